"""Machines of fixed figures, for tests of what the cost model chooses: the host's caches and
calibration differ from machine to machine (and on a loaded one from run to run)."""

from __future__ import annotations

from dataclasses import replace

from eqsat.extract.machine import Machine
from tests.test_calibrate import FakeMeasure

# The machine most figures in docs/MEASUREMENTS.md come from: 48 KiB L1, 1 MiB L2 per core.
PINNED = Machine("avx512", cores=2, l1_bytes=48 << 10, l2_bytes=1 << 20, l3_bytes=32 << 20)
PINNED = replace(PINNED, calibration=FakeMeasure()(PINNED))
