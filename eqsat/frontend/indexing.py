"""Views of a tensor's elements: numpy's basic indexing, reshape, broadcast and transpose."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from eqsat.core import shapes
from eqsat.core.errors import IndexingError, ShapeError, UnsupportedError
from eqsat.core.shapes import Shape
from eqsat.core.term import Term, texpr
from eqsat.frontend.tensor import Tensor, _require


def _view(x: Tensor, expr: Term, shape: Shape) -> Tensor:
    """`x`'s elements, rearranged by `expr` into `shape`."""
    return Tensor(
        expr, shape, x.dtype, integer_range=x.integer_range, needs_float64=x.needs_float64
    )


def _basic_index(x: Tensor, key: object) -> Tensor:
    """`x[key]` for numpy's basic indexing: a `TExpr.slice` view of the selected elements
    (nothing when all are), reshaped to drop the integer-indexed dimensions and insert the
    `None` ones.

    Raises IndexingError for an integer out of range or more indices than dimensions,
    ShapeError for a slice that selects nothing (a tensor has at least one element per
    dimension), UnsupportedError for advanced indexing (arrays, lists, booleans, tensors).
    """
    items = list(key) if isinstance(key, tuple) else [key]
    for item in items:
        allowed = item is None or item is Ellipsis or isinstance(item, slice)
        if not allowed and (isinstance(item, bool | np.bool_) or not _is_index(item)):
            raise UnsupportedError(
                f"x[{item!r}]: only basic indexing (integers, slices with steps, None, ...) is "
                "supported, not arrays, lists, booleans or tensors as indices; for a mask "
                "write eqsat.where(mask, x, 0), for a gather pass the rows as an input"
            )
    if len([item for item in items if item is Ellipsis]) > 1:
        raise IndexingError("x[...]: an index can only have a single ellipsis ('...')")
    indexed = len([item for item in items if item is not None and item is not Ellipsis])
    if indexed > x.ndim:
        raise IndexingError(f"x[...]: {indexed} indices for a tensor of rank {x.ndim}")
    ellipses = [at for at, item in enumerate(items) if item is Ellipsis] or [len(items)]
    items[ellipses[0] : ellipses[0] + 1] = [slice(None)] * (x.ndim - indexed)
    starts, steps, extents, shape = [], [], [], []
    dims = iter(enumerate(x.shape))
    for item in items:
        if item is None:
            shape.append(1)
            continue
        dim, n = next(dims)
        if isinstance(item, slice):
            start, stop, step = item.indices(n)
            extent = len(range(start, stop, step))
            if extent == 0:
                raise ShapeError(
                    f"x[...]: slice {item.start}:{item.stop}:{item.step} of dimension {dim} "
                    f"(extent {n}) selects no element; eqsat tensors are never empty"
                )
            starts.append(start), steps.append(step), extents.append(extent)
            shape.append(extent)
        else:
            position = int(item)  # type: ignore[call-overload]
            if not -n <= position < n:
                raise IndexingError(
                    f"x[...]: index {position} is out of range for dimension {dim} of extent {n}"
                )
            starts.append(position % n), steps.append(1), extents.append(1)
    view = x
    if (tuple(starts), tuple(extents)) != ((0,) * x.ndim, x.shape) or any(s != 1 for s in steps):
        view = _view(x, texpr.slice(x.expr, starts, steps, extents), tuple(extents))
    return _reshape(view, tuple(shape))


def _is_index(value: object) -> bool:
    """An integer as numpy accepts one in an index (Python or numpy ints, not bools)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _reshape(x: Tensor, shape: Shape) -> Tensor:
    """`x` reshaped to `shape` (no -1); `x` itself when the shape is unchanged."""
    shape = shapes.reshape(x.shape, shape)
    if shape == x.shape:
        return x
    return _view(x, texpr.reshape(x.expr, shape), shape)


def _broadcast_to(x: Tensor, shape: Shape) -> Tensor:
    """`x` broadcast to `shape`; `x` itself when the shape is unchanged."""
    if shape == x.shape:
        return x
    return _view(x, texpr.broadcast(x.expr, shapes.broadcast_to(x.shape, shape)), shape)


def transpose(x: Tensor, axes: Sequence[int] | None = None) -> Tensor:
    """numpy.transpose: permute the axes by `axes`; None reverses them."""
    return _require(x, "transpose").transpose(axes)


def _reshape_to(a: Tensor, shape: int | Sequence[int]) -> Tensor:
    """numpy.reshape(a, shape), row-major (`Tensor.reshape`)."""
    return _require(a, "reshape").reshape(shape)
