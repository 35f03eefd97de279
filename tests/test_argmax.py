"""argmax / argmin: the first index of the extreme (or of the first NaN, as numpy), computed as
the smallest `arange` value where the tensor holds its extreme; the index is a number of the
tensor's dtype. Checked in the interpreter on random arrays with ties and special values, and
through the C at every ISA level."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eqsat
from eqsat.core.interp import evaluate
from eqsat.core.terms import to_term

VALUES = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.0, 2.5], dtype=np.float32)


@st.composite
def arrays_with_ties(draw: st.DrawFn) -> np.ndarray:
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    picks = draw(st.lists(st.integers(0, len(VALUES) - 1), min_size=1, max_size=8))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    return rng.choice(VALUES[picks], size=shape)


@given(arrays_with_ties(), st.data())
@settings(max_examples=200, deadline=None)
def test_the_interpreter_finds_numpys_index(values: np.ndarray, data: st.DataObject) -> None:
    axis = data.draw(st.none() | st.integers(-values.ndim, values.ndim - 1))
    keepdims = data.draw(st.booleans())
    x = eqsat.tensor("x", values.shape)
    for op in ("argmax", "argmin"):
        want = getattr(np, op)(values, axis=axis, keepdims=keepdims)
        got = evaluate(to_term(getattr(x, op)(axis=axis, keepdims=keepdims).expr), {"x": values})
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_compiled_argmax_and_argmin_match_numpy_with_special_values(isa: str) -> None:
    rng = np.random.default_rng(6)
    values = rng.choice(VALUES[1:], size=(7, 45)).astype(np.float32)
    values[2, [5, 30]] = np.nan  # the first NaN wins
    values[6, 44] = np.nan
    x = eqsat.tensor("x", values.shape)
    outputs = [x.argmax(axis=1), np.argmin(x, axis=0), x.argmin(), np.argmax(x, 1, keepdims=True)]
    kernel = eqsat.compile(outputs, isa=isa, progress=False)
    want = [
        values.argmax(axis=1),
        values.argmin(axis=0),
        values.argmin(),
        values.argmax(axis=1, keepdims=True),
    ]
    for got, expected in zip(kernel(values), want, strict=True):
        np.testing.assert_array_equal(got, expected)
    if isa != "scalar":  # the index steps by one a lane: a vector of lane numbers, not scalars
        assert "_setr_ps(0, 1, 2, 3" in kernel.c_source


def test_argmax_of_a_jit_function_is_its_row_label() -> None:
    @eqsat.jit
    def predictions(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return np.argmax(x @ w, axis=1)

    rng = np.random.default_rng(7)
    x, w = (
        rng.standard_normal((30, 8), dtype=np.float32),
        rng.standard_normal((8, 5), dtype=np.float32),
    )
    np.testing.assert_array_equal(predictions(x, w), np.argmax(x @ w, axis=1))


def test_a_tuple_of_axes_is_refused_as_numpy_does() -> None:
    with pytest.raises(eqsat.ShapeError, match="argmax: axis must be an int or None"):
        eqsat.tensor("x", (3, 4)).argmax(axis=(0, 1))  # type: ignore[arg-type]
