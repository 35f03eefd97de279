"""Soundness of every loop rewrite rule, generated from the rule definitions, plus guard refusals.

Random lowered programs are saturated with one rule; then many different programs are extracted
from the root e-class (random choice per e-class) and each must agree with the canonical program.
The algebra (tensor) identities are tested in tests/test_algebra.py.
"""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
from egglog import EGraph, eq, ne, relation, rule, ruleset, unstable_combine_rulesets, var
from egglog.egraph import FactLike
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from eqsat.core.interp import run
from eqsat.core.terms import (
    Axis,
    Stmt,
    Term,
    TExpr,
    index_list,
    owned_egraph,
    subterms,
    to_egglog,
    to_term,
)
from eqsat.extract.extractor import SerializedGraph
from eqsat.extract.machine import host
from eqsat.rewrites.analysis import (
    analysis,
    mark_program,
    maxes,
    mixed,
    order_dependent,
    prods,
    reads,
    stores,
    sums,
    writes,
)
from eqsat.rewrites.annotate import annotate_identities
from eqsat.rewrites.fusion import IDENTITIES as FUSION
from eqsat.rewrites.fusion import fusion_candidates
from eqsat.rewrites.interchange import IDENTITIES as INTERCHANGE
from eqsat.rewrites.lowering import lower
from eqsat.rewrites.rule import KEBAB_CASE, Identity, Predicate
from eqsat.rewrites.schedule import loop_rules
from eqsat.rewrites.tiling import (
    TileSizes,
    split_depth_identity,
    split_identities,
    split_identity,
)
from tests.programs import SMALL_DIMS, Program, assert_variant_agrees, programs

LOOP_IDENTITIES = (
    *INTERCHANGE,
    *split_identities(TileSizes(cache=(4,), register=(2,), depth=(3,))),
    *FUSION,
    *annotate_identities(4, 2),
)
# Rules that only match what another rule made: the inner loop of a cache tile is split again;
# a loop over a reduced axis is outside every other loop once interchanged.
PREREQUISITES = {"split-tile-4-2": split_identity(4), "parallelize-sum": INTERCHANGE[0]}


def saturate_with(identity: Identity, body: Term, rounds: int = 4) -> tuple[SerializedGraph, int]:
    """E-graph of `body` after `rounds` of (analyses; `identity` and its prerequisite), and how
    often `identity` matched."""
    with owned_egraph(EGraph()) as egraph:  # never left to another thread's cycle collector
        return _saturated_with(egraph, identity, body, rounds)


def _saturated_with(
    egraph: EGraph, identity: Identity, body: Term, rounds: int
) -> tuple[SerializedGraph, int]:
    """`saturate_with` in the empty e-graph `egraph`."""
    mark_program(egraph, egraph.let("kernel", to_egglog(body)))
    facts = unstable_combine_rulesets(analysis, fusion_candidates(), name="facts")
    prerequisite = PREREQUISITES.get(identity.name)
    rules = ruleset(
        identity.egglog_rule(),
        *([prerequisite.egglog_rule()] if prerequisite else []),
        name=f"only-{identity.name}",
    )
    matches = 0
    for _ in range(rounds):
        report = egraph.run(facts.saturate() + rules)
        matches += sum(
            n
            for r, n in report.num_matches_per_rule.items()
            if getattr(r, "name", None) == identity.name
        )
    return SerializedGraph(egraph), matches


@pytest.mark.parametrize("identity", LOOP_IDENTITIES, ids=lambda i: i.name)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs(max_ops=3, dims=SMALL_DIMS), seed=st.integers(0, 1000))
def test_loop_rule_is_sound(identity: Identity, program: Program, seed: int) -> None:
    canonical = lower([to_term(program.outputs[0].expr)])  # type: ignore[list-item]
    graph, _ = saturate_with(identity, canonical.body)
    want = run(canonical, program.inputs, dtype=np.float64)[0]
    rng = random.Random(seed)
    for _ in range(4):
        variant = canonical.with_body(graph.extract_random(graph.root("kernel"), rng))
        got = run(variant, program.inputs, dtype=np.float64)[0]
        assert_variant_agrees(got, want, variant.body)


@pytest.mark.parametrize("identity", LOOP_IDENTITIES, ids=lambda i: i.name)
def test_loop_rule_fires_on_a_matmul_epilogue(identity: Identity) -> None:
    """Each loop rule applies somewhere in relu(x @ W + b), or for a rule about sums over a
    loop outside all others, in xᵀ @ y, or for a split of a short contraction, with 4-deep
    products: the soundness test is not vacuous."""
    depth = 4 if identity.name.startswith("split-short-") else 6
    x, w, b = (
        TExpr.input(n, s, "float64") for n, s in [("x", (4, depth)), ("W", (depth, 8)), ("b", (8,))]
    )
    expr = TExpr.unary("relu", TExpr.binary("add", TExpr.matmul(x, w), b))
    if identity.name == "parallelize-sum":  # xᵀ @ y: its loop over k sums into the output
        y = TExpr.input("y", (4, 1), "float64")
        expr = TExpr.matmul(TExpr.transpose(x, (1, 0)), y)  # type: ignore[arg-type]
    _, matches = saturate_with(identity, lower([to_term(expr)]).body)  # type: ignore[list-item]
    assert matches > 0


