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
extracted nest, like contraction and packing. A run of top-level statements fuses over blocks of
T rows of one named axis `a` when
1. each is a loop over `a.outer(T')` (its own tile T'), or over `a` itself, serial, parallel or
   parallel-sum (a row-block loop); or a *row-local* statement: one that walks `a` (in any
   loop of it, e.g. a matmul whose outermost loop runs over column blocks and whose row blocks
   run inside) and accesses every buffer it writes, other than its own temporaries, with plain
   `a` first;
2. every buffer that one of them writes and another touches is accessed by all of them with
   plain `a` as its first index: block b of a later loop reads only rows of block b, which the
   earlier loops have written by then, and writes rows no other block reads;
3. each statement can run one block of T rows: a loop over `a` runs its body in a loop over
   `a.inner(T)`; a loop over `a.outer(T)` runs its body; a loop over `a.outer(T')` has its
   body's pieces of `a` split by T instead of T', unless that changes the trips of a loop that
   unrolls a piece of `a` (a register tile keeps its rows: `a.inner(T').inner(8)` becomes
   `a.inner(T).inner(8)` where 8 divides T; attention 2048 x 64's scores, two blocks of 1024
   rows, then join its softmax in blocks of 64: 16.9 -> 6.5 ms); then, and for a row-local
   statement, the whole statement runs inside the block with `a` replaced by `a.inner(T)` in
   its loops (each of its own splits of `a` dividing T; its parallel loops run serially in
   the parallel block loop).
T is one of the run's own tiles, or a power of two from 8 below the extent (blocks that a
row-local statement, or a loop of another tile, runs in), whose block of each temporary of the
run fits the part of L2 a footprint may fill (`block_elements`; the smallest tile when none
does). Within that bound the cost model sizes the blocks, e.g. to keep a block of attention's
scores in L2 while the keys and values stream once per block. (The bound is a rule, not the
model's price: the model counts the bytes fetched, not the dirty lines written back, and
predicted blocks of 128 to 1024 rows of attention 4096 x 128 as fast as blocks of 64, which
measured 1.5-1.8x faster; docs/MEASUREMENTS.md.) With no split loop and no row-local statement,
the loops may also fuse over `a` itself. The fused loop is parallel when every loop was
parallel or row-local (their blocks are then independent), a parallel sum when every loop was
one of those or a parallel sum (condition 2 keeps the buffers a parallel sum's blocks share to
its own statement). The caller passes the cost model: the fused program is kept only where it
is predicted faster.

