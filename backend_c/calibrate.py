"""Measure this machine's peaks: flops per dtype and triad bandwidth per memory level.

    machine = calibrated_host()          # host() with .calibration filled in
    machine.calibration.peak_flops["float32"][machine.cores]    # flop/s on all cores

One small C library (built by `build.build_library`) holds the measuring kernels:
- `calib_fma_<dtype>`: per thread, CHAINS independent chains `acc = acc * m + c` of the widest
  vectors the ISA has (FMA latency x FMA units is 8 on this machine, so 12 chains keep both busy);
- `calib_triad`: `a = b + s * c` on float32 vectors, each thread repeating its own slice, so the
  slice stays in the cache level it was sized for: half of L1, L2 (per core) or L3 (shared),
  and 4x L3 for DRAM;
- `calib_regions`: parallel regions that do nothing, on all cores, with the OpenMP wait settings
  kernels run with: each after REGION_IDLE_SECONDS, in which the workers stop spinning and sleep
  (`Calibration.parallel_start_seconds`, the median: a kernel's first call after idle), and back
  to back (`parallel_restart_seconds`: a kernel called in a loop, ~1 us; the cost model's).
Each figure is the best of a few timed calls of at least MIN_CALL_SECONDS: peaks, not averages.
Where the figures of what every core has its own of do not grow with the cores, another process
held one: the peaks are measured again (PER_CORE_SCALING).
Measured on the design machine (AMD EPYC, AVX-512, 2 cores), the whole run takes ~2.5 s.

The result is cached as JSON in `cache_dir()/calibration-<key>.json`, the key hashing the CPU
model, its flags, the compiler flags, the Machine's fields and CALIBRATION_VERSION; a missing,
stale or corrupt file is measured again (under a file lock, so concurrent processes measure once).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from eqsat.backend_c.build import (
    THREADS_PREAMBLE,
    Library,
    build_library,
    cache_dir,
    file_lock,
    openmp_wait,
    write_atomically,
)
from eqsat.backend_c.isa import GCC_FLAGS
from eqsat.extract.machine import (
    DTYPES,
    FMA_PER_CYCLE,
    MEMORY_LEVELS,
    Calibration,
    Machine,
    cpu_flags,
    cpu_model,
    host,
)

# Bump when the kernels or the way they are timed change: cached figures are then re-measured.
CALIBRATION_VERSION = 6
CHAINS = 12
MIN_CALL_SECONDS = 0.02
TIMED_CALLS = 5
REGIONS = 21  # parallel regions timed for their start cost ...
REGION_IDLE_SECONDS = 3e-3  # ... each after this long, past the workers' spin (build.OPENMP_WAIT)
# Every core has FMA units, an L1 and an L2 of its own, so their figures on n cores should be
# about n times their 1-core figures. One below PER_CORE_SCALING times that was measured while
# another process held a core through all its timed calls (seen on a shared 2-core host, for
# more than a second: the 2-core FMA and L1 figures equal to the 1-core ones, which made
# parallel loops look like no gain). The peaks are then measured again, up to REMEASUREMENTS
# times, each figure keeping its best (a busy core only lowers a figure); a host whose cores do
# share them (SMT siblings) keeps what it measured.
PROBE_SECONDS = 0.01  # each call of `fma_share_now`'s probe ...
PROBE_CALLS = 3  # ... of which the fastest counts
PER_CORE_SCALING = 0.75
PER_CORE_LEVELS = ("L1", "L2")
REMEASUREMENTS = 3
Figures = dict[str, dict[int, float]]  # a rate by name (dtype or level) and thread count
_PAD_FLOATS = 64  # between the triad arrays, so that a[i], b[i], c[i] differ in their low bits
_C_TYPES = {"float32": "float", "float64": "double"}

_CDEF = """
double calib_fma_float32(int64_t iterations, int threads);
double calib_fma_float64(int64_t iterations, int threads);
void calib_triad(float *a, const float *b, const float *c, int64_t n, int64_t reps,
                 int threads);
