"""Temporary contraction: a temporary used by one row loop only shrinks to one row, inside it.

    alloc t0[M, N]:                      for i0 in 0..M parallel:
      for i0 in 0..M parallel:     ->      alloc t0[1, N]:
        t0[i0, j] = ...; ... t0[i0, r]       t0[0, j] = ...; ... t0[0, r]

After fusion, softmax's exp(x - max) lives in a temporary that each row writes and reads back in
the same iteration; keeping the whole M x N array sends it through DRAM for nothing. Contracted,
the row stays in L1 (and each thread has its own).

This is a pass over the extracted program, not an e-graph rule: it rewrites indices inside a
loop body, the substitution ARCHITECTURE §3 keeps out of the e-graph. It applies when
1. the temporary is allocated at the top of the program and touched by exactly one top-level
   statement, a loop over a named axis `a` whose extent is the temporary's first dimension, or
   over the tiles `a.outer(T)` of one;
2. every access to it holds plain `a` as its first index.
Then iteration `a` touches only row `a` (tile `a.outer` only its T rows), which the program
writes before it reads, so a fresh row (block of T rows, indexed by `a.inner(T)`) per iteration
computes the same result. `eqsat.core.loops.row_loop_of` is the test, shared with the cost model.
Inside a loop that allocates one-row temporaries (what a contraction left, indexed by 0 first),
the loop's body is contracted again as a program of its own (`_contracted_within`): multi-head
attention's per-head scores, fused by row blocks inside the loop over heads, shrink to a block.
"""

from __future__ import annotations

from eqsat.core.loops import (
    accesses,
    allocated,
    row_loop_of,
    top_allocations,
    top_statements,
    with_first_index,
    without_first_index,
)
from eqsat.core.terms import Term, index_items
from eqsat.rewrites.lowering import seq

FIRST_ROW = Term("Index.const", (0,))  # the index of a temporary contracted to one row


def contract_temporaries(body: Term) -> Term:
    """`body` with every contractible top-level temporary moved into its row loop (`body`
    itself when there is none, at any depth)."""
    program = body
    allocs, body = top_allocations(body)
    statements = top_statements(body)
    kept = []
    for name, shape in allocs:
        row_loop = row_loop_of(statements, name, shape)
        if row_loop is None:
            kept.append((name, shape))
            continue
        axis, kind, inner = row_loop.args
        assert isinstance(axis, Term) and isinstance(inner, Term)
        rows, row_index = 1, FIRST_ROW
        if axis.op == "Axis.outer":  # a block of T rows, indexed by the tile's inner loop
            rows = int(axis.args[1])  # type: ignore[arg-type]
            row_index = Term("Index.axis", (Term("Axis.inner", axis.args),))
        only = frozenset([name])
        reindexed = with_first_index(without_first_index(inner, only), only, row_index)
        block = Term("Stmt.alloc", (name, (rows, *shape[1:]), reindexed))
        statements[statements.index(row_loop)] = Term("Stmt.loop", (axis, kind, block))
    within = [_contracted_within(statement) for statement in statements]
    if len(kept) == len(allocs) and all(a is b for a, b in zip(within, statements, strict=True)):
        return program
    return allocated(kept, seq(within))


def _contracted_within(statement: Term) -> Term:
    """`statement`, or, when it is a loop whose body allocates one-row temporaries (a
    contraction's, indexed by 0 first) that one of the body's own row loops uses alone (row
    blocks fused inside a loop over heads, `eqsat.rewrites.row_blocks`), the loop with those
    temporaries contracted into that row loop in turn: the one-row temporaries lose their
    first dimension, and the body is contracted as a program of its own."""
    if statement.op != "Stmt.loop":
        return statement
    axis, kind, body = statement.args
    assert isinstance(body, Term)
    allocations, inner = top_allocations(body)
    one_row = frozenset(
        name
        for name, shape in allocations
        if len(shape) > 2
        and shape[0] == 1
        and all(index_items(ix)[0] == FIRST_ROW for ix in accesses(inner, name))
    )
    if not one_row:
        return statement
    view = allocated(
        [(name, shape[1:] if name in one_row else shape) for name, shape in allocations],
        without_first_index(inner, one_row),
    )
    contracted = contract_temporaries(view)
    return statement if contracted is view else Term("Stmt.loop", (axis, kind, contracted))
