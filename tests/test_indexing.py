"""numpy's basic indexing on tensors (`x[a:b:s, i, None, ...]`): a `TExpr.slice` view.

The interpreter is checked against numpy on random indices, the compiled C against numpy at
every ISA level with NaN, ±inf and -0.0 in the inputs, and bad indices against numpy's errors.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import eqsat
from eqsat.core.interp import evaluate
from eqsat.core.terms import to_term
from tests.programs import basic_indices
from tests.test_numerics import assert_specials_agree

SHAPES = st.lists(st.integers(1, 7), min_size=1, max_size=3).map(tuple)
SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.5, -2.25, 3.0], dtype=np.float32)


@st.composite
def indexed(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[object, ...]]:
    shape = draw(SHAPES)
    return shape, draw(basic_indices(shape))


@given(indexed())
@settings(max_examples=300, deadline=None)
def test_the_interpreter_indexes_as_numpy(case: tuple[tuple[int, ...], tuple[object, ...]]) -> None:
    shape, key = case
    values = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    view = eqsat.tensor("x", shape, "float64")[key]
    want = values[key]
    assert view.shape == want.shape
    np.testing.assert_array_equal(evaluate(to_term(view.expr), {"x": values}), want)


KEYS = [
    np.s_[:, :10],
    np.s_[::2],
    np.s_[::-1, 3:17:4],
    np.s_[-1],
    np.s_[..., 5],
    np.s_[2:, None, -3::-2],
    np.s_[None, 1:12, ...],
    np.s_[1:, 3:],
    np.s_[:, 2:19],
]


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
@pytest.mark.parametrize("key", KEYS, ids=str)
def test_compiled_views_match_numpy_with_special_values(isa: str, key: tuple[object, ...]) -> None:
    """Views feed elementwise ops and a reduction; NaN, ±inf and -0.0 go through as numpy."""
    rng = np.random.default_rng(0)
    values = rng.choice(SPECIAL, size=(13, 21)).astype(np.float32)
    x = eqsat.tensor("x", (13, 21))
    view = x[key]
    kernel = eqsat.compile([view * 2.0 - 1.0, view.sum(axis=-1)], isa=isa, progress=False)
    with np.errstate(invalid="ignore"):
        want = (values[key] * np.float32(2) - np.float32(1), values[key].sum(axis=-1))
    for got, expected in zip(kernel(x=values), want, strict=True):
        np.testing.assert_array_equal(got, expected)


@given(st.data())
@settings(max_examples=12, deadline=None)
def test_views_of_random_programs_compile_and_match_numpy(data: st.DataObject) -> None:
    """A view read by a product and a broadcast, through the whole pipeline."""
    rows, depth, cols = (data.draw(st.integers(2, 40)) for _ in range(3))
    a, w = eqsat.tensor("a", (rows, depth)), eqsat.tensor("w", (depth, cols))
    key = data.draw(basic_indices((rows, depth)))
    view = a[key]
    if view.ndim != 2:
        view = view.reshape(-1, view.shape[-1]) if view.ndim else view.reshape(1, 1)
    assume(view.shape[-1] <= depth)  # the view's last extent is a row count of w to multiply by
    rng = np.random.default_rng(1)
    inputs = {"a": rng.standard_normal((rows, depth)), "w": rng.standard_normal((depth, cols))}
    kernel = eqsat.compile(eqsat.tanh(view @ w[: view.shape[-1]]) + view[:, :1], progress=False)
    got = kernel(**{k: v.astype(np.float32) for k, v in inputs.items()})
    view_values = inputs["a"][key].reshape(view.shape)
    want = np.tanh(view_values @ inputs["w"][: view.shape[-1]]) + view_values[:, :1]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max()))


def test_jit_takes_the_indexing_numpy_code_is_written_with() -> None:
    @eqsat.jit
    def pairwise(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
        return (a[:, None] - b[None, :]) ** 2 + x[::2, :10].sum() + x[-1, ::-3].max()

    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(9, dtype=np.float32), rng.standard_normal(5, dtype=np.float32)
    x = rng.standard_normal((6, 14), dtype=np.float32)
    want = (a[:, None] - b[None, :]) ** 2 + x[::2, :10].sum() + x[-1, ::-3].max()
    np.testing.assert_allclose(pairwise(a, b, x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_a_view_offset_in_its_last_dimension_is_read_by_vector_loads(isa: str) -> None:
    """`x[:, 3:]` walks memory with unit stride from an offset: a vector loop of unaligned
    loads, its tail (97 is no multiple of the lanes) masked or peeled."""
    x = eqsat.tensor("x", (40, 100))
    kernel = eqsat.compile(x[:, 3:] * 2.0, isa=isa, progress=False)
    assert "in0[i0, i1 + 3]" in kernel.explain() and "vector(" in kernel.explain()
    values = np.random.default_rng(3).standard_normal((40, 100), dtype=np.float32)
    np.testing.assert_array_equal(kernel(x=values), values[:, 3:] * np.float32(2))


def test_a_full_view_is_the_tensor_itself() -> None:
    x = eqsat.tensor("x", (3, 4))
    assert x[:].expr is x.expr and x[...].expr is x.expr and x[:, ::1].expr is x.expr


@pytest.mark.parametrize(
    ("key", "error", "says"),
    [
        (np.s_[3], eqsat.IndexingError, "index 3 is out of range for dimension 0 of extent 3"),
        (np.s_[:, -5], eqsat.IndexingError, "index -5 is out of range for dimension 1"),
        (np.s_[0, 0, 0], eqsat.IndexingError, "3 indices for a tensor of rank 2"),
        (np.s_[..., 0, ...], eqsat.IndexingError, "single ellipsis"),
        (np.s_[2:1], eqsat.ShapeError, "selects no element"),
        (np.s_[[0, 1]], eqsat.UnsupportedError, "only basic indexing"),
        (np.s_[True], eqsat.UnsupportedError, "only basic indexing"),
        (np.s_[np.array([0])], eqsat.UnsupportedError, "only basic indexing"),
    ],
    ids=str,
)
def test_bad_indices_say_what_is_wrong(key: object, error: type, says: str) -> None:
    x = eqsat.tensor("x", (3, 4))
    with pytest.raises(error, match=says.replace("(", r"\(")):
        x[key]
    if error is eqsat.IndexingError:
        with pytest.raises(IndexError):  # as numpy raises
            np.zeros((3, 4))[key]  # type: ignore[index]


def test_a_tensor_index_is_refused() -> None:
    x = eqsat.tensor("x", (3, 4))
    with pytest.raises(eqsat.UnsupportedError, match="eqsat.where"):
        x[x > 0]


PRODUCT_KEYS = [np.s_[:10], np.s_[::-2, 5:9], np.s_[3], np.s_[:, -4:], np.s_[7:9, ::3]]


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
@pytest.mark.parametrize("key", PRODUCT_KEYS, ids=str)
def test_a_view_of_a_product_multiplies_only_what_it_keeps(
    isa: str, key: tuple[object, ...]
) -> None:
    """`(2 * relu(A @ B))[key]`: the view moves onto A's rows and B's columns (slice-matmul,
    slice-unary, slice-binary-scalar-*), so no product is computed for what the view drops;
    the kernel follows numpy with NaN, ±inf and -0.0 in A."""
    A, B = eqsat.tensor("A", (40, 24)), eqsat.tensor("B", (24, 30))
    program = (2.0 * eqsat.relu(A @ B))[key]
    optimized = eqsat.optimize(program, progress=False)
    assert "(A[" in optimized.expr and "@ B[" in optimized.expr, optimized.expr
    assert not optimized.expr.endswith("]"), optimized.expr  # no view of the whole product left
    rng = np.random.default_rng(1)
    a = rng.choice(SPECIAL, size=(40, 24)).astype(np.float32)
    b = rng.uniform(-1, 1, (24, 30)).astype(np.float32)
    kernel = eqsat.compile(program, isa=isa, progress=False)
    with np.errstate(invalid="ignore"):
        want = (np.float32(2) * np.maximum(a @ b, 0))[key]
        wide = (2 * np.maximum(a.astype(np.float64) @ b.astype(np.float64), 0))[key]
    assert_specials_agree(kernel(A=a, B=b), want, wide)
