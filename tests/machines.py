"""Machines of fixed figures, for tests of what the cost model chooses: the host's caches and
calibration differ from machine to machine (and on a loaded one from run to run)."""

from __future__ import annotations

from dataclasses import replace

from eqsat.extract.machine import Calibration, Machine
from tests.test_calibrate import FakeMeasure

# The machine most figures in docs/MEASUREMENTS.md come from: 48 KiB L1, 1 MiB L2 per core.
PINNED = Machine("avx512", cores=2, l1_bytes=48 << 10, l2_bytes=1 << 20, l3_bytes=32 << 20)
PINNED = replace(PINNED, calibration=FakeMeasure()(PINNED))

# The AVX2-only AMD EPYC host of the 2026-12 sessions (32 KiB L1, 512 KiB L2 per core), with the
# peaks `python -m eqsat bench` calibrated there (GFLOP/s and GB/s on 1 / 2 threads).
AVX2_EPYC = Machine(
    "avx2",
    cores=2,
    l1_bytes=32 << 10,
    l2_bytes=512 << 10,
    l3_bytes=16 << 20,
    calibration=Calibration(
        {"float32": {1: 94e9, 2: 186e9}, "float64": {1: 48e9, 2: 93e9}},
        {
            "L1": {1: 120e9, 2: 226e9},
            "L2": {1: 93e9, 2: 180e9},
            "L3": {1: 64e9, 2: 124e9},
            "DRAM": {1: 19e9, 2: 24e9},
        },
        clock_hz=2.95e9,
        parallel_start_seconds=33e-6,
        parallel_restart_seconds=0.5e-6,
    ),
)
