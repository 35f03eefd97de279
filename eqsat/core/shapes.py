"""Shape rules of the tensor ops, one pure function per op, shared by every stage.

Shapes are tuples of ints >= 1; rank 0 is `()`. Each rule returns the result shape or raises
`ShapeError` naming the op and the offending shapes. `infer` applies the rules to a
read-back tensor term (`eqsat.core.terms.Term`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, TypeGuard

import numpy as np

from eqsat.core.errors import ShapeError
from eqsat.core.term import Term

Shape = tuple[int, ...]
ShapeOf = Callable[[object], Shape]


def _is_int(value: object) -> TypeGuard[int | np.integer[Any]]:
    """True for Python and numpy integers, but not for bools."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def validate_shape(shape: object, what: str) -> Shape:
    """`shape` as a tuple of Python ints.

    It requires: `shape` is a tuple or list of (Python or numpy) ints, each >= 1.
    """
    if isinstance(shape, tuple | list) and all(_is_int(d) and d >= 1 for d in shape):
        return tuple(int(d) for d in shape)
    raise ShapeError(f"{what}: invalid shape {shape!r}; expected a tuple of ints >= 1")


def normalize_axis(op: str, axis: object, shape: Shape) -> int:
    """`axis` of `shape` as a non-negative int; negative axes count from the end.

    It requires: `axis` is an int (TypeError otherwise) with -rank <= axis < rank.
    """
    if not _is_int(axis):
        raise TypeError(f"{op}: axis must be an int, got {axis!r}")
    rank = len(shape)
    index = int(axis)
    if not -rank <= index < rank:
        raise ShapeError(f"{op}: axis {index} is out of range for shape {shape}")
    return index % rank


def broadcast(op: str, *shapes: Shape) -> Shape:
    """numpy broadcasting of `shapes`: align on the right; each dim equal or 1."""
    rank = max((len(s) for s in shapes), default=0)
    result = []
    for position in range(-rank, 0):
        dims = {s[position] for s in shapes if len(s) >= -position} - {1}
        if len(dims) > 1:
            shown = ", ".join(str(s) for s in shapes[:-1]) + f" and {shapes[-1]}"
            raise ShapeError(f"{op}: shapes {shown} cannot be broadcast")
        result.append(dims.pop() if dims else 1)
    return tuple(result)


def broadcast_to(shape: Shape, target: Shape) -> Shape:
    """numpy.broadcast_to: `target`, if `shape` broadcasts to it without changing `target`."""
    if len(shape) > len(target) or any(
        d not in (1, t) for d, t in zip(shape[::-1], target[::-1], strict=False)
    ):
        raise ShapeError(f"broadcast: shape {shape} cannot be broadcast to {target}")
    return target


def matmul(a: Shape, b: Shape) -> Shape:
    """(..., m, k) @ (..., k, n) -> (..., m, n); the batch dims broadcast numpy-style.

    It requires: both ranks >= 2 (the frontend reshapes 1-D operands).
    """
    if len(a) < 2 or len(b) < 2:
        raise ShapeError(f"matmul: shapes {a} and {b} need rank >= 2")
    if a[-1] != b[-2]:
        raise ShapeError(f"matmul: shapes {a} and {b} are incompatible ({a[-1]} != {b[-2]})")
    try:
        batch = broadcast("matmul", a[:-2], b[:-2])
    except ShapeError:
        raise ShapeError(
            f"matmul: shapes {a} and {b} have batch dimensions {a[:-2]} and {b[:-2]}"
            " that cannot be broadcast"
        ) from None
    return batch + (a[-2], b[-1])


def reduce(op: str, shape: Shape, axis: int) -> Shape:
    """`shape` without `axis` (negative counts from the end).

    It requires: -rank <= axis < rank.
    """
    index = normalize_axis(op, axis, shape)
    return shape[:index] + shape[index + 1 :]


def transpose(shape: Shape, perm: Sequence[int]) -> Shape:
    """`shape` permuted: result[i] = shape[perm[i]].

    It requires: `perm` is a permutation of range(rank) (no negative axes).
    """
    if sorted(perm) != list(range(len(shape))):
        raise ShapeError(
            f"transpose: axes {tuple(perm)} are not a permutation of range({len(shape)})"
            f" for shape {shape}"
        )
    return tuple(shape[i] for i in perm)


def resolve_reshape(shape: Shape, new_shape: Sequence[object]) -> Shape:
    """`new_shape` with its one -1 (if any) replaced by the dim that keeps the element count.

    It requires: every entry is an int >= 1, except at most one -1.
    """
    shown = tuple(new_shape)
    dims = []
    for dim in shown:
        if not (_is_int(dim) and (dim == -1 or dim >= 1)):
            raise ShapeError(f"reshape: invalid shape {shown!r}; expected ints >= 1 and one -1")
        dims.append(int(dim))
    if dims.count(-1) > 1:
        raise ShapeError(f"reshape: shape {shown} has more than one -1")
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        size = math.prod(shape)
        if size % known:
            raise ShapeError(f"reshape: cannot reshape {shape} into {shown}")
        dims[dims.index(-1)] = size // known
    return tuple(dims)


