"""Panel packing: an operand a loop reuses is copied into a small contiguous buffer inside it.

    for i1.outer(32):                        for i1.outer(32):
      for i0.outer(8):                         alloc pk0[256, 32]:
        for k.inner(256):              ->        for k.inner(256): for i1.inner(32) vector:
          for i0.inner(8) unroll:                  pk0[k.inner, i1.inner] = B[k, i1]
            for i1.inner(32) vector:             for i0.outer(8): for k.inner(256): ...
              t[i0, i1] += A[i0, k] * B[k, i1]     t[i0, i1] += A[i0, k] * pk0[k.inner, i1.inner]

A register-tiled matmul reads a 256 x 32 block of B once per block of rows: row after row of B,
a whole B row apart (4 KiB for 1024 columns), so the block's lines map to few cache sets and
evict each other, and numpy's arrays are only 16-byte aligned. Copied once per reuse into an
aligned buffer of consecutive rows, the block is read at unit stride from L1/L2 by every row
block, which makes a large matmul faster (docs/MEASUREMENTS.md). The copy is what BLAS libraries
call packing. An operand is a load, or an expression whose loads all share one index list: in
`X @ (Y + Z)` the panel holds `Y + Z`, computed once per panel instead of once per row block.

This is a pass over the extracted program, like `eqsat.rewrites.contraction`: it introduces a buffer
and rewrites indices inside a body, which ARCHITECTURE §3 keeps out of the e-graph. The cost model
prices the program before packing. A serial or parallel loop L packs an operand E (a maximal
scalar subexpression of a statement inside L whose loads all have index list I) when
1. nothing inside L writes a buffer E loads: E's value depends only on the value of I, so one
   copy at the start of each iteration of L holds exactly what each occurrence of E computes;
2. the panel axes, the loops inside L that I moves with, surround every occurrence of E, and
   the panel (their extents multiplied) is at most PANEL_BYTES;
3. the last panel axis is a vector loop along which I is contiguous, and the panel is not
   already contiguous in memory: E is an expression, or its last dimension covers less than a
   row of the buffer it loads;
4. some loop of two or more trips inside L around an occurrence of E does not move I, and its
   trips load E anew: a serial or parallel loop, or an unrolled one around a serial loop that
   moves I (`for i0.outer unroll(7): for k: ...`; the copies of an unrolled loop inside the
   k-loop share one load). The panel is reused, so the copy pays for itself. L is the innermost
   loop where this holds.
The packed buffer is indexed by the panel axes themselves, `pk[a1, ..., an]`, and filled by a
copy nest over the same axes, so each occurrence reads the value it computed before.

The other operand of a register tile, one element of each of its rows broadcast per step
(`A[i0, k]` above, i0.inner unrolled), is packed too when those rows are a multiple of
L1_SET_SPAN bytes apart (A with 1024 float32 columns): every row's current line then falls in
one L1 set, and with the panel of B they overflow it. That replaces condition 3 (the last panel
axis is the unrolled row loop, so the panel is `pk[i0.outer, k.inner, i0.inner]`: each step's
elements side by side, and each row tile's block contiguous), and the panel may be as large as
ROWS_PANEL_BYTES (all rows of one depth block). The emitter copies it by loading a vector from
each row and interleaving them in registers (`backend_c.emit`). A 512x1024 @ 1024x1024 layer
ran 10% faster, 1000x1024 @ 1024x1000 25%, a 1024-cubed product about as fast as before
(docs/MEASUREMENTS.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from eqsat.core.loops import (
    access_kind,
    axis_extent,
    depends_on,
    loads_in,
    moves_with,
    statements_in,
)
from eqsat.core.terms import LoopProgram, Term, index_items, index_list
from eqsat.extract.machine import rows_share_sets
from eqsat.rewrites.lowering import index_of, seq

# A panel stays well inside L2 next to the rows it is multiplied with. 256 KiB: a 2048-deep panel
# of 32 columns, which a register tile reading all of k at once (its accumulators stored once,
# not per depth block: ALIASED_ACCESS_CYCLES) needs; 2048-cubed at avx512 on an AMD EPYC ran
# 152-199 ms reading B in place, 98-108 ms packed (docs/MEASUREMENTS.md).
PANEL_BYTES = 256 * 1024
# A register tile's rows, packed (module doc): a block of all rows of one depth tile, at most a
# quarter of L2 on the machines this was measured on (docs/MEASUREMENTS.md).
ROWS_PANEL_BYTES = 512 * 1024
# Loops whose trips each load an operand anew; an unrolled loop's copies share one load, unless a
# serial loop between them and the load moves it (`_reused`).
REUSE_KINDS = ("LoopKind.serial", "LoopKind.parallel")


def pack_panels(program: LoopProgram) -> LoopProgram:
    """`program` with every reused operand panel copied into a contiguous buffer (module doc)."""
    shapes = dict(_buffer_shapes(program))
    packer = _Packer(shapes, 4 if program.dtype == "float32" else 8)
    return program.with_body(packer.statement(program.body))


class _Packer:
    def __init__(self, shapes: dict[str, tuple[int, ...]], item_bytes: int) -> None:
        self.shapes = shapes
        self.item_bytes = item_bytes
        self.count = 0

    def statement(self, s: Term) -> Term:
        """`s` with its loops packed bottom-up: the innermost loop with reuse packs first."""
        if s.op not in ("Stmt.loop", "Stmt.seq", "Stmt.alloc"):
            return s
        args = tuple(self.statement(a) if isinstance(a, Term) else a for a in s.args)
        s = Term(s.op, args)
        if s.op == "Stmt.loop":
            for operand in _operands(s.args[2]):  # type: ignore[arg-type]
                s = self.pack(s, operand) or s
            s = _hoisted(s)
        return s

    def pack(self, loop: Term, operand: Term) -> Term | None:
        """`loop` with `operand`'s panel packed at the top of its body, or None (module doc)."""
        axis, kind, body = loop.args
        assert isinstance(axis, Term) and isinstance(kind, Term) and isinstance(body, Term)
        loads = loads_in(operand)
        buffers = {str(load.args[0]) for load in loads}
        index = loads[0].args[1]
        assert isinstance(index, Term)
        if kind.op not in REUSE_KINDS or any(_writes(s, buffers) for s in statements_in(body)):
            return None
        panel = _panel_axes(body, operand, index)
        if not panel:
            return None
        extents = [axis_extent(a) for a in panel]
        rows = self._conflicting_rows(body, operand, panel[-1])  # their unroll kind, or None
        limit = ROWS_PANEL_BYTES if rows else PANEL_BYTES
        if math.prod(extents) * self.item_bytes > limit:
            return None
        if not rows and not _vector_contiguous(body, panel[-1], index):
            return None
        last = index_items(index)[-1]
        covered = math.prod(axis_extent(a) for a in panel if moves_with(last, a))
        if operand.op == "Scalar.load" and covered >= self.shapes[str(operand.args[0])][-1]:
            return None
        if not _reused(body, operand, index):
            return None
        name = self._fresh_name()
        self.shapes[name] = tuple(extents)
        packed_index = index_list([index_of(a) for a in panel])
        copy: Term = Term("Stmt.store", (name, packed_index, operand))
        for position, panel_axis in reversed(list(enumerate(panel))):
            copy_kind = Term("LoopKind.serial", ())
            if position == len(panel) - 1:
                copy_kind = rows or Term("LoopKind.vector", ())
            copy = Term("Stmt.loop", (panel_axis, copy_kind, copy))
        reads = _replaced(body, operand, Term("Scalar.load", (name, packed_index)))
        packed = Term("Stmt.alloc", (name, tuple(extents), seq([copy, reads])))
        return Term("Stmt.loop", (axis, kind, packed))

    def _conflicting_rows(self, body: Term, operand: Term, axis: Term) -> Term | None:
        """The kind of an unrolled loop over `axis` in `body` (a register tile's rows) when
        `operand` loads one element per row from rows a multiple of L1_SET_SPAN bytes apart
        (module doc), else None."""
        unroll = _loop_kind(body, axis, "LoopKind.unroll")
        if operand.op != "Scalar.load" or unroll is None:
            return None
        items = index_items(operand.args[1])  # type: ignore[arg-type]
        moving = [p for p, item in enumerate(items) if moves_with(item, axis)]
        if len(moving) != 1 or items[moving[0]].op != "Index.axis":
            return None
        shape = self.shapes[str(operand.args[0])]
        row_bytes = math.prod(shape[moving[0] + 1 :]) * self.item_bytes
        apart = moving[0] < len(items) - 1 and rows_share_sets(row_bytes)
        return unroll if apart else None

    def _fresh_name(self) -> str:
        while f"pk{self.count}" in self.shapes:
            self.count += 1
        return f"pk{self.count}"


