"""The part cache (eqsat/compile_cache.py, `eqsat.optimizer._scheduled_parts`): a compile that
misses the compile cache searches only the parts of its program that no earlier compile searched,
and gets from the others the nest their own search would give."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eqsat
from eqsat import compile_cache
from eqsat.core.limits import Limits
from eqsat.core.term import Term, dag_text, terms_from_json, terms_to_json
from eqsat.extract.loop_cost import LoopCost
from eqsat.rewrites.schedule import ROOT

ROWS, WIDTH = 48, 32
FROM_CACHE = "searches answered from the part cache"


@pytest.fixture(autouse=True)
def cache(fresh_cache: Path) -> Path:
    return fresh_cache


ACTIVATIONS = {  # eqsat's, numpy's
    "relu": (eqsat.relu, lambda a: np.maximum(a, 0.0)),
    "tanh": (eqsat.tanh, np.tanh),
}


def dense_layers(last: str) -> tuple[eqsat.Tensor, dict[str, np.ndarray], np.ndarray]:
    """Three dense layers, relu(h @ W + b) but activation `last` for the third, values for their
    inputs and numpy's result."""
    rng = np.random.default_rng(0)
    values = {"x": rng.standard_normal((ROWS, WIDTH), dtype=np.float32)}
    h, want = eqsat.tensor("x", (ROWS, WIDTH)), values["x"].astype(np.float64)
    for layer, activation in enumerate(["relu", "relu", last]):
        ours, numpys = ACTIVATIONS[activation]
        w, b = f"W{layer}", f"b{layer}"
        values[w] = (rng.standard_normal((WIDTH, WIDTH)) / math.sqrt(WIDTH)).astype(np.float32)
        values[b] = rng.standard_normal(WIDTH, dtype=np.float32)
        h = ours(h @ eqsat.tensor(w, (WIDTH, WIDTH)) + eqsat.tensor(b, (WIDTH,)))
        want = numpys(want @ values[w] + values[b])
    return h, values, want


def part_entries(directory: Path) -> list[Path]:
    return sorted(directory.glob("part-*.json"))


def test_an_edited_program_searches_only_the_parts_it_changed(cache: Path) -> None:
    first, _, _ = dense_layers("relu")
    searched = eqsat.compile(first, progress=False)
    assert FROM_CACHE not in searched.explain()
    assert len(part_entries(cache)) == 3  # each layer's part (the first reads x, not a temporary)

    edited, values, want = dense_layers("tanh")
    kernel = eqsat.compile(edited, progress=False)
    assert "2 of 3 searches answered from the part cache" in kernel.explain()
    np.testing.assert_allclose(kernel(**values), want, rtol=1e-4, atol=1e-5)
    assert kernel.c_source == eqsat.compile(edited, progress=False, cache=False).c_source
    assert len(part_entries(cache)) == 4


def test_without_the_cache_no_part_is_read_or_written(cache: Path) -> None:
    program, _, _ = dense_layers("relu")
    eqsat.optimize(program, progress=False, cache=True)
    entries = part_entries(cache)
    assert entries
    assert FROM_CACHE not in eqsat.optimize(program, progress=False).report()
    assert FROM_CACHE not in eqsat.compile(program, progress=False, cache=False).explain()
    assert part_entries(cache) == entries


def test_a_cached_parts_egraph_is_searched_again_when_read(cache: Path) -> None:
    """`candidates` and `draw` read the e-graph of a part answered from the cache: it is the
    search's own, whose cheapest nest is the cached one."""
    program, _, _ = dense_layers("relu")
    searched = eqsat.optimize(program, progress=False, cache=True)
    answered = eqsat.optimize(program, progress=False, cache=True)
    assert all(graph.from_cache for graph, _ in answered.loop_parts)
    assert answered.program == searched.program
    candidates = answered.candidates(3)
    assert candidates[0].program == answered.program and len(candidates) == 3
    for (graph, _), (own, _) in zip(answered.loop_parts, searched.loop_parts, strict=True):
        assert graph.graph.size == graph.size == own.size
    cost = LoopCost(answered.machine, "float32")
    again, own = (optimized.loop_parts[1][0].graph for optimized in (answered, searched))
    (best, _), *_ = again.extract_top(again.root(ROOT), cost, 4)  # a middle layer: renamed
    (own_best, _), *_ = own.extract_top(own.root(ROOT), cost, 4)
    assert best == own_best
    picture = answered.draw("loops")
    assert picture.svg.startswith("<svg") and picture.shown_classes > 0


