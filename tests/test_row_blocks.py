"""Row-block fusion (eqsat.rewrites.row_blocks): which runs of row loops fuse, at which tile, and
that the fused program computes what the unfused one did (interpreter and compiled C)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eqsat
from eqsat.core.interp import run
from eqsat.core.loops import buffers_accessed, statements_in, top_allocations, top_statements
from eqsat.core.pretty import format_loops
from eqsat.core.terms import LoopProgram, Term, index_list
from eqsat.extract.loop_cost import LoopCost
from eqsat.extract.machine import Machine
from eqsat.rewrites import row_blocks
from eqsat.rewrites.lowering import seq
from eqsat.rewrites.row_blocks import EXACT_PRICING_UP_TO, _renamed, fuse_row_blocks
from eqsat.tools.whole_programs import attention_heads
from tests.isas import ISAS, VECTOR_ISAS
from tests.machines import PINNED
from tests.programs import agrees_with_interpreter, assert_variant_agrees
from tests.test_loops import at, inner, named, nest, outer
from tests.test_numerics import assert_specials_agree, with_specials

ROWS, COLUMNS = 24, 20
ROW, J = named("i0", ROWS), named("i1", COLUMNS)


def load(buffer: str, index: Term) -> Term:
    return Term("Scalar.load", (buffer, index))


def binary(op: str, a: Term, b: Term) -> Term:
    return Term("Scalar.binary", (op, a, b))


def row_loop(tile: int, kind: str, rows_kind: str, store: Term) -> Term:
    """for i0.outer(tile) kind: for i0.inner(tile) rows_kind: for i1 vector: store."""
    loops = [(outer(ROW, tile), kind, ()), (inner(ROW, tile), rows_kind, ())]
    if rows_kind == "unroll":
        loops[1] = (inner(ROW, tile), "unroll", (tile,))
    return nest([*loops, (J, "vector", ())], store)


def two_passes(
    first: tuple[int, str, str], second: tuple[int, str, str], read: Term | None = None
) -> LoopProgram:
    """t0 = x * 2 in row blocks of one tile, then out0 = t0[read] + x in blocks of another."""
    doubled = binary("mul", load("in0", at(ROW, J)), Term("Scalar.const", (2.0,)))
    produce = row_loop(*first, Term("Stmt.store", ("t0", at(ROW, J), doubled)))
    value = binary("add", load("t0", read or at(ROW, J)), load("in0", at(ROW, J)))
    consume = row_loop(*second, Term("Stmt.store", ("out0", at(ROW, J), value)))
    body = Term("Stmt.alloc", ("t0", (ROWS, COLUMNS), seq([produce, consume])))
    return LoopProgram(body, (("x", (ROWS, COLUMNS)),), ((ROWS, COLUMNS),), "float64")


def fewest_statements(body: Term) -> float:
    """A price that prefers fused programs: top-level statements under the allocations."""
    while body.op == "Stmt.alloc":
        body = body.args[2]  # type: ignore[assignment]
    return len(top_statements(body))


def fused_tiles(
    program: LoopProgram, price: Callable[[Term], float] = fewest_statements
) -> list[int]:
    """The tiles of the top-level loops after fusion, checked against the unfused program."""
    body = fuse_row_blocks(program.body, price)
    inputs = {"x": np.random.default_rng(2).standard_normal((ROWS, COLUMNS))}
    want = run(program, inputs, dtype=np.float64)[0]
    assert_variant_agrees(run(program.with_body(body), inputs, dtype=np.float64)[0], want, body)
    while body.op == "Stmt.alloc":
        body = body.args[2]  # type: ignore[assignment]
    return [int(s.args[0].args[1]) for s in top_statements(body)]  # type: ignore[union-attr]


@settings(max_examples=20, deadline=None)
@given(
    first=st.tuples(st.sampled_from([4, 8, 5]), st.sampled_from(["serial", "parallel"])),
    second=st.tuples(st.sampled_from([4, 8, 5]), st.sampled_from(["serial", "parallel"])),
)
def test_row_loops_over_the_same_rows_fuse_and_compute_the_same(
    first: tuple[int, str], second: tuple[int, str]
) -> None:
    """Two passes over row blocks of any tiles (5 leaves a remainder block) become one loop, at
    the first's tile (the price ties: the first tile found wins), parallel only when both were."""
    program = two_passes((*first, "serial"), (*second, "serial"))
    assert fused_tiles(program) == [first[0]]
    (fused,) = top_statements(fuse_row_blocks(program.body, fewest_statements).args[2])  # type: ignore[arg-type]
    both_parallel = first[1] == second[1] == "parallel"
    assert fused.args[1].op == ("LoopKind.parallel" if both_parallel else "LoopKind.serial")  # type: ignore[union-attr]


