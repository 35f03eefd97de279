"""A statement that fills a register tile's accumulators with a constant right before the tile
(a product's zeroed rows) seeds the accumulators instead of being stored and loaded back
(`backend_c.emit.Emitter.fills_tile`)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eqsat.backend_c.emit import emit
from eqsat.core.loops import register_tile
from eqsat.core.terms import LoopProgram, Term
from eqsat.extract.machine import host
from tests.isas import RUN_ISAS, VECTOR_ISAS, skip_unless_runs
from tests.programs import agrees_with_interpreter, compiled
from tests.test_loops import at, inner, named, nest, outer
from tests.test_numerics import assert_product_keeps_specials

ZERO = Term("Scalar.const", (0.0,))
FILLS = [0.0, -0.0, 1.5, -np.inf, np.nan]
# out0 read back: a vector load of it, or a scalar accumulator set from it
READS_OUTPUT = re.compile(r"load[a-z_0-9]*\([^;]*&out0\[|acc\d+ = out0\[")
# zeros stored into out0: a vector store of a zero vector, or a scalar store of 0
ZERO_STORED = re.compile(
    r"store[a-z_0-9]*\(&out0\[[^;]*set1_p[sd]\(0\.0f?\)|out0\[[^;]*\] = 0\.0f?;"
)


def load(buffer: str, index: Term) -> Term:
    return Term("Scalar.load", (buffer, index))


def contraction_loops(r: Term, depth: int | None) -> list[tuple[Term, str, tuple[int, ...]]]:
    """The serial loops over contraction axis `r`: itself, or blocks of `depth` and in them."""
    if depth is None:
        return [(r, "serial", ())]
    return [(outer(r, depth), "serial", ()), (inner(r, depth), "serial", ())]


def filled_tile(
    m: int,
    k: int,
    n: int,
    rows: int,
    op: str,
    fill: Term,
    vector: bool,
    dtype: str,
    depth: int | None = None,
) -> LoopProgram:
    """For each tile of `rows` rows: `fill` stored over the tile's rows and columns, then
    out0[i, j] op= x[i, k] * w[k, j] over k around the tile (columns as its vector axis, or
    a serial loop outside it); over k in blocks of `depth` where given."""
    i, j, r = named("i0", m), named("i1", n), named("k", k)
    rows_inner = (inner(i, rows), "unroll", (rows,))
    columns = (j, "vector", ()) if vector else (j, "serial", ())
    tile_axes = [rows_inner, columns] if vector else [rows_inner]
    product = Term("Scalar.binary", ("mul", load("in0", at(i, r)), load("in1", at(r, j))))
    filled = nest(tile_axes, Term("Stmt.store", ("out0", at(i, j), fill)))
    tile = nest(
        [*contraction_loops(r, depth), *tile_axes],
        Term("Stmt.accumulate", ("out0", at(i, j), op, product)),
    )
    body = Term("Stmt.seq", (filled, tile))
    outside = [(outer(i, rows), "serial", ())] + ([] if vector else [columns])
    return LoopProgram(nest(outside, body), (("x", (m, k)), ("w", (k, n))), ((m, n),), dtype)


# what a property test of fills draws besides its shape: the ISA level, dtype, rows per tile,
# the tile's operation and the constant filled
FILL_CASES = {
    "isa": st.sampled_from(RUN_ISAS),
    "dtype": st.sampled_from(["float32", "float64"]),
    "rows": st.integers(1, 4),
    "op": st.sampled_from(["sum", "max"]),
    "constant": st.sampled_from(FILLS),
}


@settings(max_examples=20, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 19), st.integers(1, 9), st.integers(1, 40)),
    vector=st.booleans(),
    **FILL_CASES,
)
def test_a_constant_fill_seeds_the_tile_and_is_not_read_back(
    isa: str,
    dtype: str,
    shape: tuple[int, int, int],
    rows: int,
    op: str,
    constant: float,
    vector: bool,
) -> None:
    """Row tiles with a remainder, partial vectors, NaN and -0.0 as the fill: the kernel agrees
    with the interpreter, and wherever the emitter makes a register tile of the loop it never
    reads out0 (where the tile does not fit the registers, or at the scalar level with a vector
    loop, there is no register tile and the fill runs as written)."""
    m, k, n = shape
    program = filled_tile(m, k, n, rows, op, Term("Scalar.const", (constant,)), vector, dtype)
    source = emit(program, isa, "eqsat_kernel")
    fill_then_tile = program.body.args[2]  # inside the loop over row tiles
    if not vector:
        fill_then_tile = fill_then_tile.args[2]  # inside the loop over columns
    r, _, body = fill_then_tile.args[1].args  # the tile's loop over k
    tiled = register_tile(r, body, isa, host().with_isa(isa).lanes(dtype)) is not None
    if tiled:
        assert READS_OUTPUT.search(source) is None, source
    agrees_with_interpreter(program, isa)


@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_a_products_zeroed_rows_are_not_read_back(isa: str) -> None:
    """99 x 17 @ 17 x 75 in tiles of 4 rows x 75 columns (5 or 10 vectors): zeroed rows whose
    masked stores the tile waited for when it loaded them (docs/MEASUREMENTS.md)."""
    program = filled_tile(99, 17, 75, 4 if isa == "avx512" else 1, "sum", ZERO, True, "float32")
    source = emit(program, isa, "eqsat_kernel")
    assert READS_OUTPUT.search(source) is None and "acc4 = " in source
    agrees_with_interpreter(program, isa)


def filled_panels(
    m: int,
    k: int,
    n: int,
    rows: int,
    panel: int,
    op: str,
    fill: Term,
    dtype: str,
    depth: int | None = None,
) -> LoopProgram:
    """For each tile of `rows` rows: `fill` stored over the tile's rows and all `n` columns,
    then, for each panel of `panel` columns, out0[i, j] op= x[i, k] * w[k, j] over k around a
    register tile of the panel (a product's zeroed rows, then its column panels); over k in
    blocks of `depth` inside each panel where given."""
    i, j, r = named("i0", m), named("i1", n), named("k", k)
    rows_inner = (inner(i, rows), "unroll", (rows,))
    product = Term("Scalar.binary", ("mul", load("in0", at(i, r)), load("in1", at(r, j))))
    filled = nest([rows_inner, (j, "vector", ())], Term("Stmt.store", ("out0", at(i, j), fill)))
    panels = nest(
        [
            (outer(j, panel), "serial", ()),
            *contraction_loops(r, depth),
            rows_inner,
            (inner(j, panel), "vector", ()),
        ],
        Term("Stmt.accumulate", ("out0", at(i, j), op, product)),
    )
    body = nest([(outer(i, rows), "serial", ())], Term("Stmt.seq", (filled, panels)))
    return LoopProgram(body, (("x", (m, k)), ("w", (k, n))), ((m, n),), dtype)


def filled_packed_panels(
    m: int,
    k: int,
    n: int,
    block: int,
    rows: int,
    panel: int,
    fill: Term,
    unrolled: bool = False,
    panels_kind: str = "serial",
) -> LoopProgram:
    """A product as eqsat nests a large one: for each block of `block` rows, `fill` stored over
    its rows (in tiles of `rows`) and all `n` columns; then for each panel of `panel` columns (a
    loop of `panels_kind`: serial, or parallel as 25x34 @ 34x513 chose at AVX2), w's panel
    packed into a temporary, and for each tile of rows of the block (a loop unrolled with
    `unrolled`, as the same product chose at AVX-512), a register tile summing
    x[i, k] * panel[k, j] over k."""
    i, j, r = named("i0", m), named("i1", n), named("k", k)
    block_rows = inner(i, block)
    tiles_kind = ("unroll", (-(-block // rows),)) if unrolled else ("serial", ())
    row_tiles, tile_rows = (
        (outer(block_rows, rows), *tiles_kind),
        (inner(block_rows, rows), "unroll", (rows,)),
    )
    columns = inner(j, panel)
    filled = nest(
        [row_tiles, tile_rows, (j, "vector", ())], Term("Stmt.store", ("out0", at(i, j), fill))
    )
    pack = nest(
        [(r, "serial", ()), (columns, "vector", ())],
        Term("Stmt.store", ("pk", at(r, columns), load("in1", at(r, j)))),
    )
    product = Term("Scalar.binary", ("mul", load("in0", at(i, r)), load("pk", at(r, columns))))
    tiles = nest(
        [row_tiles, (r, "serial", ()), tile_rows, (columns, "vector", ())],
        Term("Stmt.accumulate", ("out0", at(i, j), "sum", product)),
    )
    panels = nest(
        [(outer(j, panel), panels_kind, ())],
        Term("Stmt.alloc", ("pk", (k, panel), Term("Stmt.seq", (pack, tiles)))),
    )
    body = nest([(outer(i, block), "serial", ())], Term("Stmt.seq", (filled, panels)))
    return LoopProgram(body, (("x", (m, k)), ("w", (k, n))), ((m, n),), "float32")


@settings(max_examples=20, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 19), st.integers(1, 9), st.integers(1, 60)),
    panel=st.sampled_from([8, 16, 24]),
    **FILL_CASES,
)
def test_a_fill_of_all_columns_seeds_the_tile_of_each_column_panel(
    isa: str,
    dtype: str,
    shape: tuple[int, int, int],
    rows: int,
    panel: int,
    op: str,
    constant: float,
) -> None:
    """Remainder row tiles and column panels, NaN and -0.0 as the fill: the kernel agrees with
    the interpreter, and wherever the panel's loop is a register tile, each panel's
    accumulators start at the constant and out0 is never read back (`Emitter.fill_sunk`)."""
    m, k, n = shape
    program = filled_panels(m, k, n, rows, panel, op, Term("Scalar.const", (constant,)), dtype)
    source = emit(program, isa, "eqsat_kernel")
    panels = program.body.args[2].args[1]  # inside the loop over row tiles
    r, _, body = panels.args[2].args  # the tile's loop over k, inside the loop over panels
    if register_tile(r, body, isa, host().with_isa(isa).lanes(dtype)) is not None:
        assert READS_OUTPUT.search(source) is None, source
    agrees_with_interpreter(program, isa)


@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_a_short_products_zeroed_rows_are_not_read_back_in_its_panels(isa: str) -> None:
    """A short product tiled as eqsat tiles 1607 x 39 @ 39 x 292 (rows of 4, panels of 24, a
    remainder of each), here 27 x 39 @ 39 x 52: each panel's tile starts at zero instead of
    loading the zeroed rows back."""
    program = filled_panels(27, 39, 52, 4, 24, "sum", ZERO, "float32")
    source = emit(program, isa, "eqsat_kernel")
    assert READS_OUTPUT.search(source) is None and "acc0 = _mm" in source
    assert ZERO_STORED.search(source) is None, source  # no pass of zeros before the panels
    agrees_with_interpreter(program, isa)


@settings(max_examples=20, deadline=None)
@given(
    isa=st.sampled_from(RUN_ISAS),
    shape=st.tuples(st.integers(1, 40), st.integers(1, 9), st.integers(1, 60)),
    block=st.sampled_from([8, 16]),
    rows=st.integers(1, 4),
    panel=st.sampled_from([8, 16, 24]),
    constant=st.sampled_from(FILLS),
    unrolled=st.booleans(),
    panels_kind=st.sampled_from(["serial", "parallel"]),
)
def test_a_blocks_fill_goes_down_to_each_tile_of_its_packed_panels(
    isa: str,
    shape: tuple[int, int, int],
    block: int,
    rows: int,
    panel: int,
    constant: float,
    unrolled: bool,
    panels_kind: str,
) -> None:
    """Blocks of rows, tiles of rows in them (a serial or an unrolled loop) and column panels
    (a serial or a parallel loop), each with a remainder, the panel packed first: the fill of
    the block's rows goes down through the panel's loop, the packing and the loop over row tiles
    to each tile (`Emitter.fill_sunk`); the kernel agrees with the interpreter, and out0 is
    never read back where the tiles are register tiles."""
    m, k, n = shape
    fill = Term("Scalar.const", (constant,))
    program = filled_packed_panels(m, k, n, block, rows, panel, fill, unrolled, panels_kind)
    source = emit(program, isa, "eqsat_kernel")
    if isa != "scalar":
        assert READS_OUTPUT.search(source) is None, source
    agrees_with_interpreter(program, isa)


@pytest.mark.parametrize("isa", VECTOR_ISAS)
@pytest.mark.parametrize("panels_kind", ["serial", "parallel"])
def test_a_sunk_fill_keeps_nan_inf_and_signed_zeros_as_numpy(isa: str, panels_kind: str) -> None:
    """Tiles seeded by a block's zeroed rows taken down to them (`Emitter.fill_sunk`), in a
    serial or a parallel loop of column panels, carry NaN, ±inf and -0.0 through as numpy's
    product does."""
    program = filled_packed_panels(37, 20, 100, 16, 4, 24, ZERO, panels_kind=panels_kind)
    kernel = compiled(program, isa)
    assert READS_OUTPUT.search(kernel.c_source) is None, kernel.c_source
    skip_unless_runs(isa)
    assert_product_keeps_specials(kernel, 37, 20, 100)


@pytest.mark.parametrize("isa", VECTOR_ISAS)
@pytest.mark.parametrize("panels", [False, True])
def test_a_fill_stays_above_blocks_of_the_contraction(isa: str, panels: bool) -> None:
    """A tile summed over k in blocks of 4, right after the fill of its accumulators or inside
    column panels: a fill taken down into the loop over the blocks would start each block's
    sums again from the constant (a perturbed extraction of 128^3 hit the first: 44 off). It
    stays where it is (stored, then read back by every block's tile), and the kernel agrees
    with the interpreter."""
    if panels:
        program = filled_panels(9, 10, 20, 4, 8, "sum", ZERO, "float32", depth=4)
    else:
        program = filled_tile(9, 10, 20, 4, "sum", ZERO, True, "float32", depth=4)
    source = emit(program, isa, "eqsat_kernel")
    assert READS_OUTPUT.search(source) is not None, source
    agrees_with_interpreter(program, isa)


def test_a_fill_that_is_not_a_constant_is_stored_and_read_back() -> None:
    """A fill computed from an input is stored as written: the tile loads what it stored."""
    fill = load("in0", at(named("i0", 12), named("i1", 48)))  # x[i, j]: x is 12 x 48
    program = filled_tile(12, 48, 48, 4, "sum", fill, True, "float32")
    source = emit(program, "avx512", "eqsat_kernel")
    assert READS_OUTPUT.search(source) is not None
    agrees_with_interpreter(program, "avx512")