def _hoisted(loop: Term) -> Term:
    """`for p: for l: alloc pk: [copy; rest]` as `for l: alloc pk: [copy; for p: rest]`, the
    panel then copied once per l instead of once per (p, l), when p and l are serial, the copy
    does not move with p, and every store or accumulate of `rest` into a buffer not allocated in
    it writes elements that move with p (each element still takes its steps of l in order, so
    the result is the same bit for bit); else `loop`. A product whose column blocks run
    outside its depth blocks packed its rows panel once per column block
    (docs/MEASUREMENTS.md)."""
    outer_axis, outer_kind, inner = loop.args
    assert isinstance(outer_axis, Term) and isinstance(outer_kind, Term) and isinstance(inner, Term)
    serial = Term("LoopKind.serial", ())
    if outer_kind != serial or inner.op != "Stmt.loop" or inner.args[1] != serial:
        return loop
    inner_axis, _, alloc = inner.args
    assert isinstance(inner_axis, Term) and isinstance(alloc, Term)
    if alloc.op != "Stmt.alloc" or not str(alloc.args[0]).startswith("pk"):
        return loop
    body = alloc.args[2]
    assert isinstance(body, Term)
    if body.op != "Stmt.seq":
        return loop
    copy, rest = body.args
    assert isinstance(copy, Term) and isinstance(rest, Term)
    indices = [s.args[1] for s in statements_in(copy) if s.op == "Stmt.store"]
    indices += [load.args[1] for value in _values(copy) for load in loads_in(value)]
    if any(depends_on(index, outer_axis) for index in indices):  # type: ignore[arg-type]
        return loop
    local = {s.args[0] for s in statements_in(rest) if s.op == "Stmt.alloc"}
    writes = [
        s
        for s in statements_in(rest)
        if s.op in ("Stmt.store", "Stmt.accumulate") and s.args[0] not in local
    ]
    if not all(depends_on(s.args[1], outer_axis) for s in writes):  # type: ignore[arg-type]
        return loop
    hoisted = Term("Stmt.seq", (copy, Term("Stmt.loop", (outer_axis, outer_kind, rest))))
    return Term("Stmt.loop", (inner_axis, serial, Term("Stmt.alloc", (*alloc.args[:2], hoisted))))


