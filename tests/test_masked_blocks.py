"""Masked blocks (eqsat.rewrites.masked_blocks): a block of a product whose every result a
mask discards is skipped by a guard.

Soundness is checked on nests built by hand (any extents and tiles, every comparison, the load
in either branch of the `where`, a mask offset): the guarded nest gives the same output as the
nest without guards, bit for bit, in the loop interpreter and compiled at every ISA level, on
inputs with NaN, ±inf and -0.0. Causal attention as eqsat schedules it skips its blocks above
the diagonal and agrees with numpy on special values.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import eqsat
from eqsat.core.interp import run
from eqsat.core.term import subterms
from eqsat.core.terms import LoopProgram, Term
from eqsat.rewrites.lowering import seq
from eqsat.rewrites.masked_blocks import skip_masked_blocks
from eqsat.tools.whole_programs import causal_attention
from tests.isas import ISAS, skip_unless_runs
from tests.machines import PINNED
from tests.programs import compiled
from tests.test_loops import at, inner, named, nest, outer
from tests.test_numerics import assert_specials_agree, with_specials


def scalar(op: str, *args: object) -> Term:
    return Term(f"Scalar.{op}", args)


def masked_product(
    rows: int, columns: int, depth: int, tile: int, compare: str, offset: int, in_branch: str
) -> LoopProgram:
    """out0[i, j] = where(j - i + offset `compare` 0, t0[i, j], -inf) (the load in the `in_branch`
    branch, "chosen" or "other"), with t0 = in0 @ in1 computed in blocks of `tile` columns."""
    i, j, k = named("i0", rows), named("i1", columns), named("k", depth)
    zero = nest(
        [(i, "serial", ()), (j, "serial", ())],
        Term("Stmt.store", ("t0", at(i, j), scalar("const", 0.0))),
    )
    product = scalar(
        "binary", "mul", scalar("load", "in0", at(i, k)), scalar("load", "in1", at(k, j))
    )
    block = nest(
        [
            (i, "serial", ()),
            (outer(j, tile), "serial", ()),
            (k, "serial", ()),
            (inner(j, tile), "serial", ()),
        ],
        Term("Stmt.accumulate", ("t0", at(i, j), "sum", product)),
    )
    difference = scalar(
        "binary",
        "add",
        scalar(
            "binary",
            "sub",
            scalar("index", Term("Index.axis", (j,))),
            scalar("index", Term("Index.axis", (i,))),
        ),
        scalar("const", float(offset)),
    )
    condition = scalar("binary", compare, difference, scalar("const", 0.0))
    load, masked = scalar("load", "t0", at(i, j)), scalar("const", float("-inf"))
    chosen, other = (load, masked) if in_branch == "chosen" else (masked, load)
    consumer = nest(
        [(i, "serial", ()), (j, "serial", ())],
        Term("Stmt.store", ("out0", at(i, j), scalar("where", condition, chosen, other))),
    )
    body = Term("Stmt.alloc", ("t0", (rows, columns), seq([zero, block, consumer])))
    inputs = (("a", (rows, depth)), ("b", (depth, columns)))
    return LoopProgram(body, inputs, ((rows, columns),), "float32")


def guards(body: Term) -> int:
    return sum(isinstance(t, Term) and t.op == "Stmt.guard" for t in subterms([body]))


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 40),
    columns=st.integers(1, 40),
    depth=st.integers(1, 5),
    tile=st.sampled_from([1, 3, 8]),
    compare=st.sampled_from(["le", "lt", "ge", "gt"]),
    offset=st.integers(-10, 10),
    in_branch=st.sampled_from(["chosen", "other"]),
    seed=st.integers(0, 1000),
)
def test_guarded_nest_gives_the_same_output_in_the_interpreter(
    rows: int,
    columns: int,
    depth: int,
    tile: int,
    compare: str,
    offset: int,
    in_branch: str,
    seed: int,
) -> None:
    """Bit for bit, NaN where the unguarded nest has NaN (a skipped element left unwritten is
    NaN in the interpreter: read, it would show)."""
    program = masked_product(rows, columns, depth, tile, compare, offset, in_branch)
    guarded = program.with_body(skip_masked_blocks(program.body))
    rng = np.random.default_rng(seed)
    inputs = {
        "a": with_specials(rng, (rows, depth), 0.1),
        "b": with_specials(rng, (depth, columns), 0.1),
    }
    (want,) = run(program, inputs)
    (got,) = run(guarded, inputs)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("compare", "offset", "in_branch"),
    [
        ("le", 0, "chosen"),  # j <= i: the causal mask
        ("gt", 0, "other"),  # not (j > i)
        ("ge", 0, "chosen"),  # j >= i: the other triangle
        ("lt", -20, "chosen"),  # j < i - 20
        ("le", 5, "other"),  # j > i - 5
    ],
)
def test_a_block_loop_is_guarded_by_the_masks_bound_over_the_block(
    compare: str, offset: int, in_branch: str
) -> None:
    """The column-block loop's body runs exactly for the blocks holding an element the load's
    branch reads, checked by evaluating the guard's condition at every row and block."""
    rows, columns, tile = 48, 64, 8
    program = masked_product(rows, columns, 4, tile, compare, offset, in_branch)
    body = skip_masked_blocks(program.body)
    assert guards(body) == 1
    (guard,) = (t for t in subterms([body]) if isinstance(t, Term) and t.op == "Stmt.guard")
    index, limit, _ = guard.args
    i, j = named("i0", rows), named("i1", columns)
    for row in range(rows):
        for block in range(columns // tile):
            values = {i: row, outer(j, tile): block}
            kept = [
                c
                for c in range(block * tile, block * tile + tile)
                if _mask(compare, c - row + offset) == (in_branch == "chosen")
            ]
            assert (_value(index, values) <= limit) == bool(kept), (row, block)  # type: ignore[arg-type]


def _mask(compare: str, x: int) -> bool:
    return {"le": x <= 0, "lt": x < 0, "ge": x >= 0, "gt": x > 0}[compare]


def _value(index: Term, values: dict[Term, int]) -> int:
    a = index.args
    match index.op:
        case "Index.axis":
            return values[a[0]]  # type: ignore[index]
        case "Index.add":
            return _value(a[0], values) + _value(a[1], values)  # type: ignore[arg-type]
        case "Index.scale":
            return _value(a[0], values) * int(a[1])  # type: ignore[arg-type]
    raise AssertionError(index.op)


def test_a_temporary_read_outside_the_mask_is_not_guarded() -> None:
    """t0 also read unmasked (out0 += t0): every block is needed."""
    program = masked_product(32, 32, 4, 8, "le", 0, "chosen")
    i, j = named("i0", 32), named("i1", 32)
    extra = nest(
        [(i, "serial", ()), (j, "serial", ())],
        Term("Stmt.accumulate", ("out0", at(i, j), "sum", scalar("load", "t0", at(i, j)))),
    )
    name, shape, body = program.body.args
    assert guards(skip_masked_blocks(Term("Stmt.alloc", (name, shape, seq([body, extra]))))) == 0  # type: ignore[list-item]


def test_a_mask_that_is_not_exact_in_floating_point_is_not_used() -> None:
    """0.5 * j - i: not integral, so not a block bound."""
    program = masked_product(32, 32, 4, 8, "le", 0, "chosen")
    j = named("i1", 32)
    half = scalar("binary", "mul", scalar("const", 0.5), scalar("index", Term("Index.axis", (j,))))
    body = _replaced(program.body, scalar("index", Term("Index.axis", (j,))), half)
    assert guards(skip_masked_blocks(body)) == 0


def _replaced(term: Term, old: Term, new: Term) -> Term:
    if term == old:
        return new
    return Term(
        term.op, tuple(_replaced(a, old, new) if isinstance(a, Term) else a for a in term.args)
    )


@pytest.mark.parametrize("isa", ISAS)
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.integers(1, 70),
    columns=st.integers(1, 70),
    tile=st.sampled_from([4, 16]),
    compare=st.sampled_from(["le", "gt"]),
    seed=st.integers(0, 1000),
)
def test_guarded_nest_compiles_to_the_same_output(
    isa: str, rows: int, columns: int, tile: int, compare: str, seed: int
) -> None:
    program = masked_product(rows, columns, 3, tile, compare, 0, "chosen")
    guarded = program.with_body(skip_masked_blocks(program.body))
    rng = np.random.default_rng(seed)
    inputs = {"a": with_specials(rng, (rows, 3), 0.05), "b": with_specials(rng, (3, columns), 0.05)}
    kernels = compiled(program, isa), compiled(guarded, isa)
    skip_unless_runs(isa)
    want, got = (kernel(**inputs) for kernel in kernels)
    np.testing.assert_array_equal(got, want)


