"""Properties the stage-2 cost model must have on any machine (timing belongs to the bench)."""

from __future__ import annotations

import pytest

from eqsat.core.terms import Term
from eqsat.extract.loop_cost import (
    FIRST_TOUCH_CYCLES_PER_BYTE,
    PARALLEL_CALL_RESTARTS,
    PARALLEL_START,
    REUSED_ALLOCATION_BYTES,
    SPLIT_LOAD_SHARE,
    LoopCost,
)
from eqsat.extract.machine import Machine
from tests.test_loops import at, inner, named, nest, outer

MACHINES = [
    Machine("avx512", cores=2, l1_bytes=48 << 10, l2_bytes=2 << 20, l3_bytes=32 << 20),
    Machine("avx2", cores=8, l1_bytes=32 << 10, l2_bytes=256 << 10, l3_bytes=8 << 20),
]


def copy(n: int, kind: str, transposed: bool = False) -> Term:
    """out0[i, j] = in0[i, j] (or in0[j, i]) over an n x n nest whose inner loop is `kind`."""
    i, j = named("i0", n), named("i1", n)
    source = at(j, i) if transposed else at(i, j)
    store = Term("Stmt.store", ("out0", at(i, j), Term("Scalar.load", ("in0", source))))
    args = (16,) if kind == "vector" else ()
    return nest([(i, "serial", ()), (j, kind, args)], store)


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.isa)
def test_vectorized_unit_stride_beats_scalar(machine: Machine) -> None:
    cost = LoopCost(machine, "float32")
    assert cost.estimate(copy(256, "vector")).cycles < cost.estimate(copy(256, "serial")).cycles


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.isa)
def test_strided_inner_loop_moves_more_bytes(machine: Machine) -> None:
    cost = LoopCost(machine, "float32")
    unit, strided = cost.estimate(copy(1024, "serial")), cost.estimate(copy(1024, "serial", True))
    assert all(s >= u for s, u in zip(strided.traffic, unit.traffic, strict=True))
    assert strided.traffic[0] > unit.traffic[0]  # a new line per element instead of per 16


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.isa)
@pytest.mark.parametrize("kind", ["serial", "vector"])
def test_a_larger_problem_never_costs_less(machine: Machine, kind: str) -> None:
    cost = LoopCost(machine, "float32")
    sizes = [16, 32, 64, 256, 1024, 4096]
    cycles = [cost.estimate(copy(n, kind)).cycles for n in sizes]
    assert cycles == sorted(cycles)


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.isa)
def test_parallel_pays_only_above_a_size_threshold(machine: Machine) -> None:
    cost = LoopCost(machine, "float32")

    def exp_rows(n: int, kind: str) -> Term:
        i, j = named("i0", n), named("i1", n)
        value = Term("Scalar.unary", ("exp", Term("Scalar.load", ("in0", at(i, j)))))
        store = Term("Stmt.store", ("out0", at(i, j), value))
        return nest([(i, kind, ()), (j, "vector", (16,))], store)

    small, large = 16, 2048
    assert (
        cost.estimate(exp_rows(small, "parallel")).cycles
        > cost.estimate(exp_rows(small, "serial")).cycles
    )
    assert (
        cost.estimate(exp_rows(large, "parallel")).cycles
        < cost.estimate(exp_rows(large, "serial")).cycles
    )


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.isa)
@pytest.mark.parametrize("rows", [64, 2048])
def test_a_statement_around_a_parallel_loop_costs_what_the_loop_does(
    machine: Machine, rows: int
) -> None:
    """An allocation around a parallel loop adds no traffic: the loop's traffic is its busiest
    core's share, which the allocation once priced again from the whole footprint (1.5x a
    product's loop alone; extraction then passed over cheaper nests)."""
    i, j = named("i0", rows), named("i1", 4096)
    doubled = Term(
        "Scalar.binary",
        ("mul", Term("Scalar.load", ("in0", at(i, j))), Term("Scalar.const", (2.0,))),
    )
    read = Term("Scalar.unary", ("exp", Term("Scalar.load", ("t0", at(i, j)))))
    row = Term(
        "Stmt.seq",
        (
            nest([(j, "vector", (16,))], Term("Stmt.store", ("t0", at(i, j), doubled))),
            nest([(j, "vector", (16,))], Term("Stmt.store", ("out0", at(i, j), read))),
        ),
    )
    cost = LoopCost(machine, "float32")
    for kind in ("parallel", "serial"):
        loop = nest([(i, kind, ())], row)
        allocated = Term("Stmt.alloc", ("t0", (rows, 4096), loop))
        around = cost.estimate(allocated)
        assert around.cycles <= cost.estimate(loop).cycles + cost.first_touch(allocated)


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.isa)
def test_a_parallel_loop_of_one_trip_gains_nothing(machine: Machine) -> None:
    one, j = named("i0", 1), named("i1", 1 << 20)
    value = Term("Scalar.unary", ("exp", Term("Scalar.load", ("in0", at(one, j)))))
    store = Term("Stmt.store", ("out0", at(one, j), value))
    cost = LoopCost(machine, "float32")
    parallel = cost.estimate(nest([(one, "parallel", ()), (j, "vector", (16,))], store))
    serial = cost.estimate(nest([(one, "serial", ()), (j, "vector", (16,))], store))
    assert parallel.compute == serial.compute
    assert parallel.cycles > serial.cycles  # and it pays the team start


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.isa)
def test_a_parallel_loop_is_as_slow_as_its_busiest_core(machine: Machine) -> None:
    """OpenMP's static schedule gives a core ceil(trips / cores) trips: on 2 cores, 3 trips
    take as long as 4, and 5 trips as long as 6."""
    n = machine.cores
    j = named("i1", 1 << 16)

    def compute(rows: int, kind: str) -> float:
        i = named("i0", rows)
        value = Term("Scalar.unary", ("exp", Term("Scalar.load", ("in0", at(i, j)))))
        store = Term("Stmt.store", ("out0", at(i, j), value))
        return (
            LoopCost(machine, "float32")
            .estimate(nest([(i, kind, ()), (j, "vector", (16,))], store))
            .compute
        )

    for rows, busiest in ((n + 1, 2), (2 * n, 2), (2 * n + 1, 3)):
        assert compute(rows, "parallel") == pytest.approx(compute(rows, "serial") * busiest / rows)


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.isa)
def test_a_parallel_start_costs_what_the_calibration_measured_back_to_back(
    machine: Machine,
) -> None:
    """A parallel loop is priced as a kernel called in a loop pays it: PARALLEL_CALL_RESTARTS
    region starts back to back (the start after idle is not the model's)."""
    from dataclasses import replace

    i, j = named("i0", 64), named("i1", 64)
    store = Term("Stmt.store", ("out0", at(i, j), Term("Scalar.load", ("in0", at(i, j)))))
    program = nest([(i, "parallel", ()), (j, "vector", (16,))], store)
    base = calibrated(machine, 200.0, 100.0, 40.0)  # a 1 GHz clock
    assert base.calibration is not None
    restarts = PARALLEL_CALL_RESTARTS
    for seconds, cycles in ((0.0, PARALLEL_START), (1e-6, restarts * 1e3), (4e-6, restarts * 4e3)):
        figures = replace(
            base.calibration, parallel_start_seconds=3e-5, parallel_restart_seconds=seconds
        )
        estimate = LoopCost(replace(base, calibration=figures), "float32").estimate(program)
        assert estimate.overhead == pytest.approx(cycles)


