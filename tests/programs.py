"""Hypothesis strategies: random well-typed eqsat programs with numpy inputs to run them on."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

import eqsat
from eqsat.backend_c.abi import prototype
from eqsat.backend_c.build import build_library
from eqsat.backend_c.emit import emit
from eqsat.backend_c.isa import GCC_FLAGS
from eqsat.backend_c.kernel import Kernel, TensorSpec
from eqsat.core.interp import run
from eqsat.core.pretty import format_loops
from eqsat.core.terms import LoopProgram, Term
from tests.isas import skip_unless_runs

# 17 and 33 exceed a 16-lane vector (masked tails); 1 exercises broadcasting.
DIMS = st.sampled_from([1, 2, 3, 5, 17, 33])


# Unary ops on bounded or non-negative operands, so exp/log/sqrt stay finite.
UNARY = {
    "exp": lambda t: eqsat.exp(eqsat.tanh(t)),
    "log": lambda t: eqsat.log(eqsat.abs(t) + 1.0),
    "sqrt": lambda t: eqsat.sqrt(eqsat.abs(t)),
    "tanh": eqsat.tanh,
    "sigmoid": eqsat.sigmoid,
    "relu": eqsat.relu,
    "abs": eqsat.abs,
    "neg": lambda t: -t,
    "sin": eqsat.sin,
    "cos": eqsat.cos,
    "expm1": lambda t: eqsat.expm1(eqsat.tanh(t)),
    "log1p": lambda t: eqsat.log1p(eqsat.abs(t)),
    "erf": eqsat.erf,
}
BINARY = {
    "add": lambda a, b: a + b,
    "rsub": lambda a, b: b - a,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (eqsat.abs(b) + 0.5) if isinstance(b, eqsat.Tensor) else a / b,
    "max": eqsat.maximum,
    "min": eqsat.minimum,
}


@dataclass
class Program:
    outputs: list[eqsat.Tensor]
    inputs: dict[str, np.ndarray]
    dtype: str


SMALL_DIMS = st.sampled_from([1, 2, 3, 4, 6])  # for the (slow, per-element) loop interpreter


@st.composite
def basic_indices(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[object, ...]:
    """A numpy basic index of a tensor of `shape` that selects at least one element: per
    dimension an integer (negative too) or a slice with a step (negative too, bounds possibly
    out of range as numpy clips them), with `None`s inserted and a run of full slices written
    as `...` now and then."""
    key: list[object] = []
    for n in shape:
        if draw(st.booleans()) and draw(st.booleans()):
            key.append(draw(st.integers(-n, n - 1)))
            continue
        bound = st.none() | st.integers(-n - 2, n + 2)
        step = draw(st.none() | st.integers(-3, 3).filter(bool))
        item = slice(draw(bound), draw(bound), step)
        key.append(item if len(range(*item.indices(n))) else slice(None))
    for _ in range(draw(st.integers(0, 2))):
        key.insert(draw(st.integers(0, len(key))), None)
    full = [at for at, item in enumerate(key) if item == slice(None)]
    if full and draw(st.booleans()):
        key[full[-1]] = Ellipsis
    return tuple(key)


@st.composite
def programs(draw: st.DrawFn, max_ops: int = 4, dims: st.SearchStrategy[int] = DIMS) -> Program:
    """A random program over every op family: elementwise (with broadcasting), reductions,
    matmul, transpose, reshape, where, basic indexing, concatenate; values stay where
    exp/log/sqrt are finite."""
    dtype = draw(st.sampled_from(["float32", "float64"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    inputs: dict[str, np.ndarray] = {}

    def new_input(shape: tuple[int, ...]) -> eqsat.Tensor:
        name = f"v{len(inputs)}"
        inputs[name] = rng.uniform(-2, 2, size=shape).astype(dtype)
        return eqsat.tensor(name, shape, dtype)

    rank = draw(st.integers(1, 3))
    x = new_input(tuple(draw(dims) for _ in range(rank)))
    for _ in range(draw(st.integers(1, max_ops))):
        op = draw(
            st.sampled_from(
                [
                    "unary",
                    "binary",
                    "broadcast-binary",
                    "scalar",
                    "reduce",
                    "matmul",
                    "transpose",
                    "where",
                    "reshape",
                    "softmax",
                    "index",
                    "concatenate",
                ]
            )
        )
        if op == "unary":
            x = UNARY[draw(st.sampled_from(sorted(UNARY)))](x)
        elif op in ("binary", "broadcast-binary"):
            shape = x.shape
            if op == "broadcast-binary":
                shape = tuple(1 if draw(st.booleans()) else n for n in shape)[
                    draw(st.integers(0, len(shape))) :
                ]
            x = BINARY[draw(st.sampled_from(sorted(BINARY)))](x, new_input(shape))
        elif op == "scalar":
            c = draw(st.sampled_from([0.5, 2.0, -1.5]))
            x = BINARY[draw(st.sampled_from(sorted(BINARY)))](x, c)
        elif op == "reduce" and x.ndim >= 1:
            axis = draw(st.integers(0, x.ndim - 1))
            keepdims = draw(st.booleans())
            fn = draw(st.sampled_from([eqsat.sum, eqsat.max, eqsat.mean]))
            x = fn(x, axis=axis, keepdims=keepdims)
        elif op == "matmul" and x.ndim >= 1:
            w = new_input((x.shape[-1], draw(dims)))
            x = x @ w
        elif op == "transpose" and x.ndim >= 2:
            x = x.T
        elif op == "where":
            y = new_input(x.shape)
            x = eqsat.where(x > y, x, y * 0.5)
        elif op == "reshape" and x.ndim >= 1:
            x = x.reshape(-1)
        elif op == "softmax" and x.ndim >= 1:
            x = eqsat.softmax(x, axis=-1)
        elif op == "index" and x.ndim >= 1:
            x = x[draw(basic_indices(x.shape))]
        elif op == "concatenate" and x.ndim >= 1:
            axis = draw(st.integers(0, x.ndim - 1))
            shape = (*x.shape[:axis], draw(dims), *x.shape[axis + 1 :])
            x = eqsat.concatenate([new_input(shape), x][:: draw(st.sampled_from([1, -1]))], axis)
    return Program([x], inputs, dtype)


def ops_in(t: Term) -> set[str]:
    """The constructors in term `t`."""
    found = {t.op}
    for arg in t.args:
        if isinstance(arg, Term):
            found |= ops_in(arg)
    return found


def assert_close(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    """ARCHITECTURE §9: rtol 1e-4, atol 1e-4*max(1, max|ref|) for float32 (1e-9 for float64)."""
    tolerance = 1e-4 if dtype == "float32" else 1e-9
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance * scale)


def assert_matches_program(got: np.ndarray, program: Program) -> None:
    """`got`, a kernel's first output, is `program`'s by the criterion the compile's check uses
    (`eqsat.validation.disagreement`): ARCHITECTURE §9's tolerance around the float64 result,
    or, where numpy's own result in the program's dtype is off the float64 one (a cosine of a
    long float32 sum), within SLACK times that."""
    from eqsat.core.terms import to_term
    from eqsat.validation import disagreement

    term = to_term(program.outputs[0].expr)
    problem = disagreement(got, term, program.inputs, program.dtype, False)  # type: ignore[arg-type]
    assert not problem, problem


def assert_variant_agrees(got: np.ndarray, want: np.ndarray, body: Term) -> None:
    """A rewritten loop program's float64 result equals the canonical one's; on failure the
    message shows the loop nest (formatted only then: printing big terms is slow)."""
    try:
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    except AssertionError as failure:
        raise AssertionError(f"{failure}\nprogram:\n{format_loops(body, 1)}") from None


def compiled(program: LoopProgram, isa: str, source: str | None = None) -> Kernel:
    """`program` emitted for `isa` (or the C `source` given for it), built and loaded; one
    output."""
    source = emit(program, isa, "eqsat_kernel") if source is None else source
    cdef = prototype("eqsat_kernel", len(program.inputs), 1, program.dtype, for_cdef=True) + ";"
    library = build_library(source, cdef, GCC_FLAGS[isa])
    inputs = [TensorSpec(name, shape) for name, shape in program.inputs]
    outputs = [TensorSpec("out0", program.outputs[0])]
    return Kernel(
        library=library,
        symbol="eqsat_kernel",
        inputs=inputs,
        outputs=outputs,
        dtype=program.dtype,
        returns_tuple=False,
        isa=isa,
        c_source=source,
        explanation="",
    )


def agrees_with_interpreter(
    program: LoopProgram, isa: str, seed: int = 0, source: str | None = None
) -> None:
    """The compiled `program` (`compiled`) agrees with the interpreter on random inputs (built
    at any level; run, and the rest of the test, only where the host runs `isa`)."""
    kernel = compiled(program, isa, source)
    skip_unless_runs(isa)
    rng = np.random.default_rng(seed)
    inputs = {n: rng.standard_normal(s).astype(program.dtype) for n, s in program.inputs}
    want = run(program, inputs, dtype=np.float64)[0]
    assert_close(kernel(**inputs), want, program.dtype)  # type: ignore[arg-type]
