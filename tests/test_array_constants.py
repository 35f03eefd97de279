"""Constant numpy arrays in traced code (eqsat.core.array_constants): an array numpy computed
from static data that is a function of its indices (np.arange, np.ones/np.full, np.tril/np.triu,
np.eye, causal masks from np.arange comparisons) is captured as that function of the loop
indices: exactly numpy's values and dtype, no array in memory; any other array is refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import eqsat
from eqsat.core.array_constants import Pattern, pattern
from eqsat.core.interp import evaluate
from eqsat.core.terms import to_term
from eqsat.frontend.elementwise import _array_constant

DTYPES = ("bool", "int32", "int64", "float32", "float64")

# Index-function arrays as numpy users write them, of shape (n, m), an offset k and a dtype.
BUILDERS: dict[str, Callable[[int, int, int, str], np.ndarray]] = {
    "tril of ones": lambda n, m, k, dtype: np.tril(np.ones((n, m), dtype), k),
    "triu of ones": lambda n, m, k, dtype: np.triu(np.ones((n, m), dtype), k),
    "triu of -inf": lambda n, m, k, dtype: np.triu(np.full((n, m), -np.inf), k).astype(dtype),
    "eye": lambda n, m, k, dtype: np.eye(n, m, k, dtype=dtype),
    "causal comparison": lambda n, m, k, dtype: (np.arange(n)[:, None] + k >= np.arange(m)).astype(
        dtype
    ),
    "full": lambda n, m, k, dtype: np.full((n, m), k, dtype),
    "arange": lambda n, m, k, dtype: np.arange(n * m, dtype=dtype).reshape(n, m),
}


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(sorted(BUILDERS)),
    st.integers(1, 9),
    st.integers(1, 9),
    st.integers(-10, 10),
    st.sampled_from(DTYPES),
    st.sampled_from([(), (1,), (1, 1)]),
)
def test_an_index_function_array_is_captured_with_numpys_values_and_dtype(
    builder: str, n: int, m: int, k: int, dtype: str, leading: tuple[int, ...]
) -> None:
    assume(not (builder == "arange" and dtype == "bool"))  # numpy has no such array
    with np.errstate(invalid="ignore"):  # -inf cast to an integer is INT_MIN (refused below)
        value = BUILDERS[builder](n, m, k, dtype).reshape(*leading, n, m)
    captured = _array_constant(value)
    if value.dtype.kind in "iu" and abs(value.astype(np.float64)).max() > 2.0**53:
        assert captured is None  # refused: no float holds it exactly
        return
    assert captured is not None, (builder, value)
    assert captured.shape == value.shape and captured.dtype == value.dtype.name
    term = to_term(captured.expr)
    got = evaluate(term, {})  # type: ignore[arg-type]
    np.testing.assert_array_equal(np.asarray(got).astype(value.dtype), value)


@pytest.mark.parametrize(
    "value",
    [
        np.random.default_rng(0).random((4, 5)),
        np.array([[0.0, 1.0], [2.0, 0.0]]),  # constant diagonals, but three values
        np.array([[1.0, np.nan], [1.0, 1.0]]),
        np.array([[-0.0, 0.0], [0.0, -0.0]]),
        np.stack([np.tril(np.ones((3, 3))), np.triu(np.ones((3, 3)))]),  # a leading axis of 2
    ],
    ids=["random", "three values", "NaN", "-0.0", "two triangles stacked"],
)
def test_other_arrays_are_not_recognized(value: np.ndarray) -> None:
    assert pattern(value) is None


def test_a_filled_array_of_any_rank_is_recognized() -> None:
    assert pattern(np.full((2, 3, 3), 1.5)) == Pattern("filled", 1.5)


def causal_attention(q: Any, k: Any, v: Any) -> Any:
    """Causal single-head attention as numpy users write it (the mask from np.arange)."""
    n = q.shape[0]
    scores = q @ k.T / np.sqrt(q.shape[1])
    scores = np.where(np.arange(n)[:, None] >= np.arange(n), scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True) @ v


def test_causal_attention_written_in_numpy_compiles_without_a_mask_in_memory() -> None:
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((40, 16), dtype=np.float32) for _ in range(3))
    traced = eqsat.jit(causal_attention)
    got = traced(q, k, v)
    want = causal_attention(*(a.astype(np.float64) for a in (q, k, v)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    kernel = traced.kernel_for(q, k, v)
    assert kernel.input_names == ("q", "k", "v")  # the mask is a predicate, not an input
    assert ": agrees" in kernel.explain()