def calibrated(machine: Machine, l2: float, l3: float, dram: float) -> Machine:
    """`machine` with made-up triad bandwidths (GB/s on 1 thread; DRAM 1.5x on all cores) at a
    1 GHz clock, so bytes per second read as bytes per cycle / 1e9."""
    from dataclasses import replace

    from eqsat.extract.machine import Calibration

    threads = (1, machine.cores)
    per_level = {"L1": 500.0, "L2": l2, "L3": l3, "DRAM": dram}
    bandwidth = {
        level: {t: gbs * 1e9 * (1.5 if level == "DRAM" and t > 1 else 1) for t in threads}
        for level, gbs in per_level.items()
    }
    flops = {dtype: {t: 64e9 * t for t in threads} for dtype in ("float32", "float64")}
    return replace(machine, calibration=Calibration(flops, bandwidth, clock_hz=1e9))


def test_fetch_rates_come_from_the_calibration_and_stay_ordered() -> None:
    from eqsat.extract.loop_cost import BYTES_PER_CYCLE, DRAM_SCALING, fetch_rates

    machine = MACHINES[0]
    assert fetch_rates(machine) == (BYTES_PER_CYCLE, DRAM_SCALING)
    assert fetch_rates(calibrated(machine, 60, 30, 10)) == ((60, 30, 10), 1.5)
    assert fetch_rates(calibrated(machine, 20, 30, 10)) == ((30, 30, 10), 1.5)  # noisy L2
    slow_dram = LoopCost(calibrated(machine, 60, 30, 5), "float32").estimate(copy(4096, "vector"))
    fast_dram = LoopCost(calibrated(machine, 60, 30, 20), "float32").estimate(copy(4096, "vector"))
    assert slow_dram.cycles > fast_dram.cycles


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.isa)
def test_only_a_temporary_the_allocator_cannot_reuse_faults_and_once_per_call(
    machine: Machine,
) -> None:
    one = Term("Scalar.const", (1.0,))
    cost = LoopCost(machine, "float32")

    def filled(elements: int) -> Term:
        j = named("i1", elements)
        fill = nest([(j, "serial", ())], Term("Stmt.store", ("t0", at(j), one)))
        return Term("Stmt.alloc", ("t0", (elements,), fill))

    reused = REUSED_ALLOCATION_BYTES // 4
    assert cost.estimate(filled(reused)).first_touch == 0  # served again from malloc's heap
    mapped = cost.estimate(filled(reused + 16)).first_touch
    assert mapped == pytest.approx((reused + 16) * 4 * FIRST_TOUCH_CYCLES_PER_BYTE)
    i = named("i0", 64)
    assert cost.estimate(nest([(i, "serial", ())], filled(reused + 16))).first_touch == mapped


