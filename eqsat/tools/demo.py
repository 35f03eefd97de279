"""The demo behind `python -m eqsat demo` (the README's first command)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import numpy as np

import eqsat
from eqsat.core.measure import agreement, interleaved_medians, random_inputs
from eqsat.tools.workloads import SETTLE_SECONDS, numpy_softmax


def _show(
    title: str,
    expression: eqsat.Tensor,
    shapes: Mapping[str, tuple[int, ...]],
    numpy_version: Callable[..., np.ndarray],
    repeats: int,
) -> bool:
    """Compile `expression`, print what was chosen, check it against `numpy_version` run in
    float64 (taking the inputs by name), and time both on the same float32 inputs in `repeats`
    rounds. Returns whether the kernel agreed."""
    start = time.perf_counter()
    kernel = eqsat.compile(expression)
    compile_seconds = time.perf_counter() - start
    inputs = random_inputs(shapes, "float32", np.random.default_rng(0))
    want = numpy_version(**{name: a.astype(np.float64) for name, a in inputs.items()})
    found = agreement(np.asarray(kernel(**inputs)), want, "float32")
    print(f"== {title}  (compiled in {compile_seconds:.2f} s)")
    print(kernel.explain())
    body = kernel.c_source.split("void eqsat_kernel", 1)[1]
    c_lines = [line for line in body.splitlines() if "for (" in line or "_mm" in line]
    print("C (excerpt):")
    print("\n".join("  " + line.strip()[:110] for line in c_lines[:6]))
    medians = interleaved_medians(
        {"eqsat": lambda: kernel(**inputs), "numpy": lambda: numpy_version(**inputs)},
        repeats=repeats,
        settle_seconds=SETTLE_SECONDS,
    )
    t_eqsat, t_numpy = medians["eqsat"], medians["numpy"]
    status = "OK" if found.ok else "MISMATCH"
    print(f"check against numpy (float64): max |error| = {found.max_error:.2e}  {status}")
    print(
        f"median time: eqsat {t_eqsat * 1e3:.3f} ms, numpy {t_numpy * 1e3:.3f} ms, "
        f"numpy/eqsat = {t_numpy / t_eqsat:.2f}x\n"
    )
    return found.ok


def run_demo(repeats: int = 15) -> bool:
    """Compile, check and time an MLP layer and a row softmax; returns whether both agreed."""
    shapes = {"x": (256, 1024), "W": (1024, 512), "b": (512,)}
    x, W, b = (eqsat.tensor(name, shape) for name, shape in shapes.items())
    mlp_ok = _show(
        "MLP layer relu(x @ W + b), 256x1024 @ 1024x512",
        eqsat.relu(x @ W + b),
        shapes,
        lambda x, W, b: np.maximum(x @ W + b, 0),
        repeats,
    )
    rows = eqsat.tensor("x", (1024, 1024))  # named as numpy_softmax's parameter
    softmax_ok = _show(
        "row softmax, 1024x1024", eqsat.softmax(rows), {"x": (1024, 1024)}, numpy_softmax, repeats
    )
    print(
        "threads: eqsat uses OpenMP on the loops it marks parallel; numpy uses OpenBLAS's "
        "default thread count (unset OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE); each side is "
        "timed after the other's threads went idle."
    )
    return mlp_ok and softmax_ok
