"""The machine as data: ISA level, vector width, cores and caches, read from the running CPU.

Every stage that depends on the hardware takes a `Machine`, so tests can pass a fake one.
Measured peaks (flops, bandwidth per memory level) are an optional `Calibration` on the Machine:
`host()` leaves it None (instant); `eqsat.backend_c.calibrate.calibrated_host()` fills it in
(a short run, cached on disk); tests build `Machine(..., calibration=Calibration(...))` with
made-up figures.

`EQSAT_MAX_ISA` (avx512, avx2 or scalar) caps the host's ISA level for a whole process: an
AVX-512 machine then optimizes, calibrates and runs kernels as an AVX2 (or plain x86-64) one
would, which is how the test suite proves it passes on such hosts (ARCHITECTURE §7, "Any host").
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from eqsat.core.workers import usable_cpus

ISA_LEVELS = ("avx512", "avx2", "scalar")
VECTOR_BITS = {"avx512": 512, "avx2": 256, "scalar": 0}
_ISA_REQUIRES = {
    "avx512": {"avx512f", "avx512dq", "avx512bw", "avx512vl", "fma", "avx2"},
    "avx2": {"avx2", "fma"},
    "scalar": set(),
}
DTYPES = ("float32", "float64")
MEMORY_LEVELS = ("L1", "L2", "L3", "DRAM")
FMA_PER_CYCLE = 2  # vector FMA issue ports per core on the x86-64 cores eqsat targets
CACHE_LINE_BYTES = 64  # on the x86-64 cores eqsat targets
# Addresses this many bytes apart share an L1 set on x86 (64 sets of 64-byte lines: 32 KiB
# 8-way and 48 KiB 12-way alike), and an L2 set too.
L1_SET_SPAN = 4096
DEFAULT_CLOCK_HZ = 3.0e9


def rows_share_sets(row_bytes: int) -> bool:
    """Whether rows `row_bytes` long put each column of consecutive rows in the same L1 sets
    (a whole multiple of L1_SET_SPAN)."""
    return row_bytes % L1_SET_SPAN == 0


@dataclass(frozen=True)
class Calibration:
    """Measured peaks of one machine, indexed by the thread counts measured (1 and all cores).

    peak_flops[dtype][threads]: flop/s of independent FMA chains (an FMA counts 2 flops), for
    every dtype in DTYPES. bandwidth[level][threads]: bytes/s of a triad a = b + s*c whose arrays
    fit in `level` (every level in MEMORY_LEVELS), counting each element read or written once.
    """

    peak_flops: Mapping[str, Mapping[int, float]] = field(hash=False)
    bandwidth: Mapping[str, Mapping[int, float]] = field(hash=False)
    seconds: float = 0.0  # how long the measurement took
    clock_hz: float = DEFAULT_CLOCK_HZ  # one core's fp32 peak / the flops per cycle it implies
    # one parallel region on all cores: after its workers slept (a kernel's first call after
    # idle), and back to back (a kernel called in a loop: its workers still spin)
    parallel_start_seconds: float = 0.0
    parallel_restart_seconds: float = 0.0


@dataclass(frozen=True)
class Machine:
    isa: str  # one of ISA_LEVELS
    cores: int
    l1_bytes: int
    l2_bytes: int
    l3_bytes: int
    line_bytes: int = CACHE_LINE_BYTES
    calibration: Calibration | None = None  # measured peaks, when known (see the module doc)

    def lanes(self, dtype: str) -> int:
        """Elements per vector register for `dtype` (1 for the scalar ISA)."""
        bits = VECTOR_BITS[self.isa]
        return max(1, bits // (32 if dtype == "float32" else 64))

    def clock_hz(self) -> float:
        """Cycles per second of one core: the calibrated clock when known, else /proc/cpuinfo's
        nominal MHz (turbo clocks run higher)."""
        if self.calibration is not None:
            return self.calibration.clock_hz
        try:
            return float(_cpuinfo("cpu MHz")) * 1e6
        except ValueError:
            return DEFAULT_CLOCK_HZ

    def with_isa(self, isa: str) -> Machine:
        """The same machine targeting ISA level `isa`, any of ISA_LEVELS (for tests and
        comparisons). A level above what the host runs (`runs_on_host`) is still optimized
        for, emitted and compiled; its kernel refuses to run (`eqsat.backend_c.kernel`). The
        calibration stays: it measured the hardware."""
        if isa not in ISA_LEVELS:
            raise ValueError(f"unknown ISA {isa!r}; expected one of {ISA_LEVELS}")
        return replace(self, isa=isa)


def _cpuinfo(field_name: str) -> str:
    """The value of the first `field_name` line of /proc/cpuinfo ("" where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == field_name:
            return value.strip()
    return ""


def cpu_flags() -> frozenset[str]:
    """The flags line of /proc/cpuinfo (empty where it cannot be read)."""
    return frozenset(_cpuinfo("flags").split())


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("" where it cannot be read)."""
    return _cpuinfo("model name")


def best_isa(flags: frozenset[str]) -> str:
    """The highest ISA level whose instructions `flags` (a /proc/cpuinfo flags set) all name."""
    return next(isa for isa in ISA_LEVELS if _ISA_REQUIRES[isa] <= flags)


def isa_cap() -> str | None:
    """The ISA level `EQSAT_MAX_ISA` caps the host at (None where it is unset or empty).
    Raises ValueError naming the variable if it holds anything but one of ISA_LEVELS."""
    cap = os.environ.get("EQSAT_MAX_ISA", "").strip().lower()
    if not cap:
        return None
    if cap not in ISA_LEVELS:
        raise ValueError(f"EQSAT_MAX_ISA={cap!r} is not an ISA level; expected one of {ISA_LEVELS}")
    return cap


def runs_on_host(isa: str) -> bool:
    """Whether this process may execute code built for ISA level `isa`: one at or below
    `host().isa`."""
    return ISA_LEVELS.index(isa) >= ISA_LEVELS.index(host().isa)


def _cache_size(level: int, default: int) -> int:
    """Size in bytes of the data/unified cache at `level` of cpu0, from sysfs."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(base.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            if int((index / "level").read_text()) == level and kind != "Instruction":
                size = (index / "size").read_text().strip()
                return int(size[:-1]) * 1024 if size.endswith("K") else int(size)
        except (OSError, ValueError):
            continue
    return default


@functools.cache
def host() -> Machine:
    """The machine this process runs on, without calibration (see the module doc): its ISA
    level is the CPU's highest (`best_isa`), capped by `isa_cap()`; its cores are those this
    process may run on, or OMP_NUM_THREADS's first value if fewer."""
    cores = usable_cpus()
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if first.isdigit() and int(first) >= 1:
        cores = min(cores, int(first))
    isa, cap = best_isa(cpu_flags()), isa_cap()
    if cap is not None:
        isa = max(isa, cap, key=ISA_LEVELS.index)  # the lower of the two levels
    return Machine(
        isa=isa,
        cores=cores,
        l1_bytes=_cache_size(1, 32 * 1024),
        l2_bytes=_cache_size(2, 1024 * 1024),
        l3_bytes=_cache_size(3, 16 * 1024 * 1024),
    )
