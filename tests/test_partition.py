"""The loop stage's partition of a program (eqsat.rewrites.partition): runs of statements over
one outer axis, put back together in order; a one-operation program is one part."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings

import eqsat
from eqsat.core.loops import top_allocations, top_statements
from eqsat.core.terms import Term, to_term
from eqsat.rewrites.lowering import lower
from eqsat.rewrites.partition import _initializes, _is_product, joined, parts
from eqsat.tools.whole_programs import attention_heads
from tests.programs import SMALL_DIMS, Program, programs


def lowered(*outputs: eqsat.Tensor) -> Term:
    roots = [to_term(output.expr) for output in outputs]
    return lower(roots).body  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(programs(max_ops=5, dims=SMALL_DIMS))
def test_the_parts_joined_are_the_program(program: Program) -> None:
    body = lowered(*program.outputs)
    pieces = parts(body)
    assert joined(body, pieces) == body
    statements = top_statements(top_allocations(body)[1])
    assert sum(len(top_statements(top_allocations(p)[1])) for p in pieces) == len(statements)


def test_a_row_wise_program_is_one_part_attention_over_its_rows_too() -> None:
    x = eqsat.tensor("x", (64, 32))
    assert len(parts(lowered(eqsat.softmax(x)))) == 1
    q, k, v = (eqsat.tensor(name, (64, 16)) for name in "qkv")
    copy, rows = parts(lowered(eqsat.softmax(q @ k.T) @ v))  # K's transposed copy; the rest
    assert len(top_statements(top_allocations(copy)[1])) == 1
    assert len(top_statements(top_allocations(rows)[1])) == 10  # the products and the softmax
    weights = {name: eqsat.tensor(name, (32, 32)) for name in ("Wq", "Wk", "Wv", "Wo")}
    pieces = parts(lowered(attention_heads(x, **weights, heads=4, xp=np)))
    assert len(pieces) > 2
    for piece in pieces:  # each part allocates only the temporaries it touches
        allocations, statements = top_allocations(piece)
        assert all(name in repr(statements) for name, _ in allocations)


def test_a_run_of_three_products_gets_one_part_each_with_its_initialization() -> None:
    """A SwiGLU MLP's products over the same rows: three parts, each starting with its
    product's zeroing (or its prologue, for the first) and holding one product; a run of two
    products (attention over its rows, above) stays one part."""
    x, g = eqsat.tensor("x", (64, 32)), eqsat.tensor("g", (32,))
    w1, w3, w2 = (
        eqsat.tensor(n, s) for n, s in (("w1", (32, 96)), ("w3", (32, 96)), ("w2", (96, 32)))
    )
    h = x / eqsat.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6) * g
    pieces = parts(lowered((eqsat.sigmoid(h @ w1) * (h @ w3)) @ w2))
    assert len(pieces) == 3
    for number, piece in enumerate(pieces):
        statements = top_statements(top_allocations(piece)[1])
        assert sum(_is_product(s) for s in statements) == 1
        if number:  # a later part starts with its product's zeroing
            assert _initializes(statements[0], statements[1]) and _is_product(statements[1])
    two = parts(lowered((h @ w1) @ w2))
    assert len(two) == 1


def test_a_partitioned_program_compiles_to_numpys_result() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((48, 32), dtype=np.float32)
    weights = {
        name: (rng.standard_normal((32, 32)) / math.sqrt(32)).astype(np.float32)
        for name in ("Wq", "Wk", "Wv", "Wo")
    }
    traced = eqsat.jit(lambda x, Wq, Wk, Wv, Wo: attention_heads(x, Wq, Wk, Wv, Wo, 4, np))
    got = traced(x, **weights)
    wide = {name: value.astype(np.float64) for name, value in weights.items()}
    want = attention_heads(x.astype(np.float64), **wide, heads=4, xp=np)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    kernel = traced.kernel_for(x, **weights)
    assert "parts (rewrites/partition.py)" in kernel.explain()