def test_a_corrupt_or_stale_part_entry_is_searched_again(cache: Path) -> None:
    program, _, _ = dense_layers("relu")
    searched = eqsat.optimize(program, progress=False, cache=True)
    first, second, third = part_entries(cache)
    first.write_text("{not json")
    entry = json.loads(second.read_text())
    entry["payload"]["graph_size"] += 1  # its sha256 no longer matches
    second.write_text(json.dumps(entry))
    entry = json.loads(third.read_text())
    entry["version"] = -1
    third.write_text(json.dumps(entry))
    again = eqsat.optimize(program, progress=False, cache=True)
    assert not any(graph.from_cache for graph, _ in again.loop_parts)
    assert again.program == searched.program
    for path in (first, second, third):
        assert compile_cache.lookup_part(path.stem.removeprefix("part-")) is not None


@pytest.mark.parametrize(
    "limits",
    [Limits(seconds=0.0), Limits(extraction_seconds=0.0)],
    ids=["stage time limit", "extraction deadline"],
)
def test_a_part_stopped_on_the_clock_is_not_cached(limits: Limits, cache: Path) -> None:
    program, _, _ = dense_layers("relu")
    optimized = eqsat.optimize(program, progress=False, limits=limits, cache=True)
    assert optimized.stages[1].on_clock
    assert not part_entries(cache)


def test_other_limits_or_cores_are_other_parts(cache: Path) -> None:
    program, _, _ = dense_layers("relu")
    optimized = eqsat.optimize(program, progress=False, cache=True)
    eqsat.optimize(program, progress=False, cache=True, limits=Limits(iterations=3))
    assert len(part_entries(cache)) == 6
    more_cores = replace(optimized.machine, cores=optimized.machine.cores + 1)
    answered = eqsat.optimize(program, progress=False, cache=True, machine=more_cores)
    assert not any(graph.from_cache for graph, _ in answered.loop_parts)


# ---------------------------------------------------------------- terms as JSON

scalars = st.one_of(
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([-0.0, 0.0]),
    st.text(max_size=4),
)


def _terms(children: st.SearchStrategy[Term]) -> st.SearchStrategy[Term]:
    args = st.one_of(children, scalars, st.tuples(children, scalars))
    return st.builds(
        lambda op, args: Term(op, tuple(args)),
        st.sampled_from(["Stmt.seq", "Stmt.loop", "Expr.add", "a"]),
        st.lists(args, max_size=3),
    )


terms = st.recursive(st.builds(Term, st.sampled_from(["leaf", "Axis.named"]), st.just(())), _terms)


@settings(max_examples=200, deadline=None)
@given(st.lists(terms, min_size=1, max_size=3), st.data())
def test_terms_round_trip_through_json(roots: list[Term], data: st.DataObject) -> None:
    """Shared subterms, nested tuples and every float (NaN, ±inf, -0.0) come back as they were:
    `dag_text` tells them apart as `repr` does (NaN is not equal to itself)."""
    shared = data.draw(st.sampled_from(roots))
    roots = [*roots, Term("pair", (shared, shared))]
    text = json.dumps(terms_to_json(roots))
    back = terms_from_json(json.loads(text))
    assert dag_text(back) == dag_text(roots)
    assert back[-1].args[0] is back[-1].args[1]


def test_terms_differing_only_in_nan_stay_apart_through_json() -> None:
    """json reads every NaN as one object; two nodes that differ only in their NaNs (found by the
    round-trip property) must not come back as one shared Term."""
    roots = [Term("Expr.add", (Term("Axis.named", ()), math.inf, float("nan"))) for _ in range(2)]
    back = terms_from_json(json.loads(json.dumps(terms_to_json(roots))))
    assert dag_text(back) == dag_text(roots)
    assert back[0] is not back[1]


@pytest.mark.parametrize(
    "data",
    [
        {"nodes": [["a", [{"#": 0}]]], "roots": [0]},  # a node naming itself
        {"nodes": [["a", [True]]], "roots": [0]},
        {"nodes": [[1, []]], "roots": [0]},
        {"nodes": [["a", []]], "roots": [1]},
    ],
)
def test_json_that_is_not_terms_is_refused(data: dict[str, object]) -> None:
    with pytest.raises((KeyError, IndexError, TypeError, ValueError)):
        terms_from_json(data)