def _buffer_shapes(program: LoopProgram) -> Iterator[tuple[str, tuple[int, ...]]]:
    for i, (_, shape) in enumerate(program.inputs):
        yield f"in{i}", shape
    for k, shape in enumerate(program.outputs):
        yield f"out{k}", shape
    yield from _allocs(program.body)


def _allocs(s: Term) -> Iterator[tuple[str, tuple[int, ...]]]:
    if s.op == "Stmt.alloc":
        yield str(s.args[0]), tuple(s.args[1])  # type: ignore[arg-type]
    for a in s.args:
        if isinstance(a, Term) and a.op.startswith("Stmt."):
            yield from _allocs(a)


def _writes(s: Term, buffers: set[str]) -> bool:
    return s.op in ("Stmt.store", "Stmt.accumulate") and s.args[0] in buffers


def _values(s: Term) -> Iterator[Term]:
    """The value of every store and accumulate inside `s`."""
    for statement in statements_in(s):
        if statement.op in ("Stmt.store", "Stmt.accumulate"):
            value = statement.args[-1]
            assert isinstance(value, Term)
            yield value


def _operands(s: Term) -> list[Term]:
    """The maximal subexpressions of values inside `s` whose loads (at least one) all have one
    index list, in first-seen order."""
    found: list[Term] = []

    def visit(e: Term) -> None:
        loads = loads_in(e)
        if loads and len({load.args[1] for load in loads}) == 1:
            if e not in found:
                found.append(e)
            return
        for a in e.args:
            if isinstance(a, Term):
                visit(a)

    for value in _values(s):
        visit(value)
    return found


