"""Stage 2 as a whole: what the kernel e-graph holds, its size, and the register-tile codegen.

Structural tests check that the expert nests are *in* the e-graph (the cost model's choice is the
benchmark's business): a register-blocked, cache-tiled, vectorized matmul; softmax and layernorm
as one pass per row; the MLP epilogue fused into the matmul nest. Random extractions from the
fully saturated e-graph (every rule at once) must all agree with the interpreter.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from egglog import eq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import eqsat
from eqsat.core.interp import run
from eqsat.core.loops import REGISTER_BUDGET, access_kind, register_tile, statements_in
from eqsat.core.pretty import format_loops
from eqsat.core.saturate import Limits
from eqsat.core.terms import LoopProgram, Term, index_list, to_egglog, to_term
from eqsat.extract.extractor import SerializedGraph
from eqsat.extract.loop_cost import LoopCost
from eqsat.extract.machine import Machine, host
from eqsat.rewrites import lowering
from eqsat.rewrites.contraction import contract_temporaries
from eqsat.rewrites.lowering import lower, reshape_index
from eqsat.rewrites.schedule import ROOT, schedule
from eqsat.rewrites.tiling import MIN_ACCUMULATORS, TileSizes, tile_sizes
from tests.isas import VECTOR_ISAS
from tests.machines import PINNED
from tests.programs import Program, assert_close, assert_variant_agrees, programs

AVX512 = Machine("avx512", cores=2, l1_bytes=48 * 1024, l2_bytes=2 << 20, l3_bytes=32 << 20)


def named(name: str, extent: int) -> Term:
    return Term("Axis.named", (name, extent))


def outer(axis: Term, tile: int) -> Term:
    return Term("Axis.outer", (axis, tile))


def inner(axis: Term, tile: int) -> Term:
    return Term("Axis.inner", (axis, tile))


def nest(loops: Sequence[tuple[Term, str, tuple[int, ...]]], body: Term) -> Term:
    """Loops (axis, kind, kind arguments), outermost first, around `body`."""
    for axis, kind, args in reversed(loops):
        body = Term("Stmt.loop", (axis, Term(f"LoopKind.{kind}", args), body))
    return body


def at(*axes: Term) -> Term:
    return index_list([Term("Index.axis", (a,)) for a in axes])


def lowered(expr: eqsat.Tensor) -> LoopProgram:
    return lower([to_term(expr.expr)])  # type: ignore[list-item]


def fewest_loops(graph: SerializedGraph) -> Term:
    """The most fused program of the e-graph: the one with the fewest loops."""

    def cost(op: str, children: object, child_costs: Sequence[float]) -> float:
        return sum(child_costs) + (1.0 if op == "Stmt.loop" else 0.0)

    return graph.extract(graph.root(ROOT), cost)[0]


def under_allocs(statement: Term) -> Term:
    while statement.op == "Stmt.alloc":
        statement = statement.args[2]  # type: ignore[assignment]
    return statement


# ---------------------------------------------------------------- what the e-graph holds


@pytest.mark.parametrize(
    ("isa", "dtype", "rows", "columns"),
    [
        ("avx512", "float32", 8, 32),
        ("avx512", "float64", 8, 16),
        ("avx2", "float32", 4, 24),
        ("avx2", "float64", 4, 12),
        ("scalar", "float32", 4, 4),
    ],
)
def test_register_tile_keeps_enough_accumulators_within_the_registers(
    isa: str, dtype: str, rows: int, columns: int
) -> None:
    """The register tile has at least MIN_ACCUMULATORS vector accumulators where the register
    budget allows (AVX2: 4 rows x 3 vectors, as 4 x 2 left the FMAs waiting on each other) and
    never more than the budget."""
    tiles = tile_sizes(AVX512.with_isa(isa), dtype)
    assert tiles.register == tuple(sorted({rows, columns}))
    # T-deep panels of both operands fit the 48 KiB L1 together: 512 x (24 + 4) floats do not
    assert tiles.cache == ((512,) if (isa, dtype) == ("scalar", "float32") else (256,))
    lanes = AVX512.with_isa(isa).lanes(dtype)
    if lanes > 1:
        assert rows * columns // lanes <= REGISTER_BUDGET[isa]
        assert rows * columns // lanes >= min(MIN_ACCUMULATORS, REGISTER_BUDGET[isa])


def test_a_small_kernel_also_gets_half_height_register_tiles() -> None:
    """A small kernel's narrow product runs 4 rows of 5 vectors, not 1 row (5 FMA chains waiting
    on each other's latency): 99 x 17 @ 17 x 75 ran 1.8x faster (docs/MEASUREMENTS.md). At AVX2
    it gets 2-vector tiles beside the 3-vector ones instead (rows are 4 already)."""
    assert tile_sizes(AVX512, "float32", small_kernel=True).register == (4, 8, 32)
    assert tile_sizes(AVX512.with_isa("avx2"), "float32", small_kernel=True).register == (4, 16, 24)
    assert tile_sizes(AVX512.with_isa("avx2"), "float64", small_kernel=True).register == (4, 8, 12)
    a, b = eqsat.tensor("a", (99, 17)), eqsat.tensor("b", (17, 75))
    chosen = eqsat.optimize(a @ b, machine=AVX512, progress=False).program.body
    assert any(
        s.op == "Stmt.loop" and s.args[1] == Term("LoopKind.unroll", (4,))
        for s in statements_in(chosen)
    ), format_loops(chosen)


@pytest.mark.parametrize("l1_kib, depths", [(32, (64, 1024)), (48, (128, 1024))])
def test_a_long_contraction_is_offered_long_depth_blocks(l1_kib: int, depths: tuple) -> None:
    """Beside the L1 depth tile, a long one: 1024 on a 1 MiB L2 (a 1024 x 32 panel fills an
    eighth of it). A 4096-deep product's e-graph holds its 1024-deep blocks, a 768-deep one's
    does not split k by 1024. (On an AMD EPYC's 32 KiB L1 the model picked them for
    1024 x 4096 @ 4096 x 1024 over 64-deep blocks and over all of k against B read in place:
    64-70 -> 41-43 ms, docs/MEASUREMENTS.md.)"""
    machine = replace(PINNED, l1_bytes=l1_kib << 10)
    tiles = tile_sizes(machine, "float32")
    assert tiles.depth == depths
    for deep, fired in ((4096, True), (768, False)):
        program = lowered(eqsat.tensor("a", (64, deep)) @ eqsat.tensor("b", (deep, 64)))
        _, report = schedule(program.body, machine, "float32", Limits(), tiles)
        assert (report.matches["split-depth-1024"] > 0) == fired, report.matches


def test_a_small_avx2_product_read_in_place_runs_two_vector_tiles() -> None:
    """788x77 @ 77x169 at AVX2, a small kernel, reads B's unaligned rows in place: its register
    tiles are 4 rows x 2 vectors, whose operands stay in registers, not 4 x 3, whose FMAs gcc
    gave memory operands (0.195 -> 0.151 ms, docs/MEASUREMENTS.md); 1024-cubed keeps 4 x 3."""
    avx2 = AVX512.with_isa("avx2")
    for (m, k, n), width in (((788, 77, 169), 16), ((1024, 1024, 1024), 24)):
        a, b = eqsat.tensor("a", (m, k)), eqsat.tensor("b", (k, n))
        chosen = eqsat.optimize(a @ b, machine=avx2, progress=False).program.body
        vector_loops = [
            s.args[0]
            for s in statements_in(chosen)
            if s.op == "Stmt.loop"
            and s.args[1] == Term("LoopKind.vector", (8,))
            and any(t.op == "Stmt.accumulate" for t in statements_in(s))
        ]
        assert vector_loops and all(
            axis == inner(named("i1", n), width) for axis in vector_loops
        ), format_loops(chosen)


def test_matmul_egraph_holds_the_register_blocked_cache_tiled_vectorized_nest() -> None:
    n = 1024
    x, w = eqsat.tensor("x", (n, n)), eqsat.tensor("w", (n, n))
    program = lowered(x @ w)
    tiles = tile_sizes(AVX512, "float32")
    assert tiles == TileSizes(cache=(256,), register=(8, 32), depth=(128, 2048))
    # saturation, not the wall clock, ends it (the default 2 s ran out with the cores shared)
    egraph, report = schedule(program.body, AVX512, "float32", Limits(seconds=60.0))
    assert report.stop_reason == "saturated" and report.nodes <= 200_000
    i, j, k = named("i0", n), named("i1", n), named("k", n)
    product = Term(
        "Scalar.binary",
        ("mul", Term("Scalar.load", ("in0", at(i, k))), Term("Scalar.load", ("in1", at(k, j)))),
    )
    accumulate = Term("Stmt.accumulate", ("out0", at(i, j), "sum", product))
    canonical = nest([(i, "serial", ()), (j, "serial", ()), (k, "serial", ())], accumulate)
    j_block = inner(j, 256)
    # 8 rows x 2 vectors = 16 accumulators, kept in registers across the k loop around them
    micro = nest([(inner(i, 8), "unroll", (8,)), (inner(j_block, 32), "vector", (16,))], accumulate)
    assert register_tile(inner(k, 256), micro, "avx512", 16) is not None
    expert = nest(
        [
            (outer(j, 256), "parallel", ()),  # N blocks of 256 across the cores
            (outer(k, 256), "serial", ()),  # 256-deep K blocks: the B block stays in L2
            (outer(i, 8), "serial", ()),
            (outer(j_block, 32), "serial", ()),
            (inner(k, 256), "serial", ()),  # k inside the register tile: unroll-and-jam
        ],
        micro,
    )
    egraph.register(to_egglog(canonical), to_egglog(expert))
    assert egraph.check_bool(eq(to_egglog(canonical)).to(to_egglog(expert)))


@pytest.mark.parametrize("op", ["softmax", "layernorm"])
def test_row_op_can_be_extracted_as_one_pass_per_row(op: str) -> None:
    x = eqsat.tensor("x", (64, 48))
    program = lowered(getattr(eqsat, op)(x))
    egraph, report = schedule(program.body, AVX512, "float32", Limits())
    assert report.stop_reason == "saturated"
    whole = fewest_loops(SerializedGraph(egraph))
    fused = under_allocs(whole)
    assert fused.op == "Stmt.loop" and fused.args[0] == named("i0", 64)
    assert fused.args[2].op == "Stmt.seq"  # type: ignore[union-attr]
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((64, 48))}
    got = run(program.with_body(whole), inputs, dtype=np.float64)[0]
    assert_close(got, run(program, inputs, dtype=np.float64)[0], "float64")


def test_mlp_epilogue_can_be_fused_into_the_matmul_nest() -> None:
    x, w, b = eqsat.tensor("x", (16, 24)), eqsat.tensor("w", (24, 32)), eqsat.tensor("b", (32,))
    program = lowered(eqsat.relu(x @ w + b))
    egraph, _ = schedule(program.body, AVX512, "float32", Limits())
    fused = under_allocs(fewest_loops(SerializedGraph(egraph)))
    # one nest: for i0: for i1: (init; for k: accumulate; epilogue)
    assert fused.op == "Stmt.loop"
    per_element = fused.args[2].args[2]  # type: ignore[union-attr]
    assert per_element.op == "Stmt.seq"  # type: ignore[union-attr]
    statements = str(per_element)
    assert "Stmt.accumulate" in statements and "'out0'" in statements


@pytest.mark.parametrize("workload", ["matmul", "softmax"])
def test_kernel_egraph_stays_within_the_issue_bounds(workload: str) -> None:
    """1024^3 matmul and a 1024-row softmax: saturated, at most 200k e-nodes."""
    x, w = eqsat.tensor("x", (1024, 1024)), eqsat.tensor("w", (1024, 1024))
    expr = x @ w if workload == "matmul" else eqsat.softmax(x)
    _, report = schedule(lowered(expr).body, host(), "float32", Limits(seconds=30))
    assert report.stop_reason == "saturated"
    assert report.nodes <= 200_000


# ---------------------------------------------------------------- every rule at once is sound

SMALL_TILES = TileSizes(cache=(4,), register=(2,))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    program=programs(max_ops=3, dims=st.sampled_from([1, 2, 4, 8])),
    seed=st.integers(0, 10_000),
)
def test_random_extractions_of_the_saturated_kernel_egraph_agree(
    program: Program, seed: int
) -> None:
    canonical = lowered(program.outputs[0])
    egraph, _ = schedule(canonical.body, AVX512, canonical.dtype, Limits(), SMALL_TILES)
    graph = SerializedGraph(egraph)
    want = run(canonical, program.inputs, dtype=np.float64)[0]
    rng = random.Random(seed)
    for _ in range(6):
        variant = canonical.with_body(graph.extract_random(graph.root(ROOT), rng))
        got = run(variant, program.inputs, dtype=np.float64)[0]
        assert_variant_agrees(got, want, variant.body)


# ---------------------------------------------------------------- register tiles in C


@pytest.mark.parametrize("isa", ["avx512", "avx2", "scalar"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_register_tiled_matmul_compiles_and_matches_numpy(isa: str, dtype: str) -> None:
    x, w, b = (
        eqsat.tensor("x", (64, 96), dtype),
        eqsat.tensor("w", (96, 64), dtype),
        eqsat.tensor("b", (64,), dtype),
    )
    kernel = eqsat.compile(eqsat.relu(x @ w + b), isa=isa)
    if isa != "scalar":
        assert "acc0" in kernel.c_source and "fmadd" in kernel.c_source, kernel.explain()
    rng = np.random.default_rng(1)
    xa, wa, ba = (rng.standard_normal(s).astype(dtype) for s in [(64, 96), (96, 64), (64,)])
    want = np.maximum(xa.astype(np.float64) @ wa + ba, 0)
    assert_close(kernel(xa, wa, ba), want, dtype)  # type: ignore[arg-type]


def test_extract_top_gives_distinct_candidates_cheapest_first() -> None:
    x = eqsat.tensor("x", (32, 16))
    program = lowered(eqsat.softmax(x))
    egraph, _ = schedule(program.body, AVX512, "float32", Limits())
    graph = SerializedGraph(egraph)
    cost = LoopCost(AVX512, "float32")
    top = graph.extract_top(graph.root(ROOT), cost, 5)
    assert len(top) == 5 and len({term for term, _ in top}) == 5
    costs = [c for _, c in top]
    assert costs == sorted(costs)
    for term, predicted in top:
        assert predicted == cost.estimate(term).cycles


def test_softmax_temporary_is_contracted_to_one_row_per_iteration() -> None:
    x = eqsat.tensor("x", (64, 48))
    program = lowered(eqsat.softmax(x))
    egraph, _ = schedule(program.body, AVX512, "float32", Limits())
    one_pass = fewest_loops(SerializedGraph(egraph))
    contracted = contract_temporaries(one_pass)
    assert contracted.op == "Stmt.alloc" and contracted.args[0] != "t0"  # t0 left the top
    row = under_allocs(contracted).args[2]
    assert row.op == "Stmt.alloc" and row.args[:2] == ("t0", (1, 48))  # type: ignore[union-attr]
    rng = np.random.default_rng(3)
    inputs = {"x": rng.standard_normal((64, 48))}
    got = run(program.with_body(contracted), inputs, dtype=np.float64)[0]
    assert_close(got, run(program, inputs, dtype=np.float64)[0], "float64")


def test_temporary_read_across_rows_is_not_contracted() -> None:
    x = eqsat.tensor("x", (8, 8))
    body = lowered(eqsat.exp(x).T + eqsat.exp(x)).body  # exp(x) read by column and by row
    assert contract_temporaries(body) == body


RIGHT_OPERANDS: dict[str, Callable[[Any], Any]] = {  # of eqsat tensors and numpy arrays alike
    "K.T": lambda K: K.T,
    "K.T * 0.125": lambda K: K.T * 0.125,
    "(K * 0.125).T": lambda K: (K * 0.125).T,
}


@pytest.mark.parametrize("right", RIGHT_OPERANDS)
def test_a_transposed_right_operand_is_copied_once_with_its_elementwise_ops(right: str) -> None:
    """x @ (K.T * 0.125) read in place would stride through K and scale each element once per
    row of x; it is copied (and scaled) once, like x @ K.T, and the product reads the copy."""
    operand = RIGHT_OPERANDS[right]
    program = lowered(eqsat.tensor("x", (16, 8)) @ operand(eqsat.tensor("K", (12, 8))))
    text = format_loops(program.body)
    copy = "t0[i0, i1] = (in1[i1, i0] * 0.125)" if "0.125" in right else "t0[i0, i1] = in1[i1, i0]"
    assert text.count("alloc t0[8, 12]") == 1 and text.count(copy) == 1
    assert "out0[i0, i1] += (in0[i0, k] * t0[k, i1])" in text
    rng = np.random.default_rng(0)
    x, K = rng.standard_normal((16, 8)), rng.standard_normal((12, 8))
    assert_close(run(program, {"x": x, "K": K}, dtype=np.float64)[0], x @ operand(K), "float64")


def _numpy_layernorm(x: np.ndarray) -> np.ndarray:
    centered = x - x.mean(-1, keepdims=True)
    return centered / np.sqrt((centered**2).mean(-1, keepdims=True) + 1e-5)


COMPUTED_OPERANDS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    # (x, s, W) -> the product, in eqsat and in numpy
    "layernorm(x) @ W": (
        lambda x, s, W: eqsat.layernorm(x) @ W,
        lambda x, s, W: _numpy_layernorm(x) @ W,
    ),
    "relu(x * s) @ W": (
        lambda x, s, W: eqsat.relu(x * s) @ W,
        lambda x, s, W: np.maximum(x * s, 0) @ W,
    ),
    "x @ (W * s.T)": (
        lambda x, s, W: x @ (W * s.reshape(-1, 1)),
        lambda x, s, W: x @ (W * s.reshape(-1, 1)),
    ),
}


@pytest.mark.parametrize("product", COMPUTED_OPERANDS)
def test_a_computed_matmul_operand_gets_a_buffer_when_the_product_reuses_it(
    product: str,
) -> None:
    """Inlined, a matmul operand's arithmetic runs once per column block that reads the element
    (layernorm's sqrt and divide in the product's inner loop: 0.2x numpy); with a buffer it runs
    once per element and the product multiplies two loads. Below PACK_MIN_ROWS reuses it stays
    inlined."""
    build, reference = COMPUTED_OPERANDS[product]
    plain_product = re.compile(r"\+= \(\w+\[[^]]*\] \* \w+\[[^]]*\]\)$")
    for columns, buffered in ((16, True), (4, False)):
        x, s = eqsat.tensor("x", (columns, 12)), eqsat.tensor("s", (12,))
        W = eqsat.tensor("W", (12, columns))
        program = lowered(build(x, s, W))
        accumulate = next(
            line for line in format_loops(program.body).splitlines() if "out0[i0, i1] +=" in line
        )
        assert bool(plain_product.search(accumulate)) == buffered, (columns, accumulate)
        rng = np.random.default_rng(1)
        values = {"x": rng.standard_normal((columns, 12)), "s": rng.standard_normal(12)}
        values["W"] = rng.standard_normal((12, columns))
        got = run(program, values, dtype=np.float64)[0]
        assert_close(got, reference(**values), "float64")


@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_small_kernels_stay_serial_and_large_ones_run_in_parallel(isa: str) -> None:
    """The cost model charges a thread-team start (`parallel_start_cycles`): only work above it
    pays. On PINNED's figures: a host's calibration, measured beside a loaded suite, can show
    no gain from a second core (this failed once so under EQSAT_MAX_ISA=avx2)."""
    small, large = eqsat.tensor("x", (8, 16)), eqsat.tensor("x", (2048, 2048))
    machine = PINNED.with_isa(isa)
    assert "omp parallel" not in eqsat.compile(eqsat.exp(small), machine=machine).c_source
    assert "omp parallel" in eqsat.compile(eqsat.exp(large), machine=machine).c_source


def _index_value(index: Term, at: dict[Term, int]) -> int:
    """The value of an Index term, its axes' values given by `at`."""
    if index.op == "Index.axis":
        return at[index]
    parts = [_index_value(a, at) if isinstance(a, Term) else a for a in index.args]
    match index.op:
        case "Index.const":
            return int(parts[0])  # type: ignore[arg-type]
        case "Index.add":
            return parts[0] + parts[1]  # type: ignore[operator]
        case "Index.scale":
            return parts[0] * parts[1]  # type: ignore[operator]
        case "Index.div":
            return parts[0] // parts[1]  # type: ignore[operator]
        case "Index.mod":
            return parts[0] % parts[1]  # type: ignore[operator]
    raise AssertionError(index.op)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 3, 4, 6]), min_size=0, max_size=4), st.data())