def test_a_register_tiles_rows_keep_their_count() -> None:
    """The consumer unrolls its 4 rows (a register tile): it runs whole inside each block of 8
    rows, its 4 rows still unrolled; two register tiles of which neither divides the other's
    rows (8 and 12) find no common tile."""
    program = two_passes((8, "parallel", "serial"), (4, "parallel", "unroll"))
    assert fused_tiles(program) == [8]
    fused = format_loops(fuse_row_blocks(program.body, fewest_statements))
    assert "for i0.inner(8).inner(4) in 0..4 unroll(4)" in fused, fused
    both_unrolled = two_passes((8, "parallel", "unroll"), (4, "parallel", "unroll"))
    assert fused_tiles(both_unrolled) == [8]
    apart = two_passes((8, "parallel", "unroll"), (12, "parallel", "unroll"))
    assert fused_tiles(apart) == [8, 12]


def test_a_register_tile_split_from_a_block_runs_in_smaller_blocks() -> None:
    """A producer over blocks of 16 rows whose register tile unrolls 4 rows split from the block
    (`i0.inner(16).inner(4)`) joins a consumer in blocks of 8 (the most rows of t0 a block may
    hold): its pieces are split by 8 instead, its 4 rows still unrolled, and it computes the
    same. (Attention 2048 x 64's scores, in blocks of 1024 rows, then fused with its softmax:
    16.9 -> 6.5 ms, docs/MEASUREMENTS.md.)"""
    doubled = binary("mul", load("in0", at(ROW, J)), Term("Scalar.const", (2.0,)))
    block = inner(ROW, 16)
    produce = nest(
        [
            (outer(ROW, 16), "parallel", ()),
            (outer(block, 4), "serial", ()),
            (inner(block, 4), "unroll", (4,)),
            (J, "vector", ()),
        ],
        Term("Stmt.store", ("t0", at(ROW, J), doubled)),
    )
    value = binary("add", load("t0", at(ROW, J)), load("in0", at(ROW, J)))
    consume = row_loop(8, "parallel", "serial", Term("Stmt.store", ("out0", at(ROW, J), value)))
    body = Term("Stmt.alloc", ("t0", (ROWS, COLUMNS), seq([produce, consume])))
    program = LoopProgram(body, (("x", (ROWS, COLUMNS)),), ((ROWS, COLUMNS),), "float64")
    fused = fuse_row_blocks(body, fewest_statements, block_elements=8 * COLUMNS)
    listing = format_loops(fused)
    assert "for i0.outer(8) in 0..3 parallel:" in listing, listing
    assert "for i0.inner(8).inner(4) in 0..4 unroll(4)" in listing, listing
    inputs = {"x": np.random.default_rng(3).standard_normal((ROWS, COLUMNS))}
    want = run(program, inputs, dtype=np.float64)[0]
    assert_variant_agrees(run(program.with_body(fused), inputs, dtype=np.float64)[0], want, fused)


def column_blocks(write: Term, value: Term, tile: int = 4) -> Term:
    """for i1.outer(tile) parallel: for i0: for i1.inner(tile): store: a pass whose outermost
    loop runs over blocks of columns, its rows inside (a matmul's nest, on a wide operand)."""
    store = Term("Stmt.store", ("t0", write, value))
    return nest(
        [(outer(J, tile), "parallel", ()), (ROW, "serial", ()), (inner(J, tile), "vector", ())],
        store,
    )


