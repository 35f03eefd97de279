"""The demo behind `python -m eqsat demo` (the README's first command)."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

import eqsat
from eqsat.bench import interleaved_medians


def _show(
    title: str,
    kernel: eqsat.Kernel,
    ours: Callable[[], np.ndarray],
    theirs: Callable[[], np.ndarray],
    compile_seconds: float,
) -> None:
    got, want = np.asarray(ours()), theirs()
    error = float(np.max(np.abs(got - want)))
    scale = max(1.0, float(np.max(np.abs(want))))
    status = "OK" if error <= 1e-4 * scale else "MISMATCH"
    print(f"== {title}  (compiled in {compile_seconds:.2f} s)")
    print(kernel.explain())
    body = kernel.c_source.split("void eqsat_kernel", 1)[1]
    c_lines = [line for line in body.splitlines() if "for (" in line or "_mm" in line]
    print("C (excerpt):")
    print("\n".join("  " + line.strip()[:110] for line in c_lines[:6]))
    medians = interleaved_medians({"eqsat": ours, "numpy": theirs}, repeats=15)
    t_eqsat, t_numpy = medians["eqsat"], medians["numpy"]
    print(f"check against numpy: max |error| = {error:.2e}  {status}")
    print(
        f"median time: eqsat {t_eqsat * 1e3:.3f} ms, numpy {t_numpy * 1e3:.3f} ms, "
        f"numpy/eqsat = {t_numpy / t_eqsat:.2f}x\n"
    )


def run_demo() -> None:
    rng = np.random.default_rng(0)
    x, W, b = (
        eqsat.tensor("x", (256, 1024)),
        eqsat.tensor("W", (1024, 512)),
        eqsat.tensor("b", (512,)),
    )
    start = time.perf_counter()
    mlp = eqsat.compile(eqsat.relu(x @ W + b))
    mlp_seconds = time.perf_counter() - start
    xa = rng.standard_normal((256, 1024), dtype=np.float32)
    Wa = rng.standard_normal((1024, 512), dtype=np.float32)
    ba = rng.standard_normal(512, dtype=np.float32)
    _show(
        "MLP layer relu(x @ W + b), 256x1024 @ 1024x512",
        mlp,
        lambda: mlp(x=xa, W=Wa, b=ba),
        lambda: np.maximum(xa @ Wa + ba, 0),
        mlp_seconds,
    )

    s = eqsat.tensor("s", (1024, 1024))
    start = time.perf_counter()
    softmax = eqsat.compile(eqsat.softmax(s))
    softmax_seconds = time.perf_counter() - start
    sa = rng.standard_normal((1024, 1024), dtype=np.float32)

    def numpy_softmax() -> np.ndarray:
        e = np.exp(sa - sa.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    _show("row softmax, 1024x1024", softmax, lambda: softmax(sa), numpy_softmax, softmax_seconds)
    print(
        "threads: eqsat uses OpenMP on the loops it marks parallel; numpy uses OpenBLAS's "
        "default thread count (unset OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE; "
        "OPENBLAS_THREAD_TIMEOUT=4, so its idle threads sleep instead of yielding)."
    )
