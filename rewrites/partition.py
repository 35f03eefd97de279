"""Partition a whole program's loop nest into parts, each scheduled in its own e-graph.

One loop e-graph for a whole program (multi-head attention: five products, a softmax, head
splits and merges) reaches the node budget after one or two rounds, so every part gets a worse
nest than it gets alone. `parts` splits the lowered program (ARCHITECTURE §5d) into runs of
consecutive statements whose outermost loop is over one axis, and a run of several products
into one part per product: a product with its initialization, prologue and epilogue; a
row-wise group (softmax's maximum, exponentials, sum and division); an elementwise group. A
one-operation program, or single-head attention (its products and softmax all loop over the
query rows first), is one part and is scheduled as before. `joined` puts the parts' chosen
nests back together in order; row-block fusion (`eqsat.rewrites.row_blocks`) then fuses across
parts where producer and consumer share rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from eqsat.core.loops import (
    ACCESS_OPS,
    allocated,
    buffers_accessed,
    top_allocations,
    top_statements,
)
from eqsat.core.term import Arg, Term
from eqsat.rewrites.lowering import CONTRACTION, seq

# The terms whose first argument is a buffer's name: its accesses and its allocation.
BUFFER_OPS = frozenset({*ACCESS_OPS, "Stmt.alloc"})
# A run of this many products or more is cut into one part per product. A transformer block's
# run of six products reached the node budget in one e-graph and ran 1.33x faster cut, a SwiGLU
# MLP's three 1.15x; the two products of single-head attention, cut, ran 0.90-1.06x as fast
# (4096 x 128 lost the row-block fusion of its scores), so they stay one part
# (docs/MEASUREMENTS.md).
MIN_PRODUCTS_CUT = 3


def parts(body: Term) -> list[Term]:
    """The parts of a lowered program's `body`, in order, each under the allocations of the
    temporaries it touches (a program of its own for `eqsat.rewrites.schedule.schedule`).

    It requires: `body` is `lower`'s form: allocations around a sequence of statements."""
    allocations, statements_term = top_allocations(body)
    runs: list[list[Term]] = []
    for statement in top_statements(statements_term):
        if runs and _outer_axis(runs[-1][-1]) == _outer_axis(statement) is not None:
            runs[-1].append(statement)
        else:
            runs.append([statement])
    runs = [part for run in runs for part in _one_product_each(run)]
    result = []
    for run in runs:
        touched = set().union(*(buffers_accessed(statement) for statement in run))
        result.append(allocated([a for a in allocations if a[0] in touched], seq(run)))
    return result


def joined(body: Term, scheduled: Sequence[Term]) -> Term:
    """The program `body` (as `parts` took it) running the `scheduled` nests of its parts in
    order: each one's top allocations lifted out, the rest under `body`'s allocations.

    It requires: `scheduled[i]` computes what `parts(body)[i]` does."""
    allocations, _ = top_allocations(body)
    statements = [s for part in scheduled for s in top_statements(top_allocations(part)[1])]
    return allocated(allocations, seq(statements))


def with_canonical_buffers(part: Term) -> tuple[Term, dict[str, str]]:
    """`part` with its buffers renamed in the order a depth-first walk meets them, each keeping
    the letters of its name and numbered among the buffers of those letters (`in0`, `t0`, `out0`,
    ...: the cost model tells the caller's arrays from temporaries by them), and the map from the
    new names back to the old. Parts that differ only in the names of what they read and write (a
    model's stacked layers) become one term, scheduled once."""
    names: dict[str, str] = {}
    counts: dict[str, int] = {}

    def visit(arg: Arg) -> None:
        if isinstance(arg, tuple):
            for item in arg:
                visit(item)
        elif isinstance(arg, Term):
            if arg.op in BUFFER_OPS and arg.args[0] not in names:
                buffer = str(arg.args[0])
                letters = buffer.rstrip("0123456789")
                names[buffer] = f"{letters}{counts.get(letters, 0)}"
                counts[letters] = counts.get(letters, 0) + 1
            for item in arg.args:
                visit(item)

    visit(part)
    return with_buffers_renamed(part, names), {new: old for old, new in names.items()}


def with_buffers_renamed(term: Term, names: Mapping[str, str]) -> Term:
    """`term` with each buffer that `names` maps renamed to its image."""
    done: dict[int, Arg] = {}  # by id: a subterm met again (index lists) is renamed once

    def renamed(arg: Arg) -> Arg:
        if isinstance(arg, tuple):
            return tuple(map(renamed, arg))
        if not isinstance(arg, Term):
            return arg
        known = done.get(id(arg))
        if known is None:
            args = tuple(map(renamed, arg.args))
            if arg.op in BUFFER_OPS:
                args = (names.get(str(args[0]), args[0]), *args[1:])
            known = done[id(arg)] = Term(arg.op, args)
        return known

    result = renamed(term)
    assert isinstance(result, Term)
    return result


def _one_product_each(run: list[Term]) -> list[list[Term]]:
    """`run` cut before each of its products but the first (before the product's
    initialization when that precedes it), so that each part holds one product with its
    prologue and epilogue; a run of fewer than MIN_PRODUCTS_CUT products stays whole."""
    starts = []
    for position, statement in enumerate(run):
        if not _is_product(statement):
            continue
        before = run[position - 1] if position else None
        initializes = before is not None and _initializes(before, statement)
        starts.append(position - 1 if initializes else position)
    if len(starts) < MIN_PRODUCTS_CUT:
        return [run]
    cuts = [0, *starts[1:], len(run)]
    return [run[a:b] for a, b in itertools.pairwise(cuts) if a < b]


def _is_product(statement: Term) -> bool:
    """Whether `statement` accumulates over a matmul's contraction axis somewhere inside."""
    if statement.op == "Stmt.loop":
        axis = statement.args[0]
        if axis.op == "Axis.named" and axis.args[0] == CONTRACTION:  # type: ignore[union-attr]
            return True
    return any(isinstance(a, Term) and _is_product(a) for a in statement.args)


def _initializes(statement: Term, product: Term) -> bool:
    """Whether `statement` only stores into a buffer that `product` accumulates into."""
    return buffers_accessed(statement) <= buffers_accessed(product) and not _is_product(statement)


def _outer_axis(statement: Term) -> Term | None:
    """The axis of `statement`'s loop, if it is a loop."""
    if statement.op != "Stmt.loop":
        return None
    axis = statement.args[0]
    assert isinstance(axis, Term)
    return axis
