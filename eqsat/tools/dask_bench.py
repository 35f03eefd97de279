"""`python -m eqsat.tools.dask_bench`: an eqsat row softmax against numpy's on a dask cluster.

On a LocalCluster of 2 worker processes (one thread each), an 8000x1000 float32 dask array in
1000-row chunks, held in the workers' memory: `softmax_rows(x)` (an `@eqsat.jit` function, one
kernel shipped in the graph) and `x.map_blocks(numpy_softmax)` are each persisted and awaited,
in interleaved rounds; prints the median time of each and the speed-up, then the median time of
one chunk's function alone on a worker (the kernel; numpy's softmax), which dask's own per-task
and per-graph costs do not dilute. Needs the `dask` extra. The workers use the caller's compile
cache (EQSAT_CACHE_DIR, inherited).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import eqsat
from eqsat.tools.workloads import numpy_softmax


@eqsat.jit
def softmax_rows(x: Any) -> Any:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def chunk_milliseconds(function: Callable[[np.ndarray], Any], chunk: np.ndarray) -> float:
    """Median time of `function(chunk)` over 20 calls after one, in ms (run on a worker)."""
    function(chunk)
    times = []
    for _ in range(20):
        start = time.perf_counter()
        function(chunk)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--rows", type=int, default=8000)
    args = parser.parse_args(argv)
    import dask.array as da
    from distributed import Client, LocalCluster, futures_of, wait

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        x = da.random.default_rng(0).standard_normal((args.rows, 1000), chunks=(1000, 1000))
        x = client.persist(x.astype(np.float32))
        wait(x)
        sides: dict[str, Callable[[], Any]] = {
            "eqsat": lambda: softmax_rows(x),
            "numpy map_blocks": lambda: x.map_blocks(numpy_softmax, dtype=np.float32),
        }
        for side in sides.values():  # warm up: compile, ship and load the kernel
            wait(client.persist(side()))
        times: dict[str, list[float]] = {name: [] for name in sides}
        for k in range(args.rounds):
            for name in list(sides)[k % 2 :] + list(sides)[: k % 2]:
                start = time.perf_counter()
                result = client.persist(sides[name]())
                wait(result)
                times[name].append(time.perf_counter() - start)
                del result
        medians = {name: statistics.median(seconds) for name, seconds in times.items()}
        for name, seconds in medians.items():
            print(f"{name:>18}: {seconds * 1e3:8.1f} ms (median of {args.rounds})")
        speedup = medians["numpy map_blocks"] / medians["eqsat"]
        print(f"speed-up of eqsat over numpy map_blocks: {speedup:.2f}x")
        # the kernel the dask call built for a chunk: one thread (eqsat.dask_arrays)
        one_thread = eqsat.jit(softmax_rows.__wrapped__, threads=1, progress=False)
        kernel = one_thread.kernel_for(np.empty((1000, 1000), np.float32))
        chunk = futures_of(x)[0]
        per_chunk = {
            name: client.submit(chunk_milliseconds, function, chunk, pure=False).result()
            for name, function in (("eqsat", kernel), ("numpy", numpy_softmax))
        }
        print(
            f"one 1000x1000 chunk on a worker: eqsat {per_chunk['eqsat']:.2f} ms, numpy "
            f"{per_chunk['numpy']:.2f} ms ({per_chunk['numpy'] / per_chunk['eqsat']:.1f}x)"
        )


if __name__ == "__main__":
    main()
