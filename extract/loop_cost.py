"""The stage-2 cost model: predicted cycles of a loop term on a machine (a pure function).

Each statement gets an `Estimate`, computed bottom-up from its children's:
- compute: issue cycles on one core. A leaf statement costs its loads, arithmetic and stores at
  the machine's per-cycle rates (2 loads, 2 FMA/ALU ops, 1 store) plus math-function latency; a
  loop multiplies its body by the trip count (vector loops by the vector count) plus loop
  overhead; a register tile (`eqsat.core.loops.register_tile`, what the emitter keeps in registers)
  costs one FMA per accumulator and one load per distinct operand per step, with no
  load/store of the accumulators inside the loop.
- memory: the bytes each statement brings into L1, L2 and L3 from the level below. A statement
  whose footprint (distinct cache lines it touches) fits a level, or whose every child's
  footprint fits it (data touched by consecutive executions is still there, and lines are
  shared by neighbouring iterations), fetches its footprint into that level once; otherwise
  every execution of its children fetches again. That is the classical reuse model: tiling pays
  when a tile's footprint fits a cache.
- A store to a large output through the caches reads each line before writing it (write
  allocation); the vector stores the emitter makes non-temporal (`eqsat.core.loops.streamed_store`)
  do not, so such an output costs its bytes once instead of twice.
- Reads from DRAM stream well only in long runs: a statement that streams an access (reads
  each element once) pays STREAM_RESTART_BYTES more for every run of consecutive elements it
  reads when the runs are shorter than a row (`_Touched.runs`: a loop extends its body's run
  when it steps exactly one run further along the last dimension; any other loop that moves
  the access starts a new run). Blocked and row-by-row nests of equal footprint then differ.
- A Parallel loop divides compute and per-core traffic by the cores and pays a start cost; DRAM
  traffic does not scale with cores (bandwidth is shared). A Parallel-sum loop also pays for its
  threads' copies of the buffers they share: zeroing them, and adding them in turn after one
  more meeting of the team.
The predicted time is the roofline of the whole statement, max(compute, traffic / bandwidth at
each level), plus a quarter of the other terms (overlap of compute and memory is never perfect:
a nest that streams from L2 while it computes is measurably slower than one that does not), plus
overheads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from eqsat.core.affine import guard_fraction
from eqsat.core.loops import (
    PARALLEL_KINDS,
    RegisterTile,
    axis_extent,
    caller_input,
    caller_output,
    depends_on,
    horizontal,
    large_output,
    loads_in,
    mean_trips,
    mean_vectors,
    moves_with,
    pieces_of,
    privatized,
    register_tile,
    row_loop_of,
    streamed_store,
    top_allocations,
    top_statements,
    transposed_copy,
    trip_runs,
    unit_stride_axes,
    vectorizable,
    without_offset,
    without_unit_tail,
)
from eqsat.core.term import Arg, Term, index_items
from eqsat.extract.machine import Machine, rows_share_sets

LOOP_OVERHEAD = 1.0  # cycles per iteration (increment, compare, branch)
# A parallel region is priced as a kernel called in a loop pays it: its workers still spin.
# Kernels of a few microseconds paid 2-3.5 back-to-back starts of an empty region for it (the
# barrier, the worker's share of the lines; docs/MEASUREMENTS.md): priced at 4, a near tie stays
# on one thread. PARALLEL_START cycles (4 starts of ~0.9 us at 2.8 GHz) without a calibration.
PARALLEL_CALL_RESTARTS = 4.0
PARALLEL_START = 10_000.0
# The share of a register tile's vector loads from a caller's array that span two cache lines,
# each costing two loads: numpy aligns arrays to 16 bytes (a large one starts 16 bytes past a
# line), so every 64-byte load splits and every other 32-byte one. relu(x @ W + b), 547x163 @
# 163x176 at AVX-512: a tile of 1 row x 11 vectors of W ran 0.228 ms, 0.175 ms reading an
# aligned copy of W (docs/MEASUREMENTS.md).
SPLIT_LOAD_SHARE = {"avx512": 1.0, "avx2": 0.5, "scalar": 0.0}
# Cycles of each access of a register tile to rows of a caller's array a whole multiple of
# L1_SET_SPAN apart (a 1024-wide float32 product's), when the tile's accesses step from row to
# row: they then fall in the same L1 sets and evict each other, and loads wait on stores to the
# same low address bits. Such are the loads and stores of accumulators in several rows of an
# output, and the operand loads that move a row each step of the tile's loop (B read in place).
# An 8 x 32 tile 64 deep ran at 79% of an AMD EPYC's AVX-512 peak with its rows 4 KiB apart, 99%
# with rows one line longer, 256 deep 93%: ~8 cycles (4 of the model's) an access
# (docs/MEASUREMENTS.md).
ALIASED_ACCESS_CYCLES = 4.0
UNARY_CYCLES = {
    "exp": 10.0,
    "log": 10.0,
    "tanh": 14.0,
    "sigmoid": 12.0,
    "sqrt": 6.0,
    "erf": 22.0,  # eq_verf: ~2.1x eq_vexp's time per vector (docs/MEASUREMENTS.md)
    # libm's scalar functions (no vector form): per element, an order of magnitude (not measured)
    "log1p": 20.0,
    "expm1": 20.0,
    "sin": 20.0,
    "cos": 20.0,
}
BINARY_CYCLES = {"div": 4.0}
LOADS_PER_CYCLE, OPS_PER_CYCLE, STORES_PER_CYCLE = 2.0, 2.0, 1.0
FMA_LATENCY = 4.0  # cycles from an FMA to the next one that reads its result
# A horizontal reduction (`eqsat.core.loops.horizontal`, the emitter's own test) keeps its partial
# results in vector registers: no load and store of the element per step; after the loop, the
# partial results are reduced across lanes (log2(16) shuffle-and-add steps, ~3 cycles each) and
# combined into the element.
HORIZONTAL_STEP_SAVING = 1 / LOADS_PER_CYCLE + 1 / STORES_PER_CYCLE
HORIZONTAL_FINISH = 12.0 + 1 / LOADS_PER_CYCLE + 1 / STORES_PER_CYCLE
# Bytes per cycle and core into L1 (from L2), into L2 (from L3), into L3 (from DRAM), and the
# DRAM figure for all cores together, for a machine without calibration (`fetch_rates`);
# measured order of magnitude on this class of machine.
BYTES_PER_CYCLE = (48.0, 12.0, 8.0)
OVERLAP_PENALTY = 0.25  # the fraction of the non-limiting terms that is not hidden
DRAM_SCALING = 1.25  # all cores' DRAM bandwidth over one core's (docs/MEASUREMENTS.md)
FIRST_TOUCH_CYCLES_PER_BYTE = 0.5  # a fresh page: fault + zeroing (docs/MEASUREMENTS.md)
# glibc raises its mmap threshold to the size of a freed mapped block, up to this: a temporary
# of at most this many bytes is served again from the heap from the second call on, without page
# faults; a larger one is mapped, and faulted, on every call (docs/MEASUREMENTS.md).
REUSED_ALLOCATION_BYTES = 32 << 20
CACHE_USE = 0.5  # the fraction of a cache a footprint may fill and still hit (conflicts, LRU)
# DRAM bytes lost each time a read restarts mid-row (the hardware prefetcher ramps up again):
# a matrix-vector product reading its rows in pieces ran slower than one reading whole rows
# (docs/MEASUREMENTS.md).
STREAM_RESTART_BYTES = 256.0


# The loads and stores below a statement, grouped by the loops they run inside: for each set of
# loop axes below the statement (its `LoopCost.loop_set` number), the accesses made inside exactly
# those loops (`LoopCost.access` numbers of (buffer, index list) pairs).
Accesses = Mapping[int, frozenset[int]]


@dataclass(frozen=True, slots=True)
class Estimate:
    compute: float  # cycles on one core (already shared out inside a Parallel loop)
    traffic: tuple[float, float, float]  # bytes fetched into L1, L2, L3
    overhead: float  # parallel starts: paid on every execution
    footprint: float  # bytes of distinct cache lines touched
    first_touch: float  # page faults of temporaries too large for the allocator to reuse
    bytes_per_cycle: tuple[float, float, float]  # into L1, L2, L3 (`fetch_rates`)

    @property
    def cycles(self) -> float:
        """The roofline with imperfect overlap, plus overheads (module doc)."""
        (l1, l2, l3), (to_l1, to_l2, to_l3) = self.traffic, self.bytes_per_cycle
        terms = (self.compute, l1 / to_l1, l2 / to_l2, l3 / to_l3)
        limit = max(terms)
        return limit + OVERLAP_PENALTY * (sum(terms) - limit) + self.overhead + self.first_touch


class _Touched(NamedTuple):
    """What a statement touches, as its parent statement builds on it. Statements that touch
    the same accesses in the same way (the loops of a nest in another order, or of another
    kind, often do) share one `_Touched` (`LoopCost.touched`), so its facts are worked out once
    per way, not once per statement. Never changed."""

    number: int  # in the order first met (a key of memo tables)
    accesses: Accesses
    # For each access that the statement streams (every loop of two or more trips moves it): how
    # many consecutive elements of its last dimension it reads in a row, in execution order, and
    # whether one execution of the statement reads just one such run (else a loop moved to
    # another row in between).
    runs: Mapping[int, tuple[int, bool]]
    # The `eqsat.core.loops.large_output` buffers it stores into through the caches (not in
    # `eqsat.core.loops.streamed_store` vector loops).
    allocating: frozenset[str]
    # the bytes of the lines each buffer occupies (accesses to one buffer overlap), their sum,
    # and `LoopCost.dram_extra`
    buffer_bytes: Mapping[str, float]
    footprint: float
    dram_extra: float


class _Statement(NamedTuple):
    """An estimated statement: its estimate and its cycles, and what it touches."""

    estimate: Estimate
    cycles: float
    touched: _Touched

    @classmethod
    def of(cls, estimate: Estimate, touched: _Touched) -> _Statement:
        return cls(estimate, estimate.cycles, touched)


class _Access(NamedTuple):
    """A (buffer, index list) pair, its `_row_length`, and the axes its index names."""

    buffer: str
    index_list: Term
    row_length: int
    axes: frozenset[Term]


class _Along(NamedTuple):
    """What is known of loops over one axis: their most and mean trips, the axes it was split
    from (`pieces_of`), the loop set (number) each loop set grows into with the axis, each
    access's `LoopCost.movement` along the axis, and what a loop touches by what its body
    touches (`_Touched.number`; the loop's kind aside)."""

    extent: int
    mean_trips: float
    pieces: frozenset[Term]
    grown: dict[int, int]
    movements: dict[int, tuple[int, bool]]
    loops: dict[int, _Touched]


class LoopCost:
    """Stage-2 estimate for `machine` and element type `dtype`; call it as a NodeCost.

    Estimates are memoized per statement term for the life of the object (one extraction), and
    so are the footprints they are built from, so pricing a statement whose children were priced
    before costs only its own level; what a statement touches is worked out once per way of
    touching (`_Touched`). Accesses and sets of loop axes are numbered as they are met, so that
    the work per access is done on ints (hashing a Term runs Python)."""

    def __init__(
        self, machine: Machine, dtype: str, guarded: Callable[[Term], Term] | None = None
    ) -> None:
        """`guarded`: a loop statement with the guards that skip blocks a mask discards
        (`masked_blocks.with_guards`), priced in its place; None where nothing is masked."""
        self.machine = machine
        self.dtype = dtype
        self._guarded = guarded
        self.item_bytes = 4 if dtype == "float32" else 8
        self.lanes = machine.lanes(dtype)
        self._statements: dict[Term, _Statement] = {}
        self._access_numbers: dict[tuple[str, Term], int] = {}
        self._accesses: list[_Access] = []  # by number
        # sets of loop axes by number (0: none), and the lines' bytes of each access over each
        self._loop_set_numbers: dict[frozenset[Term], int] = {frozenset(): 0}
        self._loop_sets: list[frozenset[Term]] = [frozenset()]
        self._lines: list[dict[int, float]] = [{}]
        self._lines_over: dict[tuple[Term, frozenset[Term]], float] = {}  # `lines_bytes`
        self._along: dict[Term, _Along] = {}
        self._touched: dict[Any, _Touched] = {}  # by content (`touched`)
        self._sequences: dict[tuple[int, int], _Touched] = {}  # by the two `_Touched.number`s
        self._leaf_pieces: dict[frozenset[Term], tuple[tuple[frozenset[Term], int], ...]] = {}
        capacities = (machine.l1_bytes, machine.l2_bytes, machine.l3_bytes)
        self._usable = tuple(capacity * CACHE_USE for capacity in capacities)
        self._bytes_per_cycle, self._dram_scaling = fetch_rates(machine)
        self._parallel_start = parallel_start_cycles(machine)

    def __call__(self, op: str, children: Sequence[Arg], child_costs: Sequence[float]) -> float:
        return self.term_cost(Term(op, tuple(children)), child_costs)

    def term_cost(self, term: Term, child_costs: Sequence[float]) -> float:
        """`self(term.op, term.args, child_costs)` for a term already built: the extractor
        calls this (eqsat.extract.extractor), so this memo's keys are the extractor's terms."""
        if not term.op.startswith("Stmt."):
            return sum(child_costs)  # axes, indices, scalars: priced inside their statement
        return self._statement(term).cycles

    def estimate(self, statement: Term) -> Estimate:
        return self._statement(statement).estimate

    def _statement(self, statement: Term) -> _Statement:
        known = self._statements.get(statement)
        if known is None:
            known = self._statements[statement] = self._estimate(statement)
        return known

    def _estimate(self, statement: Term) -> _Statement:
        a = statement.args
        match statement.op:
            case "Stmt.store" | "Stmt.accumulate":
                return self.leaf(statement)
            case "Stmt.seq":
                first, second = self._statement(a[0]), self._statement(a[1])  # type: ignore[arg-type]
                touched = self.in_sequence(first.touched, second.touched)
                estimate = self.combine(touched, (first.estimate, second.estimate), 1)
                return _Statement.of(estimate, touched)
            case "Stmt.alloc":
                body = self._statement(a[2])  # type: ignore[arg-type]
                first_touch = self.first_touch(statement)
                estimate = self.combine(body.touched, [body.estimate], 1, first_touch=first_touch)
                return _Statement.of(estimate, body.touched)
            case "Stmt.loop":
                # guards pay where a parallel loop shares out what they leave (pricing them at
                # every loop doubled extraction's time for as good a choice)
                if self._guarded is not None and a[1].op in PARALLEL_KINDS:  # type: ignore[union-attr]
                    guarded = self._guarded(statement)
                    if guarded != statement:
                        return self._statement(guarded)
                return self.loop(statement)
            case "Stmt.guard":  # its body times the share of the work it lets run
                body = self._statement(a[2])  # type: ignore[arg-type]
                fraction = guard_fraction(a[0], int(a[1]), self.machine.cores)  # type: ignore[arg-type]
                estimate = self.combine(body.touched, [body.estimate], fraction)
                return _Statement.of(estimate, body.touched)
        raise ValueError(f"not a statement: {statement.op}")

    # ------------------------------------------------------------ statements

    def first_touch(self, alloc: Term) -> float:
        """Page faults of a temporary on every call: none when the allocator reuses its memory
        (REUSED_ALLOCATION_BYTES), else of all of it, or of one row (or tile of rows) when it
        will be contracted into its row loop (eqsat.rewrites.contraction)."""
        name, shape_arg, body = alloc.args
        shape = tuple(int(n) for n in shape_arg)  # type: ignore[union-attr, arg-type]
        assert isinstance(body, Term)
        elements = math.prod(shape)
        if elements * self.item_bytes <= REUSED_ALLOCATION_BYTES:
            return 0.0  # (without the walk of the body below: a whole program is priced often)
        _, body = top_allocations(body)
        if row_loop_of(top_statements(body), str(name), shape) is not None:
            elements //= shape[0]
        allocated = elements * self.item_bytes
        if allocated <= REUSED_ALLOCATION_BYTES:
            return 0.0
        return allocated * FIRST_TOUCH_CYCLES_PER_BYTE

    def leaf(self, statement: Term) -> _Statement:
        value = statement.args[-1]
        assert isinstance(value, Term)
        loads = loads_in(value)
        accumulate = statement.op == "Stmt.accumulate"
        compute = (
            (len(loads) + accumulate) / LOADS_PER_CYCLE
            + (_ops(value) + accumulate) / OPS_PER_CYCLE
            + 1 / STORES_PER_CYCLE
            + _latency(value)
        )
        touched = self.leaf_touched(statement, loads)
        footprint = touched.footprint
        traffic = (footprint, footprint, footprint + touched.dram_extra)
        estimate = Estimate(compute, traffic, 0.0, footprint, 0.0, self._bytes_per_cycle)
        return _Statement.of(estimate, touched)

    def loop(self, statement: Term) -> _Statement:
        axis, kind, body_term = statement.args
        assert isinstance(axis, Term) and isinstance(kind, Term) and isinstance(body_term, Term)
        body = self._statement(body_term)
        along = self.along(axis)
        touched = self.loop_touched(axis, kind, body_term, body.touched, along)
        trips = along.mean_trips
        if kind.op == "LoopKind.serial":
            tile = register_tile(axis, body_term, self.machine.isa, self.lanes)
            if tile is not None:
                return self.register_tile(statement, tile, body.estimate, touched)
            copy = transposed_copy(axis, kind, body_term) if self.lanes > 1 else None
            if copy is not None:
                blocks = self.transposed_blocks(*copy)
                return _Statement.of(self.combine(touched, [body.estimate], trips, blocks), touched)
        per_trip = body.estimate.compute + (0.0 if kind.op == "LoopKind.unroll" else LOOP_OVERHEAD)
        vector = kind.op == "LoopKind.vector" and self.machine.isa != "scalar"
        vectorized = vector and vectorizable(axis, body_term)
        if vectorized:
            trips = mean_vectors(axis, self.lanes)
        compute = per_trip * trips
        if vectorized and horizontal(axis, body_term):
            compute -= trips * HORIZONTAL_STEP_SAVING - HORIZONTAL_FINISH
        estimate = self.combine(touched, [body.estimate], trips, compute)
        if kind.op not in PARALLEL_KINDS:
            return _Statement.of(estimate, touched)
        cores = min(self.machine.cores, trips)  # a loop of one trip runs on one core
        busiest = busiest_share(axis, self.machine.cores)
        l1, l2, l3 = estimate.traffic
        start = self._parallel_start
        if kind.op == "LoopKind.parallel_sum":
            start += self.summing_apart(axis, body_term, body.touched)
        parallel = Estimate(
            estimate.compute * busiest,
            (l1 * busiest, l2 * busiest, l3 / min(cores, self._dram_scaling)),
            estimate.overhead * busiest + start,
            estimate.footprint,
            estimate.first_touch,
            self._bytes_per_cycle,
        )
        return _Statement.of(parallel, touched)

    def transposed_blocks(self, outer: Term, inner_loop: Term, loads: Sequence[Term]) -> float:
        """Issue cycles of a copy the emitter runs in blocks of lanes x lanes transposed in
        registers (`transposed_copy`): per vector, the store's own work plus log2(lanes) lane
        zips for each transposed load; the elements after whole blocks run the plain loops. (It
        was priced as its scalar loops, so a tiling that the emitter cannot run in blocks cost
        the same and won ties: cosine similarity's copy ran 1 ms slower.)"""
        inner, _, store = inner_loop.args
        assert isinstance(inner, Term) and isinstance(store, Term)
        element = self._statement(store).estimate.compute
        rows, columns = mean_trips(outer), mean_trips(inner)
        lanes = self.lanes
        blocked = (rows // lanes) * (columns // lanes) * lanes * lanes
        per_vector = element + len(loads) * math.log2(lanes) / OPS_PER_CYCLE
        plain = (rows * columns - blocked) * (element + LOOP_OVERHEAD)
        return blocked / lanes * per_vector + plain + rows * LOOP_OVERHEAD

    def summing_apart(self, axis: Term, body_term: Term, body: _Touched) -> float:
        """What a parallel-sum loop pays beyond a parallel one (`eqsat.core.loops.privatized`):
        each thread zeroes its copy of each shared buffer, then the threads add their copies in
        turn, one scalar element at a time, after one more meeting of the team."""
        elements = sum(
            body.buffer_bytes.get(buffer, 0.0) / self.item_bytes
            for buffer in privatized(axis, body_term)
        )
        zeroing = elements / STORES_PER_CYCLE
        adding = self.machine.cores * elements * (2 / LOADS_PER_CYCLE + 1 / OPS_PER_CYCLE + 1)
        return zeroing + adding + self._parallel_start / PARALLEL_CALL_RESTARTS

    def register_tile(
        self, statement: Term, tile: RegisterTile, body: Estimate, touched: _Touched
    ) -> _Statement:
        """One FMA per accumulator and one load per distinct operand each step; the
        accumulators are loaded before the loop and stored after it. A tile clipped to its
        extent (a remainder tile) has fewer accumulators: each variant of the tile is priced
        by how often it runs."""
        value = tile.accumulate.args[3]
        assert isinstance(value, Term)
        # each operand's index, and what one of its loads costs (a split vector load two, one
        # in rows a set span apart ALIASED_ACCESS_CYCLES)
        split = SPLIT_LOAD_SHARE[self.machine.isa]
        loop_axis = statement.args[0]
        assert isinstance(loop_axis, Term)

        def load_cost(load: Term) -> float:
            if self.aliased_rows(load, (loop_axis,)):
                return ALIASED_ACCESS_CYCLES * LOADS_PER_CYCLE
            return 1 + split if _caller_vector(load, tile.vector_axis) else 1.0

        operands = [
            (index, load_cost(load))
            for load in loads_in(value)
            if isinstance(index := load.args[1], Term)
        ]
        step = accumulators = 0.0
        for weight, sizes_of_variant in self.tile_variants(tile):
            count = math.prod(sizes_of_variant.values())
            operand_loads = sum(
                cost * math.prod([n for a, n in sizes_of_variant.items() if depends_on(index, a)])
                for index, cost in operands
            )
            # the accumulate's add fuses with a product into one FMA
            step += weight * (
                max(
                    count * max(1, _ops(value)) / OPS_PER_CYCLE,
                    operand_loads / LOADS_PER_CYCLE,
                    FMA_LATENCY,  # each accumulator's chain: one update per FMA latency at most
                )
                + count * _latency(value)
            )
            accumulators += weight * count
        trips = mean_trips(loop_axis)
        if self.aliased_rows(tile.accumulate, tile.unrolled):
            spill = accumulators * 2 * ALIASED_ACCESS_CYCLES
        else:
            spill = accumulators * (1 / LOADS_PER_CYCLE + 1 / STORES_PER_CYCLE)
        compute = trips * (step + LOOP_OVERHEAD) + spill
        return _Statement.of(self.combine(touched, [body], trips, compute), touched)

    def aliased_rows(self, access: Term, axes: Iterable[Term]) -> bool:
        """Whether `access` (a load, or an accumulate: buffer and index first) reaches rows of a
        caller's array a whole multiple of L1_SET_SPAN bytes apart, another row as one of
        `axes` moves (ALIASED_ACCESS_CYCLES)."""
        buffer, index = access.args[:2]
        assert isinstance(index, Term)
        rows = index_items(index)[:-1]
        return (
            (caller_input(str(buffer)) or caller_output(str(buffer)))
            and rows_share_sets(_row_length(index) * self.item_bytes)
            and any(moves_with(row, axis) for row in rows for axis in axes)
        )

    def tile_variants(self, tile: RegisterTile) -> list[tuple[float, dict[Term, int]]]:
        """(how often it runs, accumulators along each tile axis) of each variant of a register
        tile: the tile axes' iterations (vectors along the vector axis) over their runs, taken
        as independent."""
        along = [(a, 1) for a in tile.unrolled]
        if tile.vector_axis is not None:
            along.append((tile.vector_axis, self.lanes))
        variants: list[tuple[float, dict[Term, int]]] = [(1.0, {})]
        for axis, lanes in along:
            runs = trip_runs(axis)
            total = sum(runs.values())
            variants = [
                (weight * count / total, {**sizes, axis: -(-trips // lanes)})
                for weight, sizes in variants
                for trips, count in runs.items()
            ]
        return variants

    def combine(
        self,
        touched: _Touched,
        children: Sequence[Estimate],
        trips: float,
        compute: float | None = None,
        first_touch: float = 0.0,
    ) -> Estimate:
        """A statement that touches `touched`, running `children` `trips` times (the reuse
        model of the module doc), plus its own `first_touch` cycles."""
        # the children's largest footprint, and their sums (one pass: this runs for every
        # statement priced)
        largest = work = overhead = faults = in_l1 = in_l2 = in_l3 = 0.0
        for child in children:
            largest = max(largest, child.footprint)
            work += child.compute
            overhead += child.overhead
            faults += child.first_touch
            l1, l2, l3 = child.traffic
            in_l1, in_l2, in_l3 = in_l1 + l1, in_l2 + l2, in_l3 + l3
        # A level the children's footprint fits fetches the statement's footprint once, any
        # other fetches what every run of the children fetches; never more than that either: a
        # parallel child's traffic is its busiest core's share (`loop`), below its footprint
        # (an allocation or sequence around a parallel loop priced it anew from the footprint,
        # 1.5x the loop alone, and extraction passed over cheaper nests for it).
        footprint = touched.footprint
        usable_l1, usable_l2, usable_l3 = self._usable
        runs_l1, runs_l2, runs_l3 = trips * in_l1, trips * in_l2, trips * in_l3
        traffic = (
            min(footprint, runs_l1) if largest <= usable_l1 else runs_l1,
            min(footprint, runs_l2) if largest <= usable_l2 else runs_l2,
            min(footprint + touched.dram_extra, runs_l3) if largest <= usable_l3 else runs_l3,
        )
        if compute is None:
            compute = trips * work
        overhead, first_touch = trips * overhead, first_touch + faults
        return Estimate(compute, traffic, overhead, footprint, first_touch, self._bytes_per_cycle)

    # ------------------------------------------------------------ DRAM streams

    def dram_extra(
        self,
        runs: Mapping[int, tuple[int, bool]],
        allocating: frozenset[str],
        sizes: Mapping[str, float],
    ) -> float:
        """DRAM bytes beyond the footprint when a statement fetches it once: stream restarts
        (`restart_bytes`), and the lines of large outputs stored without bypassing the caches
        (`allocating`), which are read before they are written."""
        return self.restart_bytes(runs, sizes) + math.fsum(sizes[buffer] for buffer in allocating)

    def allocating_stores(self, statement: Term) -> frozenset[str]:
        """The buffers `statement` stores into through the caches (`_Touched.allocating`)."""
        return self._statement(statement).touched.allocating

    def restart_bytes(
        self, runs: Mapping[int, tuple[int, bool]], sizes: Mapping[str, float]
    ) -> float:
        """STREAM_RESTART_BYTES for every run shorter than a row (`runs`: `_Touched.runs`) in
        which a statement reads a buffer once (its `sizes` bytes, the shortest run of the
        buffer's accesses)."""
        shortest: dict[str, int] = {}
        for access, (run, _) in runs.items():
            buffer, _, row_length, _ = self._accesses[access]
            if run < row_length:
                shortest[buffer] = min(run, shortest.get(buffer, run))
        line, item = self.machine.line_bytes, self.item_bytes
        return STREAM_RESTART_BYTES * sum(
            sizes[buffer] / max(run * item, line) for buffer, run in shortest.items()
        )

    # ------------------------------------------------------------ footprints

    def touched(
        self, accesses: Accesses, runs: Mapping[int, tuple[int, bool]], allocating: frozenset[str]
    ) -> _Touched:
        """The one `_Touched` of these facts (the order of `accesses` does not matter; sums over
        buffers are `math.fsum`, exact whatever their order)."""
        key = (frozenset(accesses.items()), tuple(runs.items()), allocating)
        known = self._touched.get(key)
        if known is None:
            sizes = self.bytes_per_buffer(accesses)
            known = self._touched[key] = _Touched(
                len(self._touched),
                accesses,
                runs,
                allocating,
                sizes,
                math.fsum(sizes.values()),
                self.dram_extra(runs, allocating, sizes),
            )
        return known

    def leaf_touched(self, statement: Term, loads: Sequence[Term]) -> _Touched:
        """What a store or accumulate touches: its target, then its `loads`."""
        buffer, target = str(statement.args[0]), statement.args[1]
        assert isinstance(target, Term)
        numbers = [self.access(buffer, target)]
        numbers += [self.access(str(load.args[0]), load.args[1]) for load in loads]  # type: ignore[arg-type]
        allocating: frozenset[str] = frozenset()
        if statement.op == "Stmt.store":  # an accumulate reads its element (the footprint has it)
            shape = _named_shape(target)
            if shape is not None and large_output(buffer, shape, self.item_bytes):
                allocating = frozenset([buffer])
        return self.touched({0: frozenset(numbers)}, dict.fromkeys(numbers, (1, True)), allocating)

    def in_sequence(self, first: _Touched, second: _Touched) -> _Touched:
        """What `Stmt.seq` of statements that touch `first` and `second` touches: both; an
        access streamed by both is a run of the shorter length, read twice."""
        key = (first.number, second.number)
        known = self._sequences.get(key)
        if known is None:
            runs = dict(first.runs)
            for access, (run, single) in second.runs.items():
                if access in runs:
                    run, single = min(run, runs[access][0]), False
                runs[access] = (run, single)
            accesses = _merged([*first.accesses.items(), *second.accesses.items()])
            allocating = first.allocating | second.allocating
            known = self._sequences[key] = self.touched(accesses, runs, allocating)
        return known

    def along(self, axis: Term) -> _Along:
        """What is known of loops over `axis` (`_Along`)."""
        known = self._along.get(axis)
        if known is None:
            pieces = frozenset(pieces_of(axis))
            known = self._along[axis] = _Along(
                axis_extent(axis), mean_trips(axis), pieces, {}, {}, {}
            )
        return known

    def loop_touched(
        self, axis: Term, kind: Term, body_term: Term, body: _Touched, along: _Along
    ) -> _Touched:
        """What `Stmt.loop(axis, kind, body_term)` touches, from what its body touches (`along`:
        the axis' `_Along`): each access's loop set grows by the axis, and a stream run grows
        when the loop steps one run further along it."""
        touched = along.loops.get(body.number)
        if touched is None:
            accesses = _merged(
                [
                    (self.loop_set(inner, axis, along), group)
                    for inner, group in body.accesses.items()
                ]
            )
            trips = along.extent
            runs = {}
            for access, (run, single) in body.runs.items():
                step, moves = self.movement(access, axis, along)
                if single and step == run:
                    run *= trips
                elif moves:
                    single = False
                elif trips > 1:
                    continue  # re-read: from cache, after the first pass (not a stream)
                runs[access] = (run, single)
            touched = along.loops[body.number] = self.touched(accesses, runs, body.allocating)
        allocating = touched.allocating
        if allocating and kind.op == "LoopKind.vector" and body_term.op == "Stmt.store":
            buffer, target = str(body_term.args[0]), body_term.args[1]
            assert isinstance(target, Term)
            shape = _named_shape(target)
            if (
                shape is not None
                and vectorizable(axis, body_term)
                and streamed_store(buffer, shape, self.item_bytes, target, axis, self.lanes)
            ):
                return self.touched(touched.accesses, touched.runs, allocating - {buffer})
        return touched

    def access(self, buffer: str, index: Term) -> int:
        """The number of the access to `buffer` through index list `index`."""
        number = self._access_numbers.get((buffer, index))
        if number is None:
            number = self._access_numbers[buffer, index] = len(self._accesses)
            axes = frozenset(_named_axes(index))
            self._accesses.append(_Access(buffer, index, _row_length(index), axes))
        return number

    def loop_set(self, inner: int, axis: Term, along: _Along) -> int:
        """The number of loop set `inner` with `axis` added (`along`: the axis' `_Along`)."""
        grown = along.grown.get(inner)
        if grown is None:
            axes = self._loop_sets[inner] | {axis}
            grown = self._loop_set_numbers.get(axes)
            if grown is None:
                grown = self._loop_set_numbers[axes] = len(self._loop_sets)
                self._loop_sets.append(axes)
                self._lines.append({})
            along.grown[inner] = grown
        return grown

    def movement(self, access: int, axis: Term, along: _Along) -> tuple[int, bool]:
        """How a loop over `axis` moves `access`: the elements its trips step along the last
        dimension when it moves nothing else (`_run_step`, else 0), and whether it moves the
        access at all (`along`: the axis' `_Along`)."""
        known = along.movements.get(access)
        if known is None:
            index = self._accesses[access].index_list
            known = along.movements[access] = (_run_step(index, axis), depends_on(index, axis))
        return known

    def bytes_per_buffer(self, accesses: Accesses) -> dict[str, float]:
        """Bytes of distinct cache lines each buffer's accesses touch; accesses to one buffer
        overlap (max)."""
        sizes: dict[str, float] = {}
        for inner, numbers in accesses.items():
            lines = self._lines[inner]
            for access in numbers:
                size = lines.get(access)
                if size is None:
                    size = lines[access] = self.lines_bytes(access, self._loop_sets[inner])
                buffer = self._accesses[access].buffer
                sizes[buffer] = max(sizes.get(buffer, 0.0), size)
        return sizes

    def lines_bytes(self, access: int, inner: frozenset[Term]) -> float:
        """`_lines_bytes` of `access` over the loops `inner`, memoized by the loops that bear
        on it: those over an axis its index names or a piece split from one (a loop over
        another axis neither moves it nor splits a loop that does)."""
        _, index, _, axes = self._accesses[access]
        bearing = frozenset([a for a in inner if not self._along[a].pieces.isdisjoint(axes)])
        known = self._lines_over.get((index, bearing))
        if known is None:
            known = self._lines_over[index, bearing] = self._lines_bytes(index, bearing)
        return known

    def _lines_bytes(self, index: Term, inner: frozenset[Term]) -> float:
        """Bytes of the lines an access touches over the loops `inner`: the last dimension's
        contiguous run is packed into lines, other dimensions multiply."""
        items = without_unit_tail(index_items(index))
        if not items:
            return float(self.machine.line_bytes)
        leaves = self.leaf_pieces(inner)
        counts = [_distinct(item, inner, leaves) for item in items]
        run = _contiguous_run(items[-1], inner)
        per_line = self.machine.line_bytes // self.item_bytes
        lines_last = counts[-1] / run * math.ceil(run / per_line)
        return self.machine.line_bytes * lines_last * math.prod(counts[:-1])

    def leaf_pieces(self, inner: frozenset[Term]) -> tuple[tuple[frozenset[Term], int], ...]:
        """(every axis it was split from, extent) of each loop axis of `inner` that is not
        split into loops of `inner` itself (so that extents are not counted twice)."""
        known = self._leaf_pieces.get(inner)
        if known is None:
            pieces = {axis: frozenset(pieces_of(axis)) for axis in inner}
            split = {piece for axis in inner for piece in pieces[axis] if piece != axis}
            known = self._leaf_pieces[inner] = tuple(
                (pieces[axis], axis_extent(axis)) for axis in inner if axis not in split
            )
        return known


def busiest_share(axis: Term, cores: int) -> float:
    """The share of a parallel loop's work over `axis` that its busiest core runs. OpenMP's
    static schedule gives that core ceil(trips / cores) of the trips, so 3 trips on 2 cores take
    as long as 2 (a 657-row MLP in 256-row blocks ran at 0.62x). Over the tiles of a split
    (`a.outer(T)`), a trip's work is its tile's rows and the last tile may be short: the
    busiest core's trips are counted as whole tiles (of 1177 rows in blocks of 1024, one core
    runs 1024 rows, not half of them)."""
    trips = mean_trips(axis)
    busiest_trips = math.ceil(trips / cores)
    if axis.op == "Axis.outer":
        parent, tile = axis.args
        return min(1.0, busiest_trips * int(tile) / axis_extent(parent))  # type: ignore[arg-type]
    return busiest_trips / trips


def parallel_start_cycles(machine: Machine) -> float:
    """Cycles a parallel loop costs a kernel called in a loop: PARALLEL_CALL_RESTARTS region
    starts back to back as the machine's calibration measured them, else PARALLEL_START."""
    calibration = machine.calibration
    if calibration is None or calibration.parallel_restart_seconds <= 0:
        return PARALLEL_START
    return PARALLEL_CALL_RESTARTS * calibration.parallel_restart_seconds * machine.clock_hz()


def fetch_rates(machine: Machine) -> tuple[tuple[float, float, float], float]:
    """Bytes per cycle and core fetched into L1, L2 and L3, and how many times one core's DRAM
    bandwidth all cores get together.

    From `machine.calibration` when it is known: the triad bandwidth of the level below, on one
    thread, at the calibrated clock; noise on a shared machine cannot make a nearer level slower
    than a farther one (each rate is at least the next one's). Else BYTES_PER_CYCLE and
    DRAM_SCALING."""
    calibration = machine.calibration
    if calibration is None:
        return BYTES_PER_CYCLE, DRAM_SCALING
    clock = machine.clock_hz()
    l2, l3, dram = (calibration.bandwidth[level][1] / clock for level in ("L2", "L3", "DRAM"))
    all_cores = calibration.bandwidth["DRAM"]
    scaling = max(1.0, all_cores[max(all_cores)] / all_cores[1])
    return (max(l2, l3, dram), max(l3, dram), dram), scaling


def _merged(groups: Iterable[tuple[int, frozenset[int]]]) -> Accesses:
    """`groups` as Accesses: the accesses of equal loop sets united."""
    merged: dict[int, frozenset[int]] = {}
    for inner, numbers in groups:
        merged[inner] = merged[inner] | numbers if inner in merged else numbers
    return merged


def _distinct(
    index: Term, inner: frozenset[Term], leaves: tuple[tuple[frozenset[Term], int], ...]
) -> int:
    """How many values `index` takes while the loops over `inner` run (`leaves`: their
    `LoopCost.leaf_pieces`)."""
    if index.op == "Index.axis":
        axis = index.args[0]
        assert isinstance(axis, Term)
        if axis in inner:
            return axis_extent(axis)
        return math.prod(extent for pieces, extent in leaves if axis in pieces)
    return math.prod(_distinct(a, inner, leaves) for a in index.args if isinstance(a, Term))


def _named_axes(index: Term) -> list[Term]:
    """The axes of the `Index.axis` terms inside `index`."""
    if index.op == "Index.axis":
        return [index.args[0]]  # type: ignore[list-item]
    return [axis for a in index.args if isinstance(a, Term) for axis in _named_axes(a)]


def _contiguous_run(index: Term, inner: frozenset[Term]) -> int:
    """Consecutive elements of the last dimension touched in a row: the unit-stride loop's
    extent when the index is a plain axis (plus a constant or not) walked by a loop in `inner`,
    else 1."""
    index = without_offset(index)
    if index.op != "Index.axis":
        return 1
    axis = index.args[0]
    assert isinstance(axis, Term)
    unit = [a for a in inner if axis in unit_stride_axes(a)]
    return max((axis_extent(a) for a in unit), default=1)


def _ops(scalar: Term) -> int:
    """Arithmetic operations in a scalar expression."""
    own = 1 if scalar.op in ("Scalar.unary", "Scalar.binary", "Scalar.where") else 0
    return own + sum(_ops(a) for a in scalar.args if isinstance(a, Term))


def _caller_vector(load: Term, vector_axis: Term | None) -> bool:
    """True when `load` reads vectors along `vector_axis` from an input (the caller's array)."""
    index = load.args[1]
    assert isinstance(index, Term)
    return (
        vector_axis is not None
        and caller_input(str(load.args[0]))
        and depends_on(index, vector_axis)
    )


def _latency(scalar: Term) -> float:
    """Extra cycles of math functions and divisions beyond one ALU op."""
    own = 0.0
    if scalar.op == "Scalar.unary":
        own = UNARY_CYCLES.get(str(scalar.args[0]), 0.0)
    elif scalar.op == "Scalar.binary":
        own = BINARY_CYCLES.get(str(scalar.args[0]), 0.0)
    return own + sum(_latency(a) for a in scalar.args if isinstance(a, Term))


def _row_length(index: Term) -> int:
    """Elements in a row of the accessed buffer: the extent of the named axis that its last
    index walks (lowering names axes after dimensions); 1 (no rows) for any other index."""
    items = without_unit_tail(index_items(index))
    last = items[-1] if items else None  # (a scalar buffer has no index)
    if last is not None and last.op == "Index.axis" and last.args[0].op == "Axis.named":  # type: ignore[union-attr]
        return axis_extent(last.args[0])  # type: ignore[arg-type]
    return 1


def _run_step(index: Term, axis: Term) -> int:
    """The elements a loop over `axis` steps the last index of `index` by per trip, when it moves
    only that index, a plain axis that `axis` is a piece of (so that its trips read one run after
    the other when a run is that long); else 0. A constant added to the plain axis moves
    nothing."""
    items = without_unit_tail(index_items(index))
    if not items or any(moves_with(item, axis) for item in items[:-1]):
        return 0
    last = without_offset(items[-1])
    if last.op != "Index.axis":
        return 0
    walked = last.args[0]
    return _stride(axis, walked) if walked in pieces_of(axis) else 0  # type: ignore[arg-type]


def _stride(axis: Term, ancestor: Term) -> int:
    """Steps of `ancestor` per step of `axis`, a piece split from it (1 for itself)."""
    stride = 1
    while axis != ancestor:
        if axis.op == "Axis.outer":
            stride *= int(axis.args[1])  # type: ignore[arg-type]
        axis = axis.args[0]  # type: ignore[assignment]
    return stride


def _named_shape(index: Term) -> tuple[int, ...] | None:
    """The shape of a buffer indexed by `index`, when every index is a named axis (lowering
    names axes after the dimensions they walk, and outputs are indexed that way)."""
    items = index_items(index)
    if all(i.op == "Index.axis" and i.args[0].op == "Axis.named" for i in items):  # type: ignore[union-attr]
        return tuple(axis_extent(i.args[0]) for i in items)  # type: ignore[arg-type]
    return None
