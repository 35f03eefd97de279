"""Plain numpy calls on symbolic tensors, and `@eqsat.jit`.

Each program here is one Python function run twice: by `eqsat.jit` (traced on symbolic tensors,
compiled) and by numpy on float64 copies of the same arrays (the reference, ARCHITECTURE §9).
"""

from __future__ import annotations

import inspect
import math
import operator
import pickle
import re
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eqsat
from eqsat.api import CompileOptions
from eqsat.core.errors import ArgumentError, DTypeError, ShapeError, UnsupportedError
from eqsat.tools.workloads import numpy_gelu
from eqsat.tracing import ArraySpec, Static
from tests.programs import assert_close

RNG = np.random.default_rng(7)


def arrays(*shapes: tuple[int, ...], dtype: str = "float32") -> list[np.ndarray]:
    return [RNG.uniform(-2, 2, size=shape).astype(dtype) for shape in shapes]


def assert_matches_numpy(function: Callable[..., Any], inputs: list[np.ndarray]) -> None:
    """`eqsat.jit(function)` on `inputs` agrees with `function` run by numpy in float64."""
    got = eqsat.jit(function)(*inputs)
    want = function(*(a.astype(np.float64) for a in inputs))
    assert_close(got, want, inputs[0].dtype.name)


# ------------------------------------------------------------------ numpy calls vs numpy

X, ROW, COL = (8, 16), (16,), (8, 1)

NUMPY_PROGRAMS: list[tuple[str, Callable[..., Any], list[tuple[int, ...]]]] = [
    ("mlp", lambda x, W, b: np.maximum(x @ W + b, 0), [X, (16, 4), (4,)]),
    (
        "broadcast",
        lambda x, r, c: np.subtract(np.multiply(x, r), np.divide(c, 2.0)) + np.add(r, c),
        [X, ROW, COL],
    ),
    (
        "unary",
        lambda x: (
            np.exp(np.tanh(x)) + np.log(np.abs(x) + 1) - np.sqrt(np.absolute(x)) + np.negative(x)
        ),
        [X],
    ),
    ("powers", lambda x: np.power(x, 3) - np.square(x) + np.true_divide(1.0, np.power(x, -2)), [X]),
    (
        "reductions",
        lambda x: (
            x.sum(axis=0) + np.amax(x, axis=0) + np.max(x, 0) - np.mean(x, axis=0) + np.sum(x)
        ),
        [X],
    ),
    ("products", lambda x: np.prod(np.tanh(x), axis=0) + x.prod(axis=1).sum(), [X]),
    (
        "keepdims",
        lambda x: x - np.mean(x, axis=1, keepdims=True) * np.sum(x, 1, keepdims=True),
        [X],
    ),
    (
        "where",
        lambda x, y: (
            np.where(np.greater(x, y), x, y)
            + np.where(np.less_equal(x, 0.5), 1.0, -x)
            + np.equal(x, x)
            - np.not_equal(x, y)
            + np.greater_equal(y, 0) * np.less(x, y)
        ),
        [X, X],
    ),
    (
        "numpy-scalars",
        lambda x: (
            np.float32(2) * x
            + np.float64(0.5)
            - x / np.int64(3)
            + (np.float32(1) < x)
            + np.minimum(np.float64(0.25), x)
            + 2.0 * x
        ),
        [X],
    ),
    (
        "layout",
        lambda x, v: (
            np.transpose(np.transpose(x) * 2, axes=(1, 0))
            + np.reshape(np.reshape(x, (16, 8)), shape=(8, -1))
            + np.reshape(np.dot(x, v), (8, 1))
        ),
        [X, ROW],
    ),
    (
        "matmul-dot",
        lambda x, W, v: np.dot(x, W) - np.matmul(x, W) + np.dot(v, W),
        [X, (16, 4), ROW],
    ),
    (
        "moments",
        lambda x: (
            np.min(x, axis=0)
            + np.amin(x, 1, keepdims=True).sum()
            + x.min()
            + np.var(x, axis=0)
            - np.std(x, axis=0, ddof=1)
            + x.var(axis=1, keepdims=True).sum(axis=0)
            + np.std(x)
        ),
        [X],
    ),
    (
        "clip-abs-pow",
        lambda x, y: (
            np.clip(x, -0.5, 0.75)
            + x.clip(max=0.1)
            + np.clip(x, y, 1.0)
            + abs(x) * x.size
            - x**2.0
            + np.reciprocal(y + 3.0)
        ),
        [X, X],
    ),
    (
        "softmax",
        lambda x: (
            np.exp(x - np.max(x, axis=-1, keepdims=True))
            / np.sum(np.exp(x - np.max(x, axis=-1, keepdims=True)), axis=-1, keepdims=True)
        ),
        [X],
    ),
]