void calib_regions(int64_t regions, double idle_seconds, double *seconds, float *sink);
"""

_REGIONS_SOURCE = """
void calib_regions(int64_t regions, double idle_seconds, double *seconds, float *sink) {
    for (int64_t r = 0; r < regions; ++r) {
        const double idle_until = omp_get_wtime() + idle_seconds;
        while (omp_get_wtime() < idle_until) {}  /* busy, as a caller between two kernels */
        const double start = omp_get_wtime();
        eq_team team = {sched_getcpu(), 0};
        #pragma omp parallel
        {
            eq_join(&team);
            #pragma omp for schedule(static) nowait
            for (int t = 0; t < omp_get_num_threads(); ++t) sink[16 * t] += 1.0f;
            eq_wait_for_team(&team);
        }
        seconds[r] = omp_get_wtime() - start;
    }
}
"""

_FMA_TEMPLATE = """
typedef {ctype} vec_{dtype} __attribute__((vector_size({vector_bytes})));

double calib_fma_{dtype}(int64_t iterations, int threads) {{
    double checksum = 0.0;
    eq_team team = {{sched_getcpu(), 0}};
    #pragma omp parallel num_threads(threads) reduction(+ : checksum)
    {{
        eq_join(&team);
        const vec_{dtype} zero = {{0}};
        const vec_{dtype} m = zero + ({ctype})0.999999, c = zero + ({ctype})0.001;
        vec_{dtype} acc[{chains}];
        for (int k = 0; k < {chains}; ++k) acc[k] = zero + ({ctype})(k + omp_get_thread_num());
        for (int64_t i = 0; i < iterations; ++i)
            for (int k = 0; k < {chains}; ++k) acc[k] = acc[k] * m + c;
        for (int k = 0; k < {chains}; ++k)
            for (int lane = 0; lane < {lanes}; ++lane) checksum += acc[k][lane];
        eq_wait_for_team(&team);
    }}
    return checksum;
}}
"""

_TRIAD_TEMPLATE = """
void calib_triad(float *a, const float *b, const float *c, int64_t n, int64_t reps,
                 int threads) {{
    eq_team team = {{sched_getcpu(), 0}};
    #pragma omp parallel num_threads(threads)
    {{
        eq_join(&team);
        const int64_t vectors = n / {lanes}, t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int64_t lo = vectors * t / nt, hi = vectors * (t + 1) / nt;
        vec_float32 *va = (vec_float32 *)a;
        const vec_float32 *vb = (const vec_float32 *)b, *vc = (const vec_float32 *)c;
        const vec_float32 zero = {{0}}, s = zero + 3.0f;
        for (int64_t r = 0; r < reps; ++r) {{
            #pragma GCC unroll 4
            for (int64_t i = lo; i < hi; ++i) va[i] = vb[i] + s * vc[i];
            __asm__ volatile("" ::: "memory");  /* every repetition really loads and stores */
        }}
        eq_wait_for_team(&team);
    }}
}}
"""


def calibration_source(machine: Machine) -> str:
    """The C source of the measuring kernels for `machine`'s ISA (see the module doc)."""
    # the kernels' parallel regions, measured as emit.py writes them
    parts = ["#define _GNU_SOURCE\n#include <stdint.h>\n", THREADS_PREAMBLE]
    for dtype in DTYPES:
        lanes = machine.lanes(dtype)
        parts.append(
            _FMA_TEMPLATE.format(
                dtype=dtype,
                ctype=_C_TYPES[dtype],
                lanes=lanes,
                vector_bytes=lanes * np.dtype(dtype).itemsize,
                chains=CHAINS,
            )
        )
    parts.append(_TRIAD_TEMPLATE.format(lanes=machine.lanes("float32")))
    parts.append(_REGIONS_SOURCE)
    return "".join(parts)


def _flags(machine: Machine) -> tuple[str, ...]:
    # -std=c11 turns off FMA contraction; the chains must compile to FMA instructions.
    return (*GCC_FLAGS[machine.isa], "-ffp-contract=fast")


