"""Flattening: an elementwise program over whole arrays of one shape runs as one flat loop.

Every kernel buffer is dense and row-major (`LoopProgram`; the Kernel copies non-contiguous
inputs), so a program that computes each output element from the same element of its inputs,
all of one shape S, computes the same values when every buffer is read as a 1-D array of
prod(S) elements: the same memory, read and written in the same order. Lowered that way it is
one loop, which the schedule splits into a parallel and a vector loop, instead of a nest whose
inner loop may hold only a few elements (a (2012, 4) array: 2012 masked vectors of 4 lanes).
`eqsat.optimizer.optimize` optimizes the flattened program; the kernel keeps the user's shapes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from eqsat.core import shapes
from eqsat.core.term import Term

# Ops whose element depends only on the same element of their operands (numpy broadcasting of
# a rank-0 operand included).
ELEMENTWISE_OPS = frozenset({"TExpr.const", "TExpr.unary", "TExpr.binary", "TExpr.where"})


def is_flattenable(roots: Sequence[Term]) -> bool:
    """Whether the program computing `roots` may run over its buffers read as 1-D arrays.

    True when every root has one shape S of rank >= 2 and every node of the program is an
    elementwise op or constant (ELEMENTWISE_OPS), an input of shape S or (), or a broadcast of
    a rank-0 value to S. Every value is then of shape S, or rank 0 and the same for every
    element, so no op depends on where an element sits in S.

    It requires: `roots` are well-shaped tensor terms (the frontend checks), at least one."""
    shape = shapes.infer(roots[0])
    if len(shape) < 2 or any(shapes.infer(root) != shape for root in roots[1:]):
        return False
    return all(_keeps_elements(node, shape) for node in _nodes(roots))


def flatten(roots: Sequence[Term]) -> list[Term]:
    """`roots` over 1-D arrays: every input of the roots' shape S, and every broadcast to S,
    takes the shape (prod(S),); rank-0 inputs and every other node are kept.

    It requires: `is_flattenable(roots)`."""
    shape = shapes.infer(roots[0])
    flat_shape = (math.prod(shape),)
    memo: dict[Term, Term] = {}

    def flat(term: Term) -> Term:
        if term not in memo:
            args = tuple(flat(arg) if isinstance(arg, Term) else arg for arg in term.args)
            if term.op == "TExpr.input" and args[1] == shape:
                args = (args[0], flat_shape, args[2])
            elif term.op == "TExpr.broadcast":
                args = (args[0], flat_shape)
            memo[term] = Term(term.op, args)
        return memo[term]

    return [flat(root) for root in roots]


def _keeps_elements(node: Term, shape: tuple[int, ...]) -> bool:
    """Whether `node`'s element at a position of `shape` depends on its operands' elements at
    that position only (or on a rank-0 value)."""
    if node.op == "TExpr.input":
        return node.args[1] in (shape, ())
    if node.op == "TExpr.broadcast":
        operand, target = node.args
        assert isinstance(operand, Term)
        return target == shape and shapes.infer(operand) == ()
    return node.op in ELEMENTWISE_OPS


def _nodes(roots: Sequence[Term]) -> list[Term]:
    """Every distinct tensor node under `roots`."""
    seen: set[Term] = set()
    pending = list(roots)
    while pending:
        node = pending.pop()
        if node not in seen:
            seen.add(node)
            pending.extend(arg for arg in node.args if isinstance(arg, Term))
    return list(seen)