def reshape(shape: Shape, new_shape: Shape) -> Shape:
    """`new_shape`, if it holds as many elements as `shape` (row-major reshape).

    It requires: `new_shape` has no -1 (see `resolve_reshape`).
    """
    new_shape = validate_shape(new_shape, "reshape")
    if math.prod(shape) != math.prod(new_shape):
        raise ShapeError(
            f"reshape: cannot reshape {shape} into {new_shape}"
            f" ({math.prod(shape)} != {math.prod(new_shape)} elements)"
        )
    return new_shape


@functools.lru_cache(maxsize=1 << 16)
def infer(term: Term) -> Shape:
    """The shape of a tensor term (a read-back `TExpr`); each shared sub-term is visited once.
    Memoized across calls: the compile's check and the subset programs ask it of every
    sub-term of a program, which walked each sub-term's whole tree again.

    It requires: `term` is built from the `TExpr` constructors (ValueError otherwise), with
    compatible shapes and equal batch dims for `TExpr.matmul` (ShapeError otherwise).
    """
    if not isinstance(term, Term):
        raise ValueError(f"not a tensor term: {term!r}")
    return infer_node(term, infer)  # type: ignore[arg-type]


def infer_node(term: Term, shape_of: ShapeOf) -> Shape:
    """The shape of tensor term `term` from its tensor children's shapes, `shape_of(child)`
    (`infer`'s requirements)."""
    args = term.args
    match term.op:
        case "TExpr.input":
            return validate_shape(args[1], f"input {args[0]!r}")
        case "TExpr.const":
            return ()
        case "TExpr.unary":
            return shape_of(args[1])
        case "TExpr.binary":
            return broadcast(str(args[0]), shape_of(args[1]), shape_of(args[2]))
        case "TExpr.where":
            return broadcast("where", *(shape_of(a) for a in args))
        case "TExpr.reduce":
            return reduce(str(args[0]), shape_of(args[2]), _int(args[1]))
        case "TExpr.matmul":
            a, b = shape_of(args[0]), shape_of(args[1])
            if a[:-2] != b[:-2]:
                raise ShapeError(f"TExpr.matmul: shapes {a} and {b} have unequal batch dims")
            return matmul(a, b)
        case "TExpr.transpose":
            return transpose(shape_of(args[0]), _ints(args[1]))
        case "TExpr.broadcast":
            return broadcast_to(shape_of(args[0]), _ints(args[1]))
        case "TExpr.reshape":
            return reshape(shape_of(args[0]), _ints(args[1]))
        case "TExpr.arange":
            return validate_shape((args[0],), "arange")
        case "TExpr.concat":
            return concatenate(shape_of(args[0]), shape_of(args[1]), _int(args[2]))
        case "TExpr.slice":
            return strided_view(shape_of(args[0]), *(_ints(a) for a in args[1:]))
    raise ValueError(f"not a tensor term: {term.op}")


def concatenate(a: Shape, b: Shape, axis: int) -> Shape:
    """The shape of `TExpr.concat`: `a` with `b`'s extent added along `axis`, if the shapes
    agree elsewhere."""
    if len(a) != len(b) or not 0 <= axis < len(a):
        raise ShapeError(f"concatenate: shapes {a} and {b} along axis {axis}: ranks differ")
    if a[:axis] + a[axis + 1 :] != b[:axis] + b[axis + 1 :]:
        raise ShapeError(
            f"concatenate: shapes {a} and {b} differ in another dimension than axis {axis}"
        )
    return (*a[:axis], a[axis] + b[axis], *a[axis + 1 :])


def strided_view(
    shape: Shape, starts: Sequence[int], steps: Sequence[int], extents: Sequence[int]
) -> Shape:
    """The shape of `TExpr.slice`: `extents`, if every element it reads is inside `shape`."""
    extents = validate_shape(extents, "slice")
    same_rank = len({len(shape), len(starts), len(steps), len(extents)}) == 1
    if not same_rank or not all(
        step != 0 and 0 <= start < n and 0 <= start + step * (extent - 1) < n
        for n, start, step, extent in zip(shape, starts, steps, extents, strict=True)
    ):
        raise ShapeError(
            f"slice: starts {tuple(starts)}, steps {tuple(steps)} and extents {extents} do not "
            f"select elements of a tensor of shape {shape}"
        )
    return extents


def _int(arg: object) -> int:
    if not _is_int(arg):
        raise ValueError(f"expected an int in a tensor term, got {arg!r}")
    return int(arg)


def _ints(arg: object) -> Shape:
    if not isinstance(arg, tuple):
        raise ValueError(f"expected a tuple of ints in a tensor term, got {arg!r}")
    return tuple(_int(a) for a in arg)