def test_a_reshapes_index_is_numpys_and_splits_into_groups(
    source: list[int], data: st.DataObject
) -> None:
    """`reshape_index` reads the element numpy's row-major reshape does, at every index."""
    factors = [p for n in source for p in ((2, n // 2) if n in (4, 6) else (n,))]
    shape = data.draw(st.permutations(factors)) if data.draw(st.booleans()) else factors
    shape = [*shape, 1] if data.draw(st.booleans()) else shape
    idx = [lowering.index_of(lowering.axis(f"d{d}", n)) for d, n in enumerate(shape)]
    got = reshape_index(source, shape, idx)
    for element in np.ndindex(*shape):
        at = dict(zip(idx, element, strict=True))
        want = np.unravel_index(np.ravel_multi_index(element, shape), source) if source else ()
        assert tuple(_index_value(i, at) for i in got) == tuple(int(w) for w in want)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 3, 4, 6]), min_size=1, max_size=4), st.data())
def test_a_reshapes_index_of_merged_axes_is_numpys_without_needless_division(
    source: list[int], data: st.DataObject
) -> None:
    """Each dimension of the reshape indexed by an affine combination of axes of its factors
    (as `lowering` loops over a merged dimension, `h*64 + d`): `reshape_index` reads the
    element numpy does, and where the axes are the source's own dimensions, plainly."""
    shape = [math.prod(source)] if data.draw(st.booleans()) else list(source)
    idx, axes = [], []
    for d, n in enumerate(shape):
        factors = source if len(shape) == 1 and len(source) > 1 else [n]
        pieces = [lowering.axis(f"d{d}{j}", f) for j, f in enumerate(factors)]
        axes += pieces
        merged = lowering.index_of(pieces[0])
        for piece, factor in zip(pieces[1:], factors[1:], strict=True):
            scaled = Term("Index.scale", (merged, factor))
            merged = Term("Index.add", (scaled, lowering.index_of(piece)))
        idx.append(merged)
    got = reshape_index(source, shape, idx)
    for values in np.ndindex(*(int(a.args[1]) for a in axes)):
        at = dict(zip((lowering.index_of(a) for a in axes), values, strict=True))
        element = tuple(_index_value(i, at) for i in idx)
        want = np.unravel_index(np.ravel_multi_index(element, shape), source)
        assert tuple(_index_value(i, at) for i in got) == tuple(int(w) for w in want)
    if len(shape) == 1 and len(source) > 1:
        assert all(i.op not in ("Index.div", "Index.mod") for i in got)


