"""Parallel sums (LoopKind.parallel_sum): a loop outside every other one whose iterations only
sum into buffers they share, run on threads that each sum into a zeroed copy of those buffers,
the copies added in thread order after the loop (`eqsat.core.loops.privatized`).

The compiled C is checked against numpy on inputs with NaN, ±inf, -0.0 and subnormals at every
ISA level, for nests built by hand (any extents, tiles, vector or plain inner loops, copies on
the stack and on the heap) and for programs the optimizer schedules that way.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import eqsat
from eqsat.backend_c.emit import emit
from eqsat.core.loops import privatized
from eqsat.core.terms import LoopProgram, Term
from eqsat.rewrites.lowering import seq
from eqsat.tools.whole_programs import logistic_gradient
from tests.isas import ISAS, skip_unless_runs
from tests.machines import PINNED
from tests.programs import compiled
from tests.test_loops import at, inner, named, nest, outer
from tests.test_numerics import assert_specials_agree, with_specials


def weighted_column_sums(rows: int, columns: int, tile: int, columns_kind: str) -> LoopProgram:
    """out0[j] = sum over k of in0[k, j] * in1[k], xᵀ @ r, summed over blocks of `tile` rows in
    a parallel-sum loop, the columns in a `columns_kind` loop inside."""
    k, j = named("k", rows), named("i0", columns)
    zero = nest(
        [(j, "serial", ())], Term("Stmt.store", ("out0", at(j), Term("Scalar.const", (0.0,))))
    )
    product = Term(
        "Scalar.binary",
        ("mul", Term("Scalar.load", ("in0", at(k, j))), Term("Scalar.load", ("in1", at(k)))),
    )
    sums = nest(
        [
            (outer(k, tile), "parallel_sum", ()),
            (inner(k, tile), "serial", ()),
            (j, columns_kind, ()),
        ],
        Term("Stmt.accumulate", ("out0", at(j), "sum", product)),
    )
    inputs = (("x", (rows, columns)), ("r", (rows,)))
    return LoopProgram(seq([zero, sums]), inputs, ((columns,),), "float32")


def check(program: LoopProgram, isa: str, seed: int, rate: float) -> str:
    """`program` (a `weighted_column_sums`) compiled for `isa` against numpy; its C source."""
    (_, (rows, columns)), _ = program.inputs
    rng = np.random.default_rng(seed)
    x, r = with_specials(rng, (rows, columns), rate), with_specials(rng, (rows,), rate)
    with np.errstate(all="ignore"):
        want = (x * r[:, None]).sum(axis=0)
        reference = (x.astype(np.float64) * r[:, None]).sum(axis=0)
    source = emit(program, isa, "eqsat_kernel")
    kernel = compiled(program, isa, source)
    skip_unless_runs(isa)
    assert_specials_agree(kernel(x=x, r=r), want, reference)
    return source


@pytest.mark.parametrize("isa", ISAS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.integers(1, 300),
    columns=st.integers(1, 70),
    tile=st.sampled_from([1, 4, 8, 64]),
    columns_kind=st.sampled_from(["serial", "vector"]),
    rate=st.sampled_from([0.0, 0.01, 0.2]),
    seed=st.integers(0, 1000),
)
def test_parallel_sum_nest_agrees_with_numpy_with_special_values(
    isa: str, rows: int, columns: int, tile: int, columns_kind: str, rate: float, seed: int
) -> None:
    """Any extents, a tile that may leave a remainder block or give one thread no block, and
    a vector or plain loop over the columns (a register tile where the columns fit)."""
    program = weighted_column_sums(rows, columns, tile, columns_kind)
    source = check(program, isa, seed, rate)
    assert "out0_sum[" in source and "#pragma omp ordered" in source


@pytest.mark.parametrize("isa", ISAS)
def test_parallel_sum_copies_beyond_the_stack_limit_are_allocated(isa: str) -> None:
    """Copies of more than 64 KiB come from the heap, and are freed."""
    source = check(weighted_column_sums(37, 17_000, 8, "vector"), isa, seed=3, rate=0.001)
    assert "out0_sum = aligned_alloc(" in source and "free(out0_sum);" in source


def test_privatized_are_the_summed_buffers_the_iterations_share() -> None:
    """Shared: out0[j] in a loop over row blocks. Not shared: a temporary allocated inside,
    and a buffer each block sums into at its own rows."""
    program = weighted_column_sums(16, 8, 4, "vector")
    loop = program.body.args[1]
    assert privatized(loop.args[0], loop.args[2]) == ("out0",)  # type: ignore[union-attr, arg-type]
    k, j = named("k", 16), named("i0", 8)
    own_rows = Term("Stmt.accumulate", ("t0", at(k, j), "sum", Term("Scalar.const", (1.0,))))
    inside = Term(
        "Stmt.alloc",
        ("t1", (8,), Term("Stmt.accumulate", ("t1", at(j), "sum", Term("Scalar.const", (1.0,))))),
    )
    body = nest([(inner(k, 4), "serial", ()), (j, "serial", ())], seq([own_rows, inside]))
    assert privatized(outer(k, 4), body) == ()


def column_statistics(x: eqsat.Tensor) -> eqsat.Tensor:
    """Batch-norm's statistics of the columns: the mean of x², less the squared mean."""
    mean = x.mean(axis=0)
    return (x * x).mean(axis=0) - mean * mean


PROGRAMS = {
    "logistic gradient": (
        {"x": (4096, 96), "w": (96, 1), "y": (4096, 1)},
        lambda t: logistic_gradient(t["x"], t["w"], t["y"], eqsat),
        lambda a: logistic_gradient(a["x"], a["w"], a["y"], np),
    ),
    "column sums": ({"x": (20000, 48)}, lambda t: t["x"].sum(axis=0), lambda a: a["x"].sum(0)),
    "column statistics": (
        {"x": (8192, 40)},
        lambda t: column_statistics(t["x"]),
        lambda a: (a["x"] * a["x"]).mean(axis=0) - a["x"].mean(axis=0) ** 2,
    ),
}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", PROGRAMS)
def test_long_reductions_into_small_outputs_run_as_parallel_sums(isa: str, name: str) -> None:
    """Reductions over many rows into a few columns are scheduled as parallel sums on a
    machine of two cores, and agree with numpy on special values."""
    shapes, build, reference = PROGRAMS[name]
    kernel = eqsat.compile(
        build({n: eqsat.tensor(n, s) for n, s in shapes.items()}),
        machine=PINNED,
        isa=isa,
        progress=False,
    )
    assert "parallel sum" in kernel.explain(), kernel.explain()
    rng = np.random.default_rng(11)
    inputs = {n: with_specials(rng, s, rate=0.0005) for n, s in shapes.items()}
    with np.errstate(all="ignore"):
        want = np.asarray(reference(inputs), np.float32)
        reference64 = reference({n: a.astype(np.float64) for n, a in inputs.items()})
    skip_unless_runs(isa)
    assert_specials_agree(kernel(**inputs), want, reference64)