@pytest.mark.parametrize(
    ("function", "shapes"),
    [(f, s) for _, f, s in NUMPY_PROGRAMS],
    ids=[name for name, _, _ in NUMPY_PROGRAMS],
)
def test_numpy_calls_on_tensors_match_numpy(
    function: Callable[..., Any], shapes: list[tuple[int, ...]]
) -> None:
    assert_matches_numpy(function, arrays(*shapes))


def test_float64_program_matches_numpy() -> None:
    assert_matches_numpy(lambda x, b: np.tanh(x @ x.T + b), arrays(X, (8,), dtype="float64"))


# Elementwise steps that keep values finite, on numpy arrays and tensors alike.
UNARY_STEPS: dict[str, Callable[[Any], Any]] = {
    "exp": lambda t: np.exp(np.tanh(t)),
    "log": lambda t: np.log(np.abs(t) + 1.0),
    "sqrt": lambda t: np.sqrt(np.absolute(t)),
    "tanh": np.tanh,
    "negative": np.negative,
    "power": lambda t: np.power(np.tanh(t), 3),
    "sin": np.sin,
    "cos": np.cos,
    "expm1": lambda t: np.expm1(np.tanh(t)),
    "log1p": lambda t: np.log1p(np.abs(t)),
}
BINARY_STEPS: dict[str, Callable[[Any, Any], Any]] = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": lambda a, b: np.divide(a, np.abs(b) + 0.5),
    "maximum": np.maximum,
    "minimum": np.minimum,
    "where": lambda a, b: np.where(np.greater(a, b), a, b),
    "operator-sub": operator.sub,
    "operator-mul": operator.mul,
}
# The second operand: an input of the same shape, a broadcast row, or a scalar of each kind.
OPERANDS: dict[str, Callable[[Any, Any], Any]] = {
    "y": lambda y, row: y,
    "row": lambda y, row: row,
    "float": lambda y, row: 1.5,
    "numpy-float32": lambda y, row: np.float32(-0.75),
    "numpy-int64": lambda y, row: np.int64(2),
}


Step = tuple[str, str, bool]  # (unary or binary step, operand, operand on the left)

steps_st = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(sorted(UNARY_STEPS)), st.just(""), st.just(False)),
        st.tuples(
            st.sampled_from(sorted(BINARY_STEPS)), st.sampled_from(sorted(OPERANDS)), st.booleans()
        ),
    ),
    min_size=1,
    max_size=5,
)


def chain_of(steps: list[Step]) -> Callable[..., Any]:
    """f(x, y, row) applying `steps` to x in order."""

    def chain(x: Any, y: Any, row: Any) -> Any:
        for name, operand, swap in steps:
            if name in UNARY_STEPS:
                x = UNARY_STEPS[name](x)
            else:
                other = OPERANDS[operand](y, row)
                x = BINARY_STEPS[name](other, x) if swap else BINARY_STEPS[name](x, other)
        return x

    return chain


@settings(max_examples=8, deadline=None)
@given(steps_st)
def test_random_numpy_elementwise_chains_match_numpy(steps: list[Step]) -> None:
    assert_matches_numpy(chain_of(steps), arrays(X, X, ROW))


# ------------------------------------------------------------------ exact gelu (erf)