# ---------------------------------------------------------------- guards refuse illegal cases


def axis(name: str, extent: int) -> Term:
    return Term("Axis.named", (name, extent))


def at(*indices: Term) -> Term:
    return index_list(indices)


def plain(a: Term) -> Term:
    return Term("Index.axis", (a,))


def loop(a: Term, body: Term, kind: str = "serial") -> Term:
    return Term("Stmt.loop", (a, Term(f"LoopKind.{kind}", ()), body))


def load(buffer: str, index: Term) -> Term:
    return Term("Scalar.load", (buffer, index))


def applies(identity: Identity, body: Term) -> bool:
    return saturate_with(identity, body, rounds=2)[1] > 0


AXIS_I = axis("i", 4)
AXIS_J = axis("j", 4)
REVERSED_I = Term(
    "Index.add", (Term("Index.const", (3,)), Term("Index.scale", (plain(AXIS_I), -1)))
)


def producer_consumer(consumer_index: Term) -> Term:
    produce = loop(
        AXIS_I, Term("Stmt.store", ("t0", at(plain(AXIS_I)), load("in0", at(plain(AXIS_I)))))
    )
    consume = loop(
        AXIS_I, Term("Stmt.store", ("out0", at(plain(AXIS_I)), load("t0", at(consumer_index))))
    )
    return Term("Stmt.alloc", ("t0", (4,), Term("Stmt.seq", (produce, consume))))


def test_fusion_fail_consumer_reads_a_neighbour() -> None:
    assert applies(FUSION[0], producer_consumer(plain(AXIS_I)))
    assert not applies(FUSION[0], producer_consumer(REVERSED_I))


def test_interchange_fail_order_dependent_body() -> None:
    # out0[0] = out0[0] * 0.5 + in0[i, j]: the result depends on the order of (i, j)
    update = Term(
        "Scalar.binary",
        (
            "add",
            Term(
                "Scalar.binary",
                ("mul", load("out0", at(Term("Index.const", (0,)))), Term("Scalar.const", (0.5,))),
            ),
            load("in0", at(plain(AXIS_I), plain(AXIS_J))),
        ),
    )
    body = loop(
        AXIS_I, loop(AXIS_J, Term("Stmt.store", ("out0", at(Term("Index.const", (0,))), update)))
    )
    assert not applies(INTERCHANGE[0], body)
    independent = loop(
        AXIS_I,
        loop(
            AXIS_J,
            Term(
                "Stmt.store",
                (
                    "out0",
                    at(plain(AXIS_I), plain(AXIS_J)),
                    load("in0", at(plain(AXIS_J), plain(AXIS_I))),
                ),
            ),
        ),
    )
    assert applies(INTERCHANGE[0], independent)


def test_vectorize_fail_strided_store() -> None:
    store_vector = annotate_identities(4, 2)[0]
    strided = loop(
        AXIS_I,
        Term(
            "Stmt.store",
            ("out0", at(plain(AXIS_I), Term("Index.const", (0,))), Term("Scalar.const", (1.0,))),
        ),
    )
    contiguous = loop(
        AXIS_I,
        Term(
            "Stmt.store",
            ("out0", at(Term("Index.const", (0,)), plain(AXIS_I)), Term("Scalar.const", (1.0,))),
        ),
    )
    assert not applies(store_vector, strided)
    assert applies(store_vector, contiguous)


def test_parallelize_fail_reduction_across_iterations() -> None:
    parallel = annotate_identities(4, 2)[-1]
    assert parallel.name == "parallelize"
    reduction = loop(
        AXIS_I, Term("Stmt.accumulate", ("out0", at(), "sum", load("in0", at(plain(AXIS_I)))))
    )
    assert not applies(parallel, reduction)
    rows = loop(
        AXIS_I,
        Term("Stmt.accumulate", ("out0", at(plain(AXIS_I)), "sum", load("in0", at(plain(AXIS_I))))),
    )
    assert applies(parallel, rows)