def guarded_in_parallel_loop(nest_lines: list[str]) -> bool:
    """Whether a guard ("if ...") stands inside a parallel loop of the nest `explain()` shows."""
    parallel_depths: list[int] = []  # indentation of the parallel loops around the line
    for line in nest_lines:
        depth = len(line) - len(line.lstrip())
        parallel_depths = [d for d in parallel_depths if d < depth]
        if line.strip().startswith("if ") and parallel_depths:
            return True
        if line.rstrip().endswith(" parallel:"):
            parallel_depths.append(depth)
    return False


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n", [256, 100])
def test_causal_attention_skips_blocks_and_agrees_with_numpy_on_special_values(
    isa: str, n: int
) -> None:
    """The scores product's blocks above the diagonal are skipped where its nest has column
    blocks (at 256 rows it has, at every ISA), the row blocks shared out round-robin where
    their loop is parallel; the kernel agrees with numpy."""
    q, k, v = (eqsat.tensor(name, (n, 32)) for name in "qkv")
    kernel = eqsat.compile(causal_attention(q, k, v, np), machine=PINNED, isa=isa, progress=False)
    nest_lines = kernel.explain().split("loop nest:")[1].splitlines()
    guarded = any(line.strip().startswith("if ") for line in nest_lines)
    round_robin = "schedule(static, 1)" in kernel.c_source
    assert round_robin == guarded_in_parallel_loop(nest_lines), kernel.explain()
    assert guarded or n != 256, kernel.explain()
    rng = np.random.default_rng(n)
    inputs = {name: with_specials(rng, (n, 32), rate=0.002) for name in "qkv"}
    with np.errstate(all="ignore"):
        want = causal_attention(*inputs.values(), np)
        reference = causal_attention(*(a.astype(np.float64) for a in inputs.values()), np)
    skip_unless_runs(isa)
    assert_specials_agree(kernel(**inputs), want, reference)