def column_pass_then_rows(write: Term, read: Term) -> LoopProgram:
    """t0 = x * 2 over column blocks (written at `write`), then out0 = t0[read] + x over blocks
    of 8 rows."""
    doubled = binary("mul", load("in0", at(ROW, J)), Term("Scalar.const", (2.0,)))
    value = binary("add", load("t0", read), load("in0", at(ROW, J)))
    consume = row_loop(8, "parallel", "serial", Term("Stmt.store", ("out0", at(ROW, J), value)))
    body = Term(
        "Stmt.alloc", ("t0", (ROWS, COLUMNS), seq([column_blocks(write, doubled), consume]))
    )
    return LoopProgram(body, (("x", (ROWS, COLUMNS)),), ((ROWS, COLUMNS),), "float64")


def test_a_pass_over_column_blocks_runs_inside_the_row_blocks() -> None:
    """A row-local pass whose outermost loop is over columns (each row's elements are its own)
    runs whole inside each block of rows, its loops over rows walking the block only, its
    parallel loop made serial inside the parallel block loop."""
    program = column_pass_then_rows(at(ROW, J), at(ROW, J))
    assert fused_tiles(program) == [8]
    fused = format_loops(fuse_row_blocks(program.body, fewest_statements))
    assert "for i0.outer(8) in 0..3 parallel:" in fused, fused
    assert "for i1.outer(4) in 0..5:" in fused and "for i0.inner(8) in 0..8:" in fused, fused


@pytest.mark.parametrize(
    "write, read",
    [
        (at(J, ROW), at(J, ROW)),  # rows of t0 are columns of the pass: not row-local
        (at(ROW, J), Term("IndexList.cons", (Term("Index.const", (ROWS - 1,)), at(J)))),
    ],
)
def test_a_pass_that_is_not_row_local_stays_apart(write: Term, read: Term) -> None:
    """The column pass writes t0 transposed (rows of t0 are not its rows), or the consumer
    reads t0's last row in every block: blocks would read what later blocks write."""
    program = column_pass_then_rows(write, read)
    if write == at(J, ROW):
        program = _square(program, COLUMNS)
    assert fuse_row_blocks(program.body, fewest_statements) == program.body


def test_blocks_beyond_the_loops_tiles_hold_at_most_the_given_elements() -> None:
    """With room for 16 rows of t0 (20 elements each), blocks of 8 and 16 rows are tried, not
    more; with room for less than 8 rows, only the smallest tile, 8."""
    program = column_pass_then_rows(at(ROW, J), at(ROW, J))
    tried: set[int] = set()

    def price(body: Term) -> float:
        for statement in top_statements(body.args[2]):  # type: ignore[arg-type]
            axis = statement.args[0]
            if axis.op == "Axis.outer" and axis.args[0] == ROW:  # type: ignore[union-attr]
                tried.add(int(axis.args[1]))  # type: ignore[union-attr, arg-type]
        return fewest_statements(body)

    fuse_row_blocks(program.body, price, block_elements=16 * COLUMNS)
    assert tried == {8, 16}
    tried.clear()
    fuse_row_blocks(program.body, price, block_elements=7 * COLUMNS)
    assert tried == {8}


@pytest.mark.parametrize(
    "read", [at(J, ROW), Term("IndexList.cons", (Term("Index.const", (ROWS - 1,)), at(J)))]
)
def test_a_buffer_read_across_rows_keeps_the_loops_apart(read: Term) -> None:
    """out0[i0, i1] reads t0 transposed, or t0's last row for every row: a block would read rows
    a later block writes."""
    program = two_passes((4, "parallel", "serial"), (4, "parallel", "serial"), read)
    if read == at(J, ROW):
        program = _square(program, COLUMNS)  # (read transposed: as many rows as columns)
    assert fuse_row_blocks(program.body, fewest_statements) == program.body


def _square(program: LoopProgram, n: int) -> LoopProgram:
    """`program` with both axes of extent n (so that t0 can be read transposed)."""

    def resize(term: Term) -> Term:
        if term.op == "Axis.named":
            return Term("Axis.named", (term.args[0], n))
        return Term(term.op, tuple(resize(a) if isinstance(a, Term) else a for a in term.args))

    body = resize(program.body)
    body = Term("Stmt.alloc", ("t0", (n, n), body.args[2]))
    return LoopProgram(body, (("x", (n, n)),), ((n, n),), "float64")


