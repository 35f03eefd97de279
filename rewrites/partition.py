"""Partition a whole program's loop nest into parts, each scheduled in its own e-graph.

One loop e-graph for a whole program (multi-head attention: five products, a softmax, head
splits and merges) reaches the node budget after one or two rounds, so every part gets a worse
nest than it gets alone. `parts` splits the lowered program (ARCHITECTURE §5d) into runs of
consecutive statements whose outermost loop is over one axis: a product with its
initialization, prologue and epilogue over the same rows; a row-wise group (softmax's maximum,
exponentials, sum and division); an elementwise group. A one-operation program, or single-head
attention (its products and softmax all loop over the query rows first), is one part and is
scheduled as before. `joined` puts the parts' chosen nests back together in order; row-block
fusion (`eqsat.rewrites.row_blocks`) then fuses across parts where producer and consumer share
rows.
"""

from __future__ import annotations

from collections.abc import Sequence

from eqsat.core.loops import allocated, buffers_accessed, top_allocations, top_statements
from eqsat.core.term import Term
from eqsat.rewrites.lowering import seq


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


def _outer_axis(statement: Term) -> Term | None:
    """The axis of `statement`'s loop, if it is a loop."""
    if statement.op != "Stmt.loop":
        return None
    axis = statement.args[0]
    assert isinstance(axis, Term)
    return axis