def numpy_gelu_exact(x: np.ndarray) -> np.ndarray:
    """0.5 * x * (1 + erf(x / sqrt(2))) in float64, with math.erf (numpy has no erf)."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_exact_gelu_through_jit_and_compile_matches_numpy(dtype: str) -> None:
    rng = np.random.default_rng(11)
    x = rng.uniform(-6, 6, (37, 19)).astype(dtype)
    w = (rng.standard_normal((19, 23)) / 4).astype(dtype)

    @eqsat.jit
    def layer(x: Any, w: Any) -> Any:
        return eqsat.gelu(x @ w, approximate="none")

    assert_close(layer(x, w), numpy_gelu_exact(x.astype(np.float64) @ w), dtype)
    # Elementwise, closer than the tanh form comes (it is up to ~5e-4 off on these inputs).
    kernel = eqsat.compile(eqsat.gelu(eqsat.tensor("x", x.shape, dtype), approximate=False))
    want = numpy_gelu_exact(x)
    bound = 2e-6 if dtype == "float32" else 1e-14
    assert np.abs(kernel(x) - want).max() <= bound
    assert np.abs(numpy_gelu(x.astype(np.float64)) - want).max() > 100 * bound


# ------------------------------------------------------------------ @eqsat.jit: caching


def test_jit_traces_once_per_shape_and_dtype() -> None:
    traced_with: list[tuple[type, ...]] = []

    @eqsat.jit
    def scale_rows(x: Any, w: Any) -> Any:
        traced_with.append((type(x), type(w)))
        return x * w

    x, w = arrays(X, ROW)
    for _ in range(2):
        assert_close(scale_rows(x, w), x * w, "float32")
    assert traced_with == [(eqsat.Tensor, eqsat.Tensor)]  # never called with real data
    x2, w2 = arrays((4, 16), ROW)
    assert_close(scale_rows(x2, w2), x2 * w2, "float32")
    assert_close(scale_rows(x, w), x * w, "float32")
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    assert_close(scale_rows(x64, w64), x64 * w64, "float64")
    assert len(traced_with) == 3
    assert [key[0] for key in scale_rows.kernels] == [  # least recently used first
        ("x", ArraySpec((4, 16), "float32")),
        ("x", ArraySpec(X, "float32")),
        ("x", ArraySpec(X, "float64")),
    ]


def test_jit_static_scalars_are_part_of_the_key() -> None:
    traced: list[Any] = []

    @eqsat.jit(static_argnames=("shift",))  # ints and bools are static anyway
    def power(x: Any, n: int, shift: float = 0.0, negate: bool = False) -> Any:
        traced.append((n, shift, negate))
        y = x**n + shift
        return -y if negate else y

    (x,) = arrays(X)
    assert_close(power(x, 2), x.astype(np.float64) ** 2, "float32")
    assert_close(power(x, 3, shift=1.5), x.astype(np.float64) ** 3 + 1.5, "float32")
    assert_close(power(x, 2), x.astype(np.float64) ** 2, "float32")
    assert_close(power(x, 2, 0.0, True), -(x.astype(np.float64) ** 2), "float32")
    assert_close(power(x, 2, 0.0, 1), -(x.astype(np.float64) ** 2), "float32")  # 1 is not True
    assert traced == [(2, 0.0, False), (3, 1.5, False), (2, 0.0, True), (2, 0.0, 1)]
    assert list(power.kernels)[-1][1:] == (
        ("n", Static(2, int)),
        ("shift", Static(0.0, float)),
        ("negate", Static(1, int)),
    )


def test_jit_keyword_arguments_and_defaults_share_one_kernel() -> None:
    calls = []

    @eqsat.jit
    def affine(x: Any, W: Any, b: Any, alpha: float = 0.5) -> Any:
        calls.append(alpha)
        return alpha * (x @ W) + b

    x, W, b = arrays(X, (16, 4), (4,))
    product = x.astype(np.float64) @ W.astype(np.float64)
    for call, alpha in (
        (lambda: affine(x, W, b), 0.5),
        (lambda: affine(x=x, W=W, b=b), 0.5),
        (lambda: affine(x, b=b, W=W), 0.5),
        (lambda: affine(x, W, b, alpha=0.25), 0.25),  # a traced float: the same kernel
        (lambda: affine(x, W, b, np.float32(2.0)), 2.0),
    ):
        assert_close(call(), alpha * product + b, "float32")
    assert len(calls) == 1 and isinstance(calls[0], eqsat.Tensor)
    assert calls[0].shape == () and len(affine.kernels) == 1
    assert affine.kernel_for(b=b, W=W, x=x) is next(iter(affine.kernels.values()))


def test_a_float_argument_is_traced_once_and_passed_at_run_time() -> None:
    traced: list[Any] = []

    @eqsat.jit
    def leaky(x: Any, slope: float) -> Any:
        traced.append(slope)
        return np.where(x > 0, x, slope * x)

    (x,) = arrays(X)
    for slope in (0.1, 0.2, np.float64(0.3), 0.1):  # the positional fast path converts each
        assert_close(leaky(x, slope), np.where(x > 0, x, slope * x.astype(np.float64)), "float32")
    assert len(traced) == 1 and len(leaky.kernels) == 1
    assert leaky.kernel_for(x, 0.5).input_names == ("x", "slope")
    with pytest.raises(TypeError, match="traced too.*static_argnames"):

        @eqsat.jit
        def branchy(x: Any, alpha: float) -> Any:
            return x * 2 if alpha > 0 else x

        branchy(x, 1.0)
    with pytest.raises(ArgumentError, match=r"static_argnames \['alhpa'\] are not parameters"):
        eqsat.jit(static_argnames=["alhpa"])(lambda x, alpha: x * alpha)


def test_the_kernel_table_keeps_the_most_recently_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(eqsat.tracing, "MAX_KERNELS", 2)
    traced: list[tuple[int, ...]] = []

    @eqsat.jit
    def double(x: Any) -> Any:
        traced.append(x.shape)
        return x * 2

    a, b, c = arrays((2, 3), (3, 3), (4, 3))
    for x in (a, b, a, c):  # a is used again before c comes, so b is the one dropped
        np.testing.assert_array_equal(double(x), x * 2)
    assert [key[0][1].shape for key in double.kernels] == [(2, 3), (4, 3)]
    np.testing.assert_array_equal(double(b), b * 2)  # traced again, not run from a stale entry
    assert traced == [(2, 3), (3, 3), (4, 3), (3, 3)]


def test_threads_share_one_kernel_table_while_it_drops_kernels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Threads calling one jit function with more shapes than its table holds: every call
    answers numpy's result (no KeyError from a kernel another thread dropped)."""
    monkeypatch.setattr(eqsat.tracing, "MAX_KERNELS", 2)
    double = eqsat.jit(lambda x: x * 2)
    shapes = [(n, 3) for n in range(2, 7)]
    double(*arrays(shapes[0]))  # traced once first: the threads meet compiled kernels soon

    def calls(offset: int) -> None:
        for k in range(20):
            (x,) = arrays(shapes[(k + offset) % len(shapes)])
            np.testing.assert_array_equal(double(x), x * 2)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: the table's races show
    try:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(calls, range(4)))
    finally:
        sys.setswitchinterval(interval)
    assert len(double.kernels) <= 2


