"""Translation validation: a compiled kernel is run on seeded inputs and compared with the
program as the user wrote it, evaluated by numpy (`eqsat.core.interp.evaluate`) in float64.

`eqsat.compile` checks every kernel it is about to return or cache (ARCHITECTURE §10, "Every
kernel checked"); a kernel that disagrees is replaced by the written program's plain nest. Two
sets of inputs, both from a fixed seed, so a check always sees the same values:

1. normal values: standard normal floats, small integers, random booleans;
2. the same with SPECIAL_RATE of each float input replaced by NaN, +inf, -inf or -0.0 (skipped
   under `assume_finite`, whose identities may change what a NaN becomes).

An output agrees when NaN, +inf and -inf stand exactly where numpy's evaluation in the kernel's
compute dtype puts them, and every other element is within ARCHITECTURE §9's tolerance of the
float64 evaluation, widened by SLACK times numpy's own error there in the compute dtype (a
program that cancels, `(x + 1e8) - 1e8`, is as far off in float32 numpy as in the kernel).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from eqsat.backend_c.kernel import Kernel
from eqsat.core.interp import evaluate
from eqsat.core.measure import RTOL
from eqsat.core.term import Term

SEED = 0
SPECIAL_RATE = 0.02
SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0])
SLACK = 4.0  # reassociation may round differently from numpy, by a few times numpy's own error
FLOAT16_RTOL = 1e-3  # a float16 output is rounded once more: up to half its 2**-10 spacing
INTEGER_RANGE = 50  # integer inputs are drawn from [-50, 50] ([0, 50] unsigned)


@dataclass(frozen=True)
class Check:
    """The outcome of `check_kernel`: whether every output agreed, what disagreed first (or
    which input sets were run) and how long the check took."""

    ok: bool
    detail: str
    seconds: float


def check_kernel(kernel: Kernel, written: Sequence[Term], assume_finite: bool) -> Check:
    """Run `kernel` on the module's input sets and compare its outputs with `written` (one term
    per output, in the kernel's compute dtype, as `eqsat.optimizer.Optimized.original`).

    It requires: the host runs `kernel.isa`; `written`'s inputs are the kernel's, by name."""
    start = time.perf_counter()
    rng = np.random.default_rng(SEED)
    normal = {spec.name: _draw(spec.shape, str(spec.dtype), rng) for spec in kernel.inputs}
    sets = {"normal values": normal}
    if not assume_finite and any(np.dtype(spec.dtype).kind == "f" for spec in kernel.inputs):
        sets["NaN/±inf/-0.0 values"] = {
            name: _with_specials(value, rng) for name, value in normal.items()
        }
    for label, inputs in sets.items():
        outputs = kernel(**inputs)
        got = outputs if isinstance(outputs, tuple) else (outputs,)
        for k, (term, result) in enumerate(zip(written, got, strict=True)):
            problem = _disagreement(result, term, inputs, kernel.dtype, assume_finite)
            if problem:
                return Check(False, f"output {k} on {label}: {problem}", _since(start))
    return Check(True, " and ".join(sets), _since(start))


def _disagreement(
    got: np.ndarray,
    term: Term,
    inputs: dict[str, np.ndarray],
    compute: str,
    assume_finite: bool,
) -> str:
    """What is wrong with `got` as `term`'s value on `inputs` ("" if nothing). numpy's
    evaluation in the compute dtype is only needed where something is not finite, or not within
    the tolerance of the float64 one: it is skipped when everything is."""
    rtol = FLOAT16_RTOL if got.dtype == np.float16 else RTOL[compute]
    got = np.asarray(got, dtype=np.float64)
    with np.errstate(all="ignore"):
        wide = evaluate(term, {name: value.astype(np.float64) for name, value in inputs.items()})
        if got.shape != wide.shape:
            return f"shape {got.shape}, expected {wide.shape}"
        scale = max(1.0, float(np.max(np.abs(wide), where=np.isfinite(wide), initial=1.0)))
        allowed = rtol * (np.abs(wide) + scale)
        if np.all(np.abs(got - wide) <= allowed):  # every element finite and close
            return ""
        want = evaluate(term, {name: value.astype(compute) for name, value in inputs.items()})
        if not assume_finite:
            for name, test in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
                wrong = np.argwhere(test(got) != test(want))
                if wrong.size:
                    return f"{name} differs from numpy's at index {tuple(wrong[0])}"
        checked = np.isfinite(want) & np.isfinite(wide)
        off = checked & ~(np.abs(got - wide) <= allowed + SLACK * np.abs(want - wide))
    if off.any():
        index = tuple(int(i) for i in np.argwhere(off)[0])
        return f"{got[index]!r} where numpy gives {wide[index]!r}, at index {index}"
    return ""


def _draw(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Seeded values of `dtype` ("bool", an integer or a float dtype) and `shape`."""
    kind = np.dtype(dtype).kind
    if kind == "b":
        return rng.random(shape) < 0.5
    if kind in "iu":
        low = 0 if kind == "u" else -INTEGER_RANGE
        return rng.integers(low, INTEGER_RANGE + 1, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _with_specials(value: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A float `value` with SPECIAL_RATE of its entries replaced by one of SPECIALS (others as
    they are)."""
    if value.dtype.kind != "f":
        return value
    replaced = value.copy()
    chosen = rng.random(value.shape) < SPECIAL_RATE
    replaced[chosen] = rng.choice(SPECIALS, int(chosen.sum()))
    return replaced


def _since(start: float) -> float:
    return time.perf_counter() - start