def test_a_run_fuses_in_part_where_the_whole_run_does_not_pay() -> None:
    """Three passes, and a price that charges 5 for a fused loop holding the third: the first
    two fuse (2 statements), not all three (1 + 5) nor the last two (2 + 5)."""
    first = two_passes((4, "parallel", "unroll"), (8, "parallel", "serial"))
    produce, consume = top_statements(first.body.args[2])  # type: ignore[arg-type]
    tripled = binary("mul", load("out0", at(ROW, J)), Term("Scalar.const", (3.0,)))
    again = row_loop(8, "parallel", "serial", Term("Stmt.store", ("out0", at(ROW, J), tripled)))
    body = Term("Stmt.alloc", ("t0", (ROWS, COLUMNS), seq([produce, consume, again])))
    program = LoopProgram(body, first.inputs, first.outputs, "float64")

    def price(body: Term) -> float:
        statements = top_statements(body.args[2])  # type: ignore[arg-type]
        fused_third = sum("Stmt.seq" in repr(s) and "3.0" in repr(s) for s in statements)
        return len(statements) + 5 * fused_third

    assert fused_tiles(program, price) == [4, 8]


def test_the_cost_model_keeps_the_loops_apart_when_fusing_is_not_cheaper() -> None:
    program = two_passes((4, "parallel", "serial"), (8, "parallel", "serial"))
    assert fused_tiles(program, lambda body: -fewest_statements(body)) == [4, 8]


def output_twice() -> LoopProgram:
    """out0 = x * 2 in blocks of 4 rows, then out0 = out0 * 3 in blocks of 8: two passes that
    share no temporary."""
    doubled = binary("mul", load("in0", at(ROW, J)), Term("Scalar.const", (2.0,)))
    tripled = binary("mul", load("out0", at(ROW, J)), Term("Scalar.const", (3.0,)))
    body = seq(
        [
            row_loop(4, "parallel", "serial", Term("Stmt.store", ("out0", at(ROW, J), doubled))),
            row_loop(8, "parallel", "serial", Term("Stmt.store", ("out0", at(ROW, J), tripled))),
        ]
    )
    return LoopProgram(body, (("x", (ROWS, COLUMNS)),), ((ROWS, COLUMNS),), "float64")


@pytest.mark.parametrize("gain, output_passes", [(0.01, [4, 8]), (0.03, [4])])
def test_passes_sharing_no_temporary_fuse_only_when_predicted_clearly_faster(
    gain: float, output_passes: list[int]
) -> None:
    """Passes through a temporary fuse at any predicted gain; passes that share only their
    output fuse when predicted UNSHARED_HURDLE (2%) faster: at 3%, not at 1%."""

    def price(body: Term) -> float:
        return 100 * (1 - gain) if fewest_statements(body) == 1 else 100

    through_temporary = two_passes((4, "parallel", "serial"), (8, "parallel", "serial"))
    assert fused_tiles(through_temporary, price) == [4]
    assert fused_tiles(output_twice(), price) == output_passes


@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_attention_runs_its_softmax_and_product_one_row_block_at_a_time(isa: str) -> None:
    """The extracted attention nest has the scores' matmul over blocks of columns, the softmax
    and `P @ V` in loops over rows of different tiles; fused, every pass over the rows runs in
    one loop over blocks of rows (only the keys' transposition stays before it), the
    exponentials live in a block of rows (contracted), and the kernel agrees with numpy on NaN,
    ±inf and -0.0 in the inputs."""
    shape = (384, 32)  # (on PINNED, the e-graph's own nest fuses 256 x 32 already)
    Q, K, V = (eqsat.tensor(name, shape) for name in "QKV")
    program = eqsat.softmax(Q @ K.T / 8) @ V
    unhurried = eqsat.Limits(seconds=120.0, extraction_seconds=120.0)  # the same on a busy host
    machine = PINNED.with_isa(isa)
    optimized = eqsat.optimize(program, machine=machine, limits=unhurried, progress=False)
    nest_text = format_loops(optimized.program.body)
    exps = [line for line in nest_text.splitlines() if "exp(" in line]
    assert exps and all(line.split("[")[1].startswith("i0.inner") for line in exps), nest_text
    assert optimized.scheduled != optimized.extracted
    passes = top_statements(top_allocations(optimized.scheduled)[1])
    transpose, blocks = passes  # the keys' transposition (in one loop or in tiles), then blocks
    accessed = buffers_accessed(transpose)  # K and its transposed copy only
    assert "in1" in accessed and len(accessed) == 2 and not accessed & {"in0", "in2"}, nest_text
    assert blocks.args[0].op == "Axis.outer", nest_text  # type: ignore[union-attr]
    assert "row blocks fused after extraction" in optimized.report()
    kernel = eqsat.compile(program, machine=machine, limits=unhurried, progress=False)
    rng = np.random.default_rng(8)
    values = {name: with_specials(rng, shape, 0.002) for name in "QKV"}
    values["Q"][3, 4] = -0.0

    def reference(Q: np.ndarray, K: np.ndarray, V: np.ndarray) -> np.ndarray:
        scores = Q @ K.T / 8
        e = np.exp(scores - scores.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True) @ V

    with np.errstate(all="ignore"):
        want = reference(**values)
        wide = reference(**{name: v.astype(np.float64) for name, v in values.items()})
    assert_specials_agree(kernel(**values), want, wide)


