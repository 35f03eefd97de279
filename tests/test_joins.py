"""Joins and splits: `np.concatenate`, `np.stack`, `np.split`, `np.array_split`, `np.pad`
(constant, edge, reflect, symmetric, wrap), and the views that repeat a tensor: `np.tile`,
`np.repeat`, `np.ravel` / `x.flatten()`.

A concatenation is a copy into one buffer (`TExpr.concat`: one nest per part, each storing at
its offset along the axis); stack inserts a dimension and concatenates; split is views; pad
concatenates blocks of the constant. Each is checked through the compiled C against numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eqsat

SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.5, -2.25, 3.0], dtype=np.float32)


@given(st.data())
@settings(max_examples=10, deadline=None)
def test_concatenations_of_random_parts_match_numpy(data: st.DataObject) -> None:
    rank = data.draw(st.integers(1, 3))
    shape = [data.draw(st.integers(1, 9)) for _ in range(rank)]
    axis = data.draw(st.integers(-rank, rank - 1))
    count = data.draw(st.integers(1, 3))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    symbols, values = [], []
    for part in range(count):
        part_shape = list(shape)
        part_shape[axis] = data.draw(st.integers(1, 9))
        symbols.append(eqsat.tensor(f"p{part}", tuple(part_shape)))
        values.append(rng.choice(SPECIAL, size=part_shape).astype(np.float32))
    joined = np.concatenate(symbols, axis=axis)
    kernel = eqsat.compile([joined * 2.0, eqsat.exp(joined)], progress=False)
    want = np.concatenate(values, axis=axis)
    got = kernel(*values)
    np.testing.assert_array_equal(got[0], want * np.float32(2))
    np.testing.assert_allclose(got[1], np.exp(want), rtol=1e-6)


@given(st.data())
@settings(max_examples=10, deadline=None)
def test_array_split_of_random_extents_matches_numpy(data: st.DataObject) -> None:
    """Sections that do not divide the extent: the first extent % n are one element longer."""
    shape = (data.draw(st.integers(1, 9)), data.draw(st.integers(1, 9)))
    axis = data.draw(st.integers(-2, 1))
    sections = data.draw(st.integers(1, shape[axis]))
    values = np.random.default_rng(sections).choice(SPECIAL, size=shape).astype(np.float32)
    parts = np.array_split(eqsat.tensor("x", shape), sections, axis=axis)
    want = np.array_split(values, sections, axis=axis)
    assert [part.shape for part in parts] == [part.shape for part in want]
    got = eqsat.compile([part * 2.0 for part in parts], progress=False)(values)
    for got_part, want_part in zip(got, want, strict=True):
        np.testing.assert_array_equal(got_part, want_part * np.float32(2))


# The widest pad drawn: extent + this (edge takes any width; the others what numpy mirrors once).
PAD_LIMITS = {"edge": 5, "reflect": -1, "symmetric": 0, "wrap": 0}


@given(st.data())
@settings(max_examples=12, deadline=None)
def test_pad_modes_match_numpy(data: st.DataObject) -> None:
    """Each dimension is padded in turn, so later ones pad the earlier padding (the corners)."""
    mode = data.draw(st.sampled_from(sorted(PAD_LIMITS)))
    shape = (data.draw(st.integers(2, 6)), data.draw(st.integers(2, 6)))
    widest = [extent + PAD_LIMITS[mode] for extent in shape]
    widths = [(data.draw(st.integers(0, w)), data.draw(st.integers(0, w))) for w in widest]
    values = np.random.default_rng(sum(shape)).choice(SPECIAL, size=shape).astype(np.float32)
    padded = np.pad(eqsat.tensor("x", shape), widths, mode=mode)
    got = eqsat.compile(padded * 2.0, progress=False)(values)
    np.testing.assert_array_equal(got, np.pad(values, widths, mode=mode) * np.float32(2))


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_stack_splits_and_pads_match_numpy_with_special_values(isa: str) -> None:
    rng = np.random.default_rng(4)
    a_values = rng.choice(SPECIAL, size=(6, 20)).astype(np.float32)
    b_values = rng.choice(SPECIAL, size=(6, 20)).astype(np.float32)
    a, b = eqsat.tensor("a", (6, 20)), eqsat.tensor("b", (6, 20))
    outputs = [
        np.stack([a, b * 3.0], axis=1),
        np.stack([a, b]).max(axis=0),
        np.split(a, 4, axis=1)[1] - np.split(b, [2, 5])[1][:1, :5],
        np.pad(a, ((1, 0), (2, 3)), constant_values=-1.5),
        np.pad(b, 1)[:, ::-1],
        *np.array_split(a, 4, axis=1)[2:],
        np.pad(a, ((2, 1), (3, 4)), mode="reflect") + np.pad(b, ((1, 2), (7, 0)), mode="wrap"),
        np.pad(a, ((0, 3), (2, 0)), mode="edge") * np.pad(b, ((3, 0), (0, 2)), mode="symmetric"),
    ]
    kernel = eqsat.compile(outputs, isa=isa, progress=False)
    with np.errstate(invalid="ignore"):
        want = [
            np.stack([a_values, b_values * np.float32(3)], axis=1),
            np.stack([a_values, b_values]).max(axis=0),
            np.split(a_values, 4, axis=1)[1] - np.split(b_values, [2, 5])[1][:1, :5],
            np.pad(a_values, ((1, 0), (2, 3)), constant_values=-1.5),
            np.pad(b_values, 1)[:, ::-1],
            *np.array_split(a_values, 4, axis=1)[2:],
            np.pad(a_values, ((2, 1), (3, 4)), mode="reflect")
            + np.pad(b_values, ((1, 2), (7, 0)), mode="wrap"),
            np.pad(a_values, ((0, 3), (2, 0)), mode="edge")
            * np.pad(b_values, ((3, 0), (0, 2)), mode="symmetric"),
        ]
    for got, expected in zip(kernel(a_values, b_values), want, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_jit_concatenates_as_numpy_code_does() -> None:
    @eqsat.jit
    def features(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        both = np.concatenate([x, y], axis=-1)
        return np.tanh(both) @ np.concatenate([y, x], axis=-1).T

    rng = np.random.default_rng(5)
    x = rng.standard_normal((7, 3), dtype=np.float32)
    y = rng.standard_normal((7, 5), dtype=np.float32)
    want = np.tanh(np.concatenate([x, y], axis=-1)) @ np.concatenate([y, x], axis=-1).T
    np.testing.assert_allclose(features(x, y), want, rtol=1e-5, atol=1e-5)


def test_nested_concatenations_store_each_part_once() -> None:
    """concatenate([a, b, c]) is one buffer written by three nests, not a copy of a copy."""
    a, b, c = (eqsat.tensor(name, (4, 16)) for name in "abc")
    program = eqsat.optimize(np.concatenate([a, b, c]), progress=False).program
    assert "alloc" not in eqsat.core.pretty.format_loops(program.body)


SQUARES = np.arange(12.0).reshape(3, 4) ** 2  # an array no function of its indices captures


@pytest.mark.parametrize(
    ("build", "error", "says"),
    [
        (lambda a, b: np.concatenate([a, b]), eqsat.ShapeError, "differ in another dimension"),
        (lambda a, b: np.concatenate([a, b], axis=2), eqsat.ShapeError, "axis 2"),
        (lambda a, b: np.concatenate([a, a[0]]), eqsat.ShapeError, "ranks differ"),
        (lambda a, b: np.concatenate([a.sum(), a.sum()]), eqsat.ShapeError, "zero-dimensional"),
        (lambda a, b: np.concatenate([a, SQUARES]), eqsat.UnsupportedError, "input"),
        (lambda a, b: np.stack([a, b]), eqsat.ShapeError, "one shape"),
        (lambda a, b: np.split(a, 2, axis=0), eqsat.ShapeError, "do not divide"),
        (lambda a, b: np.split(a, [0, 2]), eqsat.ShapeError, "selects no element"),
        (lambda a, b: np.array_split(a, 4), eqsat.ShapeError, "would leave 1 empty"),
        (lambda a, b: np.array_split(a, 0), eqsat.ShapeError, "must be at least 1, got 0"),
        (lambda a, b: np.pad(a, 1, mode="mean"), eqsat.UnsupportedError, "mode='mean' is not"),
        (lambda a, b: np.pad(a, 1, constant_values=(0, 1)), eqsat.UnsupportedError, "one number"),
        (lambda a, b: np.pad(a, 3, mode="reflect"), eqsat.UnsupportedError, "at most 2 elements"),
        (lambda a, b: np.pad(a, ((0, 0), (5, 0)), mode="wrap"), eqsat.UnsupportedError, "got 5"),
        (lambda a, b: np.pad(a, -1), eqsat.ShapeError, "must not be negative"),
    ],
)
def test_bad_joins_say_what_is_wrong(build: object, error: type, says: str) -> None:
    a, b = eqsat.tensor("a", (3, 4)), eqsat.tensor("b", (2, 5))
    with pytest.raises(error, match=says):
        build(a, b)  # type: ignore[operator]


@given(st.data())
@settings(max_examples=12, deadline=None)
def test_tiles_and_repeats_of_random_shapes_match_numpy(data: st.DataObject) -> None:
    """tile with fewer, as many or more counts than dimensions; repeat along an axis or over
    the flattened tensor; each a view (a broadcast of a new axis and a reshape)."""
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    reps = tuple(data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=4)))
    count = data.draw(st.integers(1, 4))
    axis = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1))
    values = np.random.default_rng(count).choice(SPECIAL, size=shape).astype(np.float32)
    x = eqsat.tensor("x", shape)
    tiled, repeated = np.tile(x, reps), np.repeat(x, count, axis=axis)
    want = [np.tile(values, reps), np.repeat(values, count, axis=axis), values.flatten()]
    assert [tiled.shape, repeated.shape] == [want[0].shape, want[1].shape]
    kernel = eqsat.compile([tiled * 2.0, repeated + 1.0, x.flatten() - 1.0], progress=False)
    got = kernel(values)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(got[0], want[0] * np.float32(2))
        np.testing.assert_array_equal(got[1], want[1] + np.float32(1))
        np.testing.assert_array_equal(got[2], want[2] - np.float32(1))


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_tile_repeat_and_norm_match_numpy_with_special_values(isa: str) -> None:
    """The views feed arithmetic and a reduction; np.linalg.norm is sqrt(sum(x * x)): NaN,
    ±inf and -0.0 go through as numpy's."""
    rng = np.random.default_rng(5)
    values = rng.choice(SPECIAL, size=(5, 19)).astype(np.float32)
    values[1] = rng.uniform(-2, 2, 19)  # one row of finite values: a finite norm too
    x = eqsat.tensor("x", (5, 19))
    outputs = [
        np.tile(x, (2, 3)).sum(axis=1),
        x.repeat(3, axis=1) * 0.5,
        np.linalg.norm(x, axis=1),
        np.linalg.norm(np.ravel(x)[20:40]),
        eqsat.norm(x, "fro", axis=(0, 1), keepdims=True),
    ]
    kernel = eqsat.compile(outputs, isa=isa, progress=False)
    with np.errstate(invalid="ignore", over="ignore"):
        want = [
            np.tile(values, (2, 3)).sum(axis=1),
            values.repeat(3, axis=1) * np.float32(0.5),
            np.linalg.norm(values, axis=1),
            np.linalg.norm(np.ravel(values)[20:40]),
            np.linalg.norm(values, "fro", axis=(0, 1), keepdims=True),
        ]
    got = kernel(values)
    for got_one, expected in zip(got, want, strict=True):
        np.testing.assert_allclose(got_one, expected, rtol=2e-6)  # (NaN equal to NaN)
    np.testing.assert_array_equal(np.signbit(got[1]), np.signbit(want[1]))  # -0.0 * 0.5


@pytest.mark.parametrize(
    ("call", "error", "says"),
    [
        (lambda x: np.repeat(x, [1, 2, 3]), eqsat.UnsupportedError, "a count per element"),
        (lambda x: np.tile(x, (2, 0)), eqsat.ShapeError, "must be positive"),
        (lambda x: np.linalg.norm(x, ord=1), eqsat.UnsupportedError, "ord=1"),
        (lambda x: np.linalg.norm(x, ord=2), eqsat.UnsupportedError, "Frobenius"),
        (lambda x: np.linalg.norm(x, 2, axis=(0, 1)), eqsat.UnsupportedError, "ord=2 over 2"),
        (lambda x: np.linalg.norm(x, "fro", axis=1), eqsat.UnsupportedError, "'fro' over 1"),
    ],
)
def test_counts_and_norms_eqsat_cannot_take_say_what_is_wrong(
    call: object, error: type, says: str
) -> None:
    with pytest.raises(error, match=says):
        call(eqsat.tensor("x", (3, 3)))  # type: ignore[operator]
