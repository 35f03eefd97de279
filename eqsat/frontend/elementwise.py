"""numpy's elementwise functions on tensors (unary math, arithmetic, comparisons, where,
integer division, logical functions, tril / triu, arange) and their operands: scalars as
weak constants, numpy arrays of a recognized pattern as the tensors computing them."""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, SupportsFloat, TypeGuard

import numpy as np

from eqsat.core import array_constants, dtypes, interp, shapes
from eqsat.core.errors import ArgumentError, ShapeError, UnsupportedError
from eqsat.core.shapes import Shape
from eqsat.core.term import COMPARE_OPS, Term, texpr
from eqsat.frontend.derived import _derived, _modulo
from eqsat.frontend.indexing import _is_index, _reshape
from eqsat.frontend.tensor import Tensor, _refuse_array, _require

_SCALAR_TYPES = (int, float, np.integer, np.floating)


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


def clip(x: Tensor, a_min: Tensor | float | None, a_max: Tensor | float | None) -> Tensor:
    """numpy.clip: each element limited to [a_min, a_max] (`Tensor.clip`)."""
    return _require(x, "clip").clip(a_min, a_max)


def _power_of(base: Tensor, exponent: float) -> Tensor:
    """numpy.power(base, exponent) for a Tensor base and a constant exponent (`Tensor.__pow__`)."""
    return _require(base, "pow") ** exponent
