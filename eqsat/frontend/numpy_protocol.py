"""numpy's functions on tensors (NEP 13 and NEP 18): the dispatch tables from each supported
numpy ufunc and function to its frontend function, the dispatch itself, and the README's table
of the numpy API on tensors."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import numpy as np

from eqsat import frontend
from eqsat.core.errors import UnsupportedError
from eqsat.frontend.contractions import _dot, einsum, matmul
from eqsat.frontend.elementwise import (
    _binary,
    _logical_operator,
    _power_of,
    _unary,
    abs,
    ceil,
    clip,
    cos,
    exp,
    expm1,
    floor,
    floor_divide,
    isfinite,
    isinf,
    isnan,
    log,
    log1p,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    maximum,
    minimum,
    remainder,
    rint,
    round,
    sign,
    sin,
    sqrt,
    tanh,
    tril,
    triu,
    trunc,
    where,
)
from eqsat.frontend.indexing import _reshape_to, transpose
from eqsat.frontend.joins import array_split, concatenate, pad, repeat, split, stack, tile
from eqsat.frontend.reductions import max, mean, min, norm, prod, std, sum, var
from eqsat.frontend.tensor import Tensor, _tensor_members

# numpy ufunc -> the frontend function it is, called with the ufunc's inputs.
_NUMPY_UFUNCS: dict[np.ufunc, Callable[..., Tensor]] = {
    np.exp: exp,
    np.log: log,
    np.sqrt: sqrt,
    np.tanh: tanh,
    np.log1p: log1p,
    np.expm1: expm1,
    np.sin: sin,
    np.cos: cos,
    np.sign: sign,
    np.floor: floor,
    np.ceil: ceil,
    np.rint: rint,
    np.trunc: trunc,
    np.absolute: abs,  # also numpy.abs
    np.negative: partial(_unary, "neg"),
    np.add: partial(_binary, "add"),
    np.subtract: partial(_binary, "sub"),
    np.multiply: partial(_binary, "mul"),
    np.divide: partial(_binary, "div"),  # also numpy.true_divide
    np.floor_divide: floor_divide,
    np.remainder: remainder,  # also numpy.mod
    np.power: _power_of,
    np.square: partial(_power_of, exponent=2),
    np.maximum: maximum,
    np.minimum: minimum,
    np.greater: partial(_binary, "gt"),
    np.greater_equal: partial(_binary, "ge"),
    np.less: partial(_binary, "lt"),
    np.less_equal: partial(_binary, "le"),
    np.equal: partial(_binary, "eq"),
    np.not_equal: partial(_binary, "ne"),
    np.matmul: matmul,
    np.reciprocal: lambda x: 1.0 / x,
    np.logical_and: logical_and,
    np.logical_or: logical_or,
    np.logical_xor: logical_xor,
    np.logical_not: logical_not,
    np.isnan: isnan,
    np.isinf: isinf,
    np.isfinite: isfinite,
    np.bitwise_and: partial(_logical_operator, "&", logical_and),
    np.bitwise_or: partial(_logical_operator, "|", logical_or),
    np.bitwise_xor: partial(_logical_operator, "^", logical_xor),
    np.invert: Tensor.__invert__,  # also numpy.bitwise_not
}


class _NumpyFunction(NamedTuple):
    """A numpy function as `function(*args, **kwargs)`: numpy's first `positional` parameters
    (any number if None) are the frontend function's, and of the rest only `keywords` may be
    passed (by name)."""

    function: Callable[..., Tensor]
    positional: int | None
    keywords: frozenset[str] = frozenset()


_REDUCTION_KEYWORDS = frozenset({"axis", "keepdims"})
_MOMENT_KEYWORDS = _REDUCTION_KEYWORDS | {"ddof"}
# numpy function (dispatched through __array_function__) -> its frontend function.
_NUMPY_FUNCTIONS: dict[Callable[..., Any], _NumpyFunction] = {
    np.sum: _NumpyFunction(sum, 2, _REDUCTION_KEYWORDS),
    np.prod: _NumpyFunction(prod, 2, _REDUCTION_KEYWORDS),
    np.any: _NumpyFunction(Tensor.any, 2, _REDUCTION_KEYWORDS),
    np.all: _NumpyFunction(Tensor.all, 2, _REDUCTION_KEYWORDS),
    np.max: _NumpyFunction(max, 2, _REDUCTION_KEYWORDS),
    np.amax: _NumpyFunction(max, 2, _REDUCTION_KEYWORDS),
    np.min: _NumpyFunction(min, 2, _REDUCTION_KEYWORDS),
    np.amin: _NumpyFunction(min, 2, _REDUCTION_KEYWORDS),
    np.mean: _NumpyFunction(mean, 2, _REDUCTION_KEYWORDS),
    np.var: _NumpyFunction(var, 2, _MOMENT_KEYWORDS),
    np.std: _NumpyFunction(std, 2, _MOMENT_KEYWORDS),
    np.clip: _NumpyFunction(clip, 3),
    np.transpose: _NumpyFunction(transpose, 2, frozenset({"axes"})),
    np.reshape: _NumpyFunction(_reshape_to, 2, frozenset({"shape"})),
    np.where: _NumpyFunction(where, 3),
    np.dot: _NumpyFunction(_dot, 2),
    np.argmax: _NumpyFunction(Tensor.argmax, 2, _REDUCTION_KEYWORDS),
    np.argmin: _NumpyFunction(Tensor.argmin, 2, _REDUCTION_KEYWORDS),
    np.concatenate: _NumpyFunction(concatenate, 2, frozenset({"axis"})),
    np.stack: _NumpyFunction(stack, 2, frozenset({"axis"})),
    np.split: _NumpyFunction(split, 3, frozenset({"indices_or_sections", "axis"})),
    np.array_split: _NumpyFunction(array_split, 3, frozenset({"indices_or_sections", "axis"})),
    np.pad: _NumpyFunction(pad, 3, frozenset({"pad_width", "mode", "constant_values"})),
    np.einsum: _NumpyFunction(einsum, None, frozenset({"optimize"})),
    np.round: _NumpyFunction(round, 2, frozenset({"decimals"})),
    np.around: _NumpyFunction(round, 2, frozenset({"decimals"})),
    np.ravel: _NumpyFunction(Tensor.ravel, 1),
    np.tile: _NumpyFunction(tile, 2),
    np.repeat: _NumpyFunction(repeat, 3, frozenset({"axis"})),
    np.linalg.norm: _NumpyFunction(norm, 3, frozenset({"ord", "axis", "keepdims"})),
    np.tril: _NumpyFunction(tril, 2, frozenset({"k"})),
    np.triu: _NumpyFunction(triu, 2, frozenset({"k"})),
}

# Python operators of Tensor (its dunder methods) as a user writes them.
_OPERATORS = {
    "__add__": "+",
    "__sub__": "-",
    "__mul__": "*",
    "__truediv__": "/",
    "__floordiv__": "//",
    "__mod__": "%",
    "__and__": "&",
    "__or__": "|",
    "__xor__": "^",
    "__invert__": "~",
    "__pow__": "**",
    "__matmul__": "@",
    "__neg__": "-x",
    "__abs__": "abs(x)",
    "__getitem__": "x[a:b:s, i, None, ...]",
    "__lt__": "<",
    "__le__": "<=",
    "__gt__": ">",
    "__ge__": ">=",
    "__eq__": "==",
    "__ne__": "!=",
}


def _numpy_name(function: Callable[..., Any]) -> str:
    """`numpy.sum`, `numpy.linalg.norm`: where a user finds the function."""
    return f"{function.__module__}.{function.__name__}"


def supported_numpy_table() -> str:
    """The README's table of the numpy API on tensors, made from the dispatch tables and
    `Tensor`'s members (tests/test_readme.py keeps the README's copy equal to it)."""
    rows = {
        "numpy ufuncs (called directly)": [f"np.{u.__name__}" for u in _NUMPY_UFUNCS],
        "numpy functions": [_numpy_name(f).replace("numpy.", "np.", 1) for f in _NUMPY_FUNCTIONS],
        "tensor methods and attributes": [f"x.{n}" for n in _tensor_members()],
        "operators": [symbol for name, symbol in _OPERATORS.items() if name in vars(Tensor)],
        "eqsat functions": [f"eqsat.{n}" for n in frontend.__all__ if n != "Tensor"],
    }
    lines = ["| kind | count | names |", "|---|---|---|"]
    for kind, names in rows.items():
        shown = ", ".join(f"`{n}`".replace("|", "\\|") for n in sorted(set(names)))  # GFM
        lines.append(f"| {kind} | {len(set(names))} | {shown} |")
    return "\n".join(lines)


_SUPPORTED = "supported: " + ", ".join(
    sorted(
        [f"numpy.{ufunc.__name__}" for ufunc in _NUMPY_UFUNCS]
        + [_numpy_name(function) for function in _NUMPY_FUNCTIONS]
    )
)


def _numpy_ufunc(
    ufunc: np.ufunc, method: str, inputs: tuple[Any, ...], kwargs: dict[str, Any]
) -> Tensor:
    """`Tensor.__array_ufunc__`: the frontend op of `ufunc`, called with its `inputs`.

    It requires: a ufunc of `_NUMPY_UFUNCS`, called directly (not `.reduce`, `.outer`, ...)
    and without keywords (`out=`, `where=`, `dtype=`, ...); else UnsupportedError.
    """
    name = f"numpy.{ufunc.__name__}"
    function = _NUMPY_UFUNCS.get(ufunc)
    if function is None:
        if getattr(np, ufunc.__name__, None) is not ufunc:  # another library's, scipy.special's
            name = f"the ufunc {ufunc.__name__} (not numpy's)"
        hint = f"; use eqsat.{ufunc.__name__}" if ufunc.__name__ in frontend.__all__ else ""
        raise UnsupportedError(f"{name} is not supported on eqsat tensors{hint}; {_SUPPORTED}")
    if method != "__call__":
        raise UnsupportedError(
            f"{name}.{method} is not supported on eqsat tensors; only {name}(...) is "
            "(reductions: numpy.sum/max/mean or the tensor methods)"
        )
    _refuse_keywords(name, kwargs, frozenset())
    return function(*inputs)


def _numpy_function(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Tensor:
    """`Tensor.__array_function__`: the frontend function of numpy function `func`.

    It requires: `func` in `_NUMPY_FUNCTIONS`, called with at most its `positional`
    arguments by position and only its `keywords` by name; else UnsupportedError.
    """
    name = _numpy_name(func)
    entry = _NUMPY_FUNCTIONS.get(func)
    if entry is None:
        raise UnsupportedError(f"{name} is not supported on eqsat tensors; {_SUPPORTED}")
    if entry.positional is not None and len(args) > entry.positional:
        raise UnsupportedError(
            f"{name}: eqsat takes at most {entry.positional} positional arguments, got {len(args)}"
        )
    _refuse_keywords(name, kwargs, entry.keywords)
    return entry.function(*args, **kwargs)


def _refuse_keywords(name: str, kwargs: dict[str, Any], allowed: frozenset[str]) -> None:
    """An UnsupportedError naming numpy function `name` if `kwargs` has a key not `allowed`."""
    refused = sorted(set(kwargs) - allowed)
    if refused:
        accepted = f" (it takes {', '.join(sorted(allowed))})" if allowed else ""
        raise UnsupportedError(
            f"{name}: keyword argument(s) {', '.join(refused)} not supported on eqsat "
            f"tensors{accepted}"
        )