def thread_counts(machine: Machine) -> tuple[int, ...]:
    """The thread counts a calibration measures: 1 and all cores."""
    return tuple(sorted({1, machine.cores}))


def _best_rates(
    run: Callable[[int, int], object], work_per_rep: Callable[[int], float], counts: tuple[int, ...]
) -> dict[int, float]:
    """Best rate (work per second) of `run(threads, reps)` for each thread count in `counts`.

    For each count, reps grow until a call takes MIN_CALL_SECONDS (the shorter calls on the way
    warm up caches and OpenMP's threads; their times are not kept). Then TIMED_CALLS rounds time
    every count once each, so that a busy moment of the shared host falls on all counts alike
    instead of on whichever one was measured then.
    """
    reps = {threads: _reps_for_min_call(lambda r, t=threads: run(t, r)) for threads in counts}
    best = dict.fromkeys(counts, math.inf)
    for _ in range(TIMED_CALLS):
        for threads in counts:
            start = time.perf_counter()
            run(threads, reps[threads])
            best[threads] = min(best[threads], time.perf_counter() - start)
    return {t: work_per_rep(t) * reps[t] / best[t] for t in counts}


def _reps_for_min_call(run: Callable[[int], object]) -> int:
    """The smallest doubling-grown repetition count for which `run(reps)` takes MIN_CALL_SECONDS."""
    reps = 1
    while True:
        start = time.perf_counter()
        run(reps)
        seconds = time.perf_counter() - start
        if seconds >= MIN_CALL_SECONDS:
            return reps
        reps = max(2 * reps, int(reps * 1.2 * MIN_CALL_SECONDS / max(seconds, 1e-7)))


def _aligned_floats(count: int) -> np.ndarray:
    """`count` float32 ones starting on a 64-byte boundary."""
    raw = np.empty(count + 16, dtype=np.float32)
    offset = (-raw.ctypes.data % 64) // 4
    buffer = raw[offset : offset + count]
    buffer.fill(1.0)
    return buffer