HEADS = named("i2", 3)


def passes_per_head() -> LoopProgram:
    """For each of 3 heads, in a parallel loop: t0 = x * 2 in row blocks of 4, then out0 = t0 +
    x in row blocks of 8; every buffer indexed by the head first."""
    index = at(HEADS, ROW, J)
    doubled = binary("mul", load("in0", index), Term("Scalar.const", (2.0,)))
    produce = row_loop(4, "serial", "serial", Term("Stmt.store", ("t0", index, doubled)))
    value = binary("add", load("t0", index), load("in0", index))
    consume = row_loop(8, "serial", "serial", Term("Stmt.store", ("out0", index, value)))
    heads = nest([(HEADS, "parallel", ())], seq([produce, consume]))
    shape = (3, ROWS, COLUMNS)
    body = Term("Stmt.alloc", ("t0", shape, heads))
    return LoopProgram(body, (("x", shape),), (shape,), "float64")


def test_the_passes_in_a_loop_over_heads_fuse_per_head_where_a_heads_temporaries_spill() -> None:
    """Inside the loop over heads, the two passes run as one loop over row blocks, serial (the
    heads' loop is the parallel one), computing the same; not when one head's temporaries
    (24 x 20 elements of t0) fit `iteration_elements`."""
    program = passes_per_head()

    def fewest_row_blocks(body: Term) -> float:
        """A price that prefers fused programs: loops over blocks of rows, at any depth."""
        return sum(
            s.op == "Stmt.loop" and s.args[0].op == "Axis.outer" for s in statements_in(body)
        )  # type: ignore[union-attr]

    fused = fuse_row_blocks(program.body, fewest_row_blocks, iteration_elements=ROWS * COLUMNS - 1)
    heads = top_allocations(fused)[1]
    assert heads.op == "Stmt.loop" and heads.args[0] == HEADS, format_loops(fused)
    (blocks,) = top_statements(heads.args[2])  # type: ignore[arg-type]
    assert blocks.args[0].op == "Axis.outer", format_loops(fused)  # type: ignore[union-attr]
    assert blocks.args[1] == Term("LoopKind.serial", ()), format_loops(fused)
    inputs = {"x": np.random.default_rng(3).standard_normal((3, ROWS, COLUMNS))}
    want = run(program, inputs, dtype=np.float64)[0]
    assert_variant_agrees(run(program.with_body(fused), inputs, dtype=np.float64)[0], want, fused)
    kept = fuse_row_blocks(program.body, fewest_row_blocks, iteration_elements=ROWS * COLUMNS)
    assert kept == program.body


