"""Machines of fixed figures, for tests of what the cost model chooses: the host's caches and
calibration differ from machine to machine (and on a loaded one from run to run)."""

from __future__ import annotations

from dataclasses import replace

from eqsat.extract.machine import Calibration, Machine
from tests.test_calibrate import FakeMeasure

# The machine most figures in docs/MEASUREMENTS.md come from: 48 KiB L1, 1 MiB L2 per core.
PINNED = Machine("avx512", cores=2, l1_bytes=48 << 10, l2_bytes=1 << 20, l3_bytes=32 << 20)
PINNED = replace(PINNED, calibration=FakeMeasure()(PINNED))

# The AVX-512 Xeon guest of 2026-11-28 (2 MiB of L2 per core, a 480 MiB L3), its calibration
# rounded: the cost model's choices that depend on measured peaks and bandwidths.
XEON = Machine("avx512", cores=2, l1_bytes=48 << 10, l2_bytes=2 << 20, l3_bytes=480 << 20)
XEON = replace(
    XEON,
    calibration=Calibration(
        peak_flops={"float32": {1: 245e9, 2: 485e9}, "float64": {1: 120e9, 2: 240e9}},
        bandwidth={
            "L1": {1: 440e9, 2: 540e9},
            "L2": {1: 115e9, 2: 231e9},
            "L3": {1: 18e9, 2: 35e9},
            "DRAM": {1: 16e9, 2: 31e9},
        },
        seconds=7.0,
        clock_hz=3.83e9,
        parallel_start_seconds=3.8e-5,
        parallel_restart_seconds=7.2e-7,
    ),
)
