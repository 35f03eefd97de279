"""The loop stage's partition of a program (eqsat.rewrites.partition): runs of statements over
one outer axis, put back together in order; a one-operation program is one part."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings

import eqsat
from eqsat.core.loops import buffers_accessed, top_allocations, top_statements
from eqsat.core.terms import Term, to_term
from eqsat.rewrites.lowering import lower
from eqsat.rewrites.partition import (
    _initializes,
    _is_product,
    joined,
    parts,
    with_buffers_renamed,
    with_canonical_buffers,
)
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


LAYERS, ROWS, WIDTH = 5, 48, 32


def stacked_layers(layers: int = LAYERS) -> tuple[eqsat.Tensor, dict[str, np.ndarray]]:
    """`layers` dense layers of one width, relu(h @ W + b) each, and values for their inputs."""
    rng = np.random.default_rng(0)
    values = {"x": rng.standard_normal((ROWS, WIDTH), dtype=np.float32)}
    h = eqsat.tensor("x", (ROWS, WIDTH))
    for layer in range(layers):
        w, b = f"W{layer}", f"b{layer}"
        values[w] = (rng.standard_normal((WIDTH, WIDTH)) / math.sqrt(WIDTH)).astype(np.float32)
        values[b] = rng.standard_normal(WIDTH, dtype=np.float32)
        h = eqsat.relu(h @ eqsat.tensor(w, (WIDTH, WIDTH)) + eqsat.tensor(b, (WIDTH,)))
    return h, values


@settings(max_examples=40, deadline=None)
@given(programs(max_ops=5, dims=SMALL_DIMS))
def test_canonical_buffer_names_map_back_to_the_part(program: Program) -> None:
    for piece in parts(lowered(*program.outputs)):
        renamed, back = with_canonical_buffers(piece)
        assert with_buffers_renamed(renamed, back) == piece
        assert with_canonical_buffers(renamed)[0] == renamed
        # the letters of each name are kept: the cost model tells caller arrays by them
        digits = "0123456789"
        assert all(new.rstrip(digits) == old.rstrip(digits) for new, old in back.items())


def test_the_middle_layers_of_a_stack_are_one_part_but_for_buffer_names() -> None:
    """The first layer reads the input x and the last writes the output: the three between read
    and write temporaries alike."""
    output, _ = stacked_layers()
    pieces = parts(lowered(output))
    assert len(pieces) == LAYERS
    renamed = [with_canonical_buffers(piece)[0] for piece in pieces]
    assert len(set(pieces)) == LAYERS and len(set(renamed)) == 3
    assert renamed[1] == renamed[2] == renamed[3] != renamed[0]


def test_identical_parts_are_searched_once_and_compile_to_numpys_result() -> None:
    output, values = stacked_layers()
    optimized = eqsat.optimize(output, progress=False)
    graphs = [graph for graph, _ in optimized.loop_parts]
    assert len(graphs) == LAYERS and len({id(graph) for graph in graphs}) == 3
    assert "2 of them identical to another but for the names of their buffers" in (
        optimized.report()
    )
    kernel = eqsat.compile(output, progress=False, cache=False)
    want = values["x"].astype(np.float64)
    for layer in range(LAYERS):
        want = np.maximum(want @ values[f"W{layer}"] + values[f"b{layer}"], 0.0)
    np.testing.assert_allclose(kernel(**values), want, rtol=1e-4, atol=1e-5)


def test_the_candidates_and_picture_of_a_part_searched_renamed_use_the_programs_buffers() -> None:
    """The largest part of the stack is a middle layer, searched with its buffers renamed: its
    candidates come back under the program's names (the chosen one first), and `draw` finds the
    chosen nest in its e-graph. The chosen one need not be the cheapest: `candidates` extracts
    more per e-class than the search, and the roofline of a whole is not a sum of its parts."""
    output, _ = stacked_layers()
    optimized = eqsat.optimize(output, progress=False)
    largest = optimized._largest_part()
    piece = parts(optimized.canonical.body)[largest]
    assert with_canonical_buffers(piece)[0] != piece
    candidates = optimized.candidates(4)
    assert candidates[0].program == optimized.program
    assert len([c for c in candidates if c.source == "best"]) > 1
    program_buffers = buffers_accessed(optimized.program.body)
    assert all(buffers_accessed(c.program.body) == program_buffers for c in candidates)
    assert optimized.draw("loops").svg
