"""Compiles from any thread (ARCHITECTURE §5e): several threads of one process compile at once
while the cycle collector runs on yet another thread.

Without `EGGLOG_LOCK`, concurrent compiles raised KeyError (`Ident('shape_of')`) or "Recursively
resolving thunk" from egglog's lazily resolved declarations; without `release`, the collector
thread dropped e-graphs that egglog-python's reference cycles held, and egglog reported "EGraph is
unsendable, but is being dropped on another thread" (an unraisable error: the e-graph leaked).
"""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import eqsat
from tests.programs import assert_close

ACTIVATIONS = (eqsat.exp, eqsat.tanh, eqsat.sigmoid, eqsat.relu)


@pytest.fixture
def collector_thread(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A thread running the cycle collector without pause for the test; yields the unraisable
    errors reported meanwhile (what a finalizer on another thread raises lands there). The
    garbage earlier tests left (e-graphs that tests build directly, without `release`) is
    collected first, here, in the thread that made it, and what survives is frozen (`gc.freeze`)
    for the test: a late xdist worker holds hundreds of MB of objects, and a collector scanning
    them every millisecond starved the compiling threads for minutes."""
    gc.collect()
    gc.freeze()
    unraisable: list[str] = []
    monkeypatch.setattr(
        sys, "unraisablehook", lambda u: unraisable.append(f"{u.exc_type.__name__}: {u.exc_value}")
    )
    stop = threading.Event()

    def collect() -> None:
        while not stop.wait(0.001):
            gc.collect()

    thread = threading.Thread(target=collect, name="collector")
    thread.start()
    yield unraisable
    stop.set()
    thread.join()
    gc.unfreeze()


def _program(k: int) -> eqsat.Tensor:
    x = eqsat.tensor("x", (8 + k, 16))
    return ACTIVATIONS[k % len(ACTIVATIONS)](x * float(k + 1)) + x.sum(axis=1, keepdims=True)


def _reference(k: int, x: np.ndarray) -> np.ndarray:
    scaled = x.astype(np.float64) * (k + 1)
    activation = [np.exp, np.tanh, lambda v: 1 / (1 + np.exp(-v)), lambda v: np.maximum(v, 0)]
    return activation[k % 4](scaled) + x.astype(np.float64).sum(axis=1, keepdims=True)


def test_compiles_from_a_thread_pool_with_the_collector_on_another_thread(
    fresh_cache: Path, collector_thread: list[str]
) -> None:
    """10 distinct programs, 4 threads, no compile cache, the collector forced after each compile
    and continuously on another thread: every kernel agrees with numpy, nothing is raised, and no
    e-graph is dropped on a thread that did not make it."""

    def compile_one(k: int) -> eqsat.Kernel:
        kernel = eqsat.compile(_program(k), cache=False, progress=False)
        gc.collect()
        return kernel

    with ThreadPoolExecutor(4) as pool:
        kernels = list(pool.map(compile_one, range(10)))
    rng = np.random.default_rng(0)
    for k, kernel in enumerate(kernels):
        x = rng.standard_normal((8 + k, 16)).astype(np.float32)
        assert_close(kernel(x), _reference(k, x), "float32")
    assert collector_thread == []


def test_one_program_from_four_threads_is_optimized_once(
    fresh_cache: Path, collector_thread: list[str]
) -> None:
    """Four threads compile one program with the compile cache: one optimizes, the others wait on
    the entry's lock and answer from the cache. A kernel the cache does not keep (a stage stopped
    on its clock safety net, or a check that disagreed: its note says so) leaves the entry empty,
    and the next thread optimizes again."""
    with ThreadPoolExecutor(4) as pool:
        kernels = list(pool.map(lambda _: eqsat.compile(_program(3), progress=False), range(4)))
    notes = "\n".join(kernel.explain().splitlines()[-1] for kernel in kernels)
    answered = notes.count("(answered from the compile cache")
    assert answered == 3 - notes.count("(not kept in the compile cache"), notes
    assert answered >= 1, notes
    assert len({kernel.c_source for kernel in kernels}) == 1
    x = np.random.default_rng(1).standard_normal((11, 16)).astype(np.float32)
    for kernel in kernels:
        assert_close(kernel(x), _reference(3, x), "float32")
    assert collector_thread == []