def test_jit_multiple_outputs_return_a_tuple() -> None:
    @eqsat.jit
    def stats(x: Any) -> Any:
        return np.sum(x, axis=1), np.max(x, axis=1)

    @eqsat.jit
    def as_list(x: Any) -> Any:
        return [np.exp(x)]

    (x,) = arrays(X)
    total, peak = stats(x)
    assert_close(total, x.astype(np.float64).sum(axis=1), "float32")
    assert_close(peak, x.max(axis=1), "float32")
    (e,) = as_list(x)
    assert isinstance(as_list(x), tuple)
    assert_close(e, np.exp(x.astype(np.float64)), "float32")


def test_jit_unused_and_positional_only_parameters() -> None:
    @eqsat.jit
    def first(x: Any, /, unused: Any) -> Any:
        return x + 1

    x, y = arrays(X, (3,))
    assert_close(first(x, y), x + 1.0, "float32")
    assert first.kernel_for(x, y).input_names == ("x",)


def test_jit_returning_an_input_gives_a_copy() -> None:
    (x,) = arrays(X)
    out = eqsat.jit(lambda x: x)(x)
    assert out is not x
    np.testing.assert_array_equal(out, x)


def test_jit_keeps_the_function_metadata_and_passes_options() -> None:
    def mlp(x: Any, W: Any) -> Any:
        """One layer."""
        return np.maximum(x @ W, 0)

    compiled = eqsat.jit(limits=eqsat.Limits(iterations=1), isa="scalar")(mlp)
    assert (compiled.__name__, compiled.__doc__, compiled.__wrapped__) == (  # type: ignore[attr-defined]
        "mlp",
        "One layer.",
        mlp,
    )
    x, W = arrays(X, (16, 4))
    assert_close(compiled(x, W), np.maximum(x.astype(np.float64) @ W, 0), "float32")
    explanation = compiled.kernel_for(x, W).explain()
    assert "isa scalar" in explanation and "iteration limit" in explanation
    assert "written: maximum((x @ W), 0)" in explanation  # inputs named after the parameters
    assert repr(compiled).endswith(".mlp: 1 kernel(s)>")


