"""The stage-2 cost model: predicted cycles of a loop term on a machine (a pure function).

Each statement gets an `Estimate`, computed bottom-up from its children's:
- compute: issue cycles on one core. A leaf statement costs its loads, arithmetic and stores at
  the machine's per-cycle rates (2 loads, 2 FMA/ALU ops, 1 store) plus math-function latency; a
  loop multiplies its body by the trip count (vector loops by the vector count) plus loop
  overhead; a register tile (`eqsat.loops.register_tile`, what the emitter keeps in registers)
  costs one FMA per accumulator and one load per distinct operand per step, with no
  load/store of the accumulators inside the loop.
- memory: the bytes each statement brings into L1, L2 and L3 from the level below. A statement
  whose footprint (distinct cache lines it touches) fits a level, or whose every child's
  footprint fits it (data touched by consecutive executions is still there, and lines are
  shared by neighbouring iterations), fetches its footprint into that level once; otherwise
  every execution of its children fetches again. That is the classical reuse model: tiling pays
  when a tile's footprint fits a cache.
- A Parallel loop divides compute and per-core traffic by the cores and pays a start cost; DRAM
  traffic does not scale with cores (bandwidth is shared).
The predicted time is the roofline of the whole statement, max(compute, traffic / bandwidth at
each level), plus a quarter of the other terms (overlap of compute and memory is never perfect:
a nest that streams from L2 while it computes is measurably slower than one that does not), plus
overheads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from eqsat.loops import (
    RegisterTile,
    axis_extent,
    base_axis,
    depends_on,
    loads_in,
    pieces_of,
    register_tile,
    row_loop_of,
    top_statements,
    vectorizable,
)
from eqsat.terms import Arg, Term, index_items
from extract.machine import Machine

LOOP_OVERHEAD = 1.0  # cycles per iteration (increment, compare, branch)
PARALLEL_START = 20_000.0  # cycles to wake a thread team (~7 us after the first region)
UNARY_CYCLES = {"exp": 10.0, "log": 10.0, "tanh": 14.0, "sigmoid": 12.0, "sqrt": 6.0}
BINARY_CYCLES = {"div": 4.0}
LOADS_PER_CYCLE, OPS_PER_CYCLE, STORES_PER_CYCLE = 2.0, 2.0, 1.0
# Bytes per cycle and core into L1 (from L2), into L2 (from L3), into L3 (from DRAM), and the
# DRAM figure for all cores together; measured order of magnitude on this class of machine.
BYTES_PER_CYCLE = (48.0, 12.0, 8.0)
OVERLAP_PENALTY = 0.25  # the fraction of the non-limiting terms that is not hidden
DRAM_SCALING = 1.25  # 2 cores get ~1.25x the DRAM bandwidth of one (31 -> 39 GB/s)
FIRST_TOUCH_CYCLES_PER_BYTE = 0.5  # a fresh page: fault + zeroing, ~0.5 us per 4 KiB
CACHE_USE = 0.5  # the fraction of a cache a footprint may fill and still hit (conflicts, LRU)


@dataclass(frozen=True)
class Access:
    """A load or store of `buffer` at `index` inside the loops over `inner` (all below the
    statement being estimated)."""

    buffer: str
    index: Term
    inner: frozenset[Term]


@dataclass(frozen=True)
class Estimate:
    compute: float  # cycles on one core (already shared out inside a Parallel loop)
    traffic: tuple[float, float, float]  # bytes fetched into L1, L2, L3
    overhead: float  # parallel start, page first-touch
    accesses: frozenset[Access]
    footprint: float  # bytes of distinct cache lines touched

    @property
    def cycles(self) -> float:
        """The roofline with imperfect overlap, plus overheads (module doc)."""
        memory = [t / bw for t, bw in zip(self.traffic, BYTES_PER_CYCLE, strict=True)]
        terms = [self.compute, *memory]
        limit = max(terms)
        return limit + OVERLAP_PENALTY * (sum(terms) - limit) + self.overhead

    def __float__(self) -> float:
        return self.cycles


class LoopCost:
    """Stage-2 estimate for `machine` and element type `dtype`; call it as a NodeCost.

    Estimates are memoized per statement term for the life of the object (one extraction)."""

    def __init__(self, machine: Machine, dtype: str) -> None:
        self.machine = machine
        self.dtype = dtype
        self._estimates: dict[Term, Estimate] = {}
        self._access_bytes: dict[tuple[Term, frozenset[Term]], float] = {}

    def __call__(self, op: str, children: Sequence[Arg], child_costs: Sequence[float]) -> float:
        if not op.startswith("Stmt."):
            return sum(child_costs)  # axes, indices, scalars: priced inside their statement
        return self.estimate(Term(op, tuple(children))).cycles

    @property
    def item_bytes(self) -> int:
        return 4 if self.dtype == "float32" else 8

    @property
    def lanes(self) -> int:
        return self.machine.lanes(self.dtype)

    def estimate(self, statement: Term) -> Estimate:
        if statement not in self._estimates:
            self._estimates[statement] = self._estimate(statement)
        return self._estimates[statement]

    def _estimate(self, statement: Term) -> Estimate:
        a = statement.args
        match statement.op:
            case "Stmt.store" | "Stmt.accumulate":
                return self.leaf(statement)
            case "Stmt.seq":
                first, second = self.estimate(a[0]), self.estimate(a[1])  # type: ignore[arg-type]
                return self.combine(first.accesses | second.accesses, [first, second], 1, 0.0)
            case "Stmt.alloc":
                body = self.estimate(a[2])  # type: ignore[arg-type]
                return self.combine(body.accesses, [body], 1, self.first_touch(statement))
            case "Stmt.loop":
                return self.loop(a[0], a[1], a[2])  # type: ignore[arg-type]
        raise ValueError(f"not a statement: {statement.op}")

    # ------------------------------------------------------------ statements

    def first_touch(self, alloc: Term) -> float:
        """Page faults of a fresh temporary: one row (or tile of rows) when it will be contracted
        into its row loop (rewrites.contraction), else all of it."""
        name, shape_arg, body = alloc.args
        shape = tuple(int(n) for n in shape_arg)  # type: ignore[union-attr, arg-type]
        while isinstance(body, Term) and body.op == "Stmt.alloc":
            body = body.args[2]
        assert isinstance(body, Term)
        elements = math.prod(shape)
        if row_loop_of(top_statements(body), str(name), shape) is not None:
            elements //= shape[0]
        return elements * self.item_bytes * FIRST_TOUCH_CYCLES_PER_BYTE

    def leaf(self, statement: Term) -> Estimate:
        buffer, target, value = statement.args[0], statement.args[1], statement.args[-1]
        assert isinstance(target, Term) and isinstance(value, Term)
        loads = loads_in(value)
        accumulate = statement.op == "Stmt.accumulate"
        compute = (
            (len(loads) + accumulate) / LOADS_PER_CYCLE
            + (_ops(value) + accumulate) / OPS_PER_CYCLE
            + 1 / STORES_PER_CYCLE
            + _latency(value)
        )
        accesses = frozenset(
            [Access(str(buffer), target, frozenset())]
            + [Access(str(load.args[0]), load.args[1], frozenset()) for load in loads]  # type: ignore[arg-type]
        )
        footprint = self.footprint(accesses)
        return Estimate(compute, (footprint,) * 3, 0.0, accesses, footprint)

    def loop(self, axis: Term, kind: Term, body_term: Term) -> Estimate:
        body = self.estimate(body_term)
        accesses = frozenset(
            Access(x.buffer, x.index, x.inner | {axis}) for x in body.accesses
        )
        trips = axis_extent(axis)
        tile = register_tile(axis, body_term, self.machine.isa, self.lanes)
        if kind.op == "LoopKind.serial" and tile is not None:
            return self.register_tile(axis, tile, body, accesses)
        per_trip = body.compute + (0.0 if kind.op == "LoopKind.unroll" else LOOP_OVERHEAD)
        vector = kind.op == "LoopKind.vector" and self.machine.isa != "scalar"
        if vector and vectorizable(axis, body_term):
            trips = math.ceil(trips / self.lanes)
            per_trip -= self.horizontal_saving(axis, body_term)
        estimate = self.combine(accesses, [body], trips, 0.0, per_trip * trips)
        if kind.op != "LoopKind.parallel":
            return estimate
        cores = self.machine.cores
        l1, l2, l3 = estimate.traffic
        return Estimate(
            estimate.compute / cores,
            (l1 / cores, l2 / cores, l3 / min(cores, DRAM_SCALING)),
            estimate.overhead / cores + PARALLEL_START,
            estimate.accesses,
            estimate.footprint,
        )

    def horizontal_saving(self, axis: Term, body: Term) -> float:
        """A vector reduction into one element keeps its partial sums in a register."""
        target = body.args[1]
        assert isinstance(target, Term)
        if body.op == "Stmt.accumulate" and not depends_on(target, axis):
            return 1 / LOADS_PER_CYCLE + 1 / STORES_PER_CYCLE
        return 0.0

    def register_tile(
        self, axis: Term, tile: RegisterTile, body: Estimate, accesses: frozenset[Access]
    ) -> Estimate:
        """One FMA per accumulator and one load per distinct operand each step; the
        accumulators are loaded before the loop and stored after it."""
        value = tile.accumulate.args[3]
        assert isinstance(value, Term)
        tile_axes = [(a, axis_extent(a)) for a in tile.unrolled]
        if tile.vector_axis is not None:
            tile_axes.append((tile.vector_axis, axis_extent(tile.vector_axis) // self.lanes))
        operand_loads = 0
        for load in loads_in(value):
            index = load.args[1]
            assert isinstance(index, Term)
            operand_loads += math.prod(n for a, n in tile_axes if depends_on(index, a))
        # the accumulate's add fuses with a product into one FMA
        step = max(
            tile.count * max(1, _ops(value)) / OPS_PER_CYCLE, operand_loads / LOADS_PER_CYCLE
        ) + tile.count * _latency(value)
        trips = axis_extent(axis)
        spill = tile.count * (1 / LOADS_PER_CYCLE + 1 / STORES_PER_CYCLE)
        compute = trips * (step + LOOP_OVERHEAD) + spill
        return self.combine(accesses, [body], trips, 0.0, compute)

    def combine(
        self,
        accesses: frozenset[Access],
        children: Iterable[Estimate],
        trips: int,
        overhead: float,
        compute: float | None = None,
    ) -> Estimate:
        """Estimate of a statement that runs `children` `trips` times (reuse model above)."""
        children = list(children)
        footprint = self.footprint(accesses)
        capacities = (self.machine.l1_bytes, self.machine.l2_bytes, self.machine.l3_bytes)
        traffic = tuple(
            footprint
            if all(child.footprint <= capacity * CACHE_USE for child in children)
            else trips * sum(child.traffic[level] for child in children)
            for level, capacity in enumerate(capacities)
        )
        if compute is None:
            compute = trips * sum(child.compute for child in children)
        return Estimate(
            compute,
            traffic,  # type: ignore[arg-type]
            overhead + trips * sum(child.overhead for child in children),
            accesses,
            footprint,
        )

    # ------------------------------------------------------------ footprints

    def footprint(self, accesses: Iterable[Access]) -> float:
        """Bytes of distinct cache lines touched; accesses to one buffer overlap (max)."""
        per_buffer: dict[str, float] = {}
        for access in accesses:
            size = self.access_bytes(access.index, access.inner)
            per_buffer[access.buffer] = max(per_buffer.get(access.buffer, 0.0), size)
        return sum(per_buffer.values())

    def access_bytes(self, index: Term, inner: frozenset[Term]) -> float:
        """Bytes of the lines an access touches over the loops `inner`: the last dimension's
        contiguous run is packed into lines, other dimensions multiply."""
        key = (index, inner)
        if key not in self._access_bytes:
            self._access_bytes[key] = self._lines_bytes(index, inner)
        return self._access_bytes[key]

    def _lines_bytes(self, index: Term, inner: frozenset[Term]) -> float:
        items = index_items(index)
        if not items:
            return float(self.machine.line_bytes)
        counts = [_distinct(item, inner) for item in items]
        run = _contiguous_run(items[-1], inner)
        per_line = self.machine.line_bytes // self.item_bytes
        lines_last = counts[-1] / run * math.ceil(run / per_line)
        return self.machine.line_bytes * lines_last * math.prod(counts[:-1])


def _distinct(index: Term, inner: frozenset[Term]) -> int:
    """How many values `index` takes while the loops over `inner` run."""
    if index.op == "Index.axis":
        axis = index.args[0]
        assert isinstance(axis, Term)
        if axis in inner:
            return axis_extent(axis)
        moving = [a for a in inner if axis in pieces_of(a) and _is_leaf_piece(a, inner)]
        return math.prod(axis_extent(a) for a in moving) if moving else 1
    return math.prod(_distinct(a, inner) for a in index.args if isinstance(a, Term))


def _is_leaf_piece(axis: Term, inner: frozenset[Term]) -> bool:
    """A split piece whose own pieces are not loops too (so extents are not counted twice)."""
    return not any(axis in pieces_of(other) and other != axis for other in inner)


def _contiguous_run(index: Term, inner: frozenset[Term]) -> int:
    """Consecutive elements of the last dimension touched in a row: the unit-stride loop's
    extent when the index is a plain axis walked by a loop in `inner`, else 1."""
    if index.op != "Index.axis":
        return 1
    axis = index.args[0]
    assert isinstance(axis, Term)
    unit = [a for a in inner if base_axis(a) == axis or a == axis]
    return max((axis_extent(a) for a in unit), default=1)


def _ops(scalar: Term) -> int:
    """Arithmetic operations in a scalar expression."""
    own = 1 if scalar.op in ("Scalar.unary", "Scalar.binary", "Scalar.where") else 0
    return own + sum(_ops(a) for a in scalar.args if isinstance(a, Term))


def _latency(scalar: Term) -> float:
    """Extra cycles of math functions and divisions beyond one ALU op."""
    own = 0.0
    if scalar.op == "Scalar.unary":
        own = UNARY_CYCLES.get(str(scalar.args[0]), 0.0)
    elif scalar.op == "Scalar.binary":
        own = BINARY_CYCLES.get(str(scalar.args[0]), 0.0)
    return own + sum(_latency(a) for a in scalar.args if isinstance(a, Term))
