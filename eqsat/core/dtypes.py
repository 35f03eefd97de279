"""Value dtypes: the dtype numpy gives each array of a program, and the one floating type a
kernel computes in.

A kernel computes in float32 or float64, its *compute dtype*. Each tensor
of the frontend also has a *value dtype*: the dtype numpy gives the same expression (bool, an
integer type, float16, float32 or float64), found by asking numpy itself (`result_dtype`).
Integer and bool tensors carry the range of their values (`IntegerRange`); a kernel holds them
exactly because integers up to 2**24 in magnitude are exact in float32 and up to 2**53 in
float64. An integer result that could leave its dtype is wrapped around as numpy does, and one
that could exceed 2**53 is refused when the expression is built (`overflow`).

A program computes in float64 when one of its tensors needs it (`needs_float64`: a float64
value, or integers beyond 2**24), else in float32 (ARCHITECTURE §9 states the contract).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from eqsat.core.errors import UnsupportedError
from eqsat.core.term import Arg, Term

# the value dtypes an input may have
INPUT_DTYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
)
# the input dtype of a traced Python float (`@eqsat.jit`): it has the compute dtype, as numpy
# casts a Python float to the dtype of the array it meets
WEAK_SCALAR = "scalar"
EXACT_INTEGERS = {"float32": 2**24, "float64": 2**53}  # every integer up to this is exact

IntegerRange = tuple[int, int]  # the least and the greatest value of an integer or bool tensor


def dtype_range(dtype: str) -> IntegerRange | None:
    """The values an input of integer or bool `dtype` may hold (int64 and uint64 limited to
    2**53, which calls check: `exceeds_exact`); None for a floating dtype."""
    if dtype == "bool":
        return (0, 1)
    if np.dtype(dtype).kind not in "iu":
        return None
    info = np.iinfo(dtype)
    limit = EXACT_INTEGERS["float64"]
    return (max(int(info.min), -limit), min(int(info.max), limit))


def needs_float64(dtype: str, values: IntegerRange | None) -> bool:
    """Whether a tensor of value dtype `dtype` and integer range `values` needs a float64
    kernel: a float64 value, or an integer float32 cannot hold exactly."""
    if dtype == "float64":
        return True
    return values is not None and max(-values[0], values[1]) > EXACT_INTEGERS["float32"]


def compute_dtype(wide: bool) -> str:
    """The compute dtype of a program: float64 when some tensor of it needs it (`wide`)."""
    return "float64" if wide else "float32"


def result_dtype(what: str, function: Callable[..., Any], *operands: str | float) -> str:
    """The dtype numpy gives `function` applied to arrays of the dtypes in `operands` (a Python
    int or float stands for itself: a weak scalar, NEP 50). UnsupportedError, naming `what`,
    where numpy refuses the combination (`-` on bools, an int too large for its array's dtype)."""
    arrays = [np.ones((1, 1), op) if isinstance(op, str) else op for op in operands]
    try:
        with np.errstate(all="ignore"):  # only the dtype matters: 1 / 0.0 is fine
            result = function(*arrays)
    except (TypeError, OverflowError) as error:
        raise UnsupportedError(f"{what}: numpy refuses these operands: {error}") from None
    return np.asarray(result).dtype.name


def overflow(what: str, dtype: str, values: IntegerRange) -> str:
    """How a result of integer or bool `dtype` whose values may reach `values` is held:
    "exact" (they fit the dtype), "wrap" (numpy wraps them around: they are computed exactly,
    then wrapped, `frontend.derived._wrapped`), "clamp" (bools: True + True is True). An
    UnsupportedError naming `what` when they could exceed 2**53 (no float holds them exactly)
    or a 64-bit dtype (whose wraparound is beyond 2**53 too)."""
    limits = dtype_range(dtype)
    assert limits is not None, f"{what}: {dtype} is not an integer dtype"
    if limits[0] <= values[0] and values[1] <= limits[1]:
        return "exact"
    if dtype == "bool":
        return "clamp"
    limit = EXACT_INTEGERS["float64"]
    if np.dtype(dtype).itemsize < 8 and -limit <= values[0] and values[1] <= limit:
        return "wrap"
    reach = values[0] if values[0] < limits[0] else values[1]
    raise UnsupportedError(
        f"{what}: the {dtype} result could reach {reach}, outside [{limits[0]}, {limits[1]}]; "
        "eqsat computes integers exactly in floating point, which holds them up to 2**53 "
        "(numpy's int64 wraps around at 2**63): cast an operand first, e.g. "
        "x.astype(np.float64)"
    )


def exceeds_exact(values: np.ndarray, compute: str) -> bool:
    """Whether some element of the integer array `values` is beyond what `compute` holds
    exactly (only int64 and uint64 arrays can be: `dtype_range`; others are not read)."""
    limit = EXACT_INTEGERS[compute]
    info = np.iinfo(values.dtype)
    if max(-int(info.min), int(info.max)) <= limit:
        return False
    return bool(values.size) and (int(values.min()) < -limit or int(values.max()) > limit)


def with_compute_dtype(root: Term, compute: str) -> Term:
    """`root` with every input declared in `compute`, the one dtype a kernel computes in (the
    value dtypes stay with the kernel's boundary: `boundary_dtype`)."""
    done: dict[Term, Term] = {}

    def retyped(arg: Arg) -> Arg:
        if not isinstance(arg, Term):
            return arg
        if arg not in done:
            if arg.op == "TExpr.input":
                done[arg] = Term(arg.op, (arg.args[0], arg.args[1], compute))
            else:
                done[arg] = Term(arg.op, tuple(retyped(a) for a in arg.args))
        return done[arg]

    result = retyped(root)
    assert isinstance(result, Term)
    return result


def boundary_dtype(input_dtype: str, compute: str) -> str:
    """The dtype a caller passes for an input declared `input_dtype` in a kernel that computes
    in `compute`: its own, but a traced Python float's, which is the compute dtype."""
    return compute if input_dtype == WEAK_SCALAR else input_dtype
