"""Measuring kernels: random inputs, ARCHITECTURE §9's tolerance, interleaved median timing.

Shared by the benchmark (`eqsat.tools.bench`), the cost-model check
(`eqsat.tools.model_check`) and the autotuner (`eqsat.autotune`), so that all three check and
time kernels the same way.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

BUDGET_SECONDS = 5.0  # of timing per call of interleaved_medians; past it, MIN_ROUNDS suffice
MIN_ROUNDS = 3
BLOCK_SECONDS = 2e-3  # a function faster than this is timed over a block of calls this long
# untimed calls after a settle, before the block: on a VM, calls of 0.5-7 ms kernels (numpy's
# and eqsat's alike) took 3-13 ms after 0.2 s idle to come within 20% of their steady time, and
# the first 3 of them ran up to 3x slower (docs/MEASUREMENTS.md)
WARM_UP_SECONDS = 0.02
# ARCHITECTURE §9: |got - want| <= rtol * |want| + rtol * max(1, max|want|), elementwise
RTOL = {"float32": 1e-4, "float64": 1e-9}

Name = TypeVar("Name", bound=Hashable)


def random_inputs(
    shapes: Mapping[str, tuple[int, ...]], dtype: str, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """Standard normal arrays of `dtype` ("float32" or "float64"), by input name."""

    def draw(shape: tuple[int, ...]) -> np.ndarray:
        if dtype == "float32":
            return rng.standard_normal(shape, dtype=np.float32)
        return rng.standard_normal(shape)

    return {name: draw(shape) for name, shape in shapes.items()}


@dataclass(frozen=True)
class Agreement:
    """How far a result is from its reference, and whether that is within ARCHITECTURE §9."""

    max_error: float  # max |got - want|; inf when the shapes differ, nan when got has a nan
    tolerance: float  # the absolute part of the tolerance: rtol * max(1, max|want|)
    ok: bool


def agreement(got: np.ndarray, want: np.ndarray, dtype: str) -> Agreement:
    """Compare `got` (a kernel's output of `dtype`) with `want` (the reference, ideally computed
    in float64) within ARCHITECTURE §9's tolerance for `dtype`."""
    rtol = RTOL[dtype]
    tolerance = rtol * max(1.0, float(np.max(np.abs(want), initial=0.0)))
    if got.shape != want.shape:
        return Agreement(float("inf"), tolerance, False)
    max_error = float(np.max(np.abs(got - want), initial=0.0))
    ok = bool(np.allclose(got, want, rtol=rtol, atol=tolerance))
    return Agreement(max_error, tolerance, ok)


def interleaved_medians(
    functions: Mapping[Name, Callable[[], object]],
    repeats: int,
    budget_seconds: float = BUDGET_SECONDS,
    *,
    each_seconds: float | None = None,
    settle_seconds: float = 0.0,
) -> dict[Name, float]:
    """Median wall time of one call of each function, timed in rounds after one warm-up.

    Each round times each function over a block of back-to-back calls lasting about
    BLOCK_SECONDS (one call for a slow function), so a fast function is measured in steady
    state: warm caches, and threads that have not gone to sleep since its previous call.

    Interleaving spreads the noise of other processes over all functions alike, and the order
    rotates every round, so no function always runs right after the same one (which leaves the
    caches warm with shared inputs, or full of its own data, for the next). It runs
    `repeats` rounds, or stops after MIN_ROUNDS once `budget_seconds` have passed. With
    `each_seconds`, a function also leaves the rounds once it has MIN_ROUNDS samples taking that
    long in total (a slow function gets few rounds, a fast one many). With `settle_seconds`, the
    process idles that long before each block, so the threads a function left spinning (a BLAS
    library's) have gone to sleep before another one is timed; then untimed calls for
    WARM_UP_SECONDS wake the function's threads and the cores they run on, so the block measures
    its steady state, not the first calls after idle (on a virtual machine, a 2-thread kernel
    of 0.15 ms ran 2-5x slower for the first ~2 ms of calls after 0.2 s idle, and kernels of
    0.5-7 ms took up to 13 ms to settle; docs/MEASUREMENTS.md).

    It requires: `repeats` >= 1.
    """
    calls = {name: _calls_per_block(function) for name, function in functions.items()}
    times: dict[Name, list[float]] = {name: [] for name in functions}
    start = time.perf_counter()
    for round_ in range(repeats):
        timed = [
            name
            for name, samples in times.items()
            if each_seconds is None or len(samples) < MIN_ROUNDS or sum(samples) < each_seconds
        ]
        if not timed:
            break
        shift = round_ % len(timed)
        for name in timed[shift:] + timed[:shift]:
            function, count = functions[name], calls[name]
            if settle_seconds:
                time.sleep(settle_seconds)
                _warm_up(function)
            before = time.perf_counter()
            for _ in range(count):
                function()
            times[name].append((time.perf_counter() - before) / count)
        if round_ + 1 >= MIN_ROUNDS and time.perf_counter() - start > budget_seconds:
            break
    return {name: statistics.median(samples) for name, samples in times.items()}


def _warm_up(function: Callable[[], object]) -> None:
    """Untimed calls of `function` for WARM_UP_SECONDS (at least one)."""
    until = time.perf_counter() + WARM_UP_SECONDS
    function()
    while time.perf_counter() < until:
        function()


def _calls_per_block(function: Callable[[], object]) -> int:
    """Back-to-back calls of `function` lasting about BLOCK_SECONDS, from a warm-up call."""
    function()
    before = time.perf_counter()
    function()
    single = time.perf_counter() - before
    return max(1, min(10_000, round(BLOCK_SECONDS / max(single, 1e-7))))