@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_multi_head_attention_runs_each_heads_softmax_in_row_blocks_where_its_scores_spill(
    isa: str,
) -> None:
    """A head's scores and exponentials (256 x 256 each) beyond one core's share of a 64 KiB
    L3: each head runs its scores, softmax and `P @ V` one block of rows at a time, the
    exponentials of a block contracted to the block's rows inside it, and the kernel agrees with
    numpy on NaN, ±inf and -0.0; with PINNED's 32 MiB L3 the heads' passes stay apart."""
    seq_len, heads, size = 256, 2, 16
    x = eqsat.tensor("x", (seq_len, heads * size))
    weights = {name: eqsat.tensor(name, (heads * size,) * 2) for name in ("Wq", "Wk", "Wv", "Wo")}
    program = attention_heads(x, **weights, heads=heads, xp=np)
    small_l3 = replace(PINNED, l3_bytes=64 << 10).with_isa(isa)
    unhurried = eqsat.Limits(seconds=120.0, extraction_seconds=120.0)  # the same on a busy host

    def exponentials(machine: Machine) -> list[str]:
        optimized = eqsat.optimize(program, machine=machine, limits=unhurried, progress=False)
        return [
            line for line in format_loops(optimized.program.body).splitlines() if "exp(" in line
        ]

    blocked = exponentials(small_l3)
    assert blocked and all("[i1.inner(" in line.split("=")[0] for line in blocked), blocked
    assert not any("[i1.inner(" in line for line in exponentials(PINNED.with_isa(isa)))
    kernel = eqsat.compile(program, machine=small_l3, limits=unhurried, progress=False)
    rng = np.random.default_rng(9)
    values = {name: with_specials(rng, t.shape, 0.001) for name, t in [("x", x), *weights.items()]}
    values["x"][5, 3] = -0.0
    with np.errstate(all="ignore"):
        want = attention_heads(**values, heads=heads, xp=np)
        wide = attention_heads(
            **{name: v.astype(np.float64) for name, v in values.items()}, heads=heads, xp=np
        )
    assert_specials_agree(kernel(**values), want, wide)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("passes", ["row blocks of 5 and 8", "column blocks, then rows"])
def test_fused_row_blocks_compile_to_the_interpreters_values(isa: str, passes: str) -> None:
    """The fused loop (a remainder block of 4 rows included; a column pass run inside the
    blocks) in C at every ISA."""
    if passes == "row blocks of 5 and 8":
        program = two_passes((5, "parallel", "serial"), (8, "parallel", "serial"))
    else:
        program = column_pass_then_rows(at(ROW, J), at(ROW, J))
    fused = program.with_body(fuse_row_blocks(program.body, fewest_statements))
    assert fused.body != program.body
    agrees_with_interpreter(LoopProgram(fused.body, fused.inputs, fused.outputs, "float32"), isa)


def weights_then_weighted_sums(between: Term | None = None) -> LoopProgram:
    """t0[i0] = x[i0, 0] * 2 over blocks of 8 rows (parallel); out0 = 0; then out0[i1] +=
    x[k, i1] * t0[k] over blocks of 4 rows in a parallel sum, k the rows under another name
    (as lowering names `x.T @ r`'s contraction), and the columns an axis named i0 (20 of them):
    x.T @ (x[:, 0] * 2). `between`, if given, runs after the zeroing."""
    k, columns = named("k", ROWS), named("i0", COLUMNS)
    first = Term("Index.const", (0,))
    weight = binary(
        "mul", load("in0", index_list([plain(ROW), first])), Term("Scalar.const", (2.0,))
    )
    produce = nest(
        [(outer(ROW, 8), "parallel", ()), (inner(ROW, 8), "serial", ())],
        Term("Stmt.store", ("t0", at(ROW), weight)),
    )
    zero = nest(
        [(columns, "vector", ())],
        Term("Stmt.store", ("out0", at(columns), Term("Scalar.const", (0.0,)))),
    )
    product = binary("mul", load("in0", at(k, columns)), load("t0", at(k)))
    sums = nest(
        [(outer(k, 4), "parallel_sum", ()), (inner(k, 4), "serial", ()), (columns, "vector", ())],
        Term("Stmt.accumulate", ("out0", at(columns), "sum", product)),
    )
    statements = [produce, zero, *([between] if between is not None else []), sums]
    body = Term("Stmt.alloc", ("t0", (ROWS,), seq(statements)))
    return LoopProgram(body, (("x", (ROWS, COLUMNS)),), ((COLUMNS,),), "float64")


def plain(axis: Term) -> Term:
    return Term("Index.axis", (axis,))


