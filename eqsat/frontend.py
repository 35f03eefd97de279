"""The user-facing symbolic array: numpy-like operations that build `TExpr` terms (as Terms,
by `eqsat.core.term.texpr`, without egglog).

Every operation checks shapes (`eqsat.core.shapes`) and dtypes as it is built, so a `Tensor` always
holds a well-formed term. Elementwise ops broadcast implicitly (numpy rules, no broadcast node);
matmul gets explicit `TExpr.broadcast` nodes so that its batch dims are equal. Composite ops
(softmax, gelu, layernorm) are built from the primitives::

    x = tensor("x", (4, 8))
    softmax(x)  ->  e / sum(e, -1, keepdims)  with  e = exp(x - max(x, -1, keepdims))

Plain numpy calls on tensors build the same terms (NEP 13 and NEP 18): `np.maximum(x @ W, 0)` is
`maximum(matmul(x, W), 0)`. `Tensor`'s numpy hooks hand the call to `_numpy_ufunc` and
`_numpy_function`, whose tables `_NUMPY_UFUNCS` and `_NUMPY_FUNCTIONS` map each supported numpy
function to its frontend function; anything else is an `UnsupportedError` naming it.
"""

from __future__ import annotations

import builtins
import itertools
import math
import string
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple, SupportsFloat, TypeGuard

import numpy as np

from eqsat.core import array_constants, dtypes, interp, shapes
from eqsat.core.errors import (
    ArgumentError,
    DTypeError,
    IndexingError,
    ShapeError,
    UnsupportedAttributeError,
    UnsupportedError,
)
from eqsat.core.shapes import Shape
from eqsat.core.subscripts import Labels, parse_subscripts
from eqsat.core.term import COMPARE_OPS, Term, texpr

__all__ = [
    "Tensor",
    "abs",
    "arange",
    "array_split",
    "ceil",
    "clip",
    "concatenate",
    "cos",
    "einsum",
    "erf",
    "exp",
    "expm1",
    "floor",
    "floor_divide",
    "gelu",
    "isfinite",
    "isinf",
    "isnan",
    "layernorm",
    "log",
    "log1p",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "matmul",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "norm",
    "pad",
    "prod",
    "relu",
    "remainder",
    "repeat",
    "rint",
    "round",
    "sigmoid",
    "sign",
    "sin",
    "softmax",
    "split",
    "sqrt",
    "stack",
    "std",
    "sum",
    "tanh",
    "tensor",
    "tile",
    "transpose",
    "tril",
    "triu",
    "trunc",
    "var",
    "where",
]

Axes = int | tuple[int, ...] | None
_ATTRIBUTES = ("shape", "dtype")  # a Tensor's own attributes (set by __init__) users read
_SCALAR_TYPES = (int, float, np.integer, np.floating)


