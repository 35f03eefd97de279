"""The symbolic array `Tensor`, its operators and methods, and the program's inputs and
outputs (`tensor`, `traced_scalar`, `output_tensors`).

Each method imports the function that builds its result when it runs: those functions build
Tensors, so this module imports none of them at its top."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from eqsat.core import dtypes, shapes
from eqsat.core.errors import DTypeError, ShapeError, UnsupportedAttributeError, UnsupportedError
from eqsat.core.shapes import Shape
from eqsat.core.term import Term, texpr

Axes = int | tuple[int, ...] | None
_ATTRIBUTES = ("shape", "dtype")  # a Tensor's own attributes (set by __init__) users read


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
        from eqsat.frontend.numpy_protocol import _numpy_ufunc

        return _numpy_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(
        self, func: Any, types: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Tensor:
        """`np.sum(x, axis=0)`, `np.where(c, x, 0)`, ...: `_numpy_function`."""
        from eqsat.frontend.numpy_protocol import _numpy_function

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
        from eqsat.frontend.indexing import _basic_index

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
        from eqsat.frontend.elementwise import _binary

        return _binary("add", self, other)

    def __radd__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import _binary

        return _binary("add", other, self)

    def __sub__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import _binary

        return _binary("sub", self, other)

    def __rsub__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import _binary

        return _binary("sub", other, self)

    def __mul__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import _binary

        return _binary("mul", self, other)

    def __rmul__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import _binary

        return _binary("mul", other, self)

    def __truediv__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import _binary

        return _binary("div", self, other)

    def __rtruediv__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import _binary

        return _binary("div", other, self)

    def __floordiv__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import floor_divide

        return floor_divide(self, other)

    def __rfloordiv__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import floor_divide

        return floor_divide(other, self)

    def __mod__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import remainder

        return remainder(self, other)

    def __rmod__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import remainder

        return remainder(other, self)

    def __neg__(self) -> Tensor:
        from eqsat.frontend.elementwise import _unary

        return _unary("neg", self)

    def __abs__(self) -> Tensor:
        from eqsat.frontend.elementwise import _unary

        return _unary("abs", self)

    def __pow__(self, exponent: object) -> Tensor:
        """x ** p for a constant p. An integral p (2 or 2.0) multiplies: p = 0 gives ones,
        p < 0 gives 1 / x ** -p. p = 0.5 is sqrt(x), as numpy computes it; any other finite p
        is exp(p * log(x)), with numpy's pow values at -inf (inf for p > 0, 0 for p < 0)."""
        from eqsat.frontend.elementwise import _binary, _full, _power

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
        from eqsat.frontend.elementwise import exp, log, sqrt, where

        if not math.isfinite(p):
            raise UnsupportedError(f"pow: eqsat takes a finite exponent, got {p!r}")
        if p == 0.5:
            return sqrt(self)
        # log(-inf) is NaN; numpy's pow(-inf, p) is inf for p > 0 and 0 for p < 0
        return where(self == -math.inf, math.inf if p > 0 else 0.0, exp(p * log(self)))

    # -------------------------------------------------------- comparisons: 1.0 / 0.0 tensors

    def __lt__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import _binary

        return _binary("lt", self, other)

    def __le__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import _binary

        return _binary("le", self, other)

    def __gt__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import _binary

        return _binary("gt", self, other)

    def __ge__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import _binary

        return _binary("ge", self, other)

    def __eq__(self, other: object) -> Tensor:  # type: ignore[override]
        from eqsat.frontend.elementwise import _binary

        return _binary("eq", self, other)

    def __ne__(self, other: object) -> Tensor:  # type: ignore[override]
        from eqsat.frontend.elementwise import _binary

        return _binary("ne", self, other)

    # -------------------------------------------------------- logical operators on bools

    def __and__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import _logical_operator, logical_and

        return _logical_operator("&", logical_and, self, other)

    def __rand__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import _logical_operator, logical_and

        return _logical_operator("&", logical_and, other, self)

    def __or__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import _logical_operator, logical_or

        return _logical_operator("|", logical_or, self, other)

    def __ror__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import _logical_operator, logical_or

        return _logical_operator("|", logical_or, other, self)

    def __xor__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import _logical_operator, logical_xor

        return _logical_operator("^", logical_xor, self, other)

    def __rxor__(self, other: object) -> Tensor:
        from eqsat.frontend.elementwise import _logical_operator, logical_xor

        return _logical_operator("^", logical_xor, other, self)

    def __invert__(self) -> Tensor:
        from eqsat.frontend.elementwise import _logical_operator, logical_not

        return _logical_operator("~", lambda x, _: logical_not(x), self, True)

    # -------------------------------------------------------- matmul and layout

    def __matmul__(self, other: Tensor) -> Tensor:
        from eqsat.frontend.contractions import matmul

        return matmul(self, other)

    def __rmatmul__(self, other: object) -> Tensor:
        from eqsat.frontend.contractions import matmul

        return matmul(other, self)  # type: ignore[arg-type]  # matmul refuses a non-Tensor

    @property
    def T(self) -> Tensor:
        """The axes reversed."""
        return self.transpose()

    def transpose(self, *axes: Any) -> Tensor:
        """Permute the axes: `t.transpose(1, 0)` or `t.transpose((1, 0))`; none = reverse.

        It requires: the axes (negative allowed) are a permutation of range(ndim).
        """
        from eqsat.frontend.indexing import _view

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
        from eqsat.frontend.indexing import _reshape

        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        return _reshape(self, shapes.resolve_reshape(self.shape, shape))

    def round(self, decimals: int = 0) -> Tensor:
        """numpy's ndarray.round: `round(self, decimals)`."""
        from eqsat.frontend.elementwise import round

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
        from eqsat.frontend.joins import repeat

        return repeat(self, repeats, axis)

    # -------------------------------------------------------- reductions

    def sum(self, axis: Axes = None, keepdims: bool = False) -> Tensor:
        """Sum over `axis`: None (all axes), an int, or a tuple of ints."""
        from eqsat.frontend.reductions import _reduce

        return _reduce("sum", self, axis, keepdims)

    def prod(self, axis: Axes = None, keepdims: bool = False) -> Tensor:
        """Product over `axis`: None (all axes), an int, or a tuple of ints."""
        from eqsat.frontend.reductions import _reduce

        return _reduce("prod", self, axis, keepdims)

    def astype(self, dtype: Any) -> Tensor:
        """numpy's ndarray.astype: to a float dtype the same values (the kernel's compute
        dtype rounds them once, at the output); to bool `self != 0`; to an integer dtype
        toward zero, as numpy (`trunc`; integers that do not fit the new dtype wrap around, as
        numpy's do)."""
        from eqsat.frontend.derived import _derived
        from eqsat.frontend.elementwise import trunc

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
        from eqsat.frontend.reductions import _reduce

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
        from eqsat.frontend.reductions import _arg_extreme

        return _arg_extreme("argmax", self, axis, keepdims)

    def argmin(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        """The index of the first minimum along `axis` (None: of the flattened tensor), as a
        number of the tensor's dtype (`_arg_extreme`)."""
        from eqsat.frontend.reductions import _arg_extreme

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
        from eqsat.frontend.elementwise import sqrt

        return sqrt(self.var(axis, ddof, keepdims))

    def clip(self, min: Tensor | float | None = None, max: Tensor | float | None = None) -> Tensor:  # noqa: A002 - numpy's names
        """Each element limited to [min, max] (either may be None), as numpy: max wins where
        min > max, and a NaN stays NaN."""
        from eqsat.frontend.elementwise import maximum, minimum

        clipped = self if min is None else maximum(self, min)
        return clipped if max is None else minimum(clipped, max)


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


def _short_form(expr: Term) -> str:
    """The outermost constructor with its literal arguments; sub-tensors shown as `...`."""
    shown = ", ".join("..." if isinstance(a, Term) else repr(a) for a in expr.args)
    return f"{expr.op}({shown})"


def _tensor_members() -> list[str]:
    """The public methods, properties and attributes of a Tensor, sorted."""
    return sorted(n for n in (*vars(Tensor), *_ATTRIBUTES) if not n.startswith("_"))