def test_jit_takes_exactly_the_keyword_options_of_compile() -> None:
    keyword_only = [
        name
        for name, parameter in inspect.signature(eqsat.compile).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    assert list(CompileOptions.__annotations__) == keyword_only
    with pytest.raises(ArgumentError, match="unknown option.*'threadz'.*autotune"):
        eqsat.jit(threadz=2)(lambda x: x)  # type: ignore[call-arg]


@eqsat.jit(progress=False)
def module_level_layer(x: Any) -> Any:
    return np.maximum(x * 2.0, 0.0)


def test_a_jit_function_pickles_by_reference_like_a_function() -> None:
    """multiprocessing and joblib send a module-level @jit function by name; a local one
    (or a lambda) cannot be pickled, as with plain functions."""
    assert pickle.loads(pickle.dumps(module_level_layer)) is module_level_layer
    (x,) = arrays(X)
    np.testing.assert_array_equal(module_level_layer(x), np.maximum(x * 2, 0))
    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(eqsat.jit(lambda x: x + 1))


# ------------------------------------------------------------------ clear errors


def tensor_x() -> eqsat.Tensor:
    return eqsat.tensor("x", X)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda x: np.sort(x), "numpy.sort is not supported on eqsat tensors; supported: "),
        (lambda x: np.fft.fft(x), "numpy.fft.fft is not supported on eqsat tensors"),
        (lambda x: np.arcsin(x), "numpy.arcsin is not supported on eqsat tensors"),
        (lambda x: np.add.reduce(x), "numpy.add.reduce is not supported on eqsat tensors"),
        (lambda x: np.multiply.outer(x, x), "numpy.multiply.outer is not supported"),
        (lambda x: np.maximum.accumulate(x), "numpy.maximum.accumulate is not supported"),
        (lambda x: np.add(x, 1, out=np.empty(X)), "numpy.add: keyword argument(s) out not"),
        (lambda x: np.exp(x, where=x > 0), "numpy.exp: keyword argument(s) where not"),
        (
            lambda x: np.multiply(x, x, dtype=np.float64),
            "numpy.multiply: keyword argument(s) dtype",
        ),
        (
            lambda x: np.sum(x, dtype=np.float64),
            "numpy.sum: keyword argument(s) dtype not "
            "supported on eqsat tensors (it takes axis, keepdims)",
        ),
        (lambda x: np.mean(x, 0, np.float64), "numpy.mean: eqsat takes at most 2 positional"),
        (lambda x: np.reshape(x, (16, 8), order="F"), "numpy.reshape: keyword argument(s) order"),
        (lambda x: np.dot(x.reshape(2, 4, 16), x.T), "numpy.dot: shapes (2, 4, 16) and (16, 8);"),
        (lambda x: np.asarray(x), "a symbolic eqsat tensor has no values"),
        (
            lambda x: np.arange(16.0) ** 2 + x,
            "add: cannot capture a numpy array of shape (16,) and dtype float64 as a constant; "
            "pass it as an input",
        ),
        (
            lambda x: np.ones((16, 2)).T @ x.T,
            "matmul: cannot capture a numpy array of shape (2, 16)",
        ),
        (lambda x: np.where(x > 0, np.arange(16.0) ** 2, x), "where: cannot capture a numpy array"),
    ],
)
def test_unsupported_numpy_use_names_it(build: Callable[[Any], Any], message: str) -> None:
    with pytest.raises(UnsupportedError, match=re.escape(message)):
        build(tensor_x())


def test_another_librarys_ufunc_is_named_as_such_with_eqsats_function() -> None:
    from scipy import special  # a test extra: the most used library of ufuncs besides numpy

    message = "the ufunc erf (not numpy's) is not supported on eqsat tensors; use eqsat.erf; "
    with pytest.raises(UnsupportedError, match=re.escape(message)):
        special.erf(tensor_x())


