"""Translation validation: a compiled kernel is run on seeded inputs and compared with the
program as the user wrote it, evaluated by numpy (`eqsat.core.interp.evaluate`) in float64.

`eqsat.compile` checks every kernel it is about to return or cache (ARCHITECTURE §10, "Every
kernel checked"); a kernel that disagrees is replaced by the written program's plain nest. Two
sets of inputs, both from a fixed seed, so a check always sees the same values:

1. normal values: standard normal floats, small integers, random booleans;
2. the same with SPECIAL_RATE of each float input (and at least one of each) replaced by NaN,
   +inf, -inf or -0.0 (skipped under `assume_finite`, whose identities may change what a NaN
   becomes).

An elementwise program larger than SAMPLE elements is compared at SAMPLE seeded positions (the
kernel runs on the whole arrays, the written program on those elements alone). An output agrees
when NaN, +inf and -inf stand exactly where numpy's float64 evaluation puts them (or, where that
differs, its evaluation in the kernel's compute dtype: a float32 overflow), and every other
element is within ARCHITECTURE §9's tolerance of the float64 evaluation, widened by SLACK
times numpy's own error there in the compute dtype (a program that cancels, `(x + 1e8) - 1e8`,
is as far off in float32 numpy as in the kernel).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from eqsat.backend_c.kernel import Kernel
from eqsat.core import shapes
from eqsat.core.interp import evaluate
from eqsat.core.measure import RTOL
from eqsat.core.term import Term
from eqsat.rewrites.flatten import flatten, is_elementwise

SEED = 0
SPECIAL_RATE = 0.02
SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0])
SLACK = 4.0  # reassociation may round differently from numpy, by a few times numpy's own error
FLOAT16_RTOL = 1e-3  # a float16 output is rounded once more: up to half its 2**-10 spacing
INTEGER_RANGE = 50  # integer inputs are drawn from [-50, 50] ([0, 50] unsigned)
# An elementwise program is compared at this many seeded positions of its outputs: evaluating a
# 16M-element program in float64 took seconds, several times the compile it checked.
SAMPLE = 1 << 16


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
    sample = _sample(written, rng)
    if sample is not None:  # the written program over the sampled elements only
        written = flatten(written, len(sample))
    normal = {spec.name: _draw(spec.shape, str(spec.dtype), rng) for spec in kernel.inputs}
    sets = {"normal values": normal}
    if not assume_finite and any(np.dtype(spec.dtype).kind == "f" for spec in kernel.inputs):
        sets["NaN/±inf/-0.0 values"] = {
            name: _with_specials(value, rng) for name, value in normal.items()
        }
    for label, inputs in sets.items():
        outputs = kernel(**inputs)
        got = outputs if isinstance(outputs, tuple) else (outputs,)
        if sample is not None:
            inputs = {name: _at(value, sample) for name, value in inputs.items()}
            got = tuple(_at(result, sample) for result in got)
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
    evaluation in the compute dtype is only needed where NaN or ±inf stand elsewhere than in the
    float64 one (an overflow in float32), or a value is not within the tolerance of it: it is
    skipped when neither is the case."""
    rtol = FLOAT16_RTOL if got.dtype == np.float16 else RTOL[compute]
    got = np.asarray(got, dtype=np.float64)
    with np.errstate(all="ignore"):
        wide = evaluate(term, {name: value.astype(np.float64) for name, value in inputs.items()})
        if got.shape != wide.shape:
            return f"shape {got.shape}, expected {wide.shape}"
        scale = max(1.0, float(np.max(np.abs(wide), where=np.isfinite(wide), initial=1.0)))
        allowed = rtol * (np.abs(wide) + scale)
        close = np.abs(got - wide) <= allowed
        if np.all(close | ~np.isfinite(wide)) and (
            assume_finite or not _specials_differ(got, wide)
        ):
            return ""  # NaN and ±inf as in float64, every finite element close
        want = evaluate(term, {name: value.astype(compute) for name, value in inputs.items()})
        if not assume_finite:
            specials = _specials_differ(got, want)
            if specials:
                return specials
        checked = np.isfinite(want) & np.isfinite(wide)
        off = checked & ~(close | (np.abs(got - wide) <= allowed + SLACK * np.abs(want - wide)))
    if off.any():
        index = tuple(int(i) for i in np.argwhere(off)[0])
        return f"{got[index]!r} where numpy gives {wide[index]!r}, at index {index}"
    return ""


def _sample(written: Sequence[Term], rng: np.random.Generator) -> np.ndarray | None:
    """SAMPLE seeded positions of the outputs, sorted, when the program is elementwise
    (`is_elementwise`: each output element depends on the same element of the inputs only) and
    its outputs have more elements than that; else None (every element is checked)."""
    size = math.prod(shapes.infer(written[0]))
    if size <= SAMPLE or not is_elementwise(written):
        return None
    return np.sort(rng.choice(size, SAMPLE, replace=False))


def _at(value: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The elements of `value` (of the outputs' shape, or rank 0) at flat `positions`."""
    return value.reshape(-1)[positions] if value.ndim else value


def _specials_differ(got: np.ndarray, want: np.ndarray) -> str:
    """Where NaN, +inf or -inf stand in one of `got` and `want` and not in the other ("" if
    nowhere)."""
    for name, test in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        wrong = np.argwhere(test(got) != test(want))
        if wrong.size:
            return f"{name} differs from numpy's at index {tuple(int(i) for i in wrong[0])}"
    return ""


def _draw(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Seeded values of `dtype` ("bool", an integer or a float dtype) and `shape`."""
    kind = np.dtype(dtype).kind
    if kind == "b":
        return rng.random(shape) < 0.5
    if kind in "iu":
        low = 0 if kind == "u" else -INTEGER_RANGE
        return rng.integers(low, INTEGER_RANGE + 1, shape).astype(dtype)
    if dtype == "float32":
        return rng.standard_normal(shape, dtype=np.float32)  # no float64 copy: inputs can be large
    return rng.standard_normal(shape).astype(dtype, copy=False)


def _with_specials(value: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A float `value` with SPECIAL_RATE of its entries, and at least one of each of SPECIALS
    where it has as many entries, replaced by SPECIALS in turn at seeded positions (others as
    they are)."""
    if value.dtype.kind != "f":
        return value
    count = min(value.size, max(len(SPECIALS), int(SPECIAL_RATE * value.size)))
    replaced = value.copy()
    positions = rng.choice(value.size, count, replace=False)
    replaced.reshape(-1)[positions] = np.resize(SPECIALS, count)
    return replaced


def _since(start: float) -> float:
    return time.perf_counter() - start
