"""Splits whose tile does not divide the extent: full tiles plus a remainder tile clipped to the
extent (eqsat.core.loops.trip_runs), in the interpreter, the emitted C at every ISA level (masked
and runtime-checked register tiles) and whole compiles on awkward shapes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eqsat
from eqsat.backend_c.emit import emit
from eqsat.core.interp import run
from eqsat.core.loops import axis_extent, mean_trips, trip_runs
from eqsat.core.terms import LoopProgram, Term
from eqsat.rewrites.packing import pack_panels
from tests.isas import ISAS
from tests.programs import agrees_with_interpreter, assert_close
from tests.test_loops import at, inner, named, nest, outer
from tests.test_packing import tiled_matmul


def test_trips_of_the_pieces_of_a_split_with_a_remainder() -> None:
    i = named("i", 1000)
    block = inner(i, 256)  # 3 tiles of 256, then one of 232
    assert trip_runs(outer(i, 256)) == {4: 1}
    assert trip_runs(block) == {256: 3, 232: 1}
    assert trip_runs(outer(block, 8)) == {32: 3, 29: 1}
    assert trip_runs(inner(block, 8)) == {8: 125}  # 232 = 29 * 8: no second remainder
    assert trip_runs(inner(named("j", 10), 4)) == {4: 2, 2: 1}
    assert axis_extent(block) == 256 and mean_trips(block) == 250.0
    assert mean_trips(outer(block, 8)) == pytest.approx((3 * 32 + 29) / 4)


def test_interpreter_clips_the_last_tile_to_the_extent() -> None:
    i = named("i0", 10)
    store = Term("Stmt.store", ("out0", at(i), Term("Scalar.load", ("in0", at(i)))))
    split = nest([(outer(i, 4), "serial", ()), (inner(i, 4), "serial", ())], store)
    program = LoopProgram(split, (("x", (10,)),), ((10,),), "float64")
    x = np.arange(10.0)
    np.testing.assert_array_equal(run(program, {"x": x})[0], x)


def test_interpreter_refuses_an_inner_piece_outside_its_outer_piece() -> None:
    i = named("i0", 10)
    store = Term("Stmt.store", ("out0", at(i), Term("Scalar.const", (1.0,))))
    program = LoopProgram(nest([(inner(i, 4), "serial", ())], store), (), ((10,),), "float64")
    with pytest.raises(ValueError, match="outside a loop over its outer piece"):
        run(program, {})


@pytest.mark.parametrize("isa", ISAS)
@settings(max_examples=6, deadline=None)
@given(
    m=st.integers(1, 30),
    k=st.integers(1, 20),
    n=st.integers(1, 70),
    ti=st.integers(2, 6),
    tk=st.integers(2, 9),
    vectors=st.integers(1, 3),
    packed=st.booleans(),
)
def test_register_tiled_matmul_with_remainders_in_every_axis(
    isa: str, m: int, k: int, n: int, ti: int, tk: int, vectors: int, packed: bool
) -> None:
    """Row tiles, depth blocks and column tiles that do not divide their extents: edge tiles
    run with lane masks (plain loops on the scalar level); packed panels hold edge blocks."""
    program = tiled_matmul(m, k, n, ti=ti, tk=tk, tj=8 * vectors)
    agrees_with_interpreter(pack_panels(program) if packed else program, isa)


@pytest.mark.parametrize("isa", ISAS)
def test_two_level_split_with_remainders(isa: str) -> None:
    """a.inner(16).inner(4) under a.outer(16), extent 37: tiles of 16, 16 and 5 split into
    pieces of 4, 4, 4, 4 and 4, 1."""
    a, b = named("i0", 37), named("i1", 3)
    block = inner(a, 16)
    value = Term(
        "Scalar.binary",
        ("mul", Term("Scalar.load", ("in0", at(a, b))), Term("Scalar.const", (2.0,))),
    )
    body = nest(
        [
            (outer(a, 16), "parallel", ()),
            (outer(block, 4), "serial", ()),
            (b, "serial", ()),
            (inner(block, 4), "unroll", (4,)),
        ],
        Term("Stmt.store", ("out0", at(a, b), value)),
    )
    agrees_with_interpreter(LoopProgram(body, (("x", (37, 3)),), ((37, 3),), "float32"), isa)


def test_an_edge_column_tile_is_masked_not_run_as_plain_loops_on_avx512() -> None:
    program = tiled_matmul(16, 8, 40, ti=4, tk=8, tj=32)  # column tiles of 32, then 8
    source = emit(program, "avx512", "eqsat_kernel")
    assert "lanes0" in source and "? 16 :" in source  # lane masks computed at run time
    assert "} else {" not in source  # no plain-loop fallback: every row tile is whole
    agrees_with_interpreter(program, "avx512")


def test_an_edge_column_tile_on_avx2_masks_only_its_partial_vector() -> None:
    """Column tiles of 16, then 4: a variant of the tile per column count, chosen at run time;
    the edge one loads and stores its half vector under a lane mask (maskload, maskstore)."""
    program = tiled_matmul(16, 8, 20, ti=4, tk=8, tj=16)
    source = emit(program, "avx2", "eqsat_kernel")
    assert "} else {" in source and "_mm256_maskstore_ps" in source
    assert source.count("_mm256_maskload_ps") >= 2  # the accumulators and the operand
    assert "? 8 :" not in source  # whole tiles load and store without masks
    agrees_with_interpreter(program, "avx2")


def test_an_edge_row_tile_is_a_register_tile_of_its_own() -> None:
    program = tiled_matmul(18, 8, 32, ti=4, tk=8, tj=32)  # row tiles of 4, then 2
    source = emit(program, "avx512", "eqsat_kernel")
    assert "} else {" in source  # chosen at run time: 4 rows x 2 vectors, or 2 rows x 2
    assert source.count("__m512 acc7 = ") == 1 and source.count("__m512 acc3 = ") == 2
    agrees_with_interpreter(program, "avx512")


SHAPES = [(274, 36, 10), (37, 29, 45), (9, 130, 70), (3, 5, 7), (100, 300, 200), (1, 17, 1)]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_compiled_matmul_epilogue_on_awkward_shapes(isa: str, shape: tuple[int, int, int]) -> None:
    m, k, n = shape
    x, w, b = eqsat.tensor("x", (m, k)), eqsat.tensor("w", (k, n)), eqsat.tensor("b", (n,))
    kernel = eqsat.compile(eqsat.relu(x @ w + b), isa=isa, progress=False)
    rng = np.random.default_rng(1)
    xa, wa, ba = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n), (n,)))
    want = np.maximum(xa.astype(np.float64) @ wa + ba, 0)
    assert_close(kernel(x=xa, w=wa, b=ba), want, "float32")  # type: ignore[arg-type]


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


PROGRAMS = {  # name: (shapes, program, float64 reference), extents no tile divides
    "softmax": ({"x": (77, 1023)}, eqsat.softmax, _softmax),
    "layernorm": (
        {"x": (33, 299), "w": (299,), "b": (299,)},
        lambda x, w, b: eqsat.layernorm(x, w, b),
        lambda x, w, b: (
            (x - x.mean(1, keepdims=True))
            / np.sqrt(((x - x.mean(1, keepdims=True)) ** 2).mean(1, keepdims=True) + 1e-5)
            * w
            + b
        ),
    ),
    "attention": (
        {"q": (37, 20), "k": (41, 20), "v": (41, 9)},
        lambda q, k, v: eqsat.softmax(q @ k.T / 3) @ v,
        lambda q, k, v: _softmax(q @ k.T / 3) @ v,
    ),
    "batched": ({"a": (3, 19, 27), "b": (3, 27, 13)}, lambda a, b: a @ b, lambda a, b: a @ b),
    "chain": (
        {"a": (45, 301), "b": (301, 45), "v": (45, 1)},
        lambda a, b, v: a @ b @ v,
        lambda a, b, v: a @ b @ v,
    ),
}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", PROGRAMS)
def test_compiled_programs_on_awkward_shapes(isa: str, name: str) -> None:
    shapes, program, reference = PROGRAMS[name]
    symbols = {n: eqsat.tensor(n, s) for n, s in shapes.items()}
    kernel = eqsat.compile(program(**symbols), isa=isa, progress=False)
    rng = np.random.default_rng(2)
    inputs = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    want = reference(**{n: a.astype(np.float64) for n, a in inputs.items()})
    assert_close(kernel(**inputs), want, "float32")  # type: ignore[arg-type]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("shape", [(37, 29, 45), (274, 36, 10), (9, 70, 33)], ids=str)
def test_remainder_tiles_propagate_nan_and_inf_like_numpy(
    isa: str, shape: tuple[int, int, int]
) -> None:
    """Masked and edge register tiles: lanes outside a mask never reach memory, and NaN and
    ±inf land where numpy puts them (a product's NaN/inf pattern does not depend on the order
    of its sum)."""
    m, k, n = shape
    x, w = eqsat.tensor("x", (m, k)), eqsat.tensor("w", (k, n))
    kernel = eqsat.compile(x @ w, isa=isa, progress=False)
    rng = np.random.default_rng(3)
    xa, wa = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n)))
    for array in (xa, wa):
        special = rng.random(array.shape) < 0.02
        array[special] = rng.choice([np.nan, np.inf, -np.inf], special.sum())
    with np.errstate(invalid="ignore"):  # inf * 0 and inf - inf make NaN, as intended
        want = xa.astype(np.float64) @ wa
    got = kernel(x=xa, w=wa)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    finite = np.isfinite(want)
    assert_close(np.where(finite, got, 0), np.where(finite, want, 0), "float32")
