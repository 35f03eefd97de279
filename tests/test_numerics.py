"""NaN, ±inf, -0.0 and subnormals behave as in numpy (ARCHITECTURE §4, the numerics contract).

Whole random programs run on inputs seeded with special values, at every ISA level: NaN and
±inf land exactly where numpy (in the inputs' dtype) and the interpreter put them, finite values
agree within §9's tolerance. The max/min/relu emission is checked lane by lane on every pair of
special values, in full vectors, tails and register tiles; the old emission (a bare max
instruction, C's fmax) fails these checks (`test_old_max_emission_fails_the_checks`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import eqsat
from eqsat.backend_c.calibrate import calibrated_host
from eqsat.backend_c.emit import emit
from eqsat.core.interp import evaluate, run
from eqsat.core.saturate import Limits
from eqsat.core.terms import LoopProgram, Term, to_term
from eqsat.rewrites.lowering import lower
from tests.isas import ISAS, skip_unless_runs
from tests.machines import PINNED
from tests.programs import assert_close, compiled
from tests.test_loops import at, inner, named, nest, outer
from tests.test_vmath import ulp_distance

TINY = np.float32(1e-40)  # a float32 subnormal
SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, TINY, -TINY, 1.5, -2.0], np.float32)
# Small schedules: these tests are about values, not speed.
LIMITS = Limits(nodes=20_000, seconds=0.5, iterations=8, extraction_seconds=0.5)


def assert_specials_agree(got: np.ndarray, want: np.ndarray, reference: np.ndarray) -> None:
    """NaN, +inf and -inf exactly where `want` (numpy, in the kernel's dtype) has them; the
    finite rest within ARCHITECTURE §9's tolerance of `reference` (float64)."""
    got = np.asarray(got)
    assert got.shape == want.shape
    for name, test in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        wrong = np.argwhere(test(got) != test(want))
        assert not wrong.size, f"{name} differs at {wrong[:5].tolist()}: {got} != {want}"
    finite = np.isfinite(want) & np.isfinite(reference)
    assert_close(np.where(finite, got, 0), np.where(finite, reference, 0), str(got.dtype))


def with_specials(rng: np.random.Generator, shape: tuple[int, ...], rate: float) -> np.ndarray:
    """float32 values in [-3, 3], each replaced with probability `rate` by one of SPECIALS."""
    values = rng.uniform(-3, 3, shape).astype(np.float32)
    special = rng.random(shape) < rate
    values[special] = rng.choice(SPECIALS, int(special.sum()))
    return values


def assert_product_keeps_specials(kernel: Callable[..., Any], m: int, k: int, n: int) -> None:
    """`kernel(x=..., w=...)`, a product x @ w of (m, k) by (k, n) with m >= 5, k >= 8 and
    n >= 3, gives numpy's NaN, ±inf and -0.0 on inputs holding them, a row of zeros meeting an
    inf among them."""
    rng = np.random.default_rng(7)
    x, w = with_specials(rng, (m, k), 0.05), with_specials(rng, (k, n), 0.05)
    x[3, 5], x[4, :], w[7, 2] = -0.0, 0.0, np.inf  # a row of zeros meets an inf: NaN
    with np.errstate(all="ignore"):
        want = x @ w
        reference = x.astype(np.float64) @ w.astype(np.float64)
    assert_specials_agree(kernel(x=x, w=w), want, reference)


# ---------------------------------------------------------------- the interpreter


def test_interpreter_follows_numpy_on_special_values() -> None:
    """Every pair of special values through max, min, relu, where, the comparisons and a max
    reduction, as tensor terms and as loop programs: numpy's values, sign of zero included."""
    a, b = np.meshgrid(SPECIALS, SPECIALS)
    x, y = eqsat.tensor("x", a.shape), eqsat.tensor("y", a.shape)
    cases = {
        "max": (eqsat.maximum(x, y), np.maximum(a, b)),
        "min": (eqsat.minimum(x, y), np.minimum(a, b)),
        "relu": (eqsat.relu(x), np.maximum(a, np.float32(0))),
        "where": (eqsat.where(x, x, y), np.where(a != 0, a, b)),
        "gt": (eqsat.where(x > y, 1.0, 0.0), (a > b).astype(np.float32)),
        "ne": (eqsat.where(x != y, 1.0, 0.0), (a != b).astype(np.float32)),
        "max-reduce": (x.max(axis=1), np.max(a, axis=1)),
    }
    inputs = {"x": a, "y": b}
    for name, (expr, want) in cases.items():
        term = to_term(expr.expr)
        assert isinstance(term, Term)
        got = evaluate(term, inputs)
        np.testing.assert_array_equal(got, want, err_msg=name)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=name)
        np.testing.assert_array_equal(run(lower([term]), inputs)[0], want, err_msg=name)