def test_a_head_merge_is_stored_along_the_heads_own_axes_and_vectorized() -> None:
    """(12, 512, 64) -> (512, 768) as a matmul operand: its buffer is filled over axes h and d,
    reading `t[h, s, d]` and storing `[s, h*64 + d]`, a vector loop along d."""
    heads = eqsat.tensor("x", (12, 512, 64))
    w = eqsat.tensor("w", (768, 32))
    program = lowered(eqsat.transpose(eqsat.exp(heads), (1, 0, 2)).reshape((512, 768)) @ w)
    text = format_loops(program.body)
    assert "t0[i0, i1a*64 + i1b] = exp(in0[i1a, i0, i1b])" in text
    assert "//" not in text and "%" not in text
    for isa in VECTOR_ISAS:  # built on any host (run where it runs)
        kernel = eqsat.compile(
            eqsat.transpose(eqsat.exp(heads), (1, 0, 2)).reshape((512, 768)) @ w,
            machine=PINNED.with_isa(isa),
            progress=False,
        )
        assert re.search(r"for i1b in 0\.\.64 vector", kernel.explain())


def test_a_head_split_reads_its_source_without_division() -> None:
    """(512, 512) -> (512, 8, 64) reads `[s, h * 64 + d]`: the vectorizer sees a unit stride."""
    s, h, d = (
        lowering.index_of(lowering.axis(name, n)) for name, n in (("s", 512), ("h", 8), ("d", 64))
    )
    assert reshape_index([512, 512], [512, 8, 64], [s, h, d]) == [
        s,
        Term("Index.add", (Term("Index.scale", (h, 64)), d)),
    ]


def test_a_head_split_column_is_contiguous_along_its_head_axis() -> None:
    """`t[s, h*64 + d]` walks memory with unit stride along d (the vectorizer may run a loop over
    d as SIMD lanes), not along h; `t[s, d*2]` is strided along d."""
    s, h, d = (lowering.axis(name, n) for name, n in (("s", 512), ("h", 8), ("d", 64)))
    column = Term(
        "Index.add", (Term("Index.scale", (lowering.index_of(h), 64)), lowering.index_of(d))
    )
    head_column = index_list([lowering.index_of(s), column])
    assert access_kind(head_column, d) == "contiguous"
    assert access_kind(head_column, h) is None
    assert access_kind(head_column, s) is None
    strided = index_list([lowering.index_of(s), Term("Index.scale", (lowering.index_of(d), 2))])
    assert access_kind(strided, d) is None
