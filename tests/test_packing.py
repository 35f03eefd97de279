"""Panel packing (eqsat.rewrites.packing): where it applies, where it must not, and that a packed
program computes what it computed before (interpreter and compiled C against numpy)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eqsat
from eqsat.backend_c.emit import emit
from eqsat.backend_c.isa import VectorIsa
from eqsat.core.interp import run
from eqsat.core.loops import top_statements
from eqsat.core.terms import LoopProgram, Term
from eqsat.extract.machine import L1_SET_SPAN
from eqsat.rewrites.packing import pack_panels
from tests.isas import ISAS, VECTOR_ISAS
from tests.machines import PINNED
from tests.programs import agrees_with_interpreter, assert_close, assert_variant_agrees, compiled
from tests.test_loops import at, inner, named, nest, outer
from tests.test_numerics import assert_specials_agree, with_specials


def load(buffer: str, index: Term) -> Term:
    return Term("Scalar.load", (buffer, index))


def tiled_matmul(
    m: int, k: int, n: int, ti: int, tk: int, tj: int, row_blocks_unrolled: bool = False
) -> LoopProgram:
    """out0 = in0 @ in1 as the optimizer tiles it: k and column blocks outside, row blocks
    inside (reusing one block of in1; a serial loop, or unrolled with `row_blocks_unrolled`),
    register tiles of ti rows x tj columns over k."""
    i, j, r = named("i0", m), named("i1", n), named("k", k)
    zero = nest(
        [(i, "serial", ()), (j, "vector", ())],
        Term("Stmt.store", ("out0", at(i, j), Term("Scalar.const", (0.0,)))),
    )
    product = Term("Scalar.binary", ("mul", load("in0", at(i, r)), load("in1", at(r, j))))
    row_blocks = ("unroll", (m // ti,)) if row_blocks_unrolled else ("serial", ())
    tiles = nest(
        [
            (outer(r, tk), "serial", ()),
            (outer(j, tj), "serial", ()),
            (outer(i, ti), *row_blocks),
            (inner(r, tk), "serial", ()),
            (inner(i, ti), "unroll", (ti,)),
            (inner(j, tj), "vector", ()),
        ],
        Term("Stmt.accumulate", ("out0", at(i, j), "sum", product)),
    )
    body = Term("Stmt.seq", (zero, tiles))
    return LoopProgram(body, (("x", (m, k)), ("w", (k, n))), ((m, n),), "float32")


def packed_allocs(term: Term) -> list[Term]:
    found = [term] if term.op == "Stmt.alloc" and str(term.args[0]).startswith("pk") else []
    return found + [a for x in term.args if isinstance(x, Term) for a in packed_allocs(x)]


def agrees_after_packing(program: LoopProgram) -> LoopProgram:
    """The packed program, checked against the unpacked one in float64."""
    packed = pack_panels(program)
    rng = np.random.default_rng(5)
    inputs = {name: rng.standard_normal(shape) for name, shape in program.inputs}
    want = run(program, inputs, dtype=np.float64)[0]
    assert_variant_agrees(run(packed, inputs, dtype=np.float64)[0], want, packed.body)
    return packed


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from([1, 2, 4]),
    st.sampled_from([2, 3, 6]),
    st.sampled_from([8, 16]),
    st.integers(2, 3),
    st.integers(1, 2),
    st.integers(2, 3),
)
def test_a_reused_block_is_packed_and_the_product_is_unchanged(
    ti: int, tk: int, tj: int, row_blocks: int, k_blocks: int, column_blocks: int
) -> None:
    m, k, n = ti * row_blocks, tk * k_blocks, tj * column_blocks
    packed = agrees_after_packing(tiled_matmul(m, k, n, ti, tk, tj))
    (alloc,) = packed_allocs(packed.body)
    assert alloc.args[1] == (tk, tj)  # one k block of one column block, rows consecutive
    assert "in1" not in repr(top_statements(alloc.args[2])[1])  # type: ignore[arg-type]


@pytest.mark.parametrize("isa", ISAS)
def test_the_pipeline_packs_a_large_matmul_and_the_kernel_matches_numpy(isa: str) -> None:
    a, b = eqsat.tensor("a", (512, 512)), eqsat.tensor("b", (512, 512))
    rng = np.random.default_rng(0)
    x, w = (rng.standard_normal((512, 512), np.float32) for _ in range(2))
    kernel = eqsat.compile(a @ b, machine=PINNED, isa=isa, progress=False)
    # (the scalar schedule has no vector loop, the packing's unit-stride condition)
    assert (" pk0[" in kernel.c_source) == (isa != "scalar"), isa  # the panel's declaration
    assert_close(kernel(x, w), x @ w, "float32")


def test_panels_are_not_packed_without_reuse_or_when_already_contiguous() -> None:
    one_row_block = tiled_matmul(4, 6, 32, ti=4, tk=6, tj=16)  # no loop reuses the block
    assert pack_panels(one_row_block) == one_row_block
    whole_rows = tiled_matmul(8, 6, 16, ti=4, tk=6, tj=16)  # the block is 6 whole rows of in1
    assert pack_panels(whole_rows) == whole_rows


@pytest.mark.parametrize("isa", ISAS)
def test_row_blocks_unrolled_around_the_depth_loop_reuse_the_panel(isa: str) -> None:
    """Each unrolled copy of the row-block loop runs the depth loop over the block of in1 again
    (25x34 @ 34x513 chose such a nest: read in place, its rows 2052 bytes apart overfill L1
    sets); the unrolled row loop inside the depth loop shares each load and packs nothing."""
    program = tiled_matmul(8, 6, 32, ti=4, tk=6, tj=16, row_blocks_unrolled=True)
    packed = agrees_after_packing(program)
    (alloc,) = packed_allocs(packed.body)
    assert alloc.args[1] == (6, 16)
    agrees_with_interpreter(packed, isa)
    single_row_block = tiled_matmul(4, 6, 32, ti=4, tk=6, tj=16, row_blocks_unrolled=True)
    assert pack_panels(single_row_block) == single_row_block


def test_a_buffer_written_inside_the_loop_is_not_packed() -> None:
    program = tiled_matmul(8, 6, 32, ti=4, tk=6, tj=16)
    # the product accumulates into its own right operand
    written = program.with_body(_retarget(program.body, "out0", "in1"))
    assert pack_panels(written) == written


def test_only_the_reads_of_the_panel_index_are_packed() -> None:
    program = tiled_matmul(8, 6, 32, ti=4, tk=6, tj=16)
    i, j, r = named("i0", 8), named("i1", 32), named("k", 6)
    both = Term("Scalar.binary", ("add", load("in1", at(r, j)), load("in1", at(r, i))))
    packed = agrees_after_packing(program.with_body(_replace_value(program.body, both)))
    (alloc,) = packed_allocs(packed.body)
    reads = repr(top_statements(alloc.args[2])[1])  # type: ignore[arg-type]
    assert "'pk0'" in reads and "'in1'" in reads  # in1[k, i0] still reads the input


def test_an_operand_expression_is_packed_once_per_panel() -> None:
    """x @ (w + z): the panel holds w + z, so the sum is not recomputed for every row block."""
    program = tiled_matmul(8, 6, 32, ti=4, tk=3, tj=16)
    i, j, r = named("i0", 8), named("i1", 32), named("k", 6)
    right = Term("Scalar.binary", ("add", load("in1", at(r, j)), load("in2", at(r, j))))
    value = Term("Scalar.binary", ("mul", load("in0", at(i, r)), right))
    body = _replace_value(program.body, value)
    inputs = (*program.inputs, ("z", (6, 32)))
    packed = agrees_after_packing(LoopProgram(body, inputs, program.outputs, "float32"))
    (alloc,) = packed_allocs(packed.body)
    copy, reads = top_statements(alloc.args[2])  # type: ignore[arg-type]
    assert "'add'" in repr(copy) and "'add'" not in repr(reads)


def _retarget(term: Term, old: str, new: str) -> Term:
    args = tuple(_retarget(a, old, new) if isinstance(a, Term) else a for a in term.args)
    if term.op == "Stmt.accumulate" and args[0] == old:
        args = (new, *args[1:])
    return Term(term.op, args)


def _replace_value(term: Term, value: Term) -> Term:
    if term.op == "Stmt.accumulate":
        return Term(term.op, (*term.args[:3], value))
    args = tuple(_replace_value(a, value) if isinstance(a, Term) else a for a in term.args)
    return Term(term.op, args)


@pytest.mark.parametrize("isa", VECTOR_ISAS)
@settings(max_examples=4, deadline=None)
@given(
    row_tiles=st.integers(1, 3),
    edge_rows=st.sampled_from([0, 3]),
    rows=st.sampled_from([4, 8]),
    depth=st.sampled_from([(16, 32), (16, 37), (33, 40)]),
    dtype=st.sampled_from(["float32", "float64"]),
)
def test_register_tile_rows_4k_apart_are_packed_and_transposed(
    isa: str, row_tiles: int, edge_rows: int, rows: int, depth: tuple[int, int], dtype: str
) -> None:
    """in0's rows are 4 KiB apart (the product reads the first k of each), so a register
    tile's rows share L1 sets: they are packed per depth block ([row tile, k, row] panels),
    copied by in-register transposes where whole row tiles fill whole vectors; the kernel
    agrees with the interpreter, edge rows and a depth remainder included."""
    tk, k = depth
    m = rows * row_tiles + edge_rows
    program = _with_rows_apart(tiled_matmul(m, k, 32, ti=rows, tk=tk, tj=16), L1_SET_SPAN, dtype)
    packed = agrees_after_packing(program)
    shapes = [alloc.args[1] for alloc in packed_allocs(packed.body)]
    assert (-(-m // rows), tk, rows) in shapes
    source = emit(packed, isa)
    whole_vectors = VectorIsa(isa, dtype).lanes % rows == 0  # rows of a step fill a vector
    assert ("_row1 =" in source) == (edge_rows == 0 and whole_vectors)
    agrees_with_interpreter(packed, isa, source=source)


def test_a_rows_panel_is_packed_once_per_depth_block_outside_the_column_blocks() -> None:
    """Column blocks outside depth blocks: the rows panel, which does not move with the column
    block, is hoisted with its depth block outside the column blocks (copied once per depth
    block, not once per column block and depth block); the product is unchanged."""
    m, k, n, ti, tk, tj = 16, 32, 64, 8, 16, 16
    i, j, r = named("i0", m), named("i1", n), named("k", k)
    product = Term("Scalar.binary", ("mul", load("in0", at(i, r)), load("in1", at(r, j))))
    zero = nest(
        [(i, "serial", ()), (j, "vector", ())],
        Term("Stmt.store", ("out0", at(i, j), Term("Scalar.const", (0.0,)))),
    )
    tiles = nest(
        [
            (outer(j, 32), "serial", ()),
            (outer(r, tk), "serial", ()),
            (outer(inner(j, 32), tj), "serial", ()),
            (outer(i, ti), "serial", ()),
            (inner(r, tk), "serial", ()),
            (inner(i, ti), "unroll", (ti,)),
            (inner(inner(j, 32), tj), "vector", ()),
        ],
        Term("Stmt.accumulate", ("out0", at(i, j), "sum", product)),
    )
    program = LoopProgram(
        Term("Stmt.seq", (zero, tiles)), (("x", (m, k)), ("w", (k, n))), ((m, n),), "float32"
    )
    packed = agrees_after_packing(_with_rows_apart(program, L1_SET_SPAN, "float32"))
    top = top_statements(packed.body)[1]
    assert top.args[0] == outer(r, tk)  # the depth blocks outside
    rows_panel = top.args[2]
    assert rows_panel.op == "Stmt.alloc" and rows_panel.args[1] == (m // ti, tk, ti)
    assert rows_panel.args[2].args[1].args[0] == outer(j, 32)  # then the column blocks
    agrees_with_interpreter(packed, "avx512")


def test_rows_not_a_multiple_of_4k_apart_are_not_packed() -> None:
    program = _with_rows_apart(tiled_matmul(16, 32, 32, ti=8, tk=16, tj=16), 4000, "float32")
    shapes = [alloc.args[1] for alloc in packed_allocs(pack_panels(program).body)]
    assert shapes == [(16, 16)]  # in1's panel only


def _with_rows_apart(program: LoopProgram, row_bytes: int, dtype: str) -> LoopProgram:
    """`program` in `dtype` with in0 as wide as `row_bytes` (the product reads its first k)."""
    (name, (m, _)), right = program.inputs
    wide = (name, (m, row_bytes // np.dtype(dtype).itemsize))
    return LoopProgram(program.body, (wide, right), program.outputs, dtype)


@pytest.mark.parametrize("isa", ["avx512", "avx2", "scalar"])
def test_packed_rows_keep_nan_inf_and_signed_zeros_as_numpy(isa: str) -> None:
    """The rows panel and its transposed copy carry special values through: NaN and ±inf where
    numpy's product has them, finite values within tolerance of float64."""
    program = _with_rows_apart(tiled_matmul(16, 32, 32, ti=8, tk=16, tj=16), L1_SET_SPAN, "float32")
    packed = pack_panels(program)
    assert any(alloc.args[1] == (2, 16, 8) for alloc in packed_allocs(packed.body))
    rng = np.random.default_rng(6)
    x = with_specials(rng, (16, 1024), 0.05)
    w = with_specials(rng, (32, 32), 0.05)
    x[3, 5], x[4, :32], w[7, 2] = -0.0, 0.0, np.inf  # a row of zeros meets an inf: NaN
    got = compiled(packed, isa)(x=x, w=w)
    with np.errstate(all="ignore"):
        want = x[:, :32] @ w
        reference = x[:, :32].astype(np.float64) @ w.astype(np.float64)
    assert_specials_agree(got, want, reference)