def test_a_sum_over_the_rows_fuses_with_the_pass_computing_its_weights() -> None:
    """The parallel sum's rows (k) are the weights' rows (i0) renamed: the two run as one
    parallel-sum loop over blocks of rows, its columns' axis renamed k (i0 is taken), and the
    zeroing of the sums, which commutes with the weights' pass, runs before it."""
    program = weights_then_weighted_sums()
    body = fuse_row_blocks(program.body, fewest_statements)
    zero, fused = top_statements(top_allocations(body)[1])
    assert zero == top_statements(program.body.args[2])[1]  # type: ignore[arg-type]
    text = format_loops(fused)
    assert text.startswith("for i0.outer(8) in 0..3 parallel sum:"), text
    assert "out0[k] += (in0[i0, k] * t0[i0])" in text, text
    x = {"x": np.random.default_rng(3).standard_normal((ROWS, COLUMNS))}
    want = run(program, x, dtype=np.float64)[0]
    assert_variant_agrees(run(program.with_body(body), x, dtype=np.float64)[0], want, body)


def test_a_sum_over_the_rows_stays_apart_from_a_pass_whose_results_it_needs_first() -> None:
    """A statement between the passes reads the weights: it cannot run before the fused loop,
    and the run stops at it."""
    first = index_list([Term("Index.const", (0,))])
    between = Term("Stmt.store", ("out0", first, load("t0", first)))  # out0[0] = t0[0]
    program = weights_then_weighted_sums(between)
    assert fuse_row_blocks(program.body, fewest_statements) == program.body


@pytest.mark.parametrize("isa", ISAS)
def test_a_fused_parallel_sum_compiles_to_the_interpreters_values(isa: str) -> None:
    """The fused parallel-sum loop, its columns' sums kept per thread, in C at every ISA."""
    program = weights_then_weighted_sums()
    fused = program.with_body(fuse_row_blocks(program.body, fewest_statements))
    assert fused.body != program.body
    agrees_with_interpreter(LoopProgram(fused.body, fused.inputs, fused.outputs, "float32"), isa)


def test_renaming_fail_two_axes_would_become_one() -> None:
    """Renaming k (24) i0 gives the statement's i0 (20) the name k: refused where the statement
    already has a k of 20 (the two would be one axis), allowed where it has not."""
    k, columns, other = named("k", ROWS), named("i0", COLUMNS), named("k", COLUMNS)
    one = Term("Scalar.const", (1.0,))
    sums = nest(
        [(k, "serial", ()), (columns, "serial", ())],
        Term("Stmt.accumulate", ("out0", at(columns), "sum", one)),
    )
    assert _renamed(sums, k, ROW) == nest(
        [(ROW, "serial", ()), (named("k", COLUMNS), "serial", ())],
        Term("Stmt.accumulate", ("out0", at(named("k", COLUMNS)), "sum", one)),
    )
    both = nest(
        [(k, "serial", ()), (other, "serial", ()), (columns, "serial", ())],
        Term("Stmt.accumulate", ("out0", at(columns), "sum", one)),
    )
    assert _renamed(both, k, ROW) is None


def test_a_long_program_fuses_by_windows_as_it_does_priced_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Beyond EXACT_PRICING_UP_TO top-level statements each fusion is priced by its change over a
    window of the program: six stacked softmax layers (24 statements) fuse as they do priced
    whole, and compute the same."""
    h = eqsat.tensor("x", (64, 32))
    for layer in range(6):
        h = eqsat.softmax(h) * eqsat.tensor(f"g{layer}", (32,)) + h
    optimized = eqsat.optimize(h, progress=False)
    extracted = len(top_statements(top_allocations(optimized.extracted)[1]))
    assert extracted > EXACT_PRICING_UP_TO
    cost = LoopCost(optimized.machine, "float32")
    windowed = fuse_row_blocks(optimized.extracted, lambda body: cost.estimate(body).cycles)
    # (one loop with vectors; without them, fewer of the passes pay to fuse)
    assert len(top_statements(top_allocations(windowed)[1])) < extracted
    monkeypatch.setattr(row_blocks, "EXACT_PRICING_UP_TO", 1 << 20)
    assert fuse_row_blocks(optimized.extracted, lambda body: cost.estimate(body).cycles) == windowed
    program = optimized.canonical
    rng = np.random.default_rng(0)
    inputs = {name: rng.standard_normal(shape) for name, shape in program.inputs}
    want = run(program, inputs, dtype=np.float64)[0]
    got = run(program.with_body(windowed), inputs, dtype=np.float64)[0]
    assert_variant_agrees(got, want, windowed)
