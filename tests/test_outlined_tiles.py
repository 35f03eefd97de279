"""A register tile whose accumulators take the ISA's whole budget (an AVX2 4 x 3 tile) is emitted
in a function of its own, with the loop around it where the tile is that loop's body, so that
gcc gives the tile every vector register (`backend_c.emit.Emitter.outlined`)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eqsat.backend_c.emit import emit
from eqsat.core.loops import REGISTER_BUDGET, register_tile
from eqsat.core.terms import LoopProgram, Term
from tests.isas import NO_VECTOR_ISA, RUN_VECTOR_ISAS, VECTOR_ISAS, skip_unless_runs
from tests.programs import agrees_with_interpreter, compiled
from tests.test_loops import at, inner, named, nest, outer
from tests.test_numerics import assert_product_keeps_specials
from tests.test_tile_fills import READS_OUTPUT

LANES = {"avx512": 16, "avx2": 8}
ZERO = Term("Scalar.const", (0.0,))
DEFINED = re.compile(r"^static void __attribute__\(\(noinline\)\) (eq_tile\d+)\(", re.M)


def tiled_product(
    m: int, k: int, n: int, rows: int, vectors: int, isa: str, kind: str
) -> LoopProgram:
    """out0 = 0, then out0 += x @ w in register tiles of `rows` rows x `vectors` vectors
    (remainder tiles where they do not divide m, n), the loop over row tiles of kind `kind`
    around the loop over column tiles."""
    i, j, r = named("i0", m), named("i1", n), named("k", k)
    columns = vectors * LANES[isa]
    product = Term(
        "Scalar.binary",
        ("mul", Term("Scalar.load", ("in0", at(i, r))), Term("Scalar.load", ("in1", at(r, j)))),
    )
    zeroed = nest(
        [(i, "serial", ()), (j, "serial", ())], Term("Stmt.store", ("out0", at(i, j), ZERO))
    )
    tiled = nest(
        [
            (outer(i, rows), kind, ()),
            (outer(j, columns), "serial", ()),
            (r, "serial", ()),
            (inner(i, rows), "unroll", (rows,)),
            (inner(j, columns), "vector", ()),
        ],
        Term("Stmt.accumulate", ("out0", at(i, j), "sum", product)),
    )
    return LoopProgram(
        Term("Stmt.seq", (zeroed, tiled)), (("x", (m, k)), ("w", (k, n))), ((m, n),), "float32"
    )


def the_tile(program: LoopProgram) -> Term:
    """The loop over k of `tiled_product`'s program."""
    return program.body.args[1].args[2].args[2]


@pytest.mark.skipif(not RUN_VECTOR_ISAS, reason=NO_VECTOR_ISA)
@settings(max_examples=16, deadline=None)
@given(
    isa=st.sampled_from(RUN_VECTOR_ISAS),
    tile=st.sampled_from([(4, 3), (6, 2), (8, 3), (4, 2), (8, 2), (2, 3)]),
    shape=st.tuples(st.integers(1, 13), st.integers(1, 9), st.integers(0, 60)),
    parallel=st.booleans(),
)
def test_a_tile_that_takes_every_register_runs_in_a_function_of_its_own(
    isa: str, tile: tuple[int, int], shape: tuple[int, int, int], parallel: bool
) -> None:
    """Tiles of rows x vectors with remainder tiles on both axes, inside a serial or a parallel
    loop: the kernel agrees with the interpreter, and exactly the tiles at the budget (AVX2:
    4 x 3 and 6 x 2; AVX-512: 8 x 3) are in a function, called from the kernel; the zeroing
    goes down to each tile (`Emitter.fill_sunk`, through the serial or parallel loop), and the
    function is one tile, started at zero, called from the loop over column tiles (faster for
    short tiles, docs/MEASUREMENTS.md)."""
    (rows, vectors), (m, k, more_columns) = tile, shape
    n = vectors * LANES[isa] + more_columns
    program = tiled_product(m, k, n, rows, vectors, isa, "parallel" if parallel else "serial")
    source = emit(program, isa, "eqsat_kernel", threads=2)
    promoted = register_tile(*the_tile(program).args[::2], isa, LANES[isa])
    full = promoted is not None and promoted.count >= REGISTER_BUDGET[isa]
    functions = DEFINED.findall(source)
    assert functions == (["eq_tile0"] if full else []), source
    if full:
        kernel = source[source.index("void eqsat_kernel(") :]
        assert "eq_tile0(" in kernel and "_fmadd_ps" not in kernel, source
        definition = source[source.index("eq_tile0(") : source.index("void eqsat_kernel(")]
        assert "for (int64_t i1_o" not in definition, source  # the loop is around the call
        assert "for (int64_t i1_o" in kernel, source
        assert READS_OUTPUT.search(definition) is None, source  # started at zero
    agrees_with_interpreter(program, isa)


@pytest.mark.parametrize(("isa", "outlined"), [("avx2", True), ("avx512", False)])
def test_a_product_outlines_its_tiles_where_they_fill_the_registers(
    isa: str, outlined: bool
) -> None:
    """A 4 x 3 tile fills AVX2's 16 registers and is outlined; AVX-512's 8 x 2 tile leaves 13
    of 32 free and stays inline."""
    rows, vectors = (4, 3) if isa == "avx2" else (8, 2)
    program = tiled_product(37, 20, 100, rows, vectors, isa, "parallel")
    source = emit(program, isa, "eqsat_kernel", threads=2)
    assert bool(DEFINED.findall(source)) == outlined, source
    agrees_with_interpreter(program, isa)


@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_an_outlined_tile_keeps_nan_inf_and_signed_zeros_as_numpy(isa: str) -> None:
    """An AVX2 4 x 3 tile (outlined there; the same program at AVX-512 is inline) carries
    NaN, ±inf and -0.0 through as numpy's product does."""
    program = tiled_product(37, 20, 100, 4, 3, "avx2", "parallel")
    kernel = compiled(program, isa)
    skip_unless_runs(isa)
    assert_product_keeps_specials(kernel, 37, 20, 100)
