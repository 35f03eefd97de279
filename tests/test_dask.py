"""`@eqsat.jit` functions on dask arrays (`eqsat.dask_arrays`, ARCHITECTURE §5f): a dask array
out, equal to numpy on the same data, on the threaded, process and distributed schedulers.

One LocalCluster of two worker processes serves the module; they share the test's compile cache
(EQSAT_CACHE_DIR, inherited), and receive the kernels in the graph.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster

import eqsat
from eqsat.extract.machine import host
from tests.conftest import copy_calibrations
from tests.programs import assert_close

SCHEDULERS = ("threads", "processes", "distributed")


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    """A LocalCluster of 2 worker processes, one thread each, and its client; the module's
    compile cache (this machine's calibration copied in) is the workers' too. Starting a cluster
    sets OMP_NUM_THREADS=1 in this process (as its nanny does on workers), which `host()` reads:
    the environment and `host()` are restored afterwards, for the tests that follow."""
    shared = tmp_path_factory.mktemp("shared-cache")
    copy_calibrations(shared)
    environment = dict(os.environ)
    os.environ["EQSAT_CACHE_DIR"] = str(shared)
    try:
        with (
            LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster,
            Client(cluster) as connected,
        ):
            yield connected
    finally:
        os.environ.clear()
        os.environ.update(environment)
        host.cache_clear()


def _computed(array: da.Array, scheduler: str, client: Client) -> np.ndarray:
    if scheduler == "distributed":
        return client.compute(array).result()  # type: ignore[no-any-return]
    return array.compute(scheduler=scheduler)  # type: ignore[no-any-return]


@eqsat.jit
def softmax_rows(x):  # type: ignore[no-untyped-def]
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@eqsat.jit
def layer(x, w, eps):  # type: ignore[no-untyped-def]
    centered = x - x.mean(axis=1, keepdims=True)
    return centered / np.sqrt((centered * centered).mean(axis=1, keepdims=True) + eps) * w


@eqsat.jit
def scaled_tanh(x, y, alpha):  # type: ignore[no-untyped-def]
    return np.tanh(x * alpha) + y


@eqsat.jit
def by_column_sums(x):  # type: ignore[no-untyped-def]
    return x / x.sum(axis=0)


@eqsat.jit
def by_row_count(x):  # type: ignore[no-untyped-def]
    return x / x.shape[0]


def _data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_softmax_rows_blockwise_on_each_scheduler(scheduler: str, client: Client) -> None:
    """850 rows in chunks of 100 (and a last one of 50): a dask array of the same chunks, one
    kernel per chunk shape, equal to numpy's softmax."""
    data = _data(850, 96)
    y = softmax_rows(da.from_array(data, chunks=(100, 96)))
    assert isinstance(y, da.Array)
    assert y.chunks == ((100,) * 8 + (50,), (96,))
    wide = data.astype(np.float64)
    e = np.exp(wide - wide.max(axis=1, keepdims=True))
    assert_close(_computed(y, scheduler, client), e / e.sum(axis=1, keepdims=True), "float32")


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_layernorm_with_a_numpy_weight_and_a_traced_float(scheduler: str, client: Client) -> None:
    """A row-wise program with a numpy weight (used whole by every chunk) and a float (passed
    to every chunk's kernel): the columns, chunked in two, are rechunked to one."""
    data, w = _data(300, 64), _data(64, seed=1)
    y = layer(da.from_array(data, chunks=(64, 32)), w, 1e-5)
    assert y.chunks == ((64,) * 4 + (44,), (64,))
    wide = data.astype(np.float64)
    centered = wide - wide.mean(axis=1, keepdims=True)
    want = centered / np.sqrt((centered**2).mean(axis=1, keepdims=True) + 1e-5) * w
    assert_close(_computed(y, scheduler, client), want, "float32")


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_elementwise_keeps_chunks_along_every_axis(scheduler: str, client: Client) -> None:
    """Two dask arrays of different chunks along both axes: unified, never merged."""
    x, y = _data(120, 90), _data(120, 90, seed=2)
    out = scaled_tanh(da.from_array(x, chunks=(50, 40)), da.from_array(y, chunks=(60, 90)), 0.5)
    assert out.chunks == ((50, 10, 40, 20), (40, 40, 10))
    want = np.tanh(x.astype(np.float64) * 0.5) + y
    assert_close(_computed(out, scheduler, client), want, "float32")


def test_workers_never_optimize(client: Client) -> None:
    """The kernels travel in the graph: no worker imports the optimizer (nor egglog)."""
    data = _data(200, 32, seed=3)
    got = client.compute(softmax_rows(da.from_array(data, chunks=(50, 32)))).result()
    assert got.shape == (200, 32)
    loaded = client.run(lambda: sorted({"eqsat.optimizer", "egglog"} & set(sys.modules)))
    assert list(loaded.values()) == [[], []]


def test_map_blocks_of_a_jit_function_is_optimized_once_for_every_worker(client: Client) -> None:
    """`x.map_blocks(f)` pickles f by reference: each worker compiles its chunks' kernel through
    the compile cache the workers share, so at most one of them optimizes (the others wait on the
    entry's lock and load it), and once the workers are replaced by new processes, none does. A
    worker that optimizes imports the optimizer, which `eqsat.compile` imports on a miss only."""
    data = _data(200, 32, seed=5)
    blocks = da.from_array(data, chunks=(50, 32)).map_blocks(softmax_rows, dtype=np.float32)
    wide = data.astype(np.float64)
    e = np.exp(wide - wide.max(axis=1, keepdims=True))
    for run in ("first", "after a restart"):
        got = client.compute(blocks).result()
        assert_close(got, e / e.sum(axis=1, keepdims=True), "float32")
        optimized = client.run(lambda: "eqsat.optimizer" in sys.modules)
        assert sum(optimized.values()) <= (1 if run == "first" else 0), run
        client.restart()


def test_a_reduction_across_chunks_is_rechunked_when_cheap() -> None:
    """Column sums over row chunks: the rows are rechunked to one chunk, columns stay apart."""
    data = _data(400, 60, seed=4)
    y = by_column_sums(da.from_array(data, chunks=(100, 30)))
    assert y.chunks == ((400,), (30, 30))
    want = data.astype(np.float64) / data.astype(np.float64).sum(axis=0)
    assert_close(y.compute(scheduler="threads"), want, "float32")


def test_a_reduction_across_chunks_fails_naming_the_axis_when_blocks_would_be_too_large() -> None:
    data = da.from_array(_data(400, 60, seed=4), chunks=(100, 30))
    too_small = dask.config.set({"array.chunk-size": "32 kB"})
    with too_small, pytest.raises(eqsat.ArgumentError, match=r"argument 'x'.*axis 0 \(4 chunks\)"):
        by_column_sums(data)


def test_a_program_using_the_shape_as_a_value_is_refused() -> None:
    """x / x.shape[0] divides each chunk by its own row count: refused, not a wrong answer."""
    data = da.from_array(_data(400, 8), chunks=(100, 8))
    with pytest.raises(eqsat.UnsupportedError, match="shape as a value"):
        by_row_count(data)
    assert_close(by_row_count(data.rechunk({0: -1})).compute(), _data(400, 8) / 400.0, "float32")