def matvec(n: int, block: int | None, column: bool) -> Term:
    """out0 += in0 @ in1 (n x n times n, or times an (n, 1) column) as a horizontal reduction
    over k, row by row (block None) or with k blocked outside blocks of rows (1 KB pieces of each
    row at a time for block 256)."""
    i, k, one = named("i0", n), named("k", n), named("i1", 1)
    right = Term("Scalar.load", ("in1", at(k, one) if column else at(k)))
    product = Term("Scalar.binary", ("mul", Term("Scalar.load", ("in0", at(i, k))), right))
    target = at(i, one) if column else at(i)
    accumulate = Term("Stmt.accumulate", ("out0", target, "sum", product))
    if block is None:
        return nest([(i, "serial", ()), (k, "vector", (16,))], accumulate)
    loops = [
        (outer(i, block), "serial", ()),
        (outer(k, block), "serial", ()),
        (inner(i, block), "serial", ()),
        (inner(k, block), "vector", (16,)),
    ]
    return nest(loops, accumulate)


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.isa)
@pytest.mark.parametrize("column", [False, True], ids=["vector", "column"])
def test_streaming_rows_in_pieces_costs_more(machine: Machine, column: bool) -> None:
    """The same bytes, but a blocked matrix-vector product restarts the DRAM stream in every
    row piece (STREAM_RESTART_BYTES); an (n, 1) column is priced as n contiguous elements."""
    cost = LoopCost(machine, "float32")
    rows = cost.estimate(matvec(4096, None, column))
    blocked = cost.estimate(matvec(4096, 256, column))
    assert blocked.traffic[2] > rows.traffic[2] * 1.1
    assert blocked.cycles > rows.cycles
    assert rows.footprint < 4096 * 4096 * 4 + 3 * 4096 * 4 + 64 * 3  # the column is not 4096 lines


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.isa)
def test_a_horizontal_reduction_is_finished_once_per_run(machine: Machine) -> None:
    """Reducing a row in 8 pieces pays the cross-lane finish 8 times; one whole-row loop, once."""
    cost = LoopCost(machine, "float32")
    n = 2048
    i, k = named("i0", n), named("k", n)
    product = Term(
        "Scalar.binary",
        ("mul", Term("Scalar.load", ("in0", at(i, k))), Term("Scalar.load", ("in1", at(k)))),
    )
    accumulate = Term("Stmt.accumulate", ("out0", at(i), "sum", product))
    whole = nest([(i, "serial", ()), (k, "vector", (16,))], accumulate)
    pieces = nest(
        [(i, "serial", ()), (outer(k, 256), "unroll", (8,)), (inner(k, 256), "vector", (16,))],
        accumulate,
    )
    assert cost.estimate(pieces).compute > cost.estimate(whole).compute


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.isa)
def test_a_large_output_stored_through_the_caches_is_read_first(machine: Machine) -> None:
    """Write allocation: a scalar store loop fetches each output line before writing it; the
    vector loop the emitter makes non-temporal (eqsat.core.loops.streamed_store) does not."""
    cost = LoopCost(machine, "float32")
    n = 2048  # a 16 MB output
    streamed, allocating = cost.estimate(copy(n, "vector")), cost.estimate(copy(n, "serial"))
    assert cost.allocating_stores(copy(n, "vector")) == frozenset()
    assert cost.allocating_stores(copy(n, "serial")) == {"out0"}
    output = n * n * 4
    assert allocating.traffic[2] - streamed.traffic[2] == pytest.approx(output, rel=0.01)
    small = LoopCost(machine, "float32")
    assert small.allocating_stores(copy(256, "serial")) == frozenset()  # may stay in cache


