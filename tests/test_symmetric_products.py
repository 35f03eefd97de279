"""Symmetric products (`x.T @ x`, `x @ x.T`, batched) with a contraction of MIRROR_MIN_DEPTH
or longer are computed on and above the diagonal only and mirrored
(`eqsat.rewrites.lowering`); blocks below the diagonal are skipped
(`eqsat.rewrites.masked_blocks`), and the cost model prices a guard by the work its busiest
thread runs (`eqsat.core.affine.guard_fraction`), in extraction too. Every lowering computes
what numpy does, NaN, ±inf and -0.0 included, at every ISA level the host runs, and a mirrored
result is exactly symmetric."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eqsat
from eqsat.core.affine import guard_fraction
from eqsat.core.interp import run
from eqsat.core.loops import allocated, top_allocations, top_statements
from eqsat.core.symmetry import MIRROR_MIN_DEPTH
from eqsat.core.term import subterms
from eqsat.core.terms import Term, to_term
from eqsat.extract.tensor_cost import TensorCost
from eqsat.rewrites.lowering import lowerings, seq
from eqsat.rewrites.masked_blocks import masking, skip_masked_blocks, top_masks, with_guards
from tests.isas import ISAS, RUN_ISAS, skip_unless_runs
from tests.machines import AVX2_EPYC
from tests.programs import compiled
from tests.test_loops import named, outer
from tests.test_masked_blocks import guarded_in_parallel_loop
from tests.test_numerics import assert_specials_agree, with_specials


def lowered(expr: eqsat.Tensor) -> list[tuple[str, object]]:
    term = to_term(expr.expr)
    assert isinstance(term, Term)
    return lowerings([term], [term])  # type: ignore[return-value]


def operand_shape(kind: str, size: int, depth: int, heads: int | None = None) -> tuple[int, ...]:
    """The shape of x whose `symmetric(x, kind)` is size x size with a contraction of `depth`."""
    matrix = (depth, size) if kind == "gram" else (size, depth)
    return matrix if heads is None else (heads, *matrix)


def symmetric(x: eqsat.Tensor | np.ndarray, kind: str) -> object:
    """x.T @ x ("gram"), x @ x.T ("outer") or, for a 3-D x, the same per leading index."""
    swapped = x.transpose(0, 2, 1) if x.ndim == 3 else x.T
    return swapped @ x if kind == "gram" else x @ swapped


def mirrored(program: object) -> bool:
    """Whether a lowered program reads a top-level temporary only on and above a diagonal."""
    return bool(top_masks(program.body))  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "kind, size, depth, heads, mirror",
    [
        ("gram", 12, MIRROR_MIN_DEPTH, None, True),
        ("gram", 12, MIRROR_MIN_DEPTH - 1, None, False),  # the mirror would not repay its pass
        ("outer", 12, 200, None, True),
        ("outer", 12, 200, 3, True),
    ],
)
def test_a_long_symmetric_product_is_lowered_mirrored(
    kind: str, size: int, depth: int, heads: int | None, mirror: bool
) -> None:
    shape = operand_shape(kind, size, depth, heads)
    programs = lowered(symmetric(eqsat.tensor("x", shape), kind))  # type: ignore[arg-type]
    assert [mirrored(program) for _, program in programs] == [mirror] * len(programs)
    value = np.random.default_rng(0).standard_normal(shape)
    want = symmetric(value, kind)
    for _, program in programs:
        got = run(program, {"x": value}, dtype=np.float64)[0]  # type: ignore[arg-type]
        np.testing.assert_allclose(got, want, rtol=1e-12)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "program",
    [
        lambda x, y: x.T @ y,  # two tensors
        lambda x, y: (2.0 * x).T @ x,  # operands that differ by more than the transpose
        lambda x, y: x.T @ x[:, :9],  # a slice of it
    ],
    ids=["two-tensors", "scaled", "sliced"],
)
def test_products_that_are_not_symmetric_are_not_mirrored(program: object) -> None:
    x, y = eqsat.tensor("x", (200, 12)), eqsat.tensor("y", (200, 12))
    programs = lowered(program(x, y))  # type: ignore[operator]
    assert not any(mirrored(p) for _, p in programs)


@settings(max_examples=16, deadline=None)
@given(
    size=st.integers(1, 30),
    depth=st.one_of(st.integers(1, 40), st.integers(MIRROR_MIN_DEPTH, MIRROR_MIN_DEPTH + 40)),
    kind=st.sampled_from(["gram", "outer"]),
    heads=st.sampled_from([None, 2]),
    dtype=st.sampled_from(["float32", "float64"]),
    isa=st.sampled_from(RUN_ISAS),
    seed=st.integers(0, 2**16),
)
def test_every_lowering_compiles_to_what_numpy_computes(
    size: int, depth: int, kind: str, heads: int | None, dtype: str, isa: str, seed: int
) -> None:
    """Each lowering of x.T @ x or x @ x.T (or heads of them), compiled as it is, against numpy
    with NaN, ±inf and -0.0 in x; a mirrored result is its own transpose."""
    shape = operand_shape(kind, size, depth, heads)
    x = eqsat.tensor("x", shape, dtype=dtype)
    programs = lowered(symmetric(x, kind))  # type: ignore[arg-type]
    value = with_specials(np.random.default_rng(seed), shape, 0.05).astype(dtype)
    with np.errstate(invalid="ignore"):  # inf * 0 and inf - inf: NaN, as the kernel gives
        want = symmetric(value, kind)
        reference = symmetric(value.astype(np.float64), kind)
    for _, program in programs:
        got = compiled(program, isa)(x=value)  # type: ignore[arg-type]
        assert_specials_agree(got, want, reference)  # type: ignore[arg-type]
        if mirrored(program):
            np.testing.assert_array_equal(got, np.swapaxes(got, -1, -2))


def test_a_mirrored_product_reads_its_buffer_on_and_above_the_diagonal_only() -> None:
    """The loads of t0[i, j] where i <= j and of t0[j, i] where i > j both read elements
    e0 <= e1, so the buffer is masked by e0 - e1 <= 0: the weaker of the two conditions."""
    x = eqsat.tensor("x", (MIRROR_MIN_DEPTH, 12))
    (_, program), *_ = lowered(x.T @ x)
    alloc = program.body  # type: ignore[attr-defined]
    assert alloc.op == "Stmt.alloc" and alloc.args[0] == "t0"
    mask = masking("t0", alloc.args[2], ())
    assert mask is not None
    assert sorted(c for _, c in mask.coefficients) == [-1, 1] and mask.constant == 0


@pytest.mark.parametrize(
    "extents, scale, limit, threads, fraction",
    [
        # a - b <= 0 over 4 x 4: 10 of 16 on one thread; dealt round-robin, the busier of
        # two threads runs 6 of its 8
        ((4, 4), (1, -1), 0, 1, 10 / 16),
        ((4, 4), (1, -1), 0, 2, 12 / 16),
        # two row blocks of 256 against 21 column blocks of 24 (x.T @ x at 500 x 500): the
        # first runs all 21, so the guard saves its busiest thread nothing
        ((2, 21), (256, -24), 23, 2, 1.0),
        ((10, 13), (32, -24), 23, 1, 73 / 130),
    ],
)
def test_a_guard_is_priced_by_its_busiest_threads_share(
    extents: tuple[int, int], scale: tuple[int, int], limit: int, threads: int, fraction: float
) -> None:
    a, b = (outer(named(name, 64 * extent), 64) for name, extent in zip("ab", extents, strict=True))
    index = Term(
        "Index.add",
        tuple(
            Term("Index.scale", (Term("Index.axis", (axis,)), factor))
            for axis, factor in zip((a, b), scale, strict=True)
        ),
    )
    assert guard_fraction(index, limit, threads) == pytest.approx(fraction)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("shape", [(2000, 300), (2048, 512)])
def test_a_mirrored_gram_matrix_shares_its_triangle_out_and_agrees_with_numpy(
    shape: tuple[int, int], isa: str
) -> None:
    """On a machine of the AVX2 host's figures, x.T @ x at 2000 x 300 and 2048 x 512 (which ran
    1.6x and 1.5x faster mirrored there, docs/MEASUREMENTS.md) skips its blocks below the
    diagonal inside a parallel loop whose busiest thread runs at most 3/4 of the full product's
    share, and agrees with numpy, NaN and ±inf included. At 2048 x 512 the nest priced without
    guards has two row blocks of 256, whose busiest thread runs all of its share: extraction
    prices the guards (`LoopCost`'s `guarded`)."""
    x = eqsat.tensor("x", shape)
    optimized = eqsat.optimize(x.T @ x, machine=AVX2_EPYC, progress=False)
    assert mirrored(optimized.canonical), optimized.report()
    nest_lines = optimized.report().split("loop nest:")[1].splitlines()
    assert guarded_in_parallel_loop(nest_lines), optimized.report()
    body = optimized.program.body
    (guard,) = [t for t in subterms([body]) if isinstance(t, Term) and t.op == "Stmt.guard"]
    index, limit = guard.args[0], int(guard.args[1])  # type: ignore[arg-type]
    assert guard_fraction(index, limit, AVX2_EPYC.cores) <= 0.75, optimized.report()  # type: ignore[arg-type]
    kernel = eqsat.compile(x.T @ x, machine=AVX2_EPYC, isa=isa, progress=False)
    value = with_specials(np.random.default_rng(3), shape, rate=1e-5)
    with np.errstate(invalid="ignore"):
        want, reference = value.T @ value, value.T.astype(np.float64) @ value
    skip_unless_runs(isa)
    got = kernel(x=value)
    assert_specials_agree(got, want, reference)
    np.testing.assert_array_equal(got, got.T)


def test_guards_priced_in_extraction_are_those_the_pass_places() -> None:
    """`with_guards`, which the cost model applies to each parallel loop it prices, guards each
    top-level statement of a mirrored product's scheduled nest as `skip_masked_blocks` guards
    the program, and applying it again changes nothing."""
    x = eqsat.tensor("x", (2048, 512))
    optimized = eqsat.optimize(x.T @ x, machine=AVX2_EPYC, progress=False)
    masks = top_masks(optimized.canonical.body)
    assert list(masks) == ["t0"]
    allocations, statement = top_allocations(optimized.scheduled)
    statements = list(top_statements(statement))
    guarded = [with_guards(s, masks) for s in statements]
    assert guarded != statements
    assert [with_guards(s, masks) for s in guarded] == guarded
    assert skip_masked_blocks(optimized.scheduled) == allocated(allocations, seq(guarded))


def test_stage_one_prices_a_mirrored_product_at_half_its_flops() -> None:
    """`TensorCost` counts x.T @ x (contraction MIRROR_MIN_DEPTH) as half its products and a
    pass over its result, x.T @ y as all of them; a shorter contraction is not mirrored."""
    cost = TensorCost()
    for depth, mirror in ((MIRROR_MIN_DEPTH, True), (MIRROR_MIN_DEPTH - 1, False)):
        x, y = (to_term(eqsat.tensor(name, (depth, 30)).expr) for name in "xy")
        transposed = Term("TExpr.transpose", (x, (1, 0)))
        full, _ = cost.work("TExpr.matmul", (transposed, y))
        symmetric_flops, _ = cost.work("TExpr.matmul", (transposed, x))
        assert full == 2.0 * 30 * 30 * depth
        assert symmetric_flops == (30 * 30 * depth + 30 * 30 if mirror else full)


def test_a_distance_matrix_keeps_its_symmetric_product_whole() -> None:
    """The rows' distances to each other, `|a|² - 2 a @ a.T + |a|²ᵀ`: stage 1 scales the product
    (`2 * (a @ a.T)`, mirrored) rather than its left operand (`(2 * a) @ a.T`, a product that
    is not symmetric), and the kernel agrees with numpy."""
    a = eqsat.tensor("a", (300, 200))
    squares = (a * a).sum(axis=1, keepdims=True)
    distances = squares - 2 * a @ a.T + squares.T
    optimized = eqsat.optimize(distances, machine=AVX2_EPYC, progress=False)
    assert mirrored(optimized.canonical), optimized.report()
    value = np.random.default_rng(5).standard_normal((300, 200), dtype=np.float32)
    squared = (value * value).sum(axis=1, keepdims=True)
    want = squared - 2 * value.astype(np.float64) @ value.T + squared.T
    got = eqsat.compile(distances, machine=AVX2_EPYC, progress=False)(a=value)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3 * np.abs(want).max())
