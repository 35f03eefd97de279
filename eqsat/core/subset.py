"""A tensor program over a subset of the indices of one output axis.

When no op of a program mixes the positions of one axis of its outputs (a row softmax along
the rows, `x @ W` along x's rows, attention along the query rows, any elementwise program
along any axis), the outputs' values at a subset of that axis's indices are the same program
over the inputs taken at those indices, with every other input whole. `along` rewrites the
program that way, so that `eqsat.validation` evaluates the written program on a few seeded rows
instead of all of them.

An axis is followed down the program: through elementwise ops and broadcasting (an operand
broadcast along it is used whole: `x - x.max(axis=0, keepdims=True)` takes rows of x and the
maximum over all of them), reductions (over other axes: a result's axis is never the reduced
one), transposes, reshapes that keep it whole, slices and concatenations along other axes, and a
product's row, column or batch axis (the other operand whole unless batched). A reshape that
merges or splits it, and a slice or a concatenation along it mix positions: `along` then
answers None. An `arange` along it (a causal mask's row index) holds the kept indices.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from eqsat.core import shapes
from eqsat.core.term import Term, subterms

INDICES = "#indices"  # '#' is in no user's input name (a Python identifier)


@dataclass(frozen=True)
class Subset:
    """`roots` over `kept` indices of an axis: each input taken at those indices is a new input
    named as a key of `taken`, whose value is `taken[key]` = (the user's input name, the axis
    of that input to take the indices along); the inputs in `whole` are used as they are; an
    `arange` along the axis became the input INDICES (the kept indices, as float64), if
    `reads_indices`."""

    roots: list[Term]
    taken: dict[str, tuple[str, int]]
    whole: frozenset[str]
    reads_indices: bool


def along(roots: Sequence[Term], axis: int, kept: int) -> Subset | None:
    """`roots` over `kept` indices of their axis `axis` (whichever indices: the subset program
    depends only on their count, and reads them as INDICES where it needs their values), or
    None if an op mixes positions along it.

    It requires: `roots` are well-shaped tensor terms, at least one, all of one shape S with
    0 <= axis < len(S) and 1 <= kept <= S[axis]."""
    extent = shapes.infer(roots[0])[axis]
    taken: dict[str, tuple[str, int]] = {}
    memo: dict[tuple[Term, int], Term | None] = {}

    def sub(term: Term, at: int) -> Term | None:
        """`term` over the kept indices of its axis `at` (whose extent is `extent`)."""
        if (term, at) not in memo:
            memo[(term, at)] = _sub_node(term, at)
        return memo[(term, at)]

    def operand(term: Term, result_rank: int, at: int) -> Term | None:
        """A broadcast operand of a node of rank `result_rank`, followed along the node's axis
        `at`: whole where it is broadcast along it (extent 1 or missing)."""
        shape = shapes.infer(term)
        own = at - (result_rank - len(shape))
        if own < 0 or shape[own] != extent:
            return term
        return sub(term, own)

    def _sub_node(term: Term, at: int) -> Term | None:
        args = term.args
        shape = shapes.infer(term)
        parts: list[Term | None]
        match term.op:
            case "TExpr.input":
                name, input_shape, dtype = args
                new_name = f"{name}#{at}"  # '#' is in no user's input name (a Python identifier)
                taken[new_name] = (str(name), at)
                return Term(term.op, (new_name, _with(input_shape, at, kept), dtype))
            case "TExpr.unary":
                parts = [sub(_term(args[1]), at)]
                return _rebuilt(term, (args[0], *parts))
            case "TExpr.binary":
                parts = [operand(_term(a), len(shape), at) for a in args[1:]]
                return _rebuilt(term, (args[0], *parts))
            case "TExpr.where":
                parts = [operand(_term(a), len(shape), at) for a in args]
                return _rebuilt(term, tuple(parts))
            case "TExpr.reduce":
                operand_shape = shapes.infer(_term(args[2]))
                reduced = shapes.normalize_axis(str(args[0]), args[1], operand_shape)
                own = at if at < reduced else at + 1  # the reduced axis is not in the result
                return _rebuilt(term, (args[0], args[1], sub(_term(args[2]), own)))
            case "TExpr.matmul":
                left, right = _term(args[0]), _term(args[1])
                if at < len(shape) - 2:  # a batch axis: both operands have it
                    return _rebuilt(term, (sub(left, at), sub(right, at)))
                if at == len(shape) - 2:
                    return _rebuilt(term, (sub(left, at), right))
                return _rebuilt(term, (left, sub(right, at)))
            case "TExpr.transpose":
                perm = _ints(args[1])
                return _rebuilt(term, (sub(_term(args[0]), perm[at]), args[1]))
            case "TExpr.broadcast":
                target = _ints(args[1])
                source = operand(_term(args[0]), len(target), at)
                return _rebuilt(term, (source, _with(target, at, kept)))
            case "TExpr.reshape":
                source = _term(args[0])
                intact = _intact_axis(shapes.infer(source), shape, at)
                if intact is None:
                    return None
                return _rebuilt(term, (sub(source, intact), _with(_ints(args[1]), at, kept)))
            case "TExpr.concat":
                if at == int(args[2]):  # type: ignore[arg-type]
                    return None
                return _rebuilt(term, (sub(_term(args[0]), at), sub(_term(args[1]), at), args[2]))
            case "TExpr.slice":
                starts, steps, extents = (_ints(a) for a in args[1:])
                if (starts[at], steps[at]) != (0, 1) or shapes.infer(_term(args[0]))[at] != extent:
                    return None  # a slice along the axis
                return _rebuilt(
                    term, (sub(_term(args[0]), at), args[1], args[2], _with(extents, at, kept))
                )
        # TExpr.arange, followed along its one axis: its values are the kept indices
        return Term("TExpr.input", (INDICES, (kept,), "float64"))

    subset = [sub(root, axis) for root in roots]
    if any(root is None for root in subset):
        return None
    kept_roots = [root for root in subset if root is not None]
    names = {
        str(node.args[0])
        for node in subterms(kept_roots)
        if isinstance(node, Term) and node.op == "TExpr.input"
    }
    whole = frozenset(names - set(taken) - {INDICES})
    return Subset(kept_roots, taken, whole, INDICES in names)


def _intact_axis(source: tuple[int, ...], result: tuple[int, ...], at: int) -> int | None:
    """The axis of a reshape's `source` shape that holds the result's axis `at` unchanged (the
    same extent with as many elements before and after it), or None if the reshape merges or
    splits it."""
    before = math.prod(result[:at])
    for own, dim in enumerate(source):
        if math.prod(source[:own]) == before and dim == result[at]:
            return own
    return None


def _rebuilt(term: Term, args: tuple[object, ...]) -> Term | None:
    """`term` with `args` (None if any of them is: a mixing op below)."""
    if any(arg is None for arg in args):
        return None
    return Term(term.op, args)  # type: ignore[arg-type]


def _with(shape: object, at: int, extent: int) -> tuple[int, ...]:
    """`shape` with `extent` at position `at`."""
    dims = list(_ints(shape))
    dims[at] = extent
    return tuple(dims)


def _ints(value: object) -> tuple[int, ...]:
    assert isinstance(value, tuple)
    return tuple(int(v) for v in value)


def _term(value: object) -> Term:
    assert isinstance(value, Term)
    return value
