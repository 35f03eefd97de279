"""Constant numpy arrays that are functions of their indices, recognized by value.

In an `@eqsat.jit` function, numpy computes an array built from the function's static data
before eqsat sees it: `np.arange(n)[:, None] >= np.arange(n)` arrives as an n x n array of
bools, `np.tril(np.ones((n, n)))` as floats. eqsat holds no array constants in memory; an array
that `pattern` recognizes is rebuilt by the frontend as a predicate of the loop indices
(`eqsat.arange` comparisons), which costs no memory traffic:

- "arange": 0, 1, ..., size - 1 in row-major order, of a number dtype (`np.arange(n)`,
  reshaped);
- "filled": every element one value (`np.ones`, `np.zeros`, `np.full`);
- "lower": `inside` where column - row <= offset in the last two axes, else `outside`
  (`np.tril`/`np.triu` of a filled array, causal masks written with `np.arange` comparisons);
- "diagonal": `inside` where column - row == offset, else `outside` (`np.eye(n, m, k)`).

Leading axes of length 1 are allowed (`mask[None, None]`). An array holding NaN or -0.0, or
any other array, is not recognized (None).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Pattern:
    """A recognized constant array: its `kind` ("arange", "filled", "lower" or "diagonal", as
    the module docstring says), and for the last three the value `inside` the region (every
    element, for "filled"), the value `outside` it and the diagonal `offset` (column - row)
    that bounds it."""

    kind: str
    inside: bool | int | float = 0
    outside: bool | int | float = 0
    offset: int = 0


def pattern(value: np.ndarray) -> Pattern | None:
    """What `value` is as a function of its indices, or None if it is none of the kinds.

    It requires: `value` has at least one element."""
    if value.dtype.kind == "f" and (np.isnan(value).any() or np.signbit(value[value == 0]).any()):
        return None  # the comparisons below see neither NaN nor -0.0
    if value.dtype.kind in "iuf" and np.array_equal(value.ravel(), np.arange(value.size)):
        return Pattern("arange")
    flat = value.ravel()
    if (flat == flat[0]).all():
        return Pattern("filled", flat[0].item())
    if value.ndim < 2 or any(dim != 1 for dim in value.shape[:-2]):
        return None
    matrix = value.reshape(value.shape[-2:])
    if not (matrix[1:, 1:] == matrix[:-1, :-1]).all():
        return None  # not constant along each diagonal
    rows = value.shape[-2]
    # by_offset[d + rows - 1] is the value on the diagonal where column - row == d
    by_offset = np.concatenate((matrix[::-1, 0], matrix[0, 1:]))
    return _step(by_offset, rows) or _spike(by_offset, rows)


def _step(by_offset: np.ndarray, rows: int) -> Pattern | None:
    """A "lower" pattern if `by_offset` is one value up to some offset and another after."""
    changes = np.flatnonzero(by_offset[1:] != by_offset[:-1])
    if len(changes) != 1:
        return None
    last_inside = int(changes[0])
    return Pattern(
        "lower",
        by_offset[0].item(),
        by_offset[-1].item(),
        last_inside - (rows - 1),
    )


def _spike(by_offset: np.ndarray, rows: int) -> Pattern | None:
    """A "diagonal" pattern if `by_offset` is one value except at one offset."""
    values, counts = np.unique(by_offset, return_counts=True)
    if len(values) != 2 or 1 not in counts:
        return None
    inside = values[list(counts).index(1)]
    outside = values[1 - list(counts).index(1)]
    position = int(np.flatnonzero(by_offset == inside)[0])
    return Pattern("diagonal", inside.item(), outside.item(), position - (rows - 1))