def _triad_floats(machine: Machine, level: str, threads: int) -> int:
    """Elements per triad array so that the three arrays fill half of `level` (4x L3 for DRAM).

    L1 and L2 are per core (each thread gets half of its own); L3 is shared. The count is a
    multiple of 64, so every thread's slice is whole vectors and the arrays stay 64-byte aligned.
    """
    total_bytes = {
        "L1": threads * machine.l1_bytes // 2,
        "L2": threads * machine.l2_bytes // 2,
        "L3": machine.l3_bytes // 2,
        "DRAM": 4 * machine.l3_bytes,
    }[level]
    return max(64, total_bytes // (3 * 4) // 64 * 64)


def measure(machine: Machine) -> Calibration:
    """Run the measuring kernels now (about 2.5 s on the design machine) and return the figures.

    It requires: `machine` describes the CPU this process runs on (its ISA level, cores and
    cache sizes size the kernels).
    """
    start = time.perf_counter()
    library = _library(machine)
    counts = thread_counts(machine)
    largest = max(_triad_floats(machine, "DRAM", threads) for threads in counts)
    buffer = _aligned_floats(3 * (largest + _PAD_FLOATS))

    def peaks() -> tuple[Figures, Figures]:
        flops = {dtype: _fma_rates(library, machine, dtype) for dtype in DTYPES}
        levels = {level: _triad_rates(library, buffer, machine, level) for level in MEMORY_LEVELS}
        return flops, levels

    peak_flops, bandwidth = peaks()
    for _ in range(REMEASUREMENTS):
        if _per_core_figures_scale(peak_flops, bandwidth):
            break
        again_flops, again_bandwidth = peaks()
        peak_flops = _best_figures(peak_flops, again_flops)
        bandwidth = _best_figures(bandwidth, again_bandwidth)
    flops_per_cycle = FMA_PER_CYCLE * 2 * machine.lanes("float32")
    clock_hz = peak_flops["float32"][1] / flops_per_cycle
    sink = _aligned_floats(16 * max(counts))
    return Calibration(
        peak_flops,
        bandwidth,
        time.perf_counter() - start,
        clock_hz,
        _region_start_seconds(library, sink, REGION_IDLE_SECONDS),
        _region_start_seconds(library, sink, 0.0),
    )


def _region_start_seconds(library: Library, sink: np.ndarray, idle_seconds: float) -> float:
    """The median seconds of REGIONS parallel regions on all cores, each after `idle_seconds`
    (`sink`: 16 floats a thread, which each region writes)."""
    seconds = np.zeros(REGIONS)
    library.lib.calib_regions(
        REGIONS,
        idle_seconds,
        library.ffi.from_buffer("double[]", seconds),
        library.ffi.from_buffer("float[]", sink),
    )
    return float(np.median(seconds))


def _per_core_figures_scale(peak_flops: Figures, bandwidth: Figures) -> bool:
    """Whether every figure of what each core has its own of (FMA units, PER_CORE_LEVELS) is on
    n threads at least PER_CORE_SCALING * n times its 1-thread figure."""
    tables = [*peak_flops.values(), *(bandwidth[level] for level in PER_CORE_LEVELS)]
    return all(
        rates[threads] >= PER_CORE_SCALING * threads * rates[1]
        for rates in tables
        for threads in rates
    )


def _best_figures(first: Figures, second: Figures) -> Figures:
    """Each figure's better of two measurements."""
    return {
        name: {threads: max(rate, second[name][threads]) for threads, rate in rates.items()}
        for name, rates in first.items()
    }


def _library(machine: Machine) -> Library:
    """The measuring kernels built for `machine`'s ISA level."""
    return build_library(calibration_source(machine), _CDEF, _flags(machine))


def fma_rates_now(machine: Machine, dtype: str = "float32") -> dict[int, float]:
    """Flop/s of the calibration's FMA chains of `dtype` per thread count, measured now as
    `measure` does. It requires: `machine` describes this host."""
    return _fma_rates(_library(machine), machine, dtype)


def _fma_rates(library: Library, machine: Machine, dtype: str) -> dict[int, float]:
    """Flop/s of the FMA chains of `dtype`, per thread count."""
    function = getattr(library.lib, f"calib_fma_{dtype}")
    return _best_rates(
        lambda threads, iterations: function(iterations, threads),
        lambda threads: 2.0 * CHAINS * machine.lanes(dtype) * threads,
        thread_counts(machine),
    )


def _triad_rates(
    library: Library, buffer: np.ndarray, machine: Machine, level: str
) -> dict[int, float]:
    """Bytes/s of the triad sized for `level`, per thread count, on arrays carved from `buffer`."""
    counts = thread_counts(machine)
    sizes = {threads: _triad_floats(machine, level, threads) for threads in counts}
    arrays = {threads: _triad_arrays(library, buffer, sizes[threads]) for threads in counts}
    return _best_rates(
        lambda threads, reps: library.lib.calib_triad(
            *arrays[threads], sizes[threads], reps, threads
        ),
        lambda threads: 12.0 * sizes[threads],
        counts,
    )


def _triad_arrays(library: Library, buffer: np.ndarray, n: int) -> tuple[Any, ...]:
    """Three `n`-element cffi arrays in `buffer`, _PAD_FLOATS apart."""
    ffi, stride = library.ffi, n + _PAD_FLOATS
    return tuple(ffi.from_buffer("float[]", buffer[k * stride : k * stride + n]) for k in range(3))


def calibration_key(machine: Machine) -> str:
    """What the cached figures depend on: CPU model and flags, compiler flags, the Machine,
    OpenMP's wait settings."""
    parts = [
        CALIBRATION_VERSION,
        cpu_model(),
        sorted(cpu_flags()),
        list(_flags(machine)),
        asdict(replace(machine, calibration=None)),
        openmp_wait(),
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def calibrated(
    machine: Machine,
    measure: Callable[[Machine], Calibration] = measure,
    announce: Callable[[str], object] | None = None,
) -> Calibration:
    """The cached calibration of `machine`, measured (and cached) first if there is none; a
    measurement is first announced to `announce`, if given, with the file it is kept in.

    It requires: as `measure`. A cache file that is unreadable, corrupt, or incomplete for
    `machine` (dtypes, levels, thread counts; every figure finite and positive) is measured again.
    """
    key = calibration_key(machine)
    path = cache_dir() / f"calibration-{key}.json"
    cached = _read(path, key, machine)
    if cached is not None:
        return cached
    with file_lock(path.with_suffix(".lock")):
        cached = _read(path, key, machine)  # another process may have measured meanwhile
        if cached is None:
            if announce is not None:
                announce(
                    "measuring this machine once for the cost model (peak flops, cache and "
                    f"memory bandwidth; a few seconds), kept in {path}"
                )
            cached = measure(machine)
            record = {"key": key, "cpu": cpu_model(), **asdict(cached)}
            write_atomically(path, json.dumps(record).encode())
    return cached


def calibrated_host(announce: Callable[[str], object] | None = None) -> Machine:
    """`host()` with its calibration (measured on the first call on this machine, then cached;
    `announce` as in `calibrated`)."""
    machine = host()
    return replace(machine, calibration=calibrated(machine, announce=announce))


def fma_share_now(machine: Machine) -> float:
    """The float32 FMA rate on all of `machine`'s cores now, over its calibrated peak: the best
    of PROBE_CALLS calls of the calibration's FMA chains lasting about PROBE_SECONDS each. About
    1 on a quiet host; lower while other processes or guests hold its cores, their time slices
    or (hyperthreads) their FMA units, which `/proc/stat`'s steal time does not show.

    It requires: `machine.calibration` is set, measured on this host at `machine.isa`.
    """
    assert machine.calibration is not None, "fma_share_now needs a calibrated machine"
    library = _library(machine)
    threads = machine.cores
    peak = machine.calibration.peak_flops["float32"][threads]
    flops_per_iteration = 2.0 * CHAINS * machine.lanes("float32") * threads
    iterations = max(1, round(peak * PROBE_SECONDS / flops_per_iteration))
    fastest = math.inf
    for _ in range(PROBE_CALLS):
        start = time.perf_counter()
        library.lib.calib_fma_float32(iterations, threads)
        fastest = min(fastest, time.perf_counter() - start)
    return flops_per_iteration * iterations / fastest / peak


def _read(path: Path, key: str, machine: Machine) -> Calibration | None:
    """The calibration stored at `path` for `key`, or None if it is missing, corrupt or stale."""
    try:
        data = json.loads(path.read_text())
        if data["key"] != key:
            return None
        calibration = Calibration(
            _figures(data["peak_flops"]),
            _figures(data["bandwidth"]),
            float(data["seconds"]),
            float(data["clock_hz"]),
            float(data["parallel_start_seconds"]),
            float(data["parallel_restart_seconds"]),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    threads = set(thread_counts(machine))
    tables = ((calibration.peak_flops, DTYPES), (calibration.bandwidth, MEMORY_LEVELS))
    complete = all(
        set(table) == set(names) and all(set(row) == threads for row in table.values())
        for table, names in tables
    )
    starts = (calibration.parallel_start_seconds, calibration.parallel_restart_seconds)
    complete = complete and all(0 < seconds < 1 for seconds in starts)
    return calibration if complete else None


def _figures(table: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[int, float]]:
    """JSON's {"name": {"threads": value}} as {name: {threads: value}}.

    Raises ValueError (or TypeError, AttributeError on a wrong structure) unless every value is
    a finite positive number.
    """
    figures = {
        str(name): {int(threads): float(value) for threads, value in row.items()}
        for name, row in table.items()
    }
    if not all(0 < value < math.inf for row in figures.values() for value in row.values()):
        raise ValueError("calibration figures must be finite and positive")
    return figures
