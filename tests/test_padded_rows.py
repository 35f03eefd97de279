"""Temporaries whose rows are a multiple of L1_SET_SPAN bytes long get rows one cache line
longer (`backend_c.emit.temporary_strides`): the layout keeps every element apart and every row
aligned, puts consecutive rows in other cache sets, and the kernels that read and write such
temporaries (plainly, in vectors, on threads, summed into by a parallel sum) agree with numpy,
NaN, ±inf and -0.0 included, at every ISA level."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eqsat.backend_c.emit import dense_strides, emit, temporary_strides
from eqsat.core.terms import LoopProgram, Term
from eqsat.extract.machine import L1_SET_SPAN
from eqsat.rewrites.lowering import seq
from tests.isas import ISAS, skip_unless_runs
from tests.programs import compiled
from tests.test_loops import at, inner, named, nest, outer
from tests.test_numerics import assert_specials_agree, with_specials

LINE = 64


@settings(max_examples=200, deadline=None)
@given(
    shape=st.lists(st.sampled_from([1, 2, 3, 7, 16, 512, 768, 1000, 1024, 2048, 3072]), max_size=4),
    item_bytes=st.sampled_from([4, 8]),
)
def test_a_temporarys_rows_leave_the_cache_sets_of_the_row_before(
    shape: list[int], item_bytes: int
) -> None:
    """Each dimension's stride covers the whole of the next (no two elements share a place), a
    row starts on a line wherever the dense layout's rows do, and rows of whole L1 set spans
    start one line further on (consecutive rows in other sets); any other layout is dense."""
    dims = tuple(shape)
    strides, dense = temporary_strides(dims, item_bytes), dense_strides(dims)
    assert len(strides) == len(dims) and (not dims or strides[-1] == 1)
    for d in range(len(dims) - 1):
        assert strides[d] >= strides[d + 1] * dims[d + 1]
    if len(dims) >= 2 and dims[-1] * item_bytes % L1_SET_SPAN == 0:
        row_bytes = strides[-2] * item_bytes
        assert row_bytes % L1_SET_SPAN == LINE  # aligned, and the next line's set
    else:
        assert strides == dense


def squares_plus_row(rows: int, columns: int, kind: str) -> LoopProgram:
    """out0[i, j] = t0[i, j] + in1[j], t0[i, j] = in0[i, j]^2 written by a `kind` loop over the
    rows (the columns a vector loop)."""
    i, j = named("i0", rows), named("i1", columns)
    x = Term("Scalar.load", ("in0", at(i, j)))
    square = nest(
        [(i, kind, ()), (j, "vector", ())],
        Term("Stmt.store", ("t0", at(i, j), Term("Scalar.binary", ("mul", x, x)))),
    )
    row = Term("Scalar.load", ("in1", at(j)))
    total = Term("Scalar.binary", ("add", Term("Scalar.load", ("t0", at(i, j))), row))
    add = nest(
        [(i, "serial", ()), (j, "vector", ())], Term("Stmt.store", ("out0", at(i, j), total))
    )
    body = Term("Stmt.alloc", ("t0", (rows, columns), seq([square, add])))
    inputs = (("x", (rows, columns)), ("b", (columns,)))
    return LoopProgram(body, inputs, ((rows, columns),), "float32")


def summed_rows(depth: int, columns: int, tile: int) -> LoopProgram:
    """out0[r, j] = t0[r, j], t0[r, j] = sum over k of in0[k, j] * in1[k, r] (r < 2), summed in
    a parallel-sum loop over blocks of `tile` values of k: each thread sums into its own copy
    of the padded temporary."""
    k, r, j = named("k", depth), named("i0", 2), named("i1", columns)
    zero = nest(
        [(r, "serial", ()), (j, "vector", ())],
        Term("Stmt.store", ("t0", at(r, j), Term("Scalar.const", (0.0,)))),
    )
    product = Term(
        "Scalar.binary",
        ("mul", Term("Scalar.load", ("in0", at(k, j))), Term("Scalar.load", ("in1", at(k, r)))),
    )
    sums = nest(
        [
            (outer(k, tile), "parallel_sum", ()),
            (inner(k, tile), "serial", ()),
            (r, "serial", ()),
            (j, "vector", ()),
        ],
        Term("Stmt.accumulate", ("t0", at(r, j), "sum", product)),
    )
    out = nest(
        [(r, "serial", ()), (j, "vector", ())],
        Term("Stmt.store", ("out0", at(r, j), Term("Scalar.load", ("t0", at(r, j))))),
    )
    body = Term("Stmt.alloc", ("t0", (2, columns), seq([zero, sums, out])))
    inputs = (("x", (depth, columns)), ("w", (depth, 2)))
    return LoopProgram(body, inputs, ((2, columns),), "float32")


def padded_row(columns: int) -> str:
    """The C of a padded float32 row's stride."""
    return f"* {columns + LINE // 4}"


@pytest.mark.parametrize("isa", ISAS)
@settings(max_examples=6, deadline=None)
@given(
    rows=st.integers(1, 20),
    columns=st.sampled_from([1024, 2048]),
    kind=st.sampled_from(["serial", "parallel"]),
    seed=st.integers(0, 1000),
)
def test_a_padded_temporary_keeps_its_values_and_specials(
    isa: str, rows: int, columns: int, kind: str, seed: int
) -> None:
    program = squares_plus_row(rows, columns, kind)
    source = emit(program, isa, "eqsat_kernel")
    assert padded_row(columns) in source
    kernel = compiled(program, isa, source)
    skip_unless_runs(isa)
    rng = np.random.default_rng(seed)
    x, b = with_specials(rng, (rows, columns), 0.02), with_specials(rng, (columns,), 0.02)
    with np.errstate(all="ignore"):
        want = x * x + b
        reference = x.astype(np.float64) ** 2 + b
    assert_specials_agree(kernel(x=x, b=b), want, reference)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("columns", [1024, 17_408])  # thread copies on the stack, on the heap
def test_a_parallel_sum_into_a_padded_temporary_adds_every_row(isa: str, columns: int) -> None:
    depth = 37
    program = summed_rows(depth, columns, tile=8)
    source = emit(program, isa, "eqsat_kernel")
    assert padded_row(columns) in source and "t0_sum[" in source
    elements = 2 * (columns + LINE // 4)  # the copies cover the padding too
    assert f"eq_e < {elements};" in source and f"eq_e < {math.prod((2, columns))};" not in source
    kernel = compiled(program, isa, source)
    skip_unless_runs(isa)
    rng = np.random.default_rng(5)
    x, w = with_specials(rng, (depth, columns), 0.001), with_specials(rng, (depth, 2), 0.0)
    with np.errstate(all="ignore"):
        want = (w[:, :, None] * x[:, None, :]).sum(axis=0)
        reference = (w[:, :, None].astype(np.float64) * x[:, None, :]).sum(axis=0)
    assert_specials_agree(kernel(x=x, w=w), want, reference)
