"""A tensor computed from others (`_derived`): its value dtype, whether it needs a float64
kernel, and integers wrapped around or clamped as numpy's fixed-width dtypes hold them."""

from __future__ import annotations

import builtins
from collections.abc import Sequence

import numpy as np

from eqsat.core import dtypes
from eqsat.core.shapes import Shape
from eqsat.core.term import Term, texpr
from eqsat.frontend.tensor import Tensor


def _derived(
    what: str,
    expr: Term,
    shape: Shape,
    dtype: str,
    parents: Sequence[Tensor],
    values: dtypes.IntegerRange | None = None,
) -> Tensor:
    """The tensor `expr` computes from `parents`, of value dtype `dtype`. For an integer or
    bool `dtype`, `values` is the range `expr` may reach: one the dtype cannot hold is wrapped
    around as numpy does, or clamped for bools (`dtypes.overflow`, whose errors name `what`)."""
    wide = builtins.any(parent.needs_float64 for parent in parents)
    if values is None or dtypes.dtype_range(dtype) is None:
        return Tensor(expr, shape, dtype, needs_float64=wide)
    held = dtypes.overflow(what, dtype, values)
    if held == "clamp":
        return Tensor(
            texpr.binary("min", expr, texpr.const(1.0)), shape, dtype, integer_range=(0, 1)
        )
    if held == "wrap":
        least = int(np.iinfo(dtype).min)  # _wrapped computes v - least too
        reach = (
            builtins.min(values[0], values[0] - least),
            builtins.max(values[1], values[1] - least),
        )
        wide = wide or dtypes.needs_float64(dtype, reach)
        expr, values = _wrapped(expr, dtype), dtypes.dtype_range(dtype)
    return Tensor(expr, shape, dtype, integer_range=values, needs_float64=wide)


def _wrapped(expr: Term, dtype: str) -> Term:
    """`expr`, integers within 2**53, wrapped around into the integer `dtype` as numpy's
    fixed-width integers do (`_modulo` by 2**bits from the dtype's least value), exact where
    v and v - least are (`_derived` makes the kernel float64 where they need it)."""
    return _modulo(expr, 2 ** (8 * np.dtype(dtype).itemsize), int(np.iinfo(dtype).min))


def _modulo(expr: Term, modulus: int, least: int = 0) -> Term:
    """v - floor((v - least) / modulus) * modulus: the integer v moved into [least, least +
    modulus), for a power of two `modulus` (its reciprocal is exact), exact in floating point
    where v and v - least are."""
    shifted = expr if least == 0 else texpr.binary("sub", expr, texpr.const(float(least)))
    scaled = texpr.binary("mul", shifted, texpr.const(1.0 / modulus))
    turns = texpr.binary("mul", texpr.unary("floor", scaled), texpr.const(float(modulus)))
    return texpr.binary("sub", expr, turns)