def test_jit_refuses_a_captured_constant_array() -> None:
    W = np.arange(64, dtype=np.float32).reshape(16, 4) ** 2  # no function of its indices

    @eqsat.jit
    def layer(x: Any) -> Any:
        return x @ W

    with pytest.raises(UnsupportedError, match=re.escape("shape (16, 4) and dtype float32 as a")):
        layer(*arrays(X))
    assert not layer.kernels


def test_jit_names_the_unsupported_numpy_function() -> None:
    with pytest.raises(UnsupportedError, match=re.escape("numpy.cumsum is not supported")):
        eqsat.jit(lambda x: np.cumsum(x, axis=0))(*arrays(X))


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (
            [np.ones(X, np.complex64)],
            "'x' of test_jit_wrong_dtype.<locals>.<lambda>: tensor: unsupported dtype 'complex64'",
        ),
        (
            [np.ones(X, np.float32), np.ones(X, np.complex128)],
            "<lambda>: tensor: unsupported dtype 'complex128'; use bool, an integer type",
        ),
    ],
)
def test_jit_wrong_dtype(inputs: list[np.ndarray], message: str) -> None:
    function = (lambda x: x + 1) if len(inputs) == 1 else (lambda x, y: (x + 1, y + 1))
    with pytest.raises(DTypeError, match=re.escape(message)):
        eqsat.jit(function)(*inputs)


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (lambda x, n: n, "<lambda> returned a result of type int, not an expression of its"),
        (lambda x, n: np.ones(3), "<lambda> returned a result of type ndarray, not an"),
        (lambda x, n: (x + 1, n), "<lambda> returned output 1 of type int, not an expression"),
    ],
)
def test_jit_result_must_be_an_expression(function: Callable[..., Any], message: str) -> None:
    with pytest.raises(UnsupportedError, match=re.escape(message)):
        eqsat.jit(function)(*arrays(X), 2)


def test_jit_refuses_unhashable_arguments_and_variadic_functions() -> None:
    def weighted(x: Any, ws: Any) -> Any:
        return x

    # ArgumentError: an EqsatError, and a TypeError as Python's own argument errors
    with pytest.raises(ArgumentError, match=r"argument 'ws' of .*weighted is a list; pass a"):
        eqsat.jit(weighted)(*arrays(X), [1.0])
    with pytest.raises(ArgumentError, match=re.escape("<lambda> has *args or **kwargs")):
        eqsat.jit(lambda *xs: xs[0])
    with pytest.raises(ArgumentError, match="<lambda>: missing a required argument: 'y'"):
        eqsat.jit(lambda x, y: x + y)(*arrays(X))
    with pytest.raises(ArgumentError, match="<lambda>: too many positional arguments"):
        eqsat.jit(lambda x: x + 1)(*arrays(X, X))
    with pytest.raises(ShapeError, match="'x' has shape"):  # a kept kernel, another shape
        compiled = eqsat.jit(lambda x: x + 1)
        compiled.kernel_for(*arrays(X))(*arrays((2, 2)))


def test_positional_calls_reuse_the_kernel_of_their_shapes_and_static_values() -> None:
    calls: list[object] = []

    @eqsat.jit(static_argnames="scale")
    def shifted(scale, x, y):  # type: ignore[no-untyped-def]
        calls.append(scale)
        return x * scale - y

    rng = np.random.default_rng(5)
    x, y = (rng.standard_normal((3, 5), np.float32) for _ in range(2))
    x2, y2 = (rng.standard_normal((4, 5), np.float32) for _ in range(2))
    for _ in range(3):  # traced once, then answered by the positional fast path
        assert_close(shifted(2.0, x, y), 2.0 * x - y, "float32")
    assert calls == [2.0]
    assert_close(shifted(3.0, x, y), 3.0 * x - y, "float32")
    assert_close(shifted(2, x, y), 2 * x - y, "float32")  # an int is another static value
    assert_close(shifted(2.0, x2, y2), 2.0 * x2 - y2, "float32")
    assert_close(shifted(2.0, y, x), 2.0 * y - x, "float32")  # inputs follow the arguments
    assert calls == [2.0, 3.0, 2, 2.0] and len(shifted.kernels) == 4
    with pytest.raises(TypeError, match="hashable"):
        shifted([2.0], x, y)