# ---------------------------------------------------------------- assume_finite


def test_assume_finite_is_an_opt_in_of_compile_and_jit_that_explain_reports() -> None:
    """x - x is NaN for inf and NaN inputs, as numpy says, unless the caller promised finite
    inputs: then sub-self makes it 0, and explain() says the promise was made."""
    x = np.array([1.5, np.inf, -np.inf, np.nan], np.float32)
    default = eqsat.jit(lambda x: x - x)
    finite = eqsat.jit(assume_finite=True)(lambda x: x - x)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(default(x), x - x)
    np.testing.assert_array_equal(finite(x), np.zeros(4, np.float32))
    assert "finite-only identities off" in default.kernel_for(x).explain()
    assert "assume_finite=True" in finite.kernel_for(x).explain()
    assert "fired: sub-self" in finite.kernel_for(x).explain()
    compiled_finite = eqsat.compile(eqsat.tensor("x", (4,)) * 0.0, assume_finite=True)
    assert "fired: mul-zero" in compiled_finite.explain()


# ---------------------------------------------------------------- max, min, relu lane by lane

N = 37  # two whole AVX-512 float32 vectors and a 5-lane tail; four AVX2 vectors and a tail


def pairs() -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair of SPECIALS, each pair once in every lane position mod 16."""
    a, b = (v.ravel() for v in np.meshgrid(SPECIALS, SPECIALS))
    rows = [np.roll(np.resize(a, (16 * len(a),)), s)[:N] for s in range(len(a))]
    cols = [np.roll(np.resize(b, (16 * len(b),)), s)[:N] for s in range(len(b))]
    return np.array(rows, np.float32), np.array(cols, np.float32)


ELEMENTWISE: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "maximum": (eqsat.maximum, np.maximum),
    "minimum": (eqsat.minimum, np.minimum),
    "relu": (lambda x, y: eqsat.relu(x), lambda x, y: np.maximum(x, np.float32(0))),
    "max-scalar": (lambda x, y: eqsat.maximum(x * 2.0, 1.5), lambda x, y: np.maximum(x * 2, 1.5)),
    "where-gt": (
        lambda x, y: eqsat.where(x > y, x, y),
        lambda x, y: np.where(x > y, x, y),
    ),
    "max-reduce-rows": (
        lambda x, y: eqsat.maximum(x, y).max(axis=1),
        lambda x, y: np.maximum(x, y).max(axis=1),
    ),
    "max-reduce-columns": (
        lambda x, y: (x * y).max(axis=0),
        lambda x, y: (x * y).max(axis=0),
    ),
    "min-reduce-rows": (
        lambda x, y: eqsat.minimum(x, y).min(axis=1),
        lambda x, y: np.minimum(x, y).min(axis=1),
    ),
    "min-reduce-columns": (
        lambda x, y: (x + y).min(axis=0),
        lambda x, y: (x + y).min(axis=0),
    ),
    "clip": (
        lambda x, y: eqsat.clip(x, -1.0, y),
        lambda x, y: np.clip(x, np.float32(-1), y),
    ),
}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", ELEMENTWISE)
def test_max_min_relu_where_on_every_pair_of_special_values(isa: str, case: str) -> None:
    """Each pair of special values in every lane, in whole vectors and tails: the values of
    numpy exactly (NaN where numpy has NaN; a zero may differ in sign, ARCHITECTURE §4)."""
    build, reference = ELEMENTWISE[case]
    a, b = pairs()
    x, y = eqsat.tensor("x", a.shape), eqsat.tensor("y", b.shape)
    kernel = eqsat.compile(build(x, y), isa=isa, limits=LIMITS, progress=False)
    got = kernel(**{name: v for name, v in (("x", a), ("y", b)) if name in kernel.input_names})
    with np.errstate(invalid="ignore"):
        want = reference(a, b)
    np.testing.assert_array_equal(got, want)  # NaN equals NaN here, and -0.0 equals 0.0


def max_tile(rows: int, columns: int, unrolled: int) -> LoopProgram:
    """out0[j] = max over i of in0[i, j] as a register tile: `unrolled` column vectors of 16
    kept in registers over the rows (a partial vector when 16 * unrolled > columns)."""
    i, j = named("i0", rows), named("i1", columns)
    start = nest(
        [(j, "vector", ())],
        Term("Stmt.store", ("out0", at(j), Term("Scalar.const", (-np.inf,)))),
    )
    block = 16 * unrolled
    tiles = nest(
        [
            (outer(j, block), "serial", ()),
            (i, "serial", ()),
            (outer(inner(j, block), 16), "unroll", (unrolled,)),
            (inner(inner(j, block), 16), "vector", ()),
        ],
        Term("Stmt.accumulate", ("out0", at(j), "max", Term("Scalar.load", ("in0", at(i, j))))),
    )
    body = Term("Stmt.seq", (start, tiles))
    return LoopProgram(body, (("x", (rows, columns)),), ((columns,),), "float32")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("columns", [64, 45])
def test_register_tiled_max_propagates_nan(isa: str, columns: int) -> None:
    """A max accumulated in registers across rows: a NaN in any row reaches its column."""
    program = max_tile(9, columns, unrolled=2)
    source = emit(program, isa, "eqsat_kernel")
    assert isa == "scalar" or "acc1 = eq_vmax(" in source  # the tile's second accumulator
    x = with_specials(np.random.default_rng(4), (9, columns), rate=0.05)
    x[:, 3] = np.nan  # a column of NaN, and NaN in the last row of another
    x[-1, 17] = np.nan
    with np.errstate(invalid="ignore"):
        want = x.max(axis=0)
    got = compiled(program, isa)(x=x)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n", [37, 100])
def test_max_reductions_propagate_nan_from_every_position(isa: str, n: int) -> None:
    """Row and column maxima of a matrix with a NaN on the diagonal (a NaN in every lane
    position of the rows' vectors, their tails and, for 100 columns, each of the horizontal
    reduction's 4 accumulators), rows of -inf and a row with +inf and NaN."""
    x = with_specials(np.random.default_rng(5), (n, n), rate=0.0)
    np.fill_diagonal(x, np.nan)
    x[1, :] = -np.inf
    x[2, :] = -np.inf
    x[2, -1] = np.nan
    x[3, [0, -1]] = np.inf
    x[4, :] = np.inf
    x[4, 7] = np.nan
    symbol = eqsat.tensor("x", x.shape)
    kernel = eqsat.compile([symbol.max(axis=1), symbol.max(axis=0)], isa=isa, progress=False)
    rows, columns = kernel(x=x)
    np.testing.assert_array_equal(rows, x.max(axis=1))
    np.testing.assert_array_equal(columns, x.max(axis=0))
    x[:, :] = -np.inf
    x[n // 2, n // 3] = np.inf
    rows, columns = kernel(x=x)
    np.testing.assert_array_equal(rows, x.max(axis=1))
    np.testing.assert_array_equal(columns, x.max(axis=0))


# ---------------------------------------------------------------- whole random programs


@dataclass(frozen=True)
class SpecialProgram:
    """A random program written once with numpy functions, so that it runs on numpy arrays
    (the reference) and on eqsat tensors alike (`run`)."""

    steps: tuple[tuple[str, Callable[..., Any]], ...]  # (description, step(x, values) -> x)
    inputs: Mapping[str, np.ndarray]  # float32, with special values

    def run(self, values: Mapping[str, Any]) -> Any:
        """The program on `values` by input name: numpy arrays or eqsat tensors."""
        x = values["v0"]
        for _, step in self.steps:
            x = step(x, values)
        return x

    def __repr__(self) -> str:
        return " -> ".join(description for description, _ in self.steps)


def relu(x: Any) -> Any:
    return eqsat.relu(x) if isinstance(x, eqsat.Tensor) else np.maximum(x, np.float32(0))


def sigmoid(x: Any) -> Any:
    return eqsat.sigmoid(x) if isinstance(x, eqsat.Tensor) else 1 / (1 + np.exp(-x))


def softmax(x: Any) -> Any:
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


UNARY: dict[str, Callable[[Any], Any]] = {
    "exp": np.exp,  # exp(-inf) = 0, exp(inf) = inf
    "tanh": np.tanh,
    "sigmoid": sigmoid,
    "relu": relu,
    "abs": np.abs,
    "neg": np.negative,
    "square": lambda x: x * x,
    "softmax": softmax,
}
# Binary ops with a new input `y`. Division, log and sqrt, which make ±inf or NaN at 0 or below
# it, take an input: an identity exact in real numbers may round a computed value to 0 in one
# form only (numpy's log(exp(1e-9)) is log(1.0) = 0) or change the sign of a computed zero
# (ARCHITECTURE §4), and a computed argument would then make ±inf or NaN in one form only.
BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "log": lambda x, y: x + np.log(y),  # NaN below 0, -inf at ±0
    "sqrt": lambda x, y: x * np.sqrt(y),  # NaN below 0
    "maximum": np.maximum,
    "maximum-yx": lambda x, y: np.maximum(y, x),
    "minimum": np.minimum,
    "minimum-yx": lambda x, y: np.minimum(y, x),
    "where-gt": lambda x, y: np.where(x > y, x, y * 0.5),
    "where-le": lambda x, y: np.where(x <= y, y, x),
    "where-ne": lambda x, y: np.where(x != y, x - y, y),
    "where-value": lambda x, y: np.where(y, x, y),  # a nonzero (or NaN) y is true
}
CONSTANTS = (0.0, 0.5, -1.5, 2.0, np.inf, -np.inf)
SCALAR: dict[str, Callable[[Any, float], Any]] = {
    "mul": lambda x, c: x * c,
    "add": lambda x, c: x + c,
    "rsub": lambda x, c: c - x,
    "maximum": np.maximum,
    "minimum": lambda x, c: np.minimum(c, x),
    "where-nan": lambda x, c: np.where(x > c, x, np.nan),
}
DIMS = st.sampled_from([1, 2, 3, 5, 17, 33])


def _binary_step(name: str, other: str) -> Callable[..., Any]:
    return lambda x, values: BINARY[name](x, values[other])


def _scalar_step(name: str, c: float) -> Callable[..., Any]:
    return lambda x, values: SCALAR[name](x, np.float32(c) if isinstance(x, np.ndarray) else c)


def _reduce_step(fn: Callable[..., Any], axis: int, keepdims: bool) -> Callable[..., Any]:
    return lambda x, values: fn(x, axis=axis, keepdims=keepdims)


@st.composite
def special_programs(draw: st.DrawFn, max_ops: int = 4) -> SpecialProgram:
    """Elementwise (with broadcasting and constants, inf among them), reductions (sum, max,
    mean), matmul, transpose, reshape, softmax, where and comparisons, relu, maximum and
    minimum, on float32 inputs of which about 10% are special values (SPECIALS)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    rate = draw(st.sampled_from([0.05, 0.1, 0.3]))
    inputs: dict[str, np.ndarray] = {}

    def new_input(shape: tuple[int, ...]) -> str:
        name = f"v{len(inputs)}"
        inputs[name] = with_specials(rng, shape, rate)
        return name

    shape = tuple(draw(DIMS) for _ in range(draw(st.integers(1, 3))))
    new_input(shape)
    steps: list[tuple[str, Callable[..., Any]]] = []
    for _ in range(draw(st.integers(1, max_ops))):
        kind = draw(st.sampled_from(["unary", "binary", "broadcast", "scalar", "reduce", "matmul",
                                     "layout"]))  # fmt: skip
        if kind == "unary":
            name = draw(st.sampled_from([n for n in sorted(UNARY) if shape or n != "softmax"]))
            steps.append((name, lambda x, values, fn=UNARY[name]: fn(x)))
        elif kind in ("binary", "broadcast"):
            other = shape
            if kind == "broadcast":
                other = tuple(1 if draw(st.booleans()) else n for n in shape)
                other = other[draw(st.integers(0, len(other))) :]
            name, operand = draw(st.sampled_from(sorted(BINARY))), new_input(other)
            steps.append((f"{name}({operand}{list(other)})", _binary_step(name, operand)))
        elif kind == "scalar":
            name, c = draw(st.sampled_from(sorted(SCALAR))), draw(st.sampled_from(CONSTANTS))
            steps.append((f"{name}({c})", _scalar_step(name, c)))
        elif kind == "reduce" and shape:
            axis, keepdims = draw(st.integers(0, len(shape) - 1)), draw(st.booleans())
            fn = draw(st.sampled_from([np.sum, np.max, np.mean]))
            steps.append((f"{fn.__name__}(axis={axis})", _reduce_step(fn, axis, keepdims)))
            shape = shape[:axis] + ((1,) if keepdims else ()) + shape[axis + 1 :]
        elif kind == "matmul" and shape:
            operand = new_input((shape[-1], draw(DIMS)))
            steps.append((f"@ {operand}", lambda x, values, w=operand: x @ values[w]))
            shape = shape[:-1] + inputs[operand].shape[1:]
        elif kind == "layout" and len(shape) >= 2:
            steps.append(("T", lambda x, values: x.T))
            shape = shape[::-1]
        elif kind == "layout" and shape:
            steps.append(("reshape(-1)", lambda x, values: x.reshape(-1)))
            shape = (int(np.prod(shape)),)
    return SpecialProgram(tuple(steps), inputs)


def check_program(program: SpecialProgram, isa: str) -> None:
    """The compiled program against numpy in float32 (NaN and ±inf positions), the interpreter
    in float32 (likewise) and numpy in float64 (finite values). The kernel is excused at the
    elements where the form the optimizer chose overflows or underflows in float32 and not in
    float64 (its NaN/±inf pattern differs between the two), as the numerics contract allows
    (ARCHITECTURE §4): `(|x| * inf) * (|x| * inf)` reassociated to `(inf * inf) * (|x| * |x|)`
    is NaN where |x| * |x| underflows to 0, where numpy gives inf."""
    with np.errstate(all="ignore"):
        want = np.asarray(program.run(program.inputs), np.float32)
        wide = {name: value.astype(np.float64) for name, value in program.inputs.items()}
        reference = np.asarray(program.run(wide))
    symbols = {name: eqsat.tensor(name, value.shape) for name, value in program.inputs.items()}
    expr = program.run(symbols)
    term = to_term(expr.expr)
    assert isinstance(term, Term)
    interpreted = evaluate(term, program.inputs)
    assert_specials_agree(interpreted, want, reference)
    kernel = eqsat.compile(expr, isa=isa, limits=LIMITS, progress=False)
    skip_unless_runs(isa)
    got = np.asarray(kernel(**program.inputs))  # type: ignore[arg-type]
    excused = chosen_form_rounds_specials(expr, program.inputs, isa)
    assert_specials_agree(np.where(excused, want, got), want, reference)


def chosen_form_rounds_specials(
    expr: eqsat.Tensor, inputs: dict[str, np.ndarray], isa: str
) -> np.ndarray:
    """Where the algebraic form the optimizer chooses for `expr` (at `isa`, as compiled by
    `check_program`) has other NaN/±inf positions evaluated in float32 than in float64."""
    machine = calibrated_host().with_isa(isa)
    optimized = eqsat.optimize(expr, limits=LIMITS, machine=machine, progress=False)
    (chosen,) = optimized.chosen
    if optimized.flattened is not None:  # the chosen form is over flat arrays
        inputs = {name: value.reshape(-1) for name, value in inputs.items()}
    with np.errstate(all="ignore"):
        narrow = evaluate(chosen, inputs)
        wide = evaluate(chosen, {name: v.astype(np.float64) for name, v in inputs.items()})
    excused = np.zeros(narrow.shape, bool)
    for test in (np.isnan, np.isposinf, np.isneginf):
        excused |= test(narrow) != test(wide)
    return excused.reshape(expr.shape)


@pytest.mark.parametrize("isa", ISAS)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=special_programs())
def test_random_programs_with_special_values_agree_with_numpy(
    isa: str, program: SpecialProgram
) -> None:
    check_program(program, isa)


# ---------------------------------------------------------------- the mutation check

ISSUE_PROGRAMS = {  # the issue's smallest failures
    "relu(x * 2)": (lambda x: eqsat.relu(x * 2.0), lambda x: np.maximum(x * 2, np.float32(0))),
    "max(x ** 2, axis=0)": (lambda x: (x * x).max(axis=0), lambda x: (x * x).max(axis=0)),
}
# The emission before NaN propagation: C's fmax and a bare max instruction, as (the helper's
# body now, the old one) for each ISA level's helpers.
OLD_MAX = {
    "scalar": [("return a != a ? a : (a > b ? a : b);", "return fmax(a, b);")],
    "avx512": [("_mm512_mask_max_ps(a, _mm512_cmp_ps_mask(a, a, _CMP_ORD_Q), a, b)",
                "_mm512_max_ps(a, b)")],
    "avx2": [("_mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q))",
              "_mm256_max_ps(a, b)")],
}  # fmt: skip


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", ISSUE_PROGRAMS)
def test_old_max_emission_fails_the_checks(isa: str, case: str) -> None:
    """The issue's programs pass; with the max helpers put back to the old emission (fmax,
    `_mm*_max_ps`), the same kernels lose the NaN and the check fails."""
    build, reference = ISSUE_PROGRAMS[case]
    x = with_specials(np.random.default_rng(6), (19, 37), rate=0.0)
    x[[0, 5, 18], [3, 36, 20]] = np.nan
    with np.errstate(invalid="ignore"):
        want = reference(x)
    expr = build(eqsat.tensor("x", x.shape))
    program = eqsat.optimize(expr, limits=LIMITS, progress=False).program
    # the program's own signature: relu(x * 2) is flattened (eqsat.rewrites.flatten)
    x, want = x.reshape(program.inputs[0][1]), want.reshape(program.outputs[0])
    source = emit(program, isa, "eqsat_kernel")
    assert_specials_agree(compiled(program, isa, source)(x=x), want, want)
    mutated = source
    for new, old in {*OLD_MAX["scalar"], *OLD_MAX[isa]}:
        assert new in mutated
        mutated = mutated.replace(new, old)
    with pytest.raises(AssertionError, match="NaN differs"):
        assert_specials_agree(compiled(program, isa, mutated)(x=x), want, want)


@pytest.mark.parametrize("isa", ISAS)
def test_contraction_blocked_mlp_layer_keeps_special_values(isa: str) -> None:
    """A matmul whose contraction axis is split into blocks with a remainder (700 by 32 or 256,
    as a depth or cache tile splits it), packed and register-tiled, and its bias + relu
    epilogue follow numpy on NaN, ±inf, -0.0 and subnormal inputs."""
    rng = np.random.default_rng(7)
    x, w, b = (with_specials(rng, shape, rate=0.002) for shape in ((64, 700), (700, 96), (96,)))
    with np.errstate(invalid="ignore", over="ignore"):
        want = np.maximum(x @ w + b, 0)
        reference = np.maximum(x.astype(np.float64) @ w + b, 0)
    symbols = [eqsat.tensor(n, a.shape) for n, a in (("x", x), ("W", w), ("b", b))]
    layer = eqsat.relu(symbols[0] @ symbols[1] + symbols[2])
    kernel = eqsat.compile(layer, machine=PINNED, isa=isa, progress=False)
    assert "for k.outer(" in kernel.explain()  # the contraction is blocked, with a remainder
    assert_specials_agree(kernel(x, w, b), want, reference)


# Math functions of numpy's, through the C at every ISA (floor, ceil and sign as vector code,
# the others as libm's scalar functions), on inputs that are the special values and numbers on
# both sides of the integers: numpy's values, the sign of a zero included.
MATH = ("log1p", "expm1", "sin", "cos", "sign", "floor", "ceil", "rint", "trunc")


def _named(name: str, check: Callable[[], None]) -> None:
    """Run `check`; a failure names `name` (one kernel checks several outputs)."""
    try:
        check()
    except AssertionError as failure:
        raise AssertionError(f"{name}: {failure}") from None


def _math_agrees(name: str, got: np.ndarray, want: np.ndarray, reference: np.ndarray) -> None:
    assert_specials_agree(got, want, reference)
    zeros = want == 0
    assert np.array_equal(np.signbit(got[zeros]), np.signbit(want[zeros])), "zero signs"
    if name in ("sign", "floor", "ceil", "rint", "trunc"):
        assert np.array_equal(got, want, equal_nan=True)  # exact


def _product_agrees(got: np.ndarray, want: np.ndarray, reference: np.ndarray) -> None:
    assert_specials_agree(got, want, reference)
    numbers = ~np.isnan(want)
    assert np.array_equal(np.signbit(got[numbers]), np.signbit(want[numbers])), "signs"


@pytest.mark.parametrize("isa", ISAS)
def test_math_functions_match_numpy_on_special_values(isa: str) -> None:
    rng = np.random.default_rng(3)
    values = np.concatenate([SPECIALS, [-1.0, -0.5, 0.5, 2.5, -2.5, 1e6, -1e-7]])
    data = np.concatenate([values, rng.uniform(-4, 4, 36)]).astype(np.float32).reshape(4, 13)
    x = eqsat.tensor("x", data.shape)
    outputs = [getattr(eqsat, name)(x) for name in MATH]
    kernel = eqsat.compile(outputs, isa=isa, progress=False, limits=LIMITS)
    for name, got in zip(MATH, kernel(data), strict=True):
        with np.errstate(all="ignore"):
            want = getattr(np, name)(data)
            reference = getattr(np, name)(data.astype(np.float64))
        _named(name, partial(_math_agrees, name, got, want, reference))


@pytest.mark.parametrize("isa", ISAS)
def test_round_matches_numpy_on_special_values_and_ties(isa: str) -> None:
    """np.round to 0 and -2 places is numpy's exactly (ties to even, zero signs, NaN and ±inf);
    to 2 places within one float32 rounding: the division by 100 runs as a multiplication by
    0.01 (the algebra's div-const)."""
    ties = [0.5, 1.5, 2.5, -0.5, -2.5, 150.0, 250.0, -350.0, 0.125, 2.675, -1.005, 1234.5678]
    data = np.concatenate([SPECIALS, ties]).astype(np.float32)
    x = eqsat.tensor("x", data.shape)
    kernel = eqsat.compile([np.round(x), np.around(x, -2), x.round(2)], isa=isa, progress=False)
    rounded, hundreds, cents = kernel(data)
    with np.errstate(all="ignore"):
        for name, got, want in (
            ("round", rounded, np.round(data)),
            ("-2", hundreds, np.round(data, -2)),
        ):
            _named(name, partial(_math_agrees, "rint", got, want, want.astype(np.float64)))
        want_cents = np.round(data, 2)
    assert_specials_agree(cents, want_cents, np.round(data.astype(np.float64), 2))


@pytest.mark.parametrize("isa", ISAS)
def test_products_match_numpy_with_special_values(isa: str) -> None:
    """A product reduction (vector lanes and chains reassociate it, as sums are): NaN where a
    NaN, or inf times 0, is in the row; ±inf, ±0 and their signs as numpy's."""
    rng = np.random.default_rng(4)
    data = rng.uniform(0.5, 1.5, (9, 37)).astype(np.float32)
    data[1, 3], data[2, 5], data[3, 7], data[3, 9] = np.nan, -0.0, np.inf, -2.0
    data[4, 1], data[4, 30], data[5, 2], data[6, 36] = np.inf, 0.0, -np.inf, TINY
    x = eqsat.tensor("x", data.shape)
    axes = (0, 1, None)
    kernel = eqsat.compile([x.prod(axis=a) for a in axes], isa=isa, progress=False, limits=LIMITS)
    for axis, got in zip(axes, kernel(data), strict=True):
        with np.errstate(all="ignore"):
            want = np.prod(data, axis=axis)
            reference = np.prod(data.astype(np.float64), axis=axis)
        _named(f"axis {axis}", partial(_product_agrees, np.asarray(got), want, reference))


@pytest.mark.parametrize("isa", ISAS)
def test_fractional_powers_match_numpy_on_special_values(isa: str) -> None:
    """x ** p for a non-integral p: sqrt for 0.5 (numpy's own fast path: -0.0 and NaN at -inf
    too), exp(p * log(x)) otherwise, with pow's values at -inf; NaN below 0."""
    rng = np.random.default_rng(5)
    values = np.concatenate([SPECIALS, [1.0, -1.0, 0.25, 100.0, 1e20]])
    data = np.concatenate([values, rng.uniform(-4, 4, 38)]).astype(np.float32).reshape(4, 13)
    x = eqsat.tensor("x", data.shape)
    exponents = (0.5, 1.5, -0.5, 2.5, -1.3, 0.1)
    kernel = eqsat.compile([x**p for p in exponents], isa=isa, progress=False, limits=LIMITS)
    for exponent, got in zip(exponents, kernel(data), strict=True):
        with np.errstate(all="ignore"):
            want = np.power(data, np.float32(exponent))
            reference = np.power(data.astype(np.float64), exponent)
        _named(f"x ** {exponent}", partial(assert_specials_agree, got, want, reference))


@pytest.mark.parametrize("isa", ISAS)
def test_any_and_all_follow_numpy_with_special_values(isa: str) -> None:
    """any/all as bools: NaN and ±inf are nonzero, ±0 are zero."""
    data = np.zeros((6, 19), np.float32)
    data[0, 4], data[1, :], data[2, 7], data[3, :], data[3, 2] = np.nan, 1.0, -0.0, -np.inf, 0.0
    data[4, :], data[5, 18] = np.nan, TINY
    x = eqsat.tensor("x", data.shape)
    programs = {
        "any-rows": (np.any(x, axis=1), np.any(data, axis=1)),
        "all-rows": (np.all(x, axis=1), np.all(data, axis=1)),
        "any-columns": (x.any(axis=0), data.any(axis=0)),
        "all-columns": (x.all(axis=0, keepdims=True), data.all(axis=0, keepdims=True)),
    }
    for name, (expr, want) in programs.items():
        kernel = eqsat.compile(expr, isa=isa, progress=False, limits=LIMITS)
        got = kernel(data)
        assert got.dtype == want.dtype == np.bool_
        np.testing.assert_array_equal(got, want, err_msg=name)


# erf, which numpy lacks, through the C at every ISA and in both dtypes: the vector form
# (eq_verf) in whole vectors and AVX-512's masked tails, libm's erff/erf in scalar code and AVX2's
# remainders; against the interpreter (libm's float64 erf) rounded to the dtype.
ERF_MAX_ULP = 4


def erf_inputs(dtype: str) -> np.ndarray:
    """NaN, +-inf, +-0, the extremes, subnormals up to 1 (both signs) and a dense [-7, 7]: past
    where erf rounds to +-1 in either dtype. Not a whole number of vectors."""
    info = np.finfo(dtype)
    specials = [np.nan, np.inf, -np.inf, 0.0, -0.0, info.smallest_subnormal, info.max]
    tiny_to_one = np.geomspace(info.smallest_subnormal, 1, 3000)
    values = np.concatenate([specials, tiny_to_one, np.linspace(-7, 7, 20003)])
    return np.concatenate([values, -values, [0.5]]).astype(dtype)


@pytest.mark.parametrize("dtype", ("float32", "float64"))
@pytest.mark.parametrize("isa", ISAS)
def test_erf_through_the_compiled_c_is_within_4_ulp(isa: str, dtype: str) -> None:
    data = erf_inputs(dtype)
    x = eqsat.tensor("x", data.shape, dtype)
    kernel = eqsat.compile(eqsat.erf(x), isa=isa, progress=False, limits=LIMITS)
    vector_form = "eq_verf(" in kernel.c_source
    assert vector_form == (isa != "scalar"), "erf's vector form in vector code only"
    got = kernel(data)
    term = to_term(eqsat.erf(x).expr)
    assert isinstance(term, Term)
    want = evaluate(term, {"x": data.astype(np.float64)}).astype(dtype)
    assert np.array_equal(np.isnan(got), np.isnan(data)), "NaN exactly where the input is NaN"
    numbers = ~np.isnan(data)
    assert np.array_equal(np.signbit(got[numbers]), np.signbit(data[numbers])), "erf(-0) = -0"
    assert np.array_equal(got[np.isinf(data)], np.sign(data[np.isinf(data)])), "erf(+-inf)"
    distance = ulp_distance(got[numbers], want[numbers])
    worst = int(np.argmax(distance))
    assert distance[worst] <= ERF_MAX_ULP, (
        f"erf({data[numbers][worst]!r}) = {got[numbers][worst]!r}, expected "
        f"{want[numbers][worst]!r}: {distance[worst]} ulp"
    )


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_a_scaled_transposed_right_operand_compiles_to_numpys_values(isa: str) -> None:
    """The copy of K.T * 0.125 keeps NaN, ±inf and -0.0 where numpy's product has them."""
    rng = np.random.default_rng(3)
    x, K = with_specials(rng, (24, 40), 0.05), with_specials(rng, (33, 40), 0.05)
    with np.errstate(all="ignore"):
        want = x @ (K.T * np.float32(0.125))
        wide = x.astype(np.float64) @ (K.T.astype(np.float64) * 0.125)
    assert np.isfinite(want).any() and not np.isfinite(want).all()  # the seed tests both
    program = eqsat.tensor("x", x.shape) @ (eqsat.tensor("K", K.shape).T * 0.125)
    kernel = eqsat.compile(program, isa=isa, progress=False)
    assert_specials_agree(kernel(x, K), want, wide)  # type: ignore[arg-type]


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_a_layernorm_before_a_matmul_compiles_to_numpys_values(isa: str) -> None:
    """layernorm(x) @ W normalizes x into a buffer of row blocks first: NaN, ±inf and -0.0 in x
    (a row holding one is NaN throughout) reach the product where numpy's have them."""
    rng = np.random.default_rng(4)
    x = with_specials(rng, (40, 48), 0.01)
    x[3, 5] = -0.0
    W = rng.uniform(-1, 1, (48, 24)).astype(np.float32)

    def reference(x: np.ndarray, W: np.ndarray) -> np.ndarray:
        centered = x - x.mean(1, keepdims=True)
        return centered / np.sqrt((centered**2).mean(1, keepdims=True) + 1e-5) @ W

    with np.errstate(all="ignore"):
        want, wide = reference(x, W), reference(x.astype(np.float64), W.astype(np.float64))
    assert np.isfinite(want).any() and not np.isfinite(want).all()  # the seed tests both
    program = eqsat.layernorm(eqsat.tensor("x", x.shape)) @ eqsat.tensor("W", W.shape)
    kernel = eqsat.compile(program, isa=isa, progress=False)
    assert_specials_agree(kernel(x, W), want, wide)  # type: ignore[arg-type]