def test_parallelize_sum_fail_buffer_not_shared_or_not_only_summed() -> None:
    parallel_sum = next(i for i in annotate_identities(4, 2) if i.name == "parallelize-sum")

    def over_i(target: Term, op: str = "sum", value: Term | None = None) -> Term:
        value = load("in0", at(plain(AXIS_I))) if value is None else value
        return loop(AXIS_I, Term("Stmt.accumulate", ("out0", target, op, value)))

    assert applies(parallel_sum, over_i(at()))  # every iteration sums into out0[]
    assert not applies(parallel_sum, over_i(at(plain(AXIS_I))))  # nothing shared: parallelize
    assert not applies(parallel_sum, over_i(at(), "max"))  # only sums are added up per thread
    assert not applies(parallel_sum, over_i(at(), value=load("out0", at())))  # reads its sum
    store = Term("Stmt.store", ("out0", at(), load("in0", at(plain(AXIS_I)))))
    assert not applies(parallel_sum, loop(AXIS_I, Term("Stmt.seq", (store, over_i(at()).args[2]))))


def test_split_fail_extent_not_larger_than_the_tile() -> None:
    store = Term("Stmt.store", ("out0", at(plain(axis("i", 6))), Term("Scalar.const", (1.0,))))
    assert not applies(split_identity(6), loop(axis("i", 6), store))
    assert not applies(split_identity(8), loop(axis("i", 6), store))
    assert applies(split_identity(4), loop(axis("i", 6), store))  # a tile of 4, then one of 2
    assert applies(split_identity(3), loop(axis("i", 6), store))


def test_split_depth_fail_not_the_contraction_axis() -> None:
    """A depth tile splits only the axis the lowering names for a matmul's contraction."""
    for name, splits in (("k", True), ("i0", False), ("r1", False)):
        store = Term("Stmt.store", ("out0", at(plain(axis(name, 6))), Term("Scalar.const", (1.0,))))
        assert applies(split_depth_identity(4), loop(axis(name, 6), store)) == splits, name


def test_split_fail_a_contraction_longer_than_the_longest_depth_tile() -> None:
    """Cache and register tiles split every named axis, but a matmul's contraction axis only
    where it is no longer than the longest depth tile; depth tiles split the longer ones."""
    tiles = TileSizes(cache=(8,), register=(4,), depth=(16,))
    split_by_4 = [
        rule for rule in split_identities(tiles) if rule.name in ("split-4", "split-short-k-4")
    ]
    assert len(split_by_4) == 2
    for name, extent, splits in (("k", 20, False), ("k", 16, True), ("i0", 20, True)):
        store = Term(
            "Stmt.store", ("out0", at(plain(axis(name, extent))), Term("Scalar.const", (1.0,)))
        )
        found = any(applies(rule, loop(axis(name, extent), store)) for rule in split_by_4)
        assert found == splits, (name, extent)


def rows_then_sums(read_index: Term) -> Term:
    """t0[i, j] = in0[i, j] for all (i, j); then out0[i] += t0 at `read_index` over r."""
    r = axis("r", 4)
    produce = loop(
        AXIS_I,
        loop(
            AXIS_J,
            Term(
                "Stmt.store",
                (
                    "t0",
                    at(plain(AXIS_I), plain(AXIS_J)),
                    load("in0", at(plain(AXIS_I), plain(AXIS_J))),
                ),
            ),
        ),
    )
    consume = loop(
        AXIS_I,
        loop(
            r, Term("Stmt.accumulate", ("out0", at(plain(AXIS_I)), "sum", load("t0", read_index)))
        ),
    )
    return Term("Stmt.alloc", ("t0", (4, 4), Term("Stmt.seq", (produce, consume))))


def test_fusion_fail_consumer_reads_another_row() -> None:
    r = plain(axis("r", 4))
    assert applies(FUSION[0], rows_then_sums(at(plain(AXIS_I), r)))  # its own row: one pass
    assert not applies(FUSION[0], rows_then_sums(at(r, plain(AXIS_I))))  # a column: refused


def test_interchange_fail_two_pieces_of_one_axis() -> None:
    store = Term("Stmt.store", ("out0", at(plain(AXIS_I)), Term("Scalar.const", (1.0,))))
    tiles = loop(Term("Axis.outer", (AXIS_I, 2)), loop(Term("Axis.inner", (AXIS_I, 2)), store))
    assert not applies(INTERCHANGE[0], tiles)


def test_parallelize_fail_inside_another_loop() -> None:
    parallel = annotate_identities(4, 2)[-1]
    rows = Term(
        "Stmt.store", ("out0", at(plain(AXIS_I), plain(AXIS_J)), Term("Scalar.const", (1.0,)))
    )
    graph, matches = saturate_with(parallel, loop(AXIS_I, loop(AXIS_J, rows)), rounds=2)
    assert matches == 1  # the outer loop only
    assert "parallel" not in str(
        graph.extract_random(graph.root("kernel"), random.Random(0)).args[2]
    )


