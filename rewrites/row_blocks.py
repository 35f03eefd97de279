"""Row-block fusion: consecutive loops over blocks of the same rows become one loop.

    for i0.outer(8) parallel: scores            for i0.outer(8) parallel:
    for i0.outer(32) parallel: softmax    ->      scores; softmax; P @ V   (8 rows at a time)
    for i0.outer(8) parallel: P @ V

Attention's extracted nest computes the 1024 x 1024 scores, then their softmax, then `P @ V`,
each in a parallel loop over blocks of rows, and every pass sends the scores through the caches
and DRAM. Run one block of rows at a time, the scores of a block (8 x 1024) stay in L2:
temporary contraction (`eqsat.rewrites.contraction`, which runs next) shrinks them to the block.
Measured on attention 1024 x 64: 2.45 against 1.44 ms (docs/MEASUREMENTS.md).

The e-graph holds such fused nests in principle (split each loop by the same tile, then
fuse-siblings), but only after more rounds than the work budget allows, and only when every
loop was split by the same tile. Changing a loop's tile rewrites every piece of its axis in its
body, the substitution that ARCHITECTURE §3 keeps out of the e-graph, so this is a pass over the
extracted nest, like contraction and packing. A run of top-level statements fuses when
1. each is a loop over `a.outer(T)` for one named axis `a` (its own tile T), or over `a` itself
   (any tile: its body goes inside a loop over `a.inner(T)`), serial or parallel;
2. every buffer that one of them writes and another touches is accessed by all of them with
   plain `a` as its first index: block b of a later loop reads only rows of block b, which the
   earlier loops have written by then, and writes rows no other block reads;
3. the common tile is one of the loops' own tiles (or none, when no loop is split: they fuse
   over `a`), and a loop whose tile changes has no unrolled loop over a piece of `a` (a
   register tile keeps its rows).
The fused loop is parallel when all of them were (their blocks are then independent). The
caller passes the cost model: the fused program is kept only where it is predicted faster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from eqsat.core.loops import (
    accesses,
    allocated,
    pieces_of,
    statements_in,
    top_allocations,
    top_statements,
)
from eqsat.core.terms import Term, index_items
from eqsat.rewrites.lowering import seq

PARALLEL = Term("LoopKind.parallel", ())
SERIAL = Term("LoopKind.serial", ())


def fuse_row_blocks(body: Term, price: Callable[[Term], float]) -> Term:
    """`body` (an extracted nest) with runs of row-block loops fused (module doc): the fusion
    (run and tile) that `price` (predicted cycles of a whole body) finds cheapest, again and
    again while one is cheaper than the body so far."""
    allocations, inner = top_allocations(body)

    def whole(parts: list[Term]) -> Term:
        return allocated(allocations, seq(parts))

    best = top_statements(inner)
    best_price = price(whole(best))
    while True:  # the best single fusion, until none is predicted faster
        options = [
            [*best[:start], _fused(run[:length], tile), *best[start + length :]]
            for start in range(len(best))
            for run in [_run(best, start)]
            for length in range(2, len(run) + 1)
            for tile in _common_tiles(run[:length])
        ]
        priced = [(price(whole(option)), option) for option in options]
        cheapest = min(priced, key=lambda pair: pair[0], default=None)
        if cheapest is None or cheapest[0] >= best_price:
            break
        best_price, best = cheapest
    return whole(best)


def _row_axis(statement: Term) -> tuple[Term, int | None] | None:
    """(a, T) for a serial or parallel loop over `a.outer(T)`, (a, None) for one over `a`
    itself (a named axis), else None."""
    if statement.op != "Stmt.loop" or statement.args[1] not in (SERIAL, PARALLEL):
        return None
    axis = statement.args[0]
    assert isinstance(axis, Term)
    if axis.op == "Axis.named":
        return axis, None
    if axis.op != "Axis.outer" or axis.args[0].op != "Axis.named":  # type: ignore[union-attr]
        return None
    return axis.args[0], int(axis.args[1])  # type: ignore[return-value, arg-type]


def _run(statements: list[Term], start: int) -> list[Term]:
    """The longest run of row-block loops from `start` that may fuse (conditions 1 and 2 of
    the module doc); [] when `statements[start]` starts none."""
    first = _row_axis(statements[start])
    if first is None:
        return []
    run = [statements[start]]
    for statement in statements[start + 1 :]:
        row = _row_axis(statement)
        if row is None or row[0] != first[0] or not _rows_local([*run, statement]):
            break
        run.append(statement)
    return run


def _rows_local(run: list[Term]) -> bool:
    """Condition 2: every buffer one loop of `run` writes and another touches is accessed with
    plain `a` first by every loop of the run."""
    row_axis = _row_axis(run[0])
    assert row_axis is not None
    plain = Term("Index.axis", (row_axis[0],))
    written = {buffer for statement in run for buffer in _written(statement)}
    for buffer in written:
        users = [s for s in run if accesses(s, buffer)]
        if len(users) < 2:
            continue
        indices = [ix for s in users for ix in accesses(s, buffer)]
        if not all(index_items(ix)[0] == plain for ix in indices):  # type: ignore[arg-type]
            return False
    return True


def _written(statement: Term) -> Iterator[str]:
    """The buffers stored or accumulated into inside `statement`."""
    for s in statements_in(statement):
        if s.op in ("Stmt.store", "Stmt.accumulate"):
            yield str(s.args[0])


def _common_tiles(run: list[Term]) -> list[int | None]:
    """The tiles of `run`'s split loops that every loop may take (condition 3), in first-seen
    order; [None] when no loop of the run is split (they fuse over the axis itself)."""
    tiles = [tile for s in run if (tile := _row_axis(s)[1]) is not None]  # type: ignore[index]
    if not tiles:
        return [None]
    return [
        tile
        for tile in dict.fromkeys(tiles)
        if all(_row_axis(s)[1] in (tile, None) or not _unrolls_rows(s) for s in run)  # type: ignore[index]
    ]


def _unrolls_rows(statement: Term) -> bool:
    """True when a loop inside `statement` unrolls a piece of its row axis."""
    row_axis = _row_axis(statement)[0]  # type: ignore[index]
    return any(
        s.op == "Stmt.loop"
        and s.args[1].op == "LoopKind.unroll"
        and row_axis in pieces_of(s.args[0])  # type: ignore[union-attr, arg-type]
        for s in statements_in(statement.args[2])  # type: ignore[arg-type]
    )


def _fused(run: list[Term], tile: int | None) -> Term:
    """One loop running the bodies of `run`: over `a.outer(tile)` with each body split by
    `tile` (a loop over `a` itself gets a loop over `a.inner(tile)`), or over `a` when `tile`
    is None."""
    row_axis = _row_axis(run[0])[0]  # type: ignore[index]
    bodies = []
    for statement in run:
        own = _row_axis(statement)[1]  # type: ignore[index]
        body = statement.args[2]
        assert isinstance(body, Term)
        if tile is not None and own is None:
            body = Term("Stmt.loop", (Term("Axis.inner", (row_axis, tile)), SERIAL, body))
        elif tile is not None:
            body = _retiled(body, row_axis, own, tile)
        bodies.append(body)
    axis = row_axis if tile is None else Term("Axis.outer", (row_axis, tile))
    kind = PARALLEL if all(s.args[1] == PARALLEL for s in run) else SERIAL
    return Term("Stmt.loop", (axis, kind, seq(bodies)))


def _retiled(term: Term, row_axis: Term, old: int, new: int) -> Term:
    """`term` with `row_axis` split by `new` wherever it was split by `old`."""
    if term.op in ("Axis.outer", "Axis.inner") and term.args == (row_axis, old):
        return Term(term.op, (row_axis, new))
    args = tuple(_retiled(a, row_axis, old, new) if isinstance(a, Term) else a for a in term.args)
    return Term(term.op, args)
