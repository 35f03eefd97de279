"""Reductions over axes: sum, prod, max, min, mean, var, std, argmax / argmin, norm."""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from eqsat.core import dtypes, shapes
from eqsat.core.errors import ShapeError, UnsupportedError
from eqsat.core.term import texpr
from eqsat.frontend.derived import _derived
from eqsat.frontend.elementwise import arange, maximum, sqrt, where
from eqsat.frontend.indexing import _reshape
from eqsat.frontend.tensor import Axes, Tensor, _require


def _reduce(op: str, x: Tensor, axis: Axes, keepdims: bool) -> Tensor:
    """Reduce one axis at a time, highest first, so the lower axis numbers stay valid."""
    if axis is None:
        axes = tuple(range(x.ndim))
    elif isinstance(axis, tuple):
        axes = tuple(shapes.normalize_axis(op, a, x.shape) for a in axis)
        if len(set(axes)) != len(axes):
            raise ShapeError(f"{op}: duplicate axes {axis} for shape {x.shape}")
    else:
        axes = (shapes.normalize_axis(op, axis, x.shape),)
    result = x
    for ax in sorted(axes, reverse=True):
        shape = shapes.reduce(op, result.shape, ax)
        dtype = dtypes.result_dtype(op, _NUMPY_REDUCE[op], result.dtype)
        values = None
        if dtypes.dtype_range(dtype) is not None:
            values = _reduced_range(op, result.integer_range, result.shape[ax])  # type: ignore[arg-type]
        expr = texpr.reduce(op, ax, result.expr)
        result = _derived(op, expr, shape, dtype, (result,), values)
    if keepdims:
        kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        result = _reshape(result, kept)
    return result


_NUMPY_REDUCE: dict[str, Callable[..., Any]] = {
    "sum": partial(np.sum, axis=0),
    "max": partial(np.max, axis=0),
    "prod": partial(np.prod, axis=0),
}


def _reduced_range(op: str, values: dtypes.IntegerRange, n: int) -> dtypes.IntegerRange:
    """The range of reduction `op` over `n` integers in range `values`."""
    lo, hi = values
    if op == "max":
        return values
    if op == "sum":
        return (n * lo, n * hi)
    largest = builtins.max(builtins.abs(lo), builtins.abs(hi))
    if largest > 1 and n * math.log2(largest) > 64:  # beyond every integer dtype
        return (-(2**64), 2**64)
    if lo >= 0:
        return (lo**n, hi**n)
    return (-(largest**n), largest**n)


def _arg_extreme(op: str, x: Tensor, axis: int | None, keepdims: bool) -> Tensor:
    """numpy.argmax / argmin: the first index along `axis` where `x` holds its maximum
    (minimum), or its first NaN if it has one (numpy's rule), as the smallest of `arange`'s
    values where that holds (the axis' extent elsewhere). The index is a number of `x`'s dtype,
    as numpy: an int64.

    It requires: `axis` an int or None (a tuple is a ShapeError, as in numpy).
    """
    if isinstance(axis, tuple):
        raise ShapeError(f"{op}: axis must be an int or None, got {axis}")
    flat = x.reshape(-1) if axis is None else x
    dim = 0 if axis is None else shapes.normalize_axis(op, axis, x.shape)
    extreme = flat.max(dim, keepdims=True) if op == "argmax" else flat.min(dim, keepdims=True)
    hit = maximum(flat == extreme, flat != flat)  # true at the extreme, or at every NaN if any
    n = flat.shape[dim]
    first = where(hit, arange(n).reshape(n, *(1,) * (flat.ndim - dim - 1)), n).min(dim)
    if not keepdims:
        return first
    kept = tuple(1 if axis is None or d == dim else extent for d, extent in enumerate(x.shape))
    return _reshape(first, kept)


def sum(x: Tensor, axis: Axes = None, keepdims: bool = False) -> Tensor:
    """Sum over `axis`: None (all axes), an int, or a tuple of ints."""
    return _require(x, "sum").sum(axis, keepdims)


def prod(x: Tensor, axis: Axes = None, keepdims: bool = False) -> Tensor:
    """Product over `axis`: None (all axes), an int, or a tuple of ints."""
    return _require(x, "prod").prod(axis, keepdims)


def max(x: Tensor, axis: Axes = None, keepdims: bool = False) -> Tensor:
    """Maximum over `axis`: None (all axes), an int, or a tuple of ints."""
    return _require(x, "max").max(axis, keepdims)


def min(x: Tensor, axis: Axes = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Minimum over `axis`: None (all axes), an int, or a tuple of ints."""
    return _require(x, "min").min(axis, keepdims)


def mean(x: Tensor, axis: Axes = None, keepdims: bool = False) -> Tensor:
    """Mean over `axis`: None (all axes), an int, or a tuple of ints."""
    return _require(x, "mean").mean(axis, keepdims)


def var(x: Tensor, axis: Axes = None, ddof: int = 0, keepdims: bool = False) -> Tensor:
    """Variance over `axis` with `ddof` delta degrees of freedom (`Tensor.var`)."""
    return _require(x, "var").var(axis, ddof, keepdims)


def std(x: Tensor, axis: Axes = None, ddof: int = 0, keepdims: bool = False) -> Tensor:
    """Standard deviation over `axis` with `ddof` delta degrees of freedom (`Tensor.std`)."""
    return _require(x, "std").std(axis, ddof, keepdims)


def norm(x: Tensor, ord: object = None, axis: Axes = None, keepdims: bool = False) -> Tensor:  # noqa: A002 - numpy's name
    """numpy.linalg.norm for the 2-norm of vectors and the Frobenius norm of matrices:
    sqrt(sum(x * x)) over `axis` (all axes when None), of integers in float64 as numpy. Other
    `ord`s raise UnsupportedError."""
    x = _require(x, "norm")
    if x.integer_range is not None:
        x = x.astype("float64")
    dims = x.ndim if axis is None else 1 if isinstance(axis, int) else len(axis)
    if not (ord is None or (ord == 2 and dims == 1) or (ord == "fro" and dims == 2)):
        raise UnsupportedError(
            f"numpy.linalg.norm: ord={ord!r} over {dims} dimension(s) of shape {x.shape}; eqsat "
            "supports the 2-norm of vectors (ord None or 2) and the Frobenius norm of matrices "
            "(ord None or 'fro')"
        )
    return sqrt(sum(x * x, axis=axis, keepdims=keepdims))