def test_unroll_fail_long_loop_or_compound_body() -> None:
    unroll = next(i for i in annotate_identities(4, 2) if i.name == "unroll")
    store = Term("Stmt.store", ("out0", at(plain(AXIS_I)), Term("Scalar.const", (1.0,))))
    assert applies(unroll, loop(AXIS_I, store))
    assert not applies(unroll, loop(axis("i", 16), store))  # more than MAX_UNROLL iterations
    two = Term("Stmt.seq", (store, store))
    assert not applies(unroll, loop(AXIS_I, two))  # not straight-line


def test_rule_whose_right_side_uses_an_unbound_variable_is_rejected() -> None:
    with pytest.raises(ValueError, match="unbound"):
        Identity("bad", "x -> y", {"x": TExpr, "y": TExpr}, lambda x: x, lambda y: y)


def _summarized(x: TExpr) -> list[FactLike]:
    """x is anything."""
    return []


def _unsummarized(x: TExpr) -> list[FactLike]:
    """x is anything, a first line that goes on
    to a second line, so a listing would cut it."""
    return []


@pytest.mark.parametrize(
    "guard", [lambda x: [], _unsummarized], ids=["lambda", "summary-over-two-lines"]
)
def test_guard_without_a_name_and_one_line_summary_is_rejected(guard: Predicate) -> None:
    with pytest.raises(ValueError, match="one-line summary"):
        Identity("bad", "x -> x", {"x": TExpr}, lambda x: x, lambda x: x, guard=(guard,))


def test_guard_is_a_tuple_of_predicates() -> None:
    with pytest.raises(TypeError, match="tuple"):
        Identity("bad", "x -> x", {"x": TExpr}, lambda x: x, lambda x: x, guard=_summarized)  # type: ignore[arg-type]
    good = Identity("good", "x -> x", {"x": TExpr}, lambda x: x, lambda x: x, guard=(_summarized,))
    assert good.describe() == "good: x -> x\n    if _summarized(x): x is anything."


def test_every_loop_stage_egglog_rule_has_a_unique_kebab_case_name() -> None:
    """The analyses, the fusion candidates and the loop rewrites: egglog would number a rule
    without a name, and a rewrite cannot take one."""
    egraph = EGraph(save_egglog_string=True)
    facts = unstable_combine_rulesets(analysis, fusion_candidates(), name="facts")
    egraph.run(facts + loop_rules(host(), "float32"))
    program = egraph.as_egglog_string
    named = re.findall(r':ruleset (\S+) :name "([^"]*)"', program)
    assert "(rewrite " not in program
    assert len(named) == program.count("(rule ") > 60
    assert len(set(named)) == len(named)
    for ruleset_name, name in named:
        assert KEBAB_CASE.fullmatch(name), (ruleset_name, name)


def assert_order_dependent_is_its_formula(body: Term) -> None:
    """`order_dependent`, computed by the analyses as their facts widen and merged by union,
    equals the formula it stands for evaluated on the saturated facts, for every asked pair,
    after rounds of every loop rule (which merge statements and widen their facts)."""
    egraph = EGraph()
    mark_program(egraph, egraph.let("kernel", to_egglog(body)))
    facts = unstable_combine_rulesets(analysis, fusion_candidates(), name="facts")
    for _ in range(3):
        egraph.run(facts.saturate() + loop_rules(host(), "float64"))
    egraph.run(facts.saturate())
    s, c = var("s", Stmt), var("c", Axis)
    summed, maxed, multiplied = sums(s), maxes(s), prods(s)
    only = (summed - maxed - multiplied) | (maxed - summed - multiplied)
    only_accumulated = (only | (multiplied - summed - maxed)) - stores(s) - reads(s)
    formula = (writes(s) & mixed(s, c)) - only_accumulated
    wrong = relation("wrong_order_dependent", Stmt, Axis)
    checked = relation("checked_order_dependent", Stmt, Axis)
    egraph.run(
        ruleset(
            rule(ne(order_dependent(s, c)).to(formula)).then(wrong(s, c)),
            rule(eq(order_dependent(s, c)).to(formula)).then(checked(s, c)),
            name="check-order-dependent",
        )
    )
    assert egraph.function_size(checked) > 0
    assert egraph.function_size(wrong) == 0


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs(max_ops=3, dims=SMALL_DIMS))
def test_order_dependent_is_its_formula_on_the_final_facts(program: Program) -> None:
    body = lower([to_term(program.outputs[0].expr)]).body  # type: ignore[list-item]
    # interchange asks the fact of a loop inside a loop; a program without one asks nothing
    assume(any(_is_loop(s) and any(map(_is_loop, subterms(s.args[2:]))) for s in subterms([body])))
    assert_order_dependent_is_its_formula(body)


def _is_loop(term: object) -> bool:
    return isinstance(term, Term) and term.op == "Stmt.loop"
