"""Translation validation: a compiled kernel is run on seeded inputs and compared with the
program as the user wrote it, evaluated by numpy (`eqsat.core.interp.evaluate`) in float64.

`eqsat.compile` checks every kernel it is about to return or cache (ARCHITECTURE §10, "Every
kernel checked"); a kernel that disagrees is replaced by the written program's plain nest. Two
sets of inputs, both from a fixed seed, so a check always sees the same values:

1. normal values: standard normal floats, small integers, random booleans, each input a seeded
   block of PERIOD values repeated (drawing 16M normal floats cost more than a small compile);
2. the same with SPECIAL_RATE of each float input (and at least one of each) replaced by NaN,
   +inf, -inf or -0.0, at the same positions of every block (skipped under `assume_finite`,
   whose identities may change what a NaN becomes).

Evaluating the written program in float64 can cost more than the compile it checks (a 4096x4096
softmax, attention over 4096 queries). Where no op mixes the positions of one axis of the outputs
(`eqsat.core.subset`: rows of a row-wise program, of `x @ W`, of attention, any axis of an
elementwise one), the kernel runs on the whole arrays and the written program on a seeded subset
of that axis's indices, the first and last always among them: as many as keep about SAMPLE output
elements and WORK flops, at least MIN_KEPT. An output agrees when NaN, +inf and -inf stand
exactly where numpy's float64 evaluation puts them (or, where that differs, its evaluation in
the kernel's compute dtype: a float32 overflow), and every other element is within
ARCHITECTURE §9's tolerance of the float64 evaluation, widened by SLACK times numpy's own error
there in the compute dtype (a program that cancels, `(x + 1e8) - 1e8`, is as far off in float32
numpy as in the kernel).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from eqsat.backend_c.kernel import Kernel
from eqsat.core import shapes
from eqsat.core.interp import evaluate
from eqsat.core.measure import RTOL
from eqsat.core.subset import INDICES, Subset, along
from eqsat.core.term import Term
from eqsat.extract.tensor_cost import work_flops

SEED = 0
SPECIAL_RATE = 0.02
SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0])
SLACK = 4.0  # reassociation may round differently from numpy, by a few times numpy's own error
SHAKES = 3  # float64 evaluations with rounding noise that numpy's error is compared with
FLOAT16_RTOL = 1e-3  # a float16 output is rounded once more: up to half its 2**-10 spacing
INTEGER_RANGE = 50  # integer inputs are drawn from [-50, 50] ([0, 50] unsigned)
# The written program is evaluated on a subset of an output axis's indices: about SAMPLE output
# elements and WORK flops (`work_flops`), at least MIN_KEPT indices. Evaluating a 4096x4096
# softmax whole in float64 took 4 s, 70% of its compile.
SAMPLE = 1 << 16
WORK = 1 << 23
MIN_KEPT = 8
# Each input repeats a seeded block of this many values (a prime, so that no row or vector
# length divides it): drawing 16M normal floats took 0.15-0.3 s, writing a block over them 12 ms.
PERIOD = 65537


@dataclass(frozen=True)
class Check:
    """The outcome of `check_kernel`: whether every output agreed, what disagreed first (or
    which input sets were run) and how long the check took."""

    ok: bool
    detail: str
    seconds: float


class Reference:
    """What a kernel of the written program is checked against (`check_kernel`): the module's
    seeded input sets, and the written program's float64 values on each, over the sampled
    indices. It needs no kernel, only the inputs' names, shapes and dtypes, so `eqsat.compile`
    works it out while gcc compiles the kernel. It keeps the values' blocks, not the inputs:
    `arrays` writes them out again for the kernel.

    It requires: `written` holds one tensor term per output, over `inputs` (name, shape, dtype)
    by name."""

    def __init__(
        self,
        written: Sequence[Term],
        inputs: Sequence[tuple[str, tuple[int, ...], str]],
        assume_finite: bool,
    ) -> None:
        start = time.perf_counter()
        self.assume_finite = assume_finite
        rng = np.random.default_rng(SEED)
        self.sample = _sample(written, rng)
        self.written = tuple(written if self.sample is None else self.sample.subset.roots)
        self.shapes = {name: shape for name, shape, _ in inputs}
        self.dtypes = {name: dtype for name, _, dtype in inputs}
        self.blocks = {
            name: _draw(min(math.prod(shape), PERIOD), dtype, rng) for name, shape, dtype in inputs
        }
        labels = ["normal values"]
        self.specials: dict[str, np.ndarray] = {}  # float input -> positions in each block
        if not assume_finite and any(np.dtype(d).kind == "f" for d in self.dtypes.values()):
            labels.append("NaN/±inf/-0.0 values")
            self.specials = {
                name: _special_positions(block.size, rng)
                for name, block in self.blocks.items()
                if block.dtype.kind == "f"
            }
        self.labels = tuple(labels)
        self.wide: list[list[np.ndarray]] = []  # float64 values, per input set and output
        values = None
        for set_number in range(len(self.labels)):
            values = self.arrays(set_number, into=values)
            evaluated = self.written_inputs(values)
            self.wide.append([_wide_value(term, evaluated) for term in self.written])
        self.seconds = time.perf_counter() - start

    def written_inputs(self, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The inputs of `self.written` (over the sampled indices) from a kernel's, `values`."""
        return values if self.sample is None else self.sample.inputs(values)

    def arrays(
        self, set_number: int, into: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """The inputs of set `set_number` (0: normal values; 1: the same with specials written
        over them), to run a kernel on: written into the arrays of `into` (earlier ones of
        this reference: fresh memory is slow to touch first on some hosts), or new ones."""
        values = into or {
            name: np.empty(shape, dtype=self.dtypes[name]) for name, shape in self.shapes.items()
        }
        for name, value in values.items():
            _fill(value, self.blocks[name])
            if set_number == 1 and name in self.specials:
                _write_specials(value, self.specials[name])
        return values


def prepared_in_background(
    written: Sequence[Term],
    inputs: Sequence[tuple[str, tuple[int, ...], str]],
    assume_finite: bool,
) -> Callable[[], Reference]:
    """Start working out `Reference(written, inputs, assume_finite)` in a thread; returns the
    call that waits for it (and raises what it raised)."""
    outcome: list[Reference | BaseException] = []

    def work() -> None:
        try:
            outcome.append(Reference(written, inputs, assume_finite))
        except BaseException as error:  # handed to the waiting caller
            outcome.append(error)

    thread = threading.Thread(target=work, name="eqsat-check-reference", daemon=True)
    thread.start()

    def result() -> Reference:
        thread.join()
        (value,) = outcome
        if isinstance(value, BaseException):
            raise value
        return value

    return result


def check_kernel(
    kernel: Kernel,
    written: Sequence[Term],
    assume_finite: bool,
    reference: Reference | None = None,
) -> Check:
    """Run `kernel` on the module's input sets and compare its outputs with `written` (one term
    per output, in the kernel's compute dtype, as `eqsat.optimizer.Optimized.original`), or
    with `reference`, worked out before for these (then `written` is not read again).

    It requires: the host runs `kernel.isa`; `written`'s inputs are the kernel's, by name."""
    start = time.perf_counter()
    if reference is None:
        specs = [(spec.name, spec.shape, spec.dtype or kernel.dtype) for spec in kernel.inputs]
        reference = Reference(written, specs, assume_finite)
    sample, values = reference.sample, None
    for set_number, label in enumerate(reference.labels):
        values = reference.arrays(set_number, into=values)
        outputs = kernel(**values)
        got = outputs if isinstance(outputs, tuple) else (outputs,)
        if sample is not None:
            got = tuple(np.take(result, sample.indices, sample.axis) for result in got)
        evaluated, wide = reference.written_inputs(values), reference.wide[set_number]
        for k, (term, result) in enumerate(zip(reference.written, got, strict=True)):
            problem = disagreement(
                result, term, evaluated, kernel.dtype, reference.assume_finite, wide[k]
            )
            if problem:
                seconds = reference.seconds + _since(start)
                return Check(False, f"output {k} on {label}: {problem}", seconds)
    where = "" if sample is None else f" {sample}"
    return Check(True, " and ".join(reference.labels) + where, reference.seconds + _since(start))


def disagreement(
    got: np.ndarray,
    term: Term,
    inputs: dict[str, np.ndarray],
    compute: str,
    assume_finite: bool,
    wide: np.ndarray | None = None,
) -> str:
    """What is wrong with `got` as `term`'s value on `inputs` ("" if nothing); `wide` is that
    value in float64 (`_wide_value`) if it was worked out before. numpy's evaluation in the
    compute dtype is only needed where NaN or ±inf stand elsewhere than in the float64 one (an
    overflow in float32), or a value is not within the tolerance of it: it is skipped when
    neither is the case."""
    rtol = FLOAT16_RTOL if got.dtype == np.float16 else RTOL[compute]
    got = np.asarray(got, dtype=np.float64)
    if wide is None:
        wide = _wide_value(term, inputs)
    with np.errstate(all="ignore"):
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
        error = _compute_error(term, _widened(inputs), compute, wide, want)
        off = checked & ~(close | (np.abs(got - wide) <= allowed + SLACK * error))
    if off.any():
        index = tuple(int(i) for i in np.argwhere(off)[0])
        return f"{got[index]!r} where numpy gives {wide[index]!r}, at index {index}"
    return ""


def _widened(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: value.astype(np.float64) for name, value in inputs.items()}


def _wide_value(term: Term, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """`term`'s value on `inputs`, evaluated in float64."""
    with np.errstate(all="ignore"):
        return evaluate(term, _widened(inputs))


def _compute_error(
    term: Term, wide_inputs: dict[str, np.ndarray], compute: str, wide: np.ndarray, want: np.ndarray
) -> np.ndarray:
    """How far an evaluation of `term` in `compute` may fall from its float64 value `wide` (on
    `wide_inputs`, the inputs in float64):
    the most of numpy's own error (`want`) and of SHAKES float64 evaluations whose every node is
    moved by a seeded random relative error of the size `compute` rounding gives it (a unit
    roundoff; times the square root of the terms summed, for a product or a reduction). Where
    the program is ill-conditioned at these inputs, numpy's one error is a lucky or unlucky
    sample: on multi-head attention's check (unscaled weights, so a softmax of scores near 1e3
    with near ties), numpy's float32 result was 2% off with OpenBLAS's Haswell kernel and 10%
    with its SkylakeX one, and the kernels, which sum in other orders, 15%."""
    rng = np.random.default_rng(SEED)
    roundoff = float(np.finfo(compute).eps) / 2
    error = np.abs(want - wide)

    def rounded(node: Term, value: np.ndarray) -> np.ndarray:
        if node.op == "TExpr.input" or value.dtype.kind != "f":
            return value
        scale = roundoff * math.sqrt(max(1.0, _terms_summed(node)))
        return value * (1 + scale * rng.uniform(-1, 1, value.shape))

    for _ in range(SHAKES):
        error = np.maximum(error, np.abs(evaluate(term, wide_inputs, rounded) - wide))
    return error


def _terms_summed(node: Term) -> float:
    """How many terms each element of tensor term `node` sums: a product's depth, a
    reduction's extent, 1 for anything else."""
    if node.op == "TExpr.matmul":
        return float(shapes.infer(node.args[0])[-1])  # type: ignore[arg-type]
    if node.op == "TExpr.reduce":
        before, after = shapes.infer(node.args[2]), shapes.infer(node)  # type: ignore[arg-type]
        return math.prod(before) / max(1, math.prod(after))
    return 1.0


@dataclass(frozen=True)
class _Sample:
    """The written program over `indices` of its outputs' `axis` (`eqsat.core.subset`)."""

    subset: Subset
    axis: int
    extent: int
    indices: np.ndarray

    def __str__(self) -> str:
        return f"at {len(self.indices)} of the {self.extent} indices of output axis {self.axis}"

    def inputs(self, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The inputs of the subset program, from `values` (the kernel's inputs; those it takes
        whole are the same arrays)."""
        taken = {
            name: np.take(values[source], self.indices, axis)
            for name, (source, axis) in self.subset.taken.items()
        }
        given = {name: values[name] for name in self.subset.whole} | taken
        if self.subset.reads_indices:
            given[INDICES] = self.indices.astype(np.float64)
        return given


def _sample(written: Sequence[Term], rng: np.random.Generator) -> _Sample | None:
    """The written program over seeded indices of the axis of its outputs, of those along which
    no op mixes positions and that have more indices than it keeps, whose subset program has the
    least work (`work_flops`); the indices sorted, the first and last among them. None where
    every index is to be evaluated (no such axis, or outputs of several shapes)."""
    shape = shapes.infer(written[0])
    if any(shapes.infer(term) != shape for term in written[1:]):
        return None
    size, work = math.prod(shape), max(1.0, work_flops(written))
    options = []
    for axis, extent in enumerate(shape):
        kept = max(MIN_KEPT, math.ceil(extent * min(SAMPLE / size, WORK / work)))
        subset = along(written, axis, kept) if kept < extent else None
        if subset is not None:
            options.append((work_flops(subset.roots), axis, kept, subset))
    if not options:
        return None
    _, axis, kept, subset = min(options, key=lambda option: option[:2])
    extent = shape[axis]
    inner = 1 + rng.choice(extent - 2, kept - 2, replace=False)
    indices = np.sort(np.concatenate(([0, extent - 1], inner)))
    return _Sample(subset, axis, extent, indices)


def _specials_differ(got: np.ndarray, want: np.ndarray) -> str:
    """Where NaN, +inf or -inf stand in one of `got` and `want` and not in the other ("" if
    nowhere)."""
    for name, test in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        wrong = np.argwhere(test(got) != test(want))
        if wrong.size:
            return f"{name} differs from numpy's at index {tuple(int(i) for i in wrong[0])}"
    return ""


def _draw(size: int, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """`size` seeded values of `dtype` ("bool", an integer or a float dtype), 1-D."""
    kind = np.dtype(dtype).kind
    if kind == "b":
        return rng.random(size) < 0.5
    if kind in "iu":
        low = 0 if kind == "u" else -INTEGER_RANGE
        return rng.integers(low, INTEGER_RANGE + 1, size).astype(dtype)
    if dtype == "float32":
        return rng.standard_normal(size, dtype=np.float32)
    return rng.standard_normal(size).astype(dtype, copy=False)


def _fill(out: np.ndarray, block: np.ndarray) -> None:
    """Write the 1-D `block` into `out` repeatedly, in row-major order (cut short at the end).

    It requires: `out` is C-contiguous."""
    flat = out.reshape(-1)
    whole = flat.size - flat.size % block.size
    flat[:whole].reshape(-1, block.size)[:] = block
    flat[whole:] = block[: flat.size - whole]


def _special_positions(period: int, rng: np.random.Generator) -> np.ndarray:
    """Where `_write_specials` writes SPECIALS in each `period`-long block of a float input:
    SPECIAL_RATE of its positions, at least one for each special where the block is as long."""
    count = min(period, max(len(SPECIALS), int(SPECIAL_RATE * period)))
    return rng.choice(period, count, replace=False)


def _write_specials(value: np.ndarray, positions: np.ndarray) -> None:
    """Write SPECIALS in turn at `positions` of each block of float `value` (as `_fill`
    repeats values, blocks of the length `positions` were drawn for); others as they are.

    It requires: `value` is C-contiguous."""
    period = min(value.size, PERIOD)
    specials = np.resize(SPECIALS, len(positions)).astype(value.dtype)
    flat = value.reshape(-1)
    for block_start in range(0, flat.size, period):  # faster than one 2-D scatter (5 vs 12 ms)
        inside = positions < flat.size - block_start
        flat[block_start + positions[inside]] = specials[inside]


def _since(start: float) -> float:
    return time.perf_counter() - start