def _contains(e: Term, part: Term) -> bool:
    return e == part or any(isinstance(a, Term) and _contains(a, part) for a in e.args)


def _panel_axes(body: Term, operand: Term, index: Term) -> list[Term]:
    """The loops inside `body` that `index` moves with, outermost first, when every occurrence
    of `operand` sits inside all of them (so each can index the packed buffer), else []."""
    found: list[tuple[Term, ...]] = []  # per occurrence, in program order (the first one's
    # loop order lays out the panel; a set would make it depend on the hash seed)

    def visit(s: Term, around: tuple[Term, ...]) -> None:
        if s.op == "Stmt.loop":
            axis = s.args[0]
            assert isinstance(axis, Term)
            if any(moves_with(item, axis) for item in index_items(index)):
                around = (*around, axis)
        if s.op in ("Stmt.store", "Stmt.accumulate") and _contains(s.args[-1], operand):  # type: ignore[arg-type]
            found.append(around)
        for a in s.args:
            if isinstance(a, Term) and a.op.startswith("Stmt."):
                visit(a, around)

    visit(body, ())
    if len({frozenset(axes) for axes in found}) != 1:
        return []
    axes = found[0]
    return list(axes) if len(set(axes)) == len(axes) else []


def _loop_kind(body: Term, axis: Term, kind_op: str) -> Term | None:
    """The kind (of op `kind_op`) of a loop over `axis` inside `body`, or None if none has it."""
    kinds = (s.args[1] for s in statements_in(body) if s.op == "Stmt.loop" and s.args[0] == axis)
    return next((k for k in kinds if isinstance(k, Term) and k.op == kind_op), None)


def _vector_contiguous(body: Term, axis: Term, index: Term) -> bool:
    """True when `body` holds a vector loop over `axis` along which `index` is contiguous."""
    vector = _loop_kind(body, axis, "LoopKind.vector")
    return vector is not None and access_kind(index, axis) == "contiguous"


def _reused(s: Term, operand: Term, index: Term) -> bool:
    """True when a loop of two or more trips inside `s`, around an occurrence of `operand`,
    leaves `index` unchanged and does not share one load among its trips: a serial or parallel
    loop, or an unrolled one around a serial loop that moves `index` (each unrolled copy then
    runs that loop over the operand's rows again: `for i0.outer unroll(7): for k: ...` reads a
    panel of B seven times)."""
    for statement in statements_in(s):
        if statement.op != "Stmt.loop":
            continue
        axis, kind, body = statement.args
        assert isinstance(axis, Term) and isinstance(kind, Term) and isinstance(body, Term)
        if axis_extent(axis) < 2 or not _around(statement, operand):
            continue
        if any(moves_with(i, axis) for i in index_items(index)):
            continue
        if kind.op in REUSE_KINDS or (
            kind.op == "LoopKind.unroll" and _rows_loop(body, operand, index)
        ):
            return True
    return False


def _rows_loop(s: Term, operand: Term, index: Term) -> bool:
    """Whether a serial loop inside `s`, around an occurrence of `operand`, moves `index`."""
    return any(
        statement.op == "Stmt.loop"
        and statement.args[1].op == "LoopKind.serial"  # type: ignore[union-attr]
        and any(moves_with(i, statement.args[0]) for i in index_items(index))  # type: ignore[arg-type]
        and _around(statement, operand)
        for statement in statements_in(s)
    )


def _around(statement: Term, operand: Term) -> bool:
    """Whether `operand` occurs in a value stored or accumulated inside `statement`."""
    return any(_contains(v, operand) for v in _values(statement))


def _replaced(term: Term, part: Term, replacement: Term) -> Term:
    """`term` with every occurrence of `part` replaced."""
    if term == part:
        return replacement
    args = tuple(_replaced(a, part, replacement) if isinstance(a, Term) else a for a in term.args)
    return Term(term.op, args)
