"""Transposed copies (`eqsat.core.loops.transposed_loads`, `backend_c.emit`): a nest that writes
along one axis and reads across the rows of another runs in blocks of lanes x lanes transposed in
registers; the kernel agrees with the interpreter and numpy at every ISA, remainders, split axes
and special values included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eqsat.backend_c.emit import emit
from eqsat.core.loops import statements_in, transposed_copy, transposed_loads
from eqsat.core.term import index_list
from eqsat.core.terms import LoopProgram, Term
from eqsat.extract.loop_cost import LoopCost
from tests.isas import ISAS, VECTOR_ISAS, skip_unless_runs
from tests.programs import agrees_with_interpreter, compiled
from tests.test_loops import AVX512, at, inner, named, nest, outer
from tests.test_numerics import assert_specials_agree, with_specials
from tests.test_packing import load


def binary(op: str, x: Term, y: Term) -> Term:
    return Term("Scalar.binary", (op, x, y))


def transposing(
    m: int,
    n: int,
    tile: int | None = None,
    dtype: str = "float32",
    twice: bool = False,
    store_outside: bool = False,
) -> LoopProgram:
    """out0[a, b] = x[b, a] / sqrt(s[b]) + y[a, b] (+ z[b, a] * x[b, a] when `twice`), looped
    over a outside b (b outside a, the store's contiguous axis outside, when `store_outside`),
    b split by `tile` when given (a parallel loop of tiles, as a chosen nest has it): cosine
    similarity's copy of its right operand, transposed."""
    a, b = named("i0", n), named("i1", m)
    value = binary(
        "add",
        binary("div", load("in0", at(b, a)), Term("Scalar.unary", ("sqrt", load("in1", at(b))))),
        load("in2", at(a, b)),
    )
    inputs: list[tuple[str, tuple[int, ...]]] = [("x", (m, n)), ("s", (m,)), ("y", (n, m))]
    if twice:
        value = binary("add", value, binary("mul", load("in3", at(b, a)), load("in0", at(b, a))))
        inputs.append(("z", (m, n)))
    store = Term("Stmt.store", ("out0", at(a, b), value))
    if tile is None:
        copy = [(a, "serial", ()), (b, "serial", ())]
    else:
        copy = [(a, "serial", ()), (inner(b, tile), "serial", ())]
    if store_outside:
        copy.reverse()
    body = nest(([] if tile is None else [(outer(b, tile), "parallel", ())]) + copy, store)
    return LoopProgram(body, tuple(inputs), ((n, m),), dtype)


def reference(inputs: dict[str, np.ndarray], twice: bool) -> np.ndarray:
    x, s, y = inputs["x"], inputs["s"], inputs["y"]
    with np.errstate(all="ignore"):
        out = (x / np.sqrt(s)[:, None]).T + y
        return out + (inputs["z"] * x).T if twice else out


@pytest.mark.parametrize("isa", ISAS)
@settings(max_examples=10, deadline=None)
@given(
    m=st.integers(2, 70),  # (an axis of extent 1 is no row to read across)
    n=st.integers(2, 70),
    tile=st.sampled_from([None, 16, 24]),
    dtype=st.sampled_from(["float32", "float64"]),
    twice=st.booleans(),
    store_outside=st.booleans(),
)
def test_a_transposed_copy_agrees_with_the_interpreter(
    isa: str, m: int, n: int, tile: int | None, dtype: str, twice: bool, store_outside: bool
) -> None:
    """In the nest's own order, or interchanged where the store runs along the outer loop."""
    program = transposing(m, n, tile, dtype, twice, store_outside)
    source = emit(program, isa)
    assert ("_t0_row0 =" in source) == (isa != "scalar")
    assert ("_t1_row0 =" in source) == (isa != "scalar" and twice)  # x[b, a] is loaded once
    agrees_with_interpreter(program, isa, source=source)


@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_a_transposed_copy_keeps_nan_inf_and_signed_zeros(isa: str) -> None:
    """Whole blocks and both remainders carry NaN, ±inf and -0.0 through as numpy does."""
    m, n = 37, 41
    kernel = compiled(transposing(m, n), isa)
    skip_unless_runs(isa)
    rng = np.random.default_rng(3)
    x = with_specials(rng, (m, n), 0.1)
    s = np.abs(with_specials(rng, (m,), 0.1))
    y = with_specials(rng, (n, m), 0.1)
    x[2, 5], y[7, 1] = -0.0, -0.0
    inputs = {"x": x, "s": s, "y": y}
    got = kernel(**inputs)
    want = reference(inputs, twice=False)
    wide = {name: value.astype(np.float64) for name, value in inputs.items()}
    assert_specials_agree(got, want, reference(wide, twice=False))


def test_transposed_loads_refuse_what_the_blocks_cannot_run() -> None:
    a, b = named("i0", 32), named("i1", 32)

    def store(target: Term, value: Term) -> Term:
        return Term("Stmt.store", ("out0", target, value))

    across = load("in0", at(b, a))
    assert transposed_loads(a, b, store(at(a, b), across)) == [across]
    assert (
        transposed_loads(a, b, Term("Stmt.accumulate", ("out0", at(a, b), "sum", across))) is None
    )
    assert transposed_loads(a, b, store(at(b, a), across)) is None  # stores strided
    assert transposed_loads(a, b, store(at(a, b), load("in0", at(a, b)))) is None  # no transpose
    assert transposed_loads(a, b, store(at(a, b), load("out0", at(b, a)))) is None  # reads itself
    doubled = Term("Index.scale", (Term("Index.axis", (b,)), 2))
    every_other_row = load("in0", index_list([doubled, Term("Index.axis", (a,))]))
    assert transposed_loads(a, b, store(at(a, b), every_other_row)) is None


@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_the_cost_model_prices_a_copy_in_blocks_below_one_it_cannot_block(isa: str) -> None:
    """A copy the emitter runs in transposed blocks (`transposed_copy`) is priced per vector,
    not as its scalar loops: a tiling the blocks cannot run (the loads' axis split and unrolled
    inside the store's) no longer ties with it (cosine similarity's copy ran 1 ms slower)."""
    machine = AVX512.with_isa(isa)
    blocked = transposing(768, 1024).body
    a, b, store = named("i0", 1024), named("i1", 768), list(statements_in(blocked))[-1]
    unrolled = nest(
        [(b, "serial", ()), (outer(a, 8), "serial", ()), (inner(a, 8), "unroll", (8,))], store
    )
    assert transposed_copy(*unrolled.args) is None and transposed_copy(*blocked.args) is not None
    cost = LoopCost(machine, "float32")
    lanes = machine.lanes("float32")
    assert cost.estimate(blocked).compute * lanes / 2 < cost.estimate(unrolled).compute