class Tensor:
    """A symbolic array: a `TExpr` term with its shape and dtype. Build it with `tensor(...)`."""

    __hash__ = object.__hash__  # __eq__ builds a tensor, so hash by identity

    def __init__(
        self,
        expr: Term,
        shape: Shape,
        dtype: str,
        *,
        integer_range: dtypes.IntegerRange | None = None,
        needs_float64: bool = False,
        weak: bool = False,
    ) -> None:
        """Internal: `shape` and `dtype` (numpy's dtype of the value, `eqsat.core.dtypes`) must
        be those of `expr`, `integer_range` the least and greatest value of an integer or bool
        tensor (the builders here check it); `needs_float64` that some tensor `expr` is
        computed from needs a float64 kernel; `weak` that it stands for a Python scalar (a
        constant, or a traced float)."""
        self.expr = expr
        self.shape = shape
        self.dtype = dtype
        self.integer_range = integer_range
        self.needs_float64 = needs_float64 or (
            not weak and dtypes.needs_float64(dtype, integer_range)
        )
        self.weak = weak

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """The number of elements."""
        return math.prod(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __bool__(self) -> bool:
        raise TypeError(
            "a symbolic tensor has no truth value; use eqsat.where for conditions (in an "
            "@eqsat.jit function a float argument is traced too: to branch on it in Python, "
            "name it in static_argnames)"
        )

    def __repr__(self) -> str:
        return f"Tensor(shape={self.shape}, dtype={self.dtype}, expr={_short_form(self.expr)})"

    # -------------------------------------------------------- numpy protocols (NEP 13, NEP 18)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Tensor:
        """`np.exp(x)`, `np.add(2.0, x)`, `np.float32(2) * x`: `_numpy_ufunc`."""
        return _numpy_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(
        self, func: Any, types: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Tensor:
        """`np.sum(x, axis=0)`, `np.where(c, x, 0)`, ...: `_numpy_function`."""
        return _numpy_function(func, args, kwargs)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """Refused: numpy would otherwise wrap the tensor in an object array (`np.asarray(x)`)."""
        raise UnsupportedError(
            "a symbolic eqsat tensor has no values to make a numpy array of; build the "
            "result with operators and supported numpy functions, then compile it"
        )

    def __getitem__(self, key: object) -> Tensor:
        """numpy's basic indexing, as a view (`_basic_index`): slices with steps (negative
        too), integers (negative count from the end), `None` / `np.newaxis` and `...`."""
        return _basic_index(self, key)

    def __getattr__(self, name: str) -> Any:
        """Called only for a name a tensor lacks: one of numpy's ndarray members raises
        `UnsupportedAttributeError` (an AttributeError too) naming what tensors have."""
        if not name.startswith("_") and hasattr(np.ndarray, name):
            raise UnsupportedAttributeError(
                f"x.{name} (numpy's ndarray.{name}) is not supported on eqsat tensors; tensors "
                f"have: {', '.join(_tensor_members())} (and the numpy functions of the README)"
            )
        raise AttributeError(f"'Tensor' object has no attribute {name!r}")

    # -------------------------------------------------------- elementwise arithmetic

    def __add__(self, other: object) -> Tensor:
        return _binary("add", self, other)

    def __radd__(self, other: object) -> Tensor:
        return _binary("add", other, self)

    def __sub__(self, other: object) -> Tensor:
        return _binary("sub", self, other)

    def __rsub__(self, other: object) -> Tensor:
        return _binary("sub", other, self)

    def __mul__(self, other: object) -> Tensor:
        return _binary("mul", self, other)

    def __rmul__(self, other: object) -> Tensor:
        return _binary("mul", other, self)

    def __truediv__(self, other: object) -> Tensor:
        return _binary("div", self, other)

    def __rtruediv__(self, other: object) -> Tensor:
        return _binary("div", other, self)

    def __floordiv__(self, other: object) -> Tensor:
        return floor_divide(self, other)

    def __rfloordiv__(self, other: object) -> Tensor:
        return floor_divide(other, self)

    def __mod__(self, other: object) -> Tensor:
        return remainder(self, other)

    def __rmod__(self, other: object) -> Tensor:
        return remainder(other, self)

    def __neg__(self) -> Tensor:
        return _unary("neg", self)

    def __abs__(self) -> Tensor:
        return _unary("abs", self)

    def __pow__(self, exponent: object) -> Tensor:
        """x ** p for a constant p. An integral p (2 or 2.0) multiplies: p = 0 gives ones,
        p < 0 gives 1 / x ** -p. p = 0.5 is sqrt(x), as numpy computes it; any other finite p
        is exp(p * log(x)), with numpy's pow values at -inf (inf for p > 0, 0 for p < 0)."""
        if isinstance(exponent, float | np.floating) and not float(exponent).is_integer():
            return self._fractional_power(float(exponent))
        if not isinstance(exponent, int | np.integer | float | np.floating):
            raise UnsupportedError(
                f"pow: eqsat takes a constant exponent (x ** 3, x ** 0.5), got {exponent!r} (in an "
                "@eqsat.jit function, name a float exponent argument in static_argnames)"
            )
        n = int(exponent)
        if n == 0:
            return _full(1, self.shape, self.dtype)
        if n < 0:
            if self.integer_range is not None:
                raise UnsupportedError(
                    f"pow: integers to negative integer powers are not allowed (numpy refuses "
                    f"them too), got {self.dtype} ** {n}; cast with x.astype(np.float64)"
                )
            return _binary("div", 1.0, self ** (-n))
        return _power(self, n)

    def _fractional_power(self, p: float) -> Tensor:
        """x ** p for a finite non-integral p (`__pow__`)."""
        if not math.isfinite(p):
            raise UnsupportedError(f"pow: eqsat takes a finite exponent, got {p!r}")
        if p == 0.5:
            return sqrt(self)
        # log(-inf) is NaN; numpy's pow(-inf, p) is inf for p > 0 and 0 for p < 0
        return where(self == -math.inf, math.inf if p > 0 else 0.0, exp(p * log(self)))

    # -------------------------------------------------------- comparisons: 1.0 / 0.0 tensors

    def __lt__(self, other: object) -> Tensor:
        return _binary("lt", self, other)

    def __le__(self, other: object) -> Tensor:
        return _binary("le", self, other)

    def __gt__(self, other: object) -> Tensor:
        return _binary("gt", self, other)

    def __ge__(self, other: object) -> Tensor:
        return _binary("ge", self, other)

    def __eq__(self, other: object) -> Tensor:  # type: ignore[override]
        return _binary("eq", self, other)

    def __ne__(self, other: object) -> Tensor:  # type: ignore[override]
        return _binary("ne", self, other)

    # -------------------------------------------------------- logical operators on bools

    def __and__(self, other: object) -> Tensor:
        return _logical_operator("&", logical_and, self, other)

    def __rand__(self, other: object) -> Tensor:
        return _logical_operator("&", logical_and, other, self)

    def __or__(self, other: object) -> Tensor:
        return _logical_operator("|", logical_or, self, other)

    def __ror__(self, other: object) -> Tensor:
        return _logical_operator("|", logical_or, other, self)

    def __xor__(self, other: object) -> Tensor:
        return _logical_operator("^", logical_xor, self, other)

    def __rxor__(self, other: object) -> Tensor:
        return _logical_operator("^", logical_xor, other, self)

    def __invert__(self) -> Tensor:
        return _logical_operator("~", lambda x, _: logical_not(x), self, True)

    # -------------------------------------------------------- matmul and layout

    def __matmul__(self, other: Tensor) -> Tensor:
        return matmul(self, other)

    def __rmatmul__(self, other: object) -> Tensor:
        return matmul(other, self)  # type: ignore[arg-type]  # matmul refuses a non-Tensor

    @property
    def T(self) -> Tensor:
        """The axes reversed."""
        return self.transpose()

    def transpose(self, *axes: Any) -> Tensor:
        """Permute the axes: `t.transpose(1, 0)` or `t.transpose((1, 0))`; none = reverse.

        It requires: the axes (negative allowed) are a permutation of range(ndim).
        """
        if not axes or axes == (None,):
            axes = tuple(range(self.ndim))[::-1]
        elif len(axes) == 1 and isinstance(axes[0], tuple | list):
            axes = tuple(axes[0])
        perm = tuple(shapes.normalize_axis("transpose", a, self.shape) for a in axes)
        shape = shapes.transpose(self.shape, perm)
        if perm == tuple(range(self.ndim)):
            return self
        return _view(self, texpr.transpose(self.expr, perm), shape)

    def reshape(self, *shape: Any) -> Tensor:
        """Same elements in row-major order: `t.reshape(2, -1)` or `t.reshape((2, -1))`.

        It requires: the element count is unchanged; at most one -1.
        """
        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        return _reshape(self, shapes.resolve_reshape(self.shape, shape))

    def round(self, decimals: int = 0) -> Tensor:
        """numpy's ndarray.round: `round(self, decimals)`."""
        return round(self, decimals)

    def flatten(self) -> Tensor:
        """The elements in row-major order, 1-D (a view: numpy's copy is not needed)."""
        return self.reshape(-1)

    def ravel(self) -> Tensor:
        """The elements in row-major order, 1-D."""
        return self.reshape(-1)

    def repeat(self, repeats: int, axis: int | None = None) -> Tensor:
        """numpy.repeat: each element `repeats` times along `axis` (the flattened tensor when
        None)."""
        return repeat(self, repeats, axis)

    # -------------------------------------------------------- reductions

    def sum(self, axis: Axes = None, keepdims: bool = False) -> Tensor:
        """Sum over `axis`: None (all axes), an int, or a tuple of ints."""
        return _reduce("sum", self, axis, keepdims)

    def prod(self, axis: Axes = None, keepdims: bool = False) -> Tensor:
        """Product over `axis`: None (all axes), an int, or a tuple of ints."""
        return _reduce("prod", self, axis, keepdims)

    def astype(self, dtype: Any) -> Tensor:
        """numpy's ndarray.astype: to a float dtype the same values (the kernel's compute
        dtype rounds them once, at the output); to bool `self != 0`; to an integer dtype
        toward zero, as numpy (`trunc`; integers that do not fit the new dtype wrap around, as
        numpy's do)."""
        name = _dtype_name(dtype, "astype")
        if name == self.dtype:
            return self
        if name == "bool":
            return self != 0
        values = self.integer_range
        if dtypes.dtype_range(name) is None:  # to a float: the same values, numpy's new dtype
            return Tensor(self.expr, self.shape, name, needs_float64=self.needs_float64)
        truncated = self if values is not None else trunc(self)
        values = dtypes.dtype_range(name) if values is None else values
        return _derived(f"x.astype({name})", truncated.expr, self.shape, name, (self,), values)

    def any(self, axis: Axes = None, keepdims: bool = False) -> Tensor:
        """1.0 where some element over `axis` is nonzero (NaN counts), else 0.0: numpy's any
        as a tensor of this dtype, as comparisons give."""
        return (self != 0).max(axis, keepdims)

    def all(self, axis: Axes = None, keepdims: bool = False) -> Tensor:
        """1.0 where every element over `axis` is nonzero (NaN counts), else 0.0 (as `any`)."""
        return (self != 0).min(axis, keepdims)

    def max(self, axis: Axes = None, keepdims: bool = False) -> Tensor:
        """Maximum over `axis`: None (all axes), an int, or a tuple of ints."""
        return _reduce("max", self, axis, keepdims)

    def min(self, axis: Axes = None, keepdims: bool = False) -> Tensor:
        """Minimum over `axis`, as -max(-x): a NaN propagates, as in numpy. Of integers and
        bools, whose negation may leave their dtype, the negations are on the same values as
        numbers and the result has `self`'s dtype and range."""
        if self.integer_range is None:
            return -((-self).max(axis, keepdims))
        numbers = Tensor(self.expr, self.shape, "float32", needs_float64=self.needs_float64)
        least = -((-numbers).max(axis, keepdims))
        return Tensor(
            least.expr,
            least.shape,
            self.dtype,
            integer_range=self.integer_range,
            needs_float64=self.needs_float64,
        )

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        """The index of the first maximum along `axis` (None: of the flattened tensor), as a
        number of the tensor's dtype (`_arg_extreme`)."""
        return _arg_extreme("argmax", self, axis, keepdims)

    def argmin(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        """The index of the first minimum along `axis` (None: of the flattened tensor), as a
        number of the tensor's dtype (`_arg_extreme`)."""
        return _arg_extreme("argmin", self, axis, keepdims)

    def mean(self, axis: Axes = None, keepdims: bool = False) -> Tensor:
        """Mean over `axis`: the sum times 1/count (of integers and bools: in float64, as
        numpy)."""
        if self.integer_range is not None:
            return self.astype("float64").mean(axis, keepdims)
        total = self.sum(axis, keepdims)
        count = math.prod(self.shape) // math.prod(total.shape)
        return total if count == 1 else total * (1.0 / count)

    def var(self, axis: Axes = None, ddof: int = 0, keepdims: bool = False) -> Tensor:
        """Variance over `axis`, as numpy computes it: the squared deviations from the mean,
        summed, divided by count - ddof.

        It requires: ddof < the count of elements reduced (numpy gives inf or NaN there; this
        raises ShapeError).
        """
        centered = self - self.mean(axis, keepdims=True)
        total = (centered * centered).sum(axis, keepdims)
        count = math.prod(self.shape) // math.prod(total.shape)
        if count - ddof <= 0:
            raise ShapeError(
                f"var: ddof={ddof} leaves no degrees of freedom for {count} elements reduced "
                f"(shape {self.shape}, axis {axis})"
            )
        return total * (1.0 / (count - ddof))

    def std(self, axis: Axes = None, ddof: int = 0, keepdims: bool = False) -> Tensor:
        """Standard deviation over `axis`: the square root of `var`."""
        return sqrt(self.var(axis, ddof, keepdims))

    def clip(self, min: Tensor | float | None = None, max: Tensor | float | None = None) -> Tensor:  # noqa: A002 - numpy's names
        """Each element limited to [min, max] (either may be None), as numpy: max wins where
        min > max, and a NaN stays NaN."""
        clipped = self if min is None else maximum(self, min)
        return clipped if max is None else minimum(clipped, max)


# ------------------------------------------------------------ building blocks


def tensor(name: str, shape: Sequence[int | np.integer[Any]], dtype: Any = "float32") -> Tensor:
    """A named input of the program.

    It requires: `name` a non-empty str; `shape` a tuple of ints >= 1 (() for a scalar);
    `dtype` one of `dtypes.INPUT_DTYPES` (a name, numpy type or numpy dtype): bool, an
    integer type, float16, float32 or float64.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"tensor: the name must be a non-empty str, got {name!r}")
    dtype_name = _dtype_name(dtype, "tensor")
    checked = shapes.validate_shape(shape, f"tensor {name!r}")
    expr = texpr.input(name, checked, dtype_name)
    return Tensor(expr, checked, dtype_name, integer_range=dtypes.dtype_range(dtype_name))


def traced_scalar(name: str) -> Tensor:
    """A 0-d input standing for a Python float (`@eqsat.jit`'s traced floats): weak, as numpy
    treats Python scalars, so it takes the dtype of what it meets (`x * alpha` stays float32)."""
    return Tensor(texpr.input(name, (), dtypes.WEAK_SCALAR), (), "float64", weak=True)


def output_tensors(outputs: Tensor | Sequence[Tensor]) -> tuple[list[Tensor], bool]:
    """The output tensors of `eqsat.compile(outputs)` or `eqsat.optimize(outputs)`, and whether
    the user asked for a tuple. TypeError unless `outputs` is a Tensor or a non-empty list or
    tuple of them."""
    if isinstance(outputs, Tensor):
        return [outputs], False
    if isinstance(outputs, (list, tuple)) and outputs:
        for k, item in enumerate(outputs):
            if not isinstance(item, Tensor):
                raise TypeError(f"output {k} is {type(item).__name__}, expected an eqsat Tensor")
        return list(outputs), True
    raise TypeError(
        f"expected an eqsat Tensor or a non-empty list of them, got {type(outputs).__name__}"
    )


def _dtype_name(dtype: Any, what: str) -> str:
    """numpy's name of `dtype`, or a DTypeError naming `what` if it is not an input dtype."""
    try:
        name = None if dtype is None else np.dtype(dtype).name
    except TypeError:
        name = None
    if name is None or name not in dtypes.INPUT_DTYPES:
        raise DTypeError(
            f"{what}: unsupported dtype {dtype!r}; use bool, an integer type, float16, "
            "float32 or float64"
        )
    return name


def _require(value: object, what: str) -> Tensor:
    """`value` if it is a Tensor, else a TypeError naming `what`."""
    if isinstance(value, Tensor):
        return value
    _refuse_array(what, value)
    raise TypeError(f"{what}: expected an eqsat.Tensor, got {type(value).__name__}")


def _refuse_array(what: str, value: object) -> None:
    """An UnsupportedError naming `what` if `value` is a numpy array: arrays are inputs only
    (but those `_array_constant` captures)."""
    if isinstance(value, np.ndarray):
        raise UnsupportedError(
            f"{what}: cannot capture a numpy array of shape {value.shape} and dtype "
            f"{value.dtype} as a constant; pass it as an input (eqsat.tensor, or an argument of "
            "the @eqsat.jit function). The constant arrays eqsat captures are functions of "
            "their indices: np.arange(n) reshaped, filled arrays (np.ones, np.full), and "
            "triangles and diagonals of two values (np.tril, np.triu, np.eye, "
            "np.arange(n)[:, None] >= np.arange(n))"
        )


def _array_constant(value: object) -> Tensor | None:
    """A numpy array that `array_constants.pattern` recognizes, as the Tensor computing it
    from the loop indices (of its shape and dtype); else None."""
    if not isinstance(value, np.ndarray) or not value.size:
        return None
    if value.dtype.name not in dtypes.INPUT_DTYPES:
        return None
    found = array_constants.pattern(value)
    if found is None:
        return None
    if value.dtype.kind in "iu" and not _exact_integers(found.inside, found.outside):
        return None  # no float holds such an integer exactly
    dtype = value.dtype.name
    if found.kind == "arange":
        positions = arange(value.size)
        if value.dtype.kind == "f":
            return _reshape(positions.astype(dtype), value.shape)
        values = (0, value.size - 1)
        return _reshape(
            Tensor(positions.expr, positions.shape, dtype, integer_range=values), value.shape
        )
    if found.kind == "filled":
        return _full(found.inside, value.shape, dtype)
    rows, columns = value.shape[-2:]
    offset = arange(columns).reshape(1, columns) - arange(rows).reshape(rows, 1)
    region = offset <= found.offset if found.kind == "lower" else offset == found.offset
    inside, outside = _full(found.inside, (), dtype), _full(found.outside, (), dtype)
    return _reshape(where(region, inside, outside), value.shape)


def _exact_integers(*values: float) -> bool:
    """Whether every one of `values` is held exactly by a float64 (eqsat's integers are)."""
    limit = dtypes.EXACT_INTEGERS["float64"]
    return builtins.all(-limit <= v <= limit for v in values)


def _is_scalar(value: object) -> TypeGuard[SupportsFloat]:
    """A real Python or numpy scalar, or a 0-d real array (numpy makes those of scalars)."""
    if isinstance(value, np.ndarray):
        return value.ndim == 0 and value.dtype.kind in "biuf"
    return isinstance(value, _SCALAR_TYPES)


def _operands(what: str, values: Sequence[object]) -> list[Tensor]:
    """`values` as Tensors: scalars (`_is_scalar`) become weak constants (`_constant`).

    It requires: at least one Tensor.
    """
    if not builtins.any(isinstance(v, Tensor) for v in values):
        raise TypeError(f"{what}: at least one operand must be an eqsat.Tensor")
    result = []
    for value in values:
        if isinstance(value, Tensor):
            result.append(value)
        elif _is_scalar(value):
            result.append(_constant(value))
        elif (captured := _array_constant(value)) is not None:
            result.append(captured)
        else:
            _refuse_array(what, value)
            raise TypeError(
                f"{what}: cannot combine a tensor with {type(value).__name__}; "
                "pass arrays as inputs with eqsat.tensor, scalars as int or float"
            )
    return result


def _constant(value: SupportsFloat) -> Tensor:
    """A Python or numpy scalar as a weak 0-d constant (NEP 50's Python scalars: it takes the
    dtype of what it meets; numpy scalars are taken as Python ones, so `x * np.float64(2)`
    stays float32, as it did before numpy 2)."""
    scalar = value.item() if isinstance(value, np.generic | np.ndarray) else value
    if isinstance(scalar, bool | int):
        return Tensor(
            texpr.const(float(scalar)),
            (),
            "bool" if isinstance(scalar, bool) else "int64",
            integer_range=(int(scalar), int(scalar)),
            weak=True,
        )
    return Tensor(texpr.const(float(scalar)), (), "float64", weak=True)


def _numpy_operand(x: Tensor) -> str | float:
    """What stands for `x` in `dtypes.result_dtype`: its dtype, or a weak scalar's value."""
    if not x.weak:
        return x.dtype
    if x.integer_range is None:
        return 0.0  # a traced float or a float constant: only its kind matters
    return bool(x.integer_range[0]) if x.dtype == "bool" else x.integer_range[0]


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


def _view(x: Tensor, expr: Term, shape: Shape) -> Tensor:
    """`x`'s elements, rearranged by `expr` into `shape`."""
    return Tensor(
        expr, shape, x.dtype, integer_range=x.integer_range, needs_float64=x.needs_float64
    )


def _full(value: int | float, shape: Shape, dtype: str) -> Tensor:
    """A tensor of `shape` and value dtype `dtype` filled with `value`, which it requires to be
    a value of `dtype`."""
    expr = texpr.const(float(value))
    if shape:
        expr = texpr.broadcast(expr, shape)
    values = None if dtypes.dtype_range(dtype) is None else (int(value), int(value))
    return Tensor(expr, shape, dtype, integer_range=values)


# numpy's function of each elementwise op, whose result dtype is the op's (`_unary`, `_binary`):
# the interpreter's; erf, which numpy lacks, takes exp's rule (the interpreter's keeps its
# argument's dtype, and only floats reach it there)
_NUMPY_UNARY: dict[str, Callable[..., Any]] = {**interp.UNARY, "erf": np.exp}


def _unary(op: str, x: object) -> Tensor:
    """Elementwise `op` in UNARY_OPS; a TypeError names `op` when `x` is not a Tensor."""
    x = _require(x, op)
    dtype = dtypes.result_dtype(op, _NUMPY_UNARY[op], _numpy_operand(x))
    values = None
    if dtypes.dtype_range(dtype) is not None:
        lo, hi = x.integer_range  # type: ignore[misc]  # an integer result has integer operands
        values = {
            "neg": (-hi, -lo),
            "abs": (
                0 if lo <= 0 <= hi else builtins.min(builtins.abs(lo), builtins.abs(hi)),
                builtins.max(builtins.abs(lo), builtins.abs(hi)),
            ),
            "sign": (-1 if lo < 0 else 0, 1 if hi > 0 else 0),
            "relu": (builtins.max(lo, 0), builtins.max(hi, 0)),
        }.get(op, (lo, hi))  # floor, ceil, trunc: integers are their own
    return _derived(op, texpr.unary(op, x.expr), x.shape, dtype, (x,), values)


def _binary(op: str, a: object, b: object, what: str | None = None) -> Tensor:
    """Elementwise `op` with numpy broadcasting; errors name `what` (default: `op`)."""
    what = what or op
    ta, tb = _operands(what, (a, b))
    shape = shapes.broadcast(what, ta.shape, tb.shape)
    dtype = dtypes.result_dtype(what, interp.BINARY[op], _numpy_operand(ta), _numpy_operand(tb))
    expr, values = texpr.binary(op, ta.expr, tb.expr), None
    if dtypes.dtype_range(dtype) is not None:
        values = _binary_range(op, ta.integer_range, tb.integer_range)  # type: ignore[arg-type]
        limit = dtypes.EXACT_INTEGERS["float64"]
        if (
            op == "mul"
            and np.dtype(dtype).itemsize <= 4
            and not -limit <= values[0] <= values[1] <= limit
        ):
            expr, values = _split_product(ta, tb)
    return _derived(what, expr, shape, dtype, (ta, tb), values)


def _split_product(ta: Tensor, tb: Tensor) -> tuple[Term, dtypes.IntegerRange]:
    """a * b for integers of at most 32 bits whose product may pass 2**53, congruent to it
    modulo 2**32 and exact in float64 (`_derived` then wraps it as numpy): with
    a = high * 2**16 + low, a * b = (high * b mod 2**16) * 2**16 + low * b (mod 2**32), every
    step under 2**49. Returns the term and its range."""
    half = 2**16

    def times(x: Term, y: Term) -> Term:
        return texpr.binary("mul", x, y)

    low = _modulo(ta.expr, half)
    high = texpr.unary("floor", times(ta.expr, texpr.const(1.0 / half)))
    high_b_low = _modulo(times(high, tb.expr), half)
    total = texpr.binary("add", times(high_b_low, texpr.const(float(half))), times(low, tb.expr))
    least, greatest = tb.integer_range  # type: ignore[misc]
    top = half - 1
    return total, (top * builtins.min(least, 0), top * half + top * builtins.max(greatest, 0))


def _binary_range(op: str, a: dtypes.IntegerRange, b: dtypes.IntegerRange) -> Any:
    """The range of `op`'s integer results for operands in ranges `a` and `b`."""
    if op in COMPARE_OPS:
        return (0, 1)
    if op == "add":
        return (a[0] + b[0], a[1] + b[1])
    if op == "sub":
        return (a[0] - b[1], a[1] - b[0])
    if op == "mul":
        products = [x * y for x in a for y in b]
        return (builtins.min(products), builtins.max(products))
    if op == "max":
        return (builtins.max(a[0], b[0]), builtins.max(a[1], b[1]))
    assert op == "min", op  # div has a float result
    return (builtins.min(a[0], b[0]), builtins.min(a[1], b[1]))


def _power(x: Tensor, n: int) -> Tensor:
    """x ** n for n >= 1 by repeated squaring: x**n = (x*x)**(n // 2) * x**(n % 2)."""
    if n == 1:
        return x
    half = _power(x * x, n // 2)
    return half * x if n % 2 else half


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


def _short_form(expr: Term) -> str:
    """The outermost constructor with its literal arguments; sub-tensors shown as `...`."""
    shown = ", ".join("..." if isinstance(a, Term) else repr(a) for a in expr.args)
    return f"{expr.op}({shown})"


# ------------------------------------------------------------ module functions


def exp(x: Tensor) -> Tensor:
    """Elementwise e**x."""
    return _unary("exp", x)


def log(x: Tensor) -> Tensor:
    """Elementwise natural logarithm."""
    return _unary("log", x)


def sqrt(x: Tensor) -> Tensor:
    """Elementwise square root."""
    return _unary("sqrt", x)


def tanh(x: Tensor) -> Tensor:
    """Elementwise hyperbolic tangent."""
    return _unary("tanh", x)


def erf(x: Tensor) -> Tensor:
    """Elementwise error function, 2/sqrt(pi) times the integral of exp(-t^2) from 0 to x
    (scipy.special.erf's values; numpy has none): erf(+-0) = +-0, erf(+-inf) = +-1."""
    return _unary("erf", x)


def sigmoid(x: Tensor) -> Tensor:
    """Elementwise 1 / (1 + exp(-x))."""
    return _unary("sigmoid", x)


def relu(x: Tensor) -> Tensor:
    """Elementwise max(x, 0)."""
    return _unary("relu", x)


def abs(x: Tensor) -> Tensor:
    """Elementwise absolute value."""
    return _unary("abs", x)


def log1p(x: Tensor) -> Tensor:
    """Elementwise log(1 + x), accurate for small x."""
    return _unary("log1p", x)


def expm1(x: Tensor) -> Tensor:
    """Elementwise exp(x) - 1, accurate for small x."""
    return _unary("expm1", x)


def sin(x: Tensor) -> Tensor:
    """Elementwise sine (radians)."""
    return _unary("sin", x)


def cos(x: Tensor) -> Tensor:
    """Elementwise cosine (radians)."""
    return _unary("cos", x)


def sign(x: Tensor) -> Tensor:
    """Elementwise -1, 0 or 1 by the sign of x (numpy's: +0 for either zero, NaN for NaN)."""
    return _unary("sign", x)


def floor(x: Tensor) -> Tensor:
    """Elementwise largest integer <= x (as a float)."""
    return _unary("floor", x)


def rint(x: Tensor) -> Tensor:
    """Elementwise round to the nearest integer, ties to even (as a float), as numpy.rint."""
    return _unary("rint", x)


def round(x: Tensor, decimals: int = 0) -> Tensor:  # noqa: A001 - numpy's name
    """numpy.round (numpy.around): to `decimals` places, ties to even, computed as numpy does
    for floats: rint(x * 10**decimals) / 10**decimals (negative decimals: divide, then
    multiply), in the program's dtype."""
    x = _require(x, "round")
    if not isinstance(decimals, int | np.integer):
        raise ArgumentError(f"round: decimals must be an int, got {decimals!r}")
    if x.integer_range is not None:
        if decimals < 0:
            raise UnsupportedError(
                f"round: rounding {x.dtype} to decimals={decimals} is not supported (integer "
                "arithmetic); cast with x.astype(np.float64) first"
            )
        return x  # integers are already round, and numpy keeps their dtype
    if decimals == 0:
        return rint(x)
    scale = 10.0 ** builtins.abs(int(decimals))
    if decimals > 0:
        return rint(x * scale) / scale
    return rint(x / scale) * scale


def trunc(x: Tensor) -> Tensor:
    """Elementwise round toward zero (as a float)."""
    return _unary("trunc", x)


def ceil(x: Tensor) -> Tensor:
    """Elementwise smallest integer >= x (as a float)."""
    return _unary("ceil", x)


def maximum(a: Tensor | float, b: Tensor | float) -> Tensor:
    """Elementwise maximum with broadcasting; one side may be a scalar."""
    return _binary("max", a, b, "maximum")


def minimum(a: Tensor | float, b: Tensor | float) -> Tensor:
    """Elementwise minimum with broadcasting; one side may be a scalar."""
    return _binary("min", a, b, "minimum")


def where(cond: Tensor | float, a: Tensor | float, b: Tensor | float) -> Tensor:
    """`a` where `cond` is nonzero, else `b`; all three broadcast.

    It requires: at least one of them is a Tensor; the Tensors share one dtype.
    """
    tc, ta, tb = _operands("where", (cond, a, b))
    shape = shapes.broadcast("where", tc.shape, ta.shape, tb.shape)
    dtype = dtypes.result_dtype(
        "where", partial(np.where, True), _numpy_operand(ta), _numpy_operand(tb)
    )
    values = None
    if dtypes.dtype_range(dtype) is not None:
        values = _union(ta.integer_range, tb.integer_range)  # type: ignore[arg-type]
    expr = texpr.where(tc.expr, ta.expr, tb.expr)
    return _derived("where", expr, shape, dtype, (tc, ta, tb), values)


def _union(a: dtypes.IntegerRange, b: dtypes.IntegerRange) -> dtypes.IntegerRange:
    """The range holding both ranges."""
    return (builtins.min(a[0], b[0]), builtins.max(a[1], b[1]))


def arange(start: int, stop: int | None = None, step: int = 1) -> Tensor:
    """numpy.arange of integers: start, start + step, ... before stop (`arange(n)`: 0 to
    n - 1), an int64 tensor. It requires: at least one value (tensors are never empty)."""
    if stop is None:
        start, stop = 0, start
    if not all(_is_index(v) for v in (start, stop, step)) or step == 0:
        raise ArgumentError(
            f"arange: eqsat takes integer start, stop and a nonzero step, got "
            f"{(start, stop, step)}; for floats write eqsat.arange(n) * step + start"
        )
    count = len(range(int(start), int(stop), int(step)))
    if count == 0:
        raise ShapeError(f"arange({start}, {stop}, {step}) is empty; eqsat tensors are never empty")
    positions = Tensor(texpr.arange(count), (count,), "int64", integer_range=(0, count - 1))
    return positions * int(step) + int(start) if (start, step) != (0, 1) else positions


def tril(x: Tensor, k: int = 0) -> Tensor:
    """numpy.tril: `x` with the elements above diagonal `k` of its last two axes zeroed (0
    of its dtype)."""
    return _triangle("tril", x, k)


def triu(x: Tensor, k: int = 0) -> Tensor:
    """numpy.triu: `x` with the elements below diagonal `k` of its last two axes zeroed."""
    return _triangle("triu", x, k)


def _triangle(what: str, x: object, k: int) -> Tensor:
    """`x` where column - row <= k (tril) or >= k (triu) in its last two axes, else 0."""
    x = _require(x, what)
    if x.ndim < 2:
        raise ShapeError(f"{what}: needs at least two dimensions, got shape {x.shape}")
    if not _is_index(k):
        raise ArgumentError(f"{what}: k must be an int, got {k!r}")
    rows, columns = x.shape[-2:]
    offset = arange(columns).reshape(1, columns) - arange(rows).reshape(rows, 1)
    keep = offset <= int(k) if what == "tril" else offset >= int(k)
    return where(keep, x, _full(0, (), x.dtype))


def floor_divide(a: Tensor | int, b: Tensor | int) -> Tensor:
    """numpy.floor_divide (`a // b`) of integers: the quotient rounded toward -inf, 0 where
    `b` is 0, wrapping around as numpy's (`iinfo.min // -1`). Exact: floor(a / b) is, for
    integers a float holds. Of floats it is an UnsupportedError (numpy's uses fmod, which
    eqsat lacks)."""
    ta, tb = _integer_operands("floor_divide", a, b)
    expr = _zero_for_zero_divisor(tb, _floor_quotient(ta, tb))
    largest = builtins.max(builtins.abs(ta.integer_range[0]), builtins.abs(ta.integer_range[1]))  # type: ignore[index]
    return _integer_result("floor_divide", expr, ta, tb, (-largest, largest))


def remainder(a: Tensor | int, b: Tensor | int) -> Tensor:
    """numpy.remainder (`a % b`, numpy.mod) of integers: a - (a // b) * b, with the sign of
    `b`, 0 where `b` is 0 (as numpy). Of floats it is an UnsupportedError (`floor_divide`)."""
    ta, tb = _integer_operands("remainder", a, b)
    rest = texpr.binary("sub", ta.expr, texpr.binary("mul", _floor_quotient(ta, tb), tb.expr))
    expr = _zero_for_zero_divisor(tb, rest)
    largest = builtins.max(builtins.abs(tb.integer_range[0]), builtins.abs(tb.integer_range[1]))  # type: ignore[index]
    return _integer_result("remainder", expr, ta, tb, (1 - largest, largest - 1))


def _floor_quotient(ta: Tensor, tb: Tensor) -> Term:
    """floor(a / b) of integer tensors: their floor division where b is not 0."""
    return texpr.unary("floor", texpr.binary("div", ta.expr, tb.expr))


def _zero_for_zero_divisor(tb: Tensor, expr: Term) -> Term:
    """`expr`, but 0 where the divisor `tb` is 0 (numpy's integer division and remainder)."""
    zero = texpr.const(0.0)
    return texpr.where(texpr.binary("eq", tb.expr, zero), zero, expr)


def _integer_operands(what: str, a: object, b: object) -> tuple[Tensor, Tensor]:
    """`a` and `b` as tensors of integers (or bools): `what` of floats is refused."""
    ta, tb = _operands(what, (a, b))
    if ta.integer_range is None or tb.integer_range is None:
        raise UnsupportedError(
            f"{what}: eqsat computes it on integers only, got {ta.dtype} and {tb.dtype} (numpy's "
            "float version rounds through fmod, which eqsat does not have); np.floor(x / y) is "
            "close but differs where x / y rounds up to an integer"
        )
    return ta, tb


def _integer_result(
    what: str, expr: Term, ta: Tensor, tb: Tensor, values: dtypes.IntegerRange
) -> Tensor:
    """`expr` of integer operands `ta` and `tb` (`floor_divide`, `remainder`), of numpy's dtype
    for `what`. Its steps (a / b, the quotient times b) stay exact where the operands' sum is:
    a float64 kernel beyond 2**24."""
    function = np.floor_divide if what == "floor_divide" else np.remainder
    dtype = dtypes.result_dtype(what, function, _numpy_operand(ta), _numpy_operand(tb))
    shape = shapes.broadcast(what, ta.shape, tb.shape)
    result = _derived(what, expr, shape, dtype, (ta, tb), values)
    steps = (ta.integer_range[0] - tb.integer_range[1], ta.integer_range[1] + tb.integer_range[1])  # type: ignore[index]
    if dtypes.needs_float64(dtype, steps) and not result.needs_float64:
        return Tensor(
            result.expr, shape, dtype, integer_range=result.integer_range, needs_float64=True
        )
    return result


def logical_and(a: Tensor | float, b: Tensor | float) -> Tensor:
    """Elementwise: both nonzero (NaN counts), as bools."""
    return minimum(_truth(a), _truth(b))


def logical_or(a: Tensor | float, b: Tensor | float) -> Tensor:
    """Elementwise: either nonzero (NaN counts), as bools."""
    return maximum(_truth(a), _truth(b))


def logical_xor(a: Tensor | float, b: Tensor | float) -> Tensor:
    """Elementwise: exactly one nonzero (NaN counts), as bools."""
    return _binary("ne", _truth(a), _truth(b), "logical_xor")


def logical_not(x: Tensor) -> Tensor:
    """Elementwise: zero, as bools."""
    return _require(x, "logical_not") == 0


def isnan(x: Tensor) -> Tensor:
    """Elementwise: x is NaN, as bools."""
    x = _require(x, "isnan")
    return _full(0, x.shape, "bool") if x.integer_range is not None else x != x


def isinf(x: Tensor) -> Tensor:
    """Elementwise: x is +inf or -inf, as bools."""
    x = _require(x, "isinf")
    return _full(0, x.shape, "bool") if x.integer_range is not None else abs(x) == math.inf


def isfinite(x: Tensor) -> Tensor:
    """Elementwise: x is neither NaN nor ±inf, as bools."""
    x = _require(x, "isfinite")
    return _full(1, x.shape, "bool") if x.integer_range is not None else abs(x) < math.inf


def _truth(x: object) -> Tensor | bool:
    """`x` as bools: a bool tensor itself, another tensor `x != 0`, a scalar `bool(x)`."""
    if isinstance(x, Tensor):
        return x if x.dtype == "bool" else x != 0
    if _is_scalar(x):
        return bool(x)
    return _require(x, "logical operation")


def _logical_operator(
    symbol: str, logical: Callable[[Any, Any], Tensor], a: object, b: object
) -> Tensor:
    """`a <symbol> b` (&, |, ^, ~): numpy's logical operation on bools; numpy makes it bitwise
    on integers, which eqsat does not compute (UnsupportedError), and refuses floats."""
    for operand in (a, b):
        dtype = operand.dtype if isinstance(operand, Tensor) else type(operand).__name__
        if dtype != "bool":
            raise UnsupportedError(
                f"{symbol}: eqsat takes it on bools only (logical), got {dtype}; numpy makes it "
                "bitwise on integers, which eqsat does not compute. For a condition on "
                "numbers write np.logical_and(x > 0, y > 0), or compare first"
            )
    return logical(a, b)


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


def clip(x: Tensor, a_min: Tensor | float | None, a_max: Tensor | float | None) -> Tensor:
    """numpy.clip: each element limited to [a_min, a_max] (`Tensor.clip`)."""
    return _require(x, "clip").clip(a_min, a_max)


def transpose(x: Tensor, axes: Sequence[int] | None = None) -> Tensor:
    """numpy.transpose: permute the axes by `axes`; None reverses them."""
    return _require(x, "transpose").transpose(axes)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """numpy.matmul: (..., m, k) @ (..., k, n) with broadcast batch dims.

    It requires: both ranks >= 1; equal contraction dims. A 1-D `a` is a row (1, k) and a 1-D
    `b` a column (k, 1), and that dim is removed from the result. Operands whose batch dims must
    grow get a `TExpr.broadcast` node, so `TExpr.matmul` always sees equal batch dims.
    """
    a = _require(a, "matmul")
    b = _require(b, "matmul")
    dtype = dtypes.result_dtype("matmul", np.matmul, a.dtype, b.dtype)
    if not a.ndim or not b.ndim:
        raise ShapeError(f"matmul: shapes {a.shape} and {b.shape} need rank >= 1")
    k_a, k_b = a.shape[-1], b.shape[0 if b.ndim == 1 else -2]
    if k_a != k_b:
        raise ShapeError(
            f"matmul: shapes {a.shape} and {b.shape} are incompatible ({k_a} != {k_b})"
        )
    a2 = _reshape(a, (1, *a.shape)) if a.ndim == 1 else a
    b2 = _reshape(b, (*b.shape, 1)) if b.ndim == 1 else b
    shape = shapes.matmul(a2.shape, b2.shape)
    batch = shape[:-2]
    a3 = _broadcast_to(a2, batch + a2.shape[-2:])
    b3 = _broadcast_to(b2, batch + b2.shape[-2:])
    values = None
    if dtypes.dtype_range(dtype) is not None:
        products = _binary_range("mul", a.integer_range, b.integer_range)  # type: ignore[arg-type]
        values = (k_a * products[0], k_a * products[1])
    result = _derived("matmul", texpr.matmul(a3.expr, b3.expr), shape, dtype, (a, b), values)
    if a.ndim == 1:
        shape = shape[:-2] + shape[-1:]
    if b.ndim == 1:
        shape = shape[:-1]
    return _reshape(result, shape)


def einsum(subscripts: str | Tensor, *operands: object, optimize: object = False) -> Tensor:
    """numpy.einsum: `einsum("ij,jk->ik", a, b)` is `a @ b`. The subscripts are numpy's
    (`eqsat.core.subscripts`: implicit or explicit output, `...`, size-1 dims broadcast, a
    letter repeated in one operand for a diagonal); the operands are tensors or scalars.
    numpy's interleaved form, `einsum(a, [0, 1], b, [1, 2], [0, 2])` (each operand followed by
    its indices as ints below 52 or `...`, then the output's, optional), is the same.

    Each operand's diagonals are taken first (`_diagonals`); the operands are then contracted
    left to right, two at a time, into matmuls, transposes, broadcasting multiplies and sums,
    which eqsat's rules then optimize like any program: a pair is a matmul, batched over the
    other labels, when one label is summed over, both operands have it with one extent, and one
    operand has a label the other lacks; else a multiply and a sum. `optimize` is accepted for
    numpy's signature and ignored.

    It requires: `subscripts` a str, as `parse_subscripts` requires (or the interleaved form);
    at least one Tensor; the Tensors share one dtype.
    """
    del optimize  # numpy's contraction order option: eqsat orders and optimizes the work itself
    if not isinstance(subscripts, str):
        subscripts, operands = _interleaved_subscripts((subscripts, *operands))
    tensors = _operands("einsum", operands)
    spec = parse_subscripts(subscripts, [t.shape for t in tensors])
    views = [_diagonals(t, labels) for t, labels in zip(tensors, spec.inputs, strict=True)]
    result, labels = views[0]
    for position in range(1, len(views)):
        needed = set(spec.output).union(*spec.inputs[position + 1 :])
        result, labels = _contract(result, labels, *views[position], needed)
    result, labels = _sum_labels(result, labels, set(spec.output))
    return result.transpose([labels.index(label) for label in spec.output])


# numpy's letters for the interleaved form's integer indices, in order.
_EINSUM_LETTERS = string.ascii_lowercase + string.ascii_uppercase


def _interleaved_subscripts(arguments: Sequence[object]) -> tuple[str, tuple[object, ...]]:
    """The subscripts and operands of numpy's interleaved einsum arguments: operand, its
    indices, operand, its indices, ..., and optionally the output's indices. Without them the
    output is, as numpy has it, `...` if an operand has one, then the indices that occur once,
    in the order of their numbers (not of their letters: 'B' is 27, after 'b')."""
    pairs = len(arguments) // 2
    operands = arguments[0 : 2 * pairs : 2]
    sublists = [_sublist(s, f"operand {k}") for k, s in enumerate(arguments[1 : 2 * pairs : 2])]
    if not sublists:
        raise TypeError("einsum: at least one operand, followed by its list of indices")
    if len(arguments) % 2:
        output = _sublist(arguments[-1], "the output")
    else:
        counts = Counter(index for sublist in sublists for index in sublist)
        ellipsis = [Ellipsis] if counts.pop(Ellipsis, 0) else []
        output = ellipsis + sorted(index for index, count in counts.items() if count == 1)
    terms = ",".join(map(_sublist_term, sublists))
    return terms + "->" + _sublist_term(output), tuple(operands)


def _sublist(indices: object, where: str) -> list[Any]:
    """An interleaved einsum's list of indices, checked: ints in [0, 52) and Ellipsis."""
    if not isinstance(indices, list | tuple):
        raise ShapeError(f"einsum: the indices of {where} must be a list, got {indices!r}")
    checked: list[Any] = []
    for index in indices:
        if index is Ellipsis:
            checked.append(index)
        elif isinstance(index, int | np.integer) and 0 <= index < len(_EINSUM_LETTERS):
            checked.append(int(index))
        else:
            raise ShapeError(
                f"einsum: index {index!r} of {where} is neither an int in [0, 52) nor ..."
            )
    return checked


def _sublist_term(sublist: Sequence[Any]) -> str:
    """A checked list of indices (`_sublist`) as a term of subscripts: 0 is 'a', 26 is 'A'."""
    return "".join("..." if index is Ellipsis else _EINSUM_LETTERS[index] for index in sublist)


def _diagonals(t: Tensor, labels: Labels) -> tuple[Tensor, Labels]:
    """`t` (one label per axis) with the axes of each label it repeats replaced by one axis,
    their diagonal (numpy.einsum's 'ii->i'), and the labels of its axes. A diagonal is a view:
    the two axes moved last, merged into one of n*n elements and read with step n + 1.

    It requires: the axes of a label have one extent.
    """
    while len(set(labels)) < len(labels):
        label = next(label for at, label in enumerate(labels) if label in labels[:at])
        first = labels.index(label)
        second = labels.index(label, first + 1)
        others = [axis for axis in range(len(labels)) if axis not in (first, second)]
        n = t.shape[first]
        moved = t.transpose([*others, first, second])
        t = moved.reshape(*moved.shape[:-2], n * n)[..., :: n + 1]
        labels = (*(labels[axis] for axis in others), label)
    return t, labels


# einsum: labels of the size-1 axes that stand in for a matrix product's missing row or column
# (a vector operand), removed from the product.
_ROW, _COLUMN = "(row)", "(column)"


def _contract(
    x: Tensor, x_labels: Labels, y: Tensor, y_labels: Labels, needed: set[str]
) -> tuple[Tensor, Labels]:
    """`x` times `y` (one label per axis each; equal labels multiply), summed over the labels
    not `needed` (later or in the output), and the labels of the result's axes."""
    order = tuple(dict.fromkeys((*x_labels, *y_labels)))
    summed = [label for label in order if label not in needed]
    if len(summed) == 1 and _is_matrix_product(x, x_labels, y, y_labels, summed[0]):
        return _matrix_product(x, x_labels, y, y_labels, summed[0])
    product = _arranged(x, x_labels, order) * _arranged(y, y_labels, order)
    return _sum_labels(product, order, needed)


def _is_matrix_product(x: Tensor, x_labels: Labels, y: Tensor, y_labels: Labels, k: str) -> bool:
    """Whether summing `x` times `y` over `k` alone is a matrix product: both have `k`, with one
    extent, and one has a label the other lacks (else it is a dot product, batched or not)."""
    return (
        k in x_labels
        and k in y_labels
        and x.shape[x_labels.index(k)] == y.shape[y_labels.index(k)]
        and set(x_labels) != set(y_labels)
    )


def _matrix_product(
    x: Tensor, x_labels: Labels, y: Tensor, y_labels: Labels, k: str
) -> tuple[Tensor, Labels]:
    """`x` times `y` summed over `k` as one `matmul`, and the labels of its axes: the last label
    only `x` has is the row dim, the last only `y` has the column dim (a size-1 axis stands in
    for a missing one), and every other label is a batch dim, which `matmul` broadcasts where an
    operand lacks it.

    It requires: `_is_matrix_product(x, x_labels, y, y_labels, k)`.
    """
    x_only = [label for label in x_labels if label not in y_labels]
    y_only = [label for label in y_labels if label not in x_labels]
    row = x_only.pop() if x_only else _ROW
    column = y_only.pop() if y_only else _COLUMN
    shared = [label for label in x_labels if label in y_labels and label != k]
    batch = (*shared, *x_only, *y_only)
    product = matmul(
        _arranged(x, x_labels, batch, (row, k)), _arranged(y, y_labels, batch, (k, column))
    )
    labels = (*batch, row, column)
    kept = tuple(label for label in labels if label not in (_ROW, _COLUMN))
    return _reshape(product, tuple(product.shape[labels.index(label)] for label in kept)), kept


def _arranged(t: Tensor, labels: Labels, outer: Labels, inner: Labels = ()) -> Tensor:
    """`t` (one label per axis) with its axes in the order of `outer` + `inner` and a size-1 axis
    for each of those labels it lacks, except the `outer` ones before its first (numpy
    broadcasting adds those in front).

    It requires: every label of `labels` is in `outer` + `inner`.
    """
    order = (*outer, *inner)
    present = [label for label in order if label in labels]
    t = t.transpose([labels.index(label) for label in present])
    start = next((i for i, label in enumerate(outer) if label in labels), len(outer))
    shape = tuple(
        t.shape[present.index(label)] if label in labels else 1 for label in order[start:]
    )
    return _reshape(t, shape)


def _sum_labels(t: Tensor, labels: Labels, kept: set[str]) -> tuple[Tensor, Labels]:
    """`t` (one label per axis) summed over the axes whose labels are not `kept`, and the
    labels of the axes left."""
    summed = tuple(axis for axis, label in enumerate(labels) if label not in kept)
    return t.sum(summed), tuple(label for label in labels if label in kept)


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) over one axis (max subtracted for stability)."""
    x = _require(x, "softmax")
    axis = shapes.normalize_axis("softmax", axis, x.shape)
    e = exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


_GELU_FORMS = {"tanh": "tanh", True: "tanh", "none": "none", False: "none"}


def gelu(x: Tensor, approximate: str | bool = "tanh") -> Tensor:
    """GELU, x times the standard normal CDF of x, in one of two forms:

    - `approximate="tanh"` (the default, or True as in jax):
      0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)));
    - `approximate="none"` (or False), the exact form: 0.5 * x * (1 + erf(x / sqrt(2))).

    The names are torch's (`torch.nn.functional.gelu(x, approximate='none'|'tanh')`) and the
    booleans jax's (`jax.nn.gelu(x, approximate=True)`). The default is jax's and eqsat's
    before the exact form existed, so a program keeps its values; torch's default is "none".
    It requires: `approximate` one of "tanh", "none", True, False (else ArgumentError).
    """
    x = _require(x, "gelu")
    form = _GELU_FORMS.get(approximate) if isinstance(approximate, str | bool) else None
    if form is None:
        raise ArgumentError(
            f"gelu: approximate must be 'tanh' or 'none' (or True or False), got {approximate!r}"
        )
    if form == "none":
        return 0.5 * x * (1.0 + erf(x * math.sqrt(0.5)))
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
    return 0.5 * x * (1.0 + tanh(inner))


def layernorm(
    x: Tensor,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    axis: int = -1,
    eps: float = 1e-5,
) -> Tensor:
    """(x - mean) / sqrt(var + eps) over one axis, then `* weight` and `+ bias` when given.

    It requires: `weight` and `bias` (Tensors) broadcast against `x`.
    """
    x = _require(x, "layernorm")
    axis = shapes.normalize_axis("layernorm", axis, x.shape)
    centered = x - x.mean(axis, keepdims=True)
    variance = (centered**2).mean(axis, keepdims=True)
    out = centered / sqrt(variance + eps)
    if weight is not None:
        out = _binary("mul", out, _require(weight, "layernorm"), "layernorm")
    if bias is not None:
        out = _binary("add", out, _require(bias, "layernorm"), "layernorm")
    return out


# ------------------------------------------------------------ numpy protocols: functions on tensors


def _power_of(base: Tensor, exponent: float) -> Tensor:
    """numpy.power(base, exponent) for a Tensor base and a constant exponent (`Tensor.__pow__`)."""
    return _require(base, "pow") ** exponent


def concatenate(arrays: Sequence[Tensor], axis: int = 0) -> Tensor:
    """numpy.concatenate: `arrays` joined along `axis` (a copy into one buffer, as numpy).

    It requires: one or more tensors of one dtype and rank >= 1, equal shapes but along `axis`
    (ShapeError otherwise); `axis=None` (flatten first) is not supported.
    """
    parts = _sequence_of_tensors("concatenate", arrays)
    if axis is None:
        raise UnsupportedError("concatenate: axis=None is not supported; reshape(-1) each part")
    dim = shapes.normalize_axis("concatenate", axis, parts[0].shape)
    joined = parts[0]
    for part in parts[1:]:
        shape = shapes.concatenate(joined.shape, part.shape, dim)
        dtype = dtypes.result_dtype(
            "concatenate", lambda a, b: np.concatenate([a, b]), joined.dtype, part.dtype
        )
        values = None
        if dtypes.dtype_range(dtype) is not None:
            values = _union(joined.integer_range, part.integer_range)  # type: ignore[arg-type]
        expr = texpr.concat(joined.expr, part.expr, dim)
        joined = _derived("concatenate", expr, shape, dtype, (joined, part), values)
    return joined


def stack(arrays: Sequence[Tensor], axis: int = 0) -> Tensor:
    """numpy.stack: `arrays`, all of one shape, joined along a new dimension `axis`."""
    parts = _sequence_of_tensors("stack", arrays)
    if len({part.shape for part in parts}) > 1:
        shown = ", ".join(str(part.shape) for part in parts)
        raise ShapeError(f"stack: all arrays must have one shape, got {shown}")
    rank = parts[0].ndim + 1
    if not -rank <= axis < rank:
        raise ShapeError(f"stack: axis {axis} is out of range for a result of rank {rank}")
    dim = axis % rank
    expanded = [part.reshape(*part.shape[:dim], 1, *part.shape[dim:]) for part in parts]
    return concatenate(expanded, dim)


def split(x: Tensor, indices_or_sections: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """numpy.split: views of `x` cut along `axis`, into that many equal sections (an int, which
    must divide the extent) or at the given indices.

    It requires: no section is empty (eqsat tensors never are; ShapeError otherwise).
    """
    return _cut("split", x, indices_or_sections, axis, equal=True)


def array_split(x: Tensor, indices_or_sections: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """numpy.array_split: `split`, but an int need not divide the extent: of n sections of an
    extent L, the first L % n hold L // n + 1 elements and the others L // n.

    It requires: no section is empty, so n <= L (ShapeError otherwise).
    """
    return _cut("array_split", x, indices_or_sections, axis, equal=False)


def _cut(
    name: str, x: Tensor, indices_or_sections: int | Sequence[int], axis: int, *, equal: bool
) -> list[Tensor]:
    """The views of `split` (`equal`: sections must divide the extent) or `array_split`."""
    x = _require(x, name)
    dim = shapes.normalize_axis(name, axis, x.shape)
    extent = x.shape[dim]
    if isinstance(indices_or_sections, int | np.integer):
        sections = int(indices_or_sections)
        if sections < 1:
            raise ShapeError(f"{name}: the number of sections must be at least 1, got {sections}")
        if equal and extent % sections:
            raise ShapeError(
                f"{name}: {sections} sections do not divide extent {extent} of axis {dim} "
                "equally (numpy.array_split allows unequal sections)"
            )
        if sections > extent:
            raise ShapeError(
                f"{name}: {sections} sections of extent {extent} (axis {dim}) would leave "
                f"{sections - extent} empty; eqsat tensors are never empty"
            )
        larger, size = extent % sections, extent // sections
        lengths = [size + 1] * larger + [size] * (sections - larger)
        cuts = list(itertools.accumulate(lengths[:-1]))
    else:
        cuts = [int(cut) for cut in indices_or_sections]
    bounds = [0, *cuts, extent]
    before = (slice(None),) * dim
    return [x[(*before, slice(start, stop))] for start, stop in itertools.pairwise(bounds)]


def pad(
    x: Tensor,
    pad_width: int | Sequence[int] | Sequence[Sequence[int]],
    mode: str = "constant",
    constant_values: float = 0.0,
) -> Tensor:
    """numpy.pad: `x` with blocks added before and after each dimension (`pad_width` as numpy
    takes it: n, (before, after) or one pair per dimension), dimension by dimension as numpy
    pads them. `mode` "constant" fills them with `constant_values`; "edge" repeats the edge;
    "reflect" mirrors `x` without its edge, "symmetric" with it; "wrap" continues from the
    other end.

    It requires: one of those modes and one constant (UnsupportedError otherwise); widths >= 0;
    for "reflect" a width of at most the extent - 1, for "symmetric" and "wrap" at most the
    extent (numpy mirrors wider pads again; UnsupportedError).
    """
    x = _require(x, "pad")
    if mode not in _PAD_MODES:
        raise UnsupportedError(
            f"pad: mode={mode!r} is not supported; the modes are {sorted(_PAD_MODES)}"
        )
    if not _is_scalar(constant_values):
        raise UnsupportedError(
            f"pad: constant_values must be one number (not one per side), got {constant_values!r}"
        )
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (x.ndim, 2))
    if (widths < 0).any():
        raise ShapeError(f"pad: widths {pad_width} must not be negative")
    padded = x
    for dim, (before, after) in enumerate(widths.tolist()):
        parts = [padded]
        if before:
            parts.insert(0, _pad_block(padded, dim, before, mode, float(constant_values), True))
        if after:
            parts.append(_pad_block(padded, dim, after, mode, float(constant_values), False))
        padded = concatenate(parts, dim)
    return padded


# The widest pad each mode takes, as a function of the extent it pads.
_PAD_MODES: dict[str, Callable[[int], float]] = {
    "constant": lambda extent: math.inf,
    "edge": lambda extent: math.inf,
    "reflect": lambda extent: extent - 1,
    "symmetric": lambda extent: extent,
    "wrap": lambda extent: extent,
}


def _pad_block(x: Tensor, dim: int, width: int, mode: str, value: float, before: bool) -> Tensor:
    """The block of `width` that `pad` adds to `x` along `dim`, before or after it."""
    extent = x.shape[dim]
    widest = _PAD_MODES[mode](extent)
    if width > widest:
        raise UnsupportedError(
            f"pad: mode={mode!r} pads at most {widest} elements along axis {dim} of extent "
            f"{extent}, got {width} (numpy mirrors wider pads again)"
        )
    if mode == "constant":
        return _filled_like(x, dim, width, value)
    lead = (slice(None),) * dim
    if mode == "edge":
        edge = x[(*lead, slice(0, 1) if before else slice(extent - 1, extent))]
        return _broadcast_to(edge, (*x.shape[:dim], width, *x.shape[dim + 1 :]))
    if mode == "wrap":
        return x[(*lead, slice(extent - width, extent) if before else slice(0, width))]
    skip = 1 if mode == "reflect" else 0  # reflect leaves the edge out, symmetric repeats it
    start = skip if before else extent - width - skip
    return x[(*lead, slice(start, start + width))][(*lead, slice(None, None, -1))]


def _filled_like(x: Tensor, dim: int, extent: int, value: float) -> Tensor:
    """A tensor of `value`, cast to `x`'s dtype as numpy casts a pad's constant, shaped as `x`
    but with `extent` along `dim`."""
    cast = np.asarray(value).astype(x.dtype).item()
    return _full(cast, (*x.shape[:dim], extent, *x.shape[dim + 1 :]), x.dtype)


def _sequence_of_tensors(what: str, arrays: object) -> list[Tensor]:
    """`arrays` (a list or tuple) as tensors of one dtype and rank >= 1."""
    if isinstance(arrays, Tensor) or not isinstance(arrays, list | tuple) or not arrays:
        raise TypeError(f"{what}: expected a non-empty list or tuple of eqsat tensors")
    parts = _operands(what, arrays)
    if any(part.ndim == 0 for part in parts):
        raise ShapeError(f"{what}: zero-dimensional arrays cannot be concatenated")
    return parts


def tile(x: Tensor, reps: int | Sequence[int]) -> Tensor:
    """numpy.tile: `x` repeated `reps[d]` times along dimension d, as a view (a broadcast of
    a new axis before each dimension, then a reshape). Like numpy, a shorter `reps` is padded
    with leading 1s and a longer one gives `x` leading dimensions of 1."""
    x = _require(x, "tile")
    counts = _counts("tile", reps if isinstance(reps, Sequence) else (reps,))
    rank = len(counts) if len(counts) > x.ndim else x.ndim
    counts = (1,) * (rank - len(counts)) + counts
    shape = (1,) * (rank - x.ndim) + x.shape
    interleaved = [extent for n in shape for extent in (1, n)]
    copies = [extent for count, n in zip(counts, shape, strict=True) for extent in (count, n)]
    widened = _broadcast_to(_reshape(x, tuple(interleaved)), tuple(copies))
    return _reshape(widened, tuple(c * n for c, n in zip(counts, shape, strict=True)))


def repeat(x: Tensor, repeats: int, axis: int | None = None) -> Tensor:
    """numpy.repeat with one count: each element `repeats` times along `axis` (the flattened
    tensor when None), as a view (a broadcast of a new axis after `axis`, then a reshape).
    A count per element (an array of repeats) raises UnsupportedError."""
    x = _require(x, "repeat")
    if not isinstance(repeats, int | np.integer):
        raise UnsupportedError(
            f"numpy.repeat: repeats={repeats!r}; eqsat takes one int count for every element "
            "(a count per element is not supported)"
        )
    (count,) = _counts("repeat", (repeats,))
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = shapes.normalize_axis("repeat", axis, x.shape)
    split = (*x.shape[: axis + 1], 1, *x.shape[axis + 1 :])
    copies = (*x.shape[: axis + 1], count, *x.shape[axis + 1 :])
    joined = (*x.shape[:axis], x.shape[axis] * count, *x.shape[axis + 1 :])
    return _reshape(_broadcast_to(_reshape(x, split), copies), joined)


def _counts(what: str, values: Sequence[object]) -> tuple[int, ...]:
    """`values` as positive ints; a ShapeError naming `what` otherwise (tensors are never
    empty, so a count of 0 is refused)."""
    if not all(isinstance(v, int | np.integer) and v >= 1 for v in values):
        raise ShapeError(f"{what}: counts {tuple(values)} must be positive ints")
    return tuple(int(v) for v in values)  # type: ignore[call-overload]


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


def _reshape_to(a: Tensor, shape: int | Sequence[int]) -> Tensor:
    """numpy.reshape(a, shape), row-major (`Tensor.reshape`)."""
    return _require(a, "reshape").reshape(shape)


def _dot(a: Tensor, b: Tensor) -> Tensor:
    """numpy.dot where it equals matmul.

    It requires: both operands 1-D or 2-D (numpy.dot of higher ranks is not matmul).
    """
    a, b = _require(a, "dot"), _require(b, "dot")
    if not (1 <= a.ndim <= 2 and 1 <= b.ndim <= 2):
        raise UnsupportedError(
            f"numpy.dot: shapes {a.shape} and {b.shape}; eqsat supports 1-D and 2-D operands "
            "(where dot is matmul): use matmul or @"
        )
    return matmul(a, b)


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


def _tensor_members() -> list[str]:
    """The public methods, properties and attributes of a Tensor, sorted."""
    return sorted(n for n in (*vars(Tensor), *_ATTRIBUTES) if not n.startswith("_"))


def supported_numpy_table() -> str:
    """The README's table of the numpy API on tensors, made from the dispatch tables and
    `Tensor`'s members (tests/test_readme.py keeps the README's copy equal to it)."""
    rows = {
        "numpy ufuncs (called directly)": [f"np.{u.__name__}" for u in _NUMPY_UFUNCS],
        "numpy functions": [_numpy_name(f).replace("numpy.", "np.", 1) for f in _NUMPY_FUNCTIONS],
        "tensor methods and attributes": [f"x.{n}" for n in _tensor_members()],
        "operators": [symbol for name, symbol in _OPERATORS.items() if name in vars(Tensor)],
        "eqsat functions": [f"eqsat.{n}" for n in __all__ if n != "Tensor"],
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
        hint = f"; use eqsat.{ufunc.__name__}" if ufunc.__name__ in __all__ else ""
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