def one_row_tile(columns_from: str, rows_from: str = "in0") -> Term:
    """A register tile of 1 row x 64 columns over k: t[i1] += rows[k] * columns[k, i1]."""
    k, j = named("k", 163), named("i1", 64)
    product = Term(
        "Scalar.binary",
        (
            "mul",
            Term("Scalar.load", (rows_from, at(k))),
            Term("Scalar.load", (columns_from, at(k, j))),
        ),
    )
    return nest(
        [(k, "serial", ()), (j, "vector", ())],
        Term("Stmt.accumulate", ("out0", at(j), "sum", product)),
    )


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.isa)
def test_a_tiles_vector_loads_from_the_callers_array_are_priced_split(machine: Machine) -> None:
    """A register tile's vectors loaded from an input (numpy's 16-byte aligned array) cost
    SPLIT_LOAD_SHARE more than the same loads from an aligned temporary (a packed panel); the
    broadcast element from an input costs what it did."""
    cost = LoopCost(machine, "float32")
    share = SPLIT_LOAD_SHARE[machine.isa]
    assert share > 0
    from_input = cost.estimate(one_row_tile("in1")).compute
    from_panel = cost.estimate(one_row_tile("pk0")).compute
    assert from_input > from_panel
    broadcast_from_panel = cost.estimate(one_row_tile("in1", rows_from="pk1")).compute
    assert broadcast_from_panel == pytest.approx(from_input)


def row_tile(columns: int, output: str, columns_from: str, lanes: int) -> Term:
    """A register tile of 4 rows x 2 vectors of `lanes`, 16 deep, of out[i0, i1] += A[i0, k] *
    B[k, i1], the rows `columns` elements long (the tile's columns a block of them)."""
    k, i0, i1 = named("k", 16), named("i0", 4), named("i1", columns)
    block = inner(i1, 2 * lanes)
    product = Term(
        "Scalar.binary",
        (
            "mul",
            Term("Scalar.load", ("pk1", at(i0, k))),
            Term("Scalar.load", (columns_from, at(k, i1))),
        ),
    )
    return nest(
        [
            (outer(i1, 32), "serial", ()),
            (k, "serial", ()),
            (i0, "unroll", (4,)),
            (block, "vector", ()),
        ],
        Term("Stmt.accumulate", (output, at(i0, i1), "sum", product)),
    )


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.isa)
def test_a_tiles_accesses_to_rows_a_set_span_apart_are_priced_aliased(machine: Machine) -> None:
    """A tile's accumulators in rows of a caller's output 4 KiB apart (1024 floats), and its
    operand read in place a row per step, cost more than in a temporary's rows (padded,
    `backend_c.emit`) or in a packed panel; at 1008 floats a row, they cost the same."""
    cost = LoopCost(machine, "float32")

    def compute(columns: int, output: str, columns_from: str = "pk0") -> float:
        return cost.estimate(row_tile(columns, output, columns_from, cost.lanes)).compute

    assert compute(1024, "out0") > 1.2 * compute(1024, "t0")
    assert compute(1008, "out0") == pytest.approx(compute(1008, "t0"))
    in_place = compute(1024, "t0", "in1") / compute(1024, "t0", "pk0")
    assert in_place > 1.2 * compute(1008, "t0", "in1") / compute(1008, "t0", "pk0")