Two freedoms widen the runs. A statement whose loop sums over rows of the same extent under
another name (`x.T @ r` sums over x's rows as `k`; the pass computing `r` walks them as `i0`)
joins with that axis renamed `a` (`_renamed`: a bound variable renamed, so it computes the
same). A statement that cannot join but commutes with the run so far (neither writes what the
other touches: the zeroing of `x.T @ r`'s output) is skipped, and runs before the fused loop.

The statements inside a top-level loop over a named axis `h` fuse the same way, one iteration
at a time (`_fused_within`): multi-head attention's loop over heads holds each head's scores,
softmax and `P @ V`. Within one iteration, a buffer that the body always indexes by plain `h`
first is a buffer of its other dimensions; the body is fused as a program over those, and `h`
put back. This runs only where one iteration's temporaries spill the cache the caller names
(one core's share of L3): there, a head's scores went to DRAM and back, and fused, seq 2048 ran
1.24-1.88x faster; where they fit, the fused blocks ran 0.92-0.99x as fast (docs/MEASUREMENTS.md).
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping

from eqsat.core.loops import (
    accesses,
    allocated,
    buffers_accessed,
    depends_on,
    pieces_of,
    statements_in,
    top_allocations,
    top_statements,
    with_first_index,
    without_first_index,
)
from eqsat.core.terms import Term, index_items
from eqsat.rewrites.lowering import seq

PARALLEL = Term("LoopKind.parallel", ())
PARALLEL_SUM = Term("LoopKind.parallel_sum", ())
SERIAL = Term("LoopKind.serial", ())
ROW_BLOCK_KINDS = (SERIAL, PARALLEL, PARALLEL_SUM)
# The smallest block of rows tried beyond the loops' own tiles (a register tile's rows).
MIN_BLOCK = 8
# A fusion whose statements share no temporary (a product with its output's zeroing) saves no
# temporary's trips through the caches; it is kept only when predicted this factor faster: its
# smaller gains are within the model's error, and it moves the row blocks outside loops whose
# panels packing would share (1024^3 on one thread: fused, priced 0.8% under before packing,
# measured 16% slower; docs/MEASUREMENTS.md).
UNSHARED_HURDLE = 1.02
ROW_AXES_CACHED = 1 << 14  # statements whose row axes are remembered (`_row_axes`)
# A program of more top-level statements than this prices each fusion by the change it makes
# to a window: the run's statements and WINDOW_NEIGHBORS on each side (the rest is the same
# before and after, and a program this long does not fit a cache level, where the model adds
# the costs of consecutive statements). Priced whole, each option re-priced every statement
# before its run: two stacked transformer blocks' fusion took 4.8 s, three 14 s. Every bench
# program has at most 12 (docs/MEASUREMENTS.md).
EXACT_PRICING_UP_TO = 16
WINDOW_NEIGHBORS = 2


def fuse_row_blocks(
    body: Term,
    price: Callable[[Term], float],
    block_elements: float = math.inf,
    iteration_elements: float = 0.0,
) -> Term:
    """`body` (an extracted nest) with runs of row-block loops fused (module doc): the fusion
    (run and tile) that `price` (predicted cycles of a whole body) finds cheapest (in a body of
    more than EXACT_PRICING_UP_TO statements, by the change over the run's window), again and
    again while one is cheaper than the body so far (by `UNSHARED_HURDLE` where the run shares
    no temporary); then the same inside each top-level loop over a named axis whose iterations
    each hold more than `iteration_elements` elements of temporaries (`_fused_within`). A block
    of a tile beyond the loops' own holds at most `block_elements` elements of each temporary
    of the run (the cache a block's rows should stay in)."""
    allocations, inner = top_allocations(body)
    shapes = dict(allocations)

    def whole(parts: list[Term]) -> Term:
        return allocated(allocations, seq(parts))

    def priced(parts: list[Term]) -> float:
        """The price of `parts` under the allocations of the temporaries they touch (those of
        a window of the program: the others' first touches are the same with and without a
        fusion in it)."""
        touched = set().union(*map(buffers_accessed, parts))
        return price(allocated([a for a in allocations if a[0] in touched], seq(parts)))

    # Each round offers again the fusions of the last one that it did not take: built once, a
    # fusion is the same term in every round, which the cost model's memo tables then find by
    # identity instead of comparing a rebuilt copy node by node.
    fused_loop = functools.cache(_fused)
    statements = _fused_runs(top_statements(inner), shapes, priced, block_elements, fused_loop)
    for position, statement in enumerate(statements):

        def in_place(loop: Term, position: int = position) -> float:
            return price(whole([*statements[:position], loop, *statements[position + 1 :]]))

        statements[position] = _fused_within(
            statement, shapes, in_place, block_elements, iteration_elements, fused_loop
        )
    return whole(statements)


def _fused_runs(
    statements: list[Term],
    shapes: Mapping[str, tuple[int, ...]],
    price: Callable[[list[Term]], float],
    block_elements: float,
    fused_loop: Callable[[tuple[Term, ...], Term, int | None, bool], Term | None],
    inside_parallel: bool = False,
) -> list[Term]:
    """`statements` (with temporaries of `shapes`) after the cheapest fusion under `price`,
    again and again while one is predicted faster (`fuse_row_blocks`); the list itself when
    none is. `inside_parallel`: they run inside a parallel loop, so fused loops are serial."""
    best, best_price = statements, price(statements)
    while True:  # the best single fusion, until none is predicted faster
        windowed = len(best) > EXACT_PRICING_UP_TO
        priced = []
        for joined, fused in _fusions(best, shapes, block_elements, fused_loop, inside_parallel):
            option = _with_fused(best, joined, fused)
            if windowed:  # the option's price: the change over its window
                low = joined[0][0] - WINDOW_NEIGHBORS
                high = joined[-1][0] + 1 + WINDOW_NEIGHBORS
                after = option[max(0, low) : high - len(joined) + 1]
                predicted = best_price + price(after) - price(best[max(0, low) : high])
            else:
                predicted = price(option)
            hurdle = 1 if _shares_temporary(fused, shapes) else UNSHARED_HURDLE
            priced.append((predicted * hurdle, option))
        cheapest = min(priced, key=lambda pair: pair[0], default=None)
        if cheapest is None or cheapest[0] >= best_price:
            return best
        best = cheapest[1]
        best_price = price(best) if windowed else cheapest[0]


def _fusions(
    statements: list[Term],
    shapes: Mapping[str, tuple[int, ...]],
    block_elements: float,
    fused_loop: Callable[[tuple[Term, ...], Term, int | None, bool], Term | None],
    inside_parallel: bool,
) -> Iterator[tuple[list[tuple[int, Term]], Term]]:
    """Each fusion `_fused_runs` may take in `statements`: the run it joins (positions and
    statements) and the fused loop, for every run from every start, every length and tile."""
    for start in range(len(statements)):
        for row_axis, run in _runs(statements, start):
            for length in range(2, len(run) + 1):
                joined = run[:length]
                for tile in _common_tiles(joined, row_axis, statements, shapes, block_elements):
                    members = tuple(s for _, s in joined)
                    fused = fused_loop(members, row_axis, tile, inside_parallel)
                    if fused is not None:
                        yield joined, fused


def _fused_within(
    loop: Term,
    shapes: Mapping[str, tuple[int, ...]],
    price: Callable[[Term], float],
    block_elements: float,
    iteration_elements: float,
    fused_loop: Callable[[tuple[Term, ...], Term, int | None, bool], Term | None],
) -> Term:
    """`loop`, a loop over a named axis `h` (multi-head attention's loop over its heads), with
    the statements of its body fused by row blocks as one iteration runs them; `price` gives
    the predicted cycles of the program with a loop in `loop`'s place. Within one iteration, a
    buffer that every access in the body indexes by plain `h` first is a buffer of the other
    dimensions (`_major`): the body is fused as a program over those (`without_first_index`), and
    `h` put back first (`with_first_index`). Anything else, or a loop whose iterations hold at
    most `iteration_elements` elements of the temporaries of `shapes`, is `loop` itself."""
    row = _row_axis(loop)
    if row is None or row[1] is not None:
        return loop
    axis, kind, body = loop.args
    assert isinstance(axis, Term) and isinstance(kind, Term) and isinstance(body, Term)
    allocations, inner = top_allocations(body)
    statements = top_statements(inner)
    major = _major(inner, axis)
    held = sum(math.prod(shape[1:]) for name, shape in shapes.items() if name in major)
    if len(statements) < 2 or held <= iteration_elements:
        return loop

    def rebuilt(view: list[Term]) -> Term:
        parts = [
            with_first_index(statement, major, Term("Index.axis", (axis,))) for statement in view
        ]
        return Term("Stmt.loop", (axis, kind, allocated(allocations, seq(parts))))

    view = [without_first_index(statement, major) for statement in statements]
    view_shapes = {name: shape[1:] if name in major else shape for name, shape in shapes.items()}
    fused = _fused_runs(
        view,
        view_shapes,
        lambda parts: price(rebuilt(parts)),
        block_elements,
        fused_loop,
        inside_parallel=kind != SERIAL,
    )
    return loop if fused is view else rebuilt(fused)


def _major(statement: Term, axis: Term) -> frozenset[str]:
    """The buffers that every access inside `statement` indexes by plain `axis` first."""
    plain = Term("Index.axis", (axis,))
    return frozenset(
        buffer
        for buffer in buffers_accessed(statement)
        if all(index_items(ix)[:1] == [plain] for ix in accesses(statement, buffer))
    )


def _shares_temporary(fused: Term, temporaries: Mapping[str, tuple[int, ...]]) -> bool:
    """Whether two statements of the `fused` loop's block touch one of the `temporaries`."""
    statements = top_statements(fused.args[2])  # type: ignore[arg-type]
    touching = Counter(buffer for s in statements for buffer in buffers_accessed(s))
    return any(count > 1 and buffer in temporaries for buffer, count in touching.items())


def _with_fused(statements: list[Term], run: list[tuple[int, Term]], fused: Term) -> list[Term]:
    """`statements` with the `run` (positions and statements) replaced by `fused`, where the
    run began; the statements between its members that it skipped run before it."""
    positions = [position for position, _ in run]
    first, last = positions[0], positions[-1]
    skipped = [statements[p] for p in range(first, last + 1) if p not in positions]
    return [*statements[:first], *skipped, fused, *statements[last + 1 :]]


def _row_axis(statement: Term) -> tuple[Term, int | None] | None:
    """(a, T) for a serial, parallel or parallel-sum loop over `a.outer(T)`, (a, None) for one
    over `a` itself (a named axis), else None."""
    if statement.op != "Stmt.loop" or statement.args[1] not in ROW_BLOCK_KINDS:
        return None
    axis = statement.args[0]
    assert isinstance(axis, Term)
    if axis.op == "Axis.named":
        return axis, None
    if axis.op != "Axis.outer" or axis.args[0].op != "Axis.named":  # type: ignore[union-attr]
        return None
    return axis.args[0], int(axis.args[1])  # type: ignore[return-value, arg-type]


@functools.lru_cache(maxsize=ROW_AXES_CACHED)
def _row_axes(statement: Term) -> tuple[Term, ...]:
    """The named axes over whose blocks `statement` may run (condition 1): its own, for a
    row-block loop, and every axis of which it is row-local. (Asked of every statement in every
    round of `_fused_runs`: memoized.)"""
    row = _row_axis(statement)
    walked = dict.fromkeys(
        axis
        for s in statements_in(statement)
        if s.op == "Stmt.loop"
        for axis in pieces_of(s.args[0])  # type: ignore[arg-type]
        if axis.op == "Axis.named"
    )
    local = [axis for axis in walked if _row_local(statement, axis)]
    return tuple(dict.fromkeys([*([row[0]] if row is not None else []), *local]))


def _own_tile(statement: Term, row_axis: Term) -> tuple[bool, int | None]:
    """(True, T) when `statement` is a row-block loop over `row_axis.outer(T)`, (True, None)
    over `row_axis` itself, else (False, None): a row-local statement."""
    row = _row_axis(statement)
    if row is None or row[0] != row_axis:
        return False, None
    return True, row[1]


def _row_local(statement: Term, row_axis: Term) -> bool:
    """Every buffer `statement` writes, other than the temporaries it allocates, is accessed
    in it with plain `row_axis` first: its iterations for different rows touch different
    elements, so it may run a block of rows at a time."""
    own = {str(s.args[0]) for s in statements_in(statement) if s.op == "Stmt.alloc"}
    return all(
        _first_is(ix, row_axis)
        for buffer in set(_written(statement)) - own
        for ix in accesses(statement, buffer)
    )


def _runs(statements: list[Term], start: int) -> Iterator[tuple[Term, list[tuple[int, Term]]]]:
    """(a, run) for each axis `a` over whose blocks `statements[start]` may run: the longest
    run of statements from `start` that may fuse over blocks of `a` (conditions 1 and 2), as
    (position, statement) pairs, each statement maybe with another axis renamed `a`
    (`_on_rows`). A statement that cannot join the run but commutes with it is skipped: it
    will run before the fused loop."""
    for row_axis in _row_axes(statements[start]):
        run = [(start, statements[start])]
        for position in range(start + 1, len(statements)):
            statement = statements[position]
            joining = _on_rows(statement, row_axis, [s for _, s in run])
            if joining is not None:
                run.append((position, joining))
            elif not all(_commute(statement, s) for _, s in run):
                break
        yield row_axis, run


def _on_rows(statement: Term, row_axis: Term, run: list[Term]) -> Term | None:
    """`statement` as it may join `run` over blocks of `row_axis` (conditions 1 and 2):
    itself, or with one of its row axes of the same extent that it only sums over renamed
    `row_axis` (`_renamed`: `x.T @ r` sums over the rows of x through an axis k that the nest
    computing r calls i0); None when neither may. (Lowering names an output dimension by its
    position, so passes writing the same rows already share its name; an axis summed over has a
    name of its own.)"""
    candidates = [statement] + [
        renamed
        for axis in _row_axes(statement)
        if axis != row_axis and axis.args[1] == row_axis.args[1]
        if not any(depends_on(target, axis) for target in _targets(statement))
        if (renamed := _renamed(statement, axis, row_axis)) is not None
    ]
    for candidate in candidates:
        if row_axis in _row_axes(candidate) and _rows_local([*run, candidate], row_axis):
            return candidate
    return None


def _renamed(statement: Term, old: Term, new: Term) -> Term | None:
    """`statement` with named axis `old` renamed `new`, and every other axis of `new`'s name
    given `old`'s (a loop's variable is named after its axis); None when two of its named axes
    would then be one, or share a name. Every axis of a top-level statement is bound by a loop
    in it, so this renames bound variables only: the statement computes the same."""
    new_name, old_name = new.args[0], old.args[0]

    def visit(term: Term) -> Term:
        if term.op == "Axis.named":
            if term == old:
                return new
            return (
                Term("Axis.named", (old_name, term.args[1])) if term.args[0] == new_name else term
            )
        return Term(term.op, tuple(visit(a) if isinstance(a, Term) else a for a in term.args))

    renamed = visit(statement)
    before, after = _named_axes(statement), _named_axes(renamed)
    return renamed if len({a.args[0] for a in after}) == len(after) == len(before) else None


def _named_axes(statement: Term) -> set[Term]:
    """The named axes that the loops of `statement` walk."""
    return {
        axis
        for s in statements_in(statement)
        if s.op == "Stmt.loop"
        for axis in pieces_of(s.args[0])  # type: ignore[arg-type]
        if axis.op == "Axis.named"
    }


def _commute(first: Term, second: Term) -> bool:
    """True when neither statement writes a buffer the other touches: they may run in either
    order."""
    first_touched, second_touched = buffers_accessed(first), buffers_accessed(second)
    return not (set(_written(first)) & second_touched or set(_written(second)) & first_touched)


def _rows_local(run: list[Term], row_axis: Term) -> bool:
    """Condition 2: every buffer one loop of `run` writes and another touches is accessed with
    plain `row_axis` first by every loop of the run."""
    written = {buffer for statement in run for buffer in _written(statement)}
    for buffer in written:
        users = [s for s in run if accesses(s, buffer)]
        if len(users) < 2:
            continue
        indices = [ix for s in users for ix in accesses(s, buffer)]
        if not all(_first_is(ix, row_axis) for ix in indices):
            return False
    return True


def _first_is(index_list: Term, row_axis: Term) -> bool:
    """True when the first index of `index_list` is plain `row_axis` (a rank-0 buffer's list
    has none)."""
    items = index_items(index_list)
    return bool(items) and items[0] == Term("Index.axis", (row_axis,))


def _targets(statement: Term) -> Iterator[Term]:
    """The index lists through which `statement` stores or accumulates."""
    for s in statements_in(statement):
        if s.op in ("Stmt.store", "Stmt.accumulate"):
            yield s.args[1]  # type: ignore[misc]


def _written(statement: Term) -> Iterator[str]:
    """The buffers stored or accumulated into inside `statement`."""
    for s in statements_in(statement):
        if s.op in ("Stmt.store", "Stmt.accumulate"):
            yield str(s.args[0])


def _common_tiles(
    positioned: list[tuple[int, Term]],
    row_axis: Term,
    statements: list[Term],
    shapes: Mapping[str, tuple[int, ...]],
    block_elements: float,
) -> list[int | None]:
    """The tiles T to try for the run `positioned` (statements at positions of `statements`,
    whose temporaries have `shapes`):
    the run's own tiles in first-seen order, then the powers of two from MIN_BLOCK below the
    extent, each only if its block of every temporary that only the run touches has at most
    `block_elements` elements (the smallest tile when none does); [None] first when every
    statement is a loop over the axis itself (they may fuse over it). `_fused` tells which
    every statement can take."""
    run = [s for _, s in positioned]
    owns = [_own_tile(s, row_axis) for s in run]
    extent = int(row_axis.args[1])  # type: ignore[arg-type]
    powers = [1 << k for k in range(MIN_BLOCK.bit_length() - 1, extent.bit_length())]
    tiles = list(
        dict.fromkeys([*(t for _, t in owns if t is not None), *(p for p in powers if p < extent)])
    )
    inside = {position for position, _ in positioned}
    others = [s for position, s in enumerate(statements) if position not in inside]
    row_elements = max(
        (
            math.prod(shape[1:])
            for name, shape in shapes.items()
            if len(shape) > 1 and shape[0] == extent and not any(accesses(s, name) for s in others)
        ),
        default=0,
    )
    fitting = [t for t in tiles if t * row_elements <= block_elements] or sorted(tiles)[:1]
    plain = [None] if all(own == (True, None) for own in owns) else []
    return [*plain, *fitting]


def _fused(
    run: tuple[Term, ...], row_axis: Term, tile: int | None, inside_parallel: bool
) -> Term | None:
    """One loop running `run` a block at a time: over `a.outer(tile)` with each statement's
    part for one block (`_block_part`), or over `a` when `tile` is None; None when some
    statement cannot run blocks of `tile` rows (condition 3). The loop is serial
    `inside_parallel` (the run is the body of a parallel loop)."""
    parts = [_block_part(statement, row_axis, tile) for statement in run]
    if any(part is None for part in parts):
        return None
    axis = row_axis if tile is None else Term("Axis.outer", (row_axis, tile))
    kinds = {s.args[1] for s in run if _own_tile(s, row_axis)[0]}  # row-local ones: parallel
    kind = SERIAL if SERIAL in kinds else PARALLEL_SUM if PARALLEL_SUM in kinds else PARALLEL
    if inside_parallel:
        kind = SERIAL
    return Term("Stmt.loop", (axis, kind, seq(parts)))  # type: ignore[arg-type]


def _block_part(statement: Term, row_axis: Term, tile: int | None) -> Term | None:
    """What `statement` runs for one block of `tile` rows of `row_axis` (condition 3), or
    None when it cannot."""
    row_loop, own = _own_tile(statement, row_axis)
    body = statement.args[2]
    assert isinstance(body, Term)
    if tile is None:
        return body if row_loop and own is None else None
    if row_loop and own is None:
        return Term("Stmt.loop", (Term("Axis.inner", (row_axis, tile)), SERIAL, body))
    if own == tile:
        return body
    if own is not None and _keeps_unrolled_rows(statement, row_axis, own, tile):
        return _retiled(body, row_axis, own, tile)
    if all(tile % split == 0 for split in _splits(statement, row_axis)):
        return _in_block(statement, row_axis, tile)
    return None


def _keeps_unrolled_rows(statement: Term, row_axis: Term, old: int, new: int) -> bool:
    """True when every loop inside `statement` that unrolls a piece of `row_axis` runs as many
    trips with `row_axis` split by `new` instead of `old`: a register tile's rows split from the
    block, `a.inner(old).inner(8)`, with 8 dividing `new` (an unrolled `a.inner(old)` would
    change its count)."""
    old_block = Term("Axis.inner", (row_axis, old))
    for s in statements_in(statement):
        if s.op != "Stmt.loop" or s.args[1].op != "LoopKind.unroll":  # type: ignore[union-attr]
            continue
        axis = s.args[0]
        assert isinstance(axis, Term)
        if row_axis not in pieces_of(axis):
            continue
        rows = int(axis.args[1])  # type: ignore[arg-type]
        if axis.op != "Axis.inner" or axis.args[0] != old_block or new % rows != 0:
            return False
    return True


def _splits(statement: Term, row_axis: Term) -> set[int]:
    """The tiles by which loops of `statement` split `row_axis` itself."""
    return {
        int(s.args[0].args[1])  # type: ignore[union-attr, arg-type]
        for s in statements_in(statement)
        if s.op == "Stmt.loop"
        and s.args[0].op in ("Axis.outer", "Axis.inner")  # type: ignore[union-attr]
        and s.args[0].args[0] == row_axis  # type: ignore[union-attr]
    }


def _in_block(statement: Term, row_axis: Term, tile: int) -> Term:
    """`statement` run over one block of `tile` rows: its loops over `row_axis` walk
    `row_axis.inner(tile)` instead, the pieces split from `row_axis` are split from that block
    (indices of plain `row_axis` stay: the emitter resolves them from the enclosing pieces), and
    its parallel loops are serial (the block loop is the parallel one)."""
    block = Term("Axis.inner", (row_axis, tile))

    def visit(term: Term) -> Term:
        if term.op == "Stmt.loop":
            axis, kind, body = term.args
            axis = block if axis == row_axis else visit(axis)  # type: ignore[arg-type]
            kind = SERIAL if kind in (PARALLEL, PARALLEL_SUM) else kind
            return Term("Stmt.loop", (axis, kind, visit(body)))  # type: ignore[arg-type]
        if term.op in ("Axis.outer", "Axis.inner") and term.args[0] == row_axis:
            return Term(term.op, (block, term.args[1]))
        return Term(term.op, tuple(visit(a) if isinstance(a, Term) else a for a in term.args))

    return visit(statement)


def _retiled(term: Term, row_axis: Term, old: int, new: int) -> Term:
    """`term` with `row_axis` split by `new` wherever it was split by `old`."""
    if term.op in ("Axis.outer", "Axis.inner") and term.args == (row_axis, old):
        return Term(term.op, (row_axis, new))
    args = tuple(_retiled(a, row_axis, old, new) if isinstance(a, Term) else a for a in term.args)
    return Term(term.op, args)
