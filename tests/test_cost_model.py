"""Properties the stage-2 cost model must have on any machine (timing belongs to the bench)."""

from __future__ import annotations

import pytest

from eqsat.terms import Term
from extract.loop_cost import LoopCost
from extract.machine import Machine
from tests.test_loops import at, named, nest

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
    assert cost.estimate(exp_rows(small, "parallel")).cycles > cost.estimate(
        exp_rows(small, "serial")
    ).cycles
    assert cost.estimate(exp_rows(large, "parallel")).cycles < cost.estimate(
        exp_rows(large, "serial")
    ).cycles
