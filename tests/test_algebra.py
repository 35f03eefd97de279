"""Stage 1: every algebraic identity is sound, the harness catches wrong ones, the optimizer finds
the known wins (chain order, factoring, transposes, x - x), tripwires stop unsound runs, and the
driver's limits hold on e-graphs that grow.

The soundness harness, built from each `Identity` alone, is `eqsat.rewrites.soundness`.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable

import numpy as np
import pytest
from egglog import EGraph, Vec, i64, ruleset
from hypothesis import given, settings
from hypothesis import strategies as st

import eqsat
from eqsat import optimizer
from eqsat.core import shapes
from eqsat.core.errors import UnsoundMergeError
from eqsat.core.interp import evaluate
from eqsat.core.pretty import format_tensor
from eqsat.core.progress import Progress
from eqsat.core.saturate import Limits, SaturationReport, saturate
from eqsat.core.terms import Term, TExpr, subterms, to_egglog, to_term
from eqsat.extract.extractor import SerializedGraph
from eqsat.extract.tensor_cost import TensorCost
from eqsat.rewrites.algebra import IDENTITIES, algebra_rules
from eqsat.rewrites.algebra_elementwise import sub, zeros
from eqsat.rewrites.algebra_facts import algebra_facts, has_shape
from eqsat.rewrites.rule import Identity, summary
from eqsat.rewrites.soundness import (
    UnsoundIdentityError,
    check_identity,
    fired_instances,
    interpreter_inputs,
)
from eqsat.tools.whole_programs import transformer_block
from tests.programs import assert_close


@pytest.mark.parametrize("identity", IDENTITIES, ids=lambda i: i.name)
def test_algebra_identity_is_sound(identity: Identity) -> None:
    check_identity(identity)


def test_every_identity_states_its_guard_and_a_unique_kebab_case_name() -> None:
    assert len({identity.name for identity in IDENTITIES}) == len(IDENTITIES)
    for identity in IDENTITIES:
        assert "->" in identity.identity, identity.name
        assert all(summary(p) in identity.describe() for p in identity.guard), identity.name


def test_identity_fail_name_not_kebab_case() -> None:
    with pytest.raises(ValueError, match="kebab-case"):
        Identity("Add_Zero", "x + 0 -> x", {"x": TExpr}, lambda x: x, lambda x: x)


# ---------------------------------------------------------------- the harness catches bad rules

XY = {"x": TExpr, "y": TExpr}
WRONG = (
    Identity("sub-comm", "x - y -> y - x", XY, lambda x, y: sub(x, y), lambda x, y: sub(y, x)),
    Identity(
        "sub-self-rank-0",
        "x - x -> 0 (a rank-0 zero: the shape changes)",
        {"x": TExpr},
        lambda x: sub(x, x),
        lambda: TExpr.const(0.0),
        finite_only=True,
    ),
    Identity(
        "sub-self-for-inf-too",
        "x - x -> zeros(shape(x)) (claimed for inf and nan too)",
        {"x": TExpr, "s": Vec[i64]},
        lambda x: sub(x, x),
        lambda s: zeros(s),
        guard=(has_shape,),
    ),
    Identity(
        "transpose-drop",
        "transpose(x, p) -> x",
        {"x": TExpr, "p": Vec[i64]},
        lambda x, p: TExpr.transpose(x, p),
        lambda x: x,
    ),
)


# What the harness raises for each WRONG rule: the values disagree (UnsoundIdentityError), or the
# right side changes the shape (a plain AssertionError). Either way the rule must have fired:
# "fired on N instances only" would be an AssertionError too.
WRONG_ERRORS: dict[str, tuple[type[AssertionError], str]] = {
    "sub-comm": (UnsoundIdentityError, r"^rule sub-comm \(x - y -> y - x\) is unsound: "),
    "sub-self-rank-0": (AssertionError, r"^sub-self-rank-0: Fired\(.*\) changes the shape"),
    "sub-self-for-inf-too": (UnsoundIdentityError, r"is unsound: nan at different places"),
    "transpose-drop": (AssertionError, r"^transpose-drop: Fired\(.*\) changes the shape"),
}


@pytest.mark.parametrize("wrong", WRONG, ids=lambda i: i.name)
def test_harness_fail_wrong_rule(wrong: Identity) -> None:
    error, message = WRONG_ERRORS[wrong.name]
    with pytest.raises(AssertionError) as caught:
        check_identity(wrong, examples=100)
    assert caught.type is error
    caught.match(message)


def test_harness_reports_the_shrunk_counterexample() -> None:
    """x - y -> y - x fails on the smallest instance already: hypothesis shrinks to it, and the
    error carries that instance, its inputs and both sides' values."""
    sub_comm = WRONG[0]
    with pytest.raises(UnsoundIdentityError) as caught:
        check_identity(sub_comm, examples=100)
    error = caught.value
    assert error.left == fired_instances(sub_comm)[0].left
    assert format_tensor(error.left) in str(error) and "sub-comm" in str(error)
    assert sorted(error.inputs) == ["x", "y"]
    reference = {name: value.astype(np.float64) for name, value in error.inputs.items()}
    np.testing.assert_array_equal(error.want, evaluate(error.left, reference))
    np.testing.assert_array_equal(error.got, evaluate(error.right, error.inputs))
    assert not np.allclose(error.got, error.want)


# ---------------------------------------------------------------- tripwires in the driver


def algebra_egraph(expr: eqsat.Tensor) -> EGraph:
    egraph = EGraph()
    egraph.let("root", to_egglog(to_term(expr.expr)))
    return egraph


def test_tripwire_fail_two_literals_merged() -> None:
    one_is_two = Identity(
        "one-is-two", "1 -> 2", {}, lambda: TExpr.const(1.0), lambda: TExpr.const(2.0)
    )
    x = eqsat.tensor("x", (3, 3))
    step = algebra_rules() + ruleset(one_is_two.egglog_rule(), name="wrong")
    with pytest.raises(UnsoundMergeError, match=r"TExpr.const\(1.0\) with TExpr.const\(2.0\)"):
        saturate(algebra_egraph(x * 1.0 + 2.0), step, Limits(), "algebra", facts=algebra_facts)


@pytest.mark.parametrize("assume_finite", [False, True])
def test_tripwire_lets_constant_folding_round_in_either_order(assume_finite: bool) -> None:
    """(a*b)*c and a*(b*c) fold to f64 constants a rounding apart, which is no unsound merge."""
    x = eqsat.tensor("x", (17,))
    chosen, report = best_form(x * (1 / 17) * 0.1 * 0.3, assume_finite=assume_finite)
    assert report.stop_reason == "saturated"
    assert format_tensor(chosen) == "(x * 0.00176471)"


ABSORBING = {  # a fold that gives back an operand would fold every power of the other constant
    "mean times 0": lambda x: x.mean() * 0.0,
    "times inf": lambda x: x * 2.0 * math.inf * 3.0,
    "times nan": lambda x: x * math.nan * 2.0 * 3.0,
    "plus inf": lambda x: (x + 1.0) + math.inf + 2.0,
}


@pytest.mark.parametrize("assume_finite", [False, True])
@pytest.mark.parametrize("case", ABSORBING)
def test_constant_folding_stays_small_with_absorbing_constants(
    case: str, assume_finite: bool
) -> None:
    expr = ABSORBING[case](eqsat.tensor("x", (17,)))
    chosen, report = best_form(expr, assume_finite=assume_finite)
    assert report.stop_reason == "saturated" and report.nodes < 100
    written = to_term(expr.expr)
    assert isinstance(written, Term)
    inputs = {"x": np.linspace(-2, 2, 17)}
    np.testing.assert_allclose(evaluate(chosen, inputs), evaluate(written, inputs), rtol=1e-12)


def test_tripwire_fail_shape_changed() -> None:
    transpose_drop = WRONG[-1]
    x = eqsat.tensor("x", (2, 3))
    step = algebra_rules() + ruleset(transpose_drop.egglog_rule(), name="wrong")
    with pytest.raises(UnsoundMergeError, match="shape"):
        saturate(algebra_egraph(x.T + 1.0), step, Limits(), "algebra", facts=algebra_facts)


# ---------------------------------------------------------------- rewrites that must be found


def best_form(
    expr: eqsat.Tensor, limits: Limits | None = None, *, assume_finite: bool = True
) -> tuple[Term, SaturationReport]:
    """The algebra stage's saturation as eqsat.api runs it (same rules, facts and limits), then
    the single cheapest form under TensorCost (eqsat.api keeps a few cheapest forms instead).
    Finite-only identities (chain order, factoring, x - x) are on unless `assume_finite` is
    False."""
    egraph = algebra_egraph(expr)
    rules = algebra_rules(assume_finite=assume_finite)
    report = saturate(egraph, rules, limits or Limits(), "algebra", facts=algebra_facts)
    graph = SerializedGraph(egraph)
    return graph.extract(graph.root("root"), TensorCost(), [to_term(expr.expr)])[0], report


A, B, C = (eqsat.tensor(name, (2048, 2048)) for name in "ABC")
V = eqsat.tensor("v", (2048,))
X, Y = eqsat.tensor("x", (8, 8)), eqsat.tensor("y", (8, 8))
FOUND = {
    "factoring": (A @ B + A @ C, "(A @ (B + C))"),
    "transpose-cancel": (A.T.T + B, "(A + B)"),
    "transpose-of-product": ((A.T @ B.T).T, "(B @ A)"),
    "chain-order": (A @ B @ V, "reshape((A @ (B @ reshape(v, (2048, 1)))), (2048,))"),
    "sub-self": (X - X, "broadcast_to(0, (8, 8))"),
    "sum-of-product": (
        (A @ B).sum(axis=1),
        "reshape((A @ reshape(sum(B, axis=1), (2048, 1))), (2048,))",
    ),
    "sum-of-scaled": ((X * 3.0).sum(axis=0), "(3 * sum(x, axis=0))"),
    "exp-product": (eqsat.exp(X) * eqsat.exp(Y), "exp((x + y))"),
}


@pytest.mark.parametrize("case", FOUND, ids=str)
def test_algebra_finds(case: str) -> None:
    expr, want = FOUND[case]
    chosen, report = best_form(expr)
    assert report.stop_reason == "saturated"
    assert format_tensor(chosen) == want


def test_one_sub_program_is_chosen_in_one_spelling() -> None:
    """The scaled scores of attention occur four times (twice under max, twice under exp) and
    have several spellings of one cost ((Q * s) @ K.T, Q @ (K.T * s), ...): every occurrence
    takes the same one, or the kernel would compute the scores more than once."""
    Q, K, V = (eqsat.tensor(name, (32, 8)) for name in "QKV")
    chosen = eqsat.optimize(eqsat.softmax(Q @ K.T / 8) @ V, progress=False).chosen
    products = [t for t in subterms(chosen) if isinstance(t, Term) and t.op == "TExpr.matmul"]
    assert len(products) == 2, sorted(map(format_tensor, products))


def test_optimize_finds_x_minus_x_is_zero_only_when_told_inputs_are_finite() -> None:
    finite = eqsat.optimize(X - X, assume_finite=True)
    assert finite.flattened == (8, 8)  # elementwise: optimized over 64 elements
    assert finite.expr == "broadcast_to(0, (64,))"
    assert "assume_finite=True" in finite.report() and "fired: sub-self" in finite.report()
    default = eqsat.optimize(X - X)
    assert default.expr == "(x - x)"
    assert "finite-only identities off" in default.report()


FINITE_ONLY = {"factoring", "chain-order", "sub-self", "sum-of-product", "sum-of-scaled"}


@pytest.mark.parametrize("case", sorted(FINITE_ONLY), ids=str)
def test_algebra_fail_finite_only_rewrite_without_assume_finite(case: str) -> None:
    """Each of these forms needs a finite-only identity (inf or nan inputs would change the
    result): the default rules do not reach it."""
    expr, want = FOUND[case]
    chosen, report = best_form(expr, assume_finite=False)
    assert report.stop_reason == "saturated"
    assert format_tensor(chosen) != want


# ---------------------------------------------------------------- matrix chains


def chain_flops(term: Term) -> int:
    """Flops of the matmuls in `term`: 2*m*k*n each."""
    own = 0
    if term.op == "TExpr.matmul":
        (m, k), n = shapes.infer(term.args[0])[-2:], shapes.infer(term.args[1])[-1]  # type: ignore[arg-type]
        own = 2 * m * k * n
    return own + sum(chain_flops(a) for a in term.args if isinstance(a, Term))


def optimal_chain_flops(dims: list[int]) -> int:
    """The classical dynamic program: matrix i is dims[i] x dims[i+1]."""
    n = len(dims) - 1
    best = {(i, i): 0 for i in range(n)}
    for length in range(2, n + 1):
        for i in range(n - length + 1):
            j = i + length - 1
            best[i, j] = min(
                best[i, k] + best[k + 1, j] + 2 * dims[i] * dims[k + 1] * dims[j + 1]
                for k in range(i, j)
            )
    return best[0, n - 1]


def chain(dims: list[int]) -> eqsat.Tensor:
    mats = [eqsat.tensor(f"M{i}", (dims[i], dims[i + 1])) for i in range(len(dims) - 1)]
    return functools.reduce(operator.matmul, mats)


@settings(max_examples=40, deadline=None)
@given(dims=st.lists(st.integers(1, 600), min_size=4, max_size=8))
def test_matrix_chain_order_is_flop_optimal(dims: list[int]) -> None:
    chosen, report = best_form(chain(dims))
    assert report.stop_reason == "saturated"
    assert chain_flops(chosen) == optimal_chain_flops(dims)


# ---------------------------------------------------------------- the driver's limits


def six_term_matmul_sum() -> eqsat.Tensor:
    """x@W0 + ... + x@W5 plus a second factor shared by two terms: AC, factoring and
    distribution all fire."""
    x, y = eqsat.tensor("x", (6, 5)), eqsat.tensor("y", (6, 5))
    ws = [eqsat.tensor(f"W{i}", (5, 4)) for i in range(6)]
    terms = [x @ w for w in ws[:4]] + [y @ ws[4], y @ ws[5]]
    return functools.reduce(operator.add, terms)


def long_chain() -> eqsat.Tensor:
    return chain([5, 40, 3, 70, 2, 90, 4, 60, 7, 30, 8, 50, 6, 20, 9])


LIMITS = {
    "node limit": Limits(nodes=300),
    "iteration limit": Limits(iterations=2),
    "time limit": Limits(seconds=0.005),
}


@pytest.mark.parametrize("build", [six_term_matmul_sum, long_chain], ids=lambda f: f.__name__)
@pytest.mark.parametrize("reason", LIMITS)
def test_limited_algebra_stops_within_its_limits_and_stays_correct(
    build: Callable[[], eqsat.Tensor], reason: str
) -> None:
    expr, limits = build(), LIMITS[reason]
    chosen, report = best_form(expr, limits)
    assert report.stop_reason == reason
    assert report.iterations <= limits.iterations
    if reason == "node limit" and report.stop_predicted:  # the next step would cross it
        assert report.nodes < limits.nodes
    elif reason == "node limit":  # crossed during the last step, not before it
        _, before = best_form(expr, Limits(iterations=report.iterations - 1))
        assert before.nodes < limits.nodes <= report.nodes
    original = to_term(expr.expr)
    assert isinstance(original, Term)
    inputs = interpreter_inputs(original, "float64", np.random.default_rng(0), non_finite=False)
    assert_close(evaluate(chosen, inputs), evaluate(original, inputs), "float64")


@pytest.mark.parametrize("build", [six_term_matmul_sum, long_chain], ids=lambda f: f.__name__)
def test_unlimited_algebra_saturates_small(build: Callable[[], eqsat.Tensor]) -> None:
    _, report = best_form(build())
    assert report.stop_reason == "saturated"
    assert report.nodes < 5_000 and report.seconds < 2.0


def test_a_large_algebra_e_graph_gives_one_form_the_cheapest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Above ALGEBRA_FORMS_UP_TO_NODES e-nodes (two stacked transformer blocks: their residual
    sums regroup), one candidate per e-class finds the form that several per e-class find
    first: the stage-1 cost sums over the tree."""
    size, heads = 8, 2
    model = size * heads
    shapes_of_block = [(model,), (model,), *[(model, model)] * 4, (model,), (model,)]
    shapes_of_block += [(model, 4 * model), (4 * model,), (4 * model, model), (model,)]
    y = eqsat.tensor("x", (size, model))
    for layer in range(2):
        weights = [eqsat.tensor(f"w{layer}_{k}", s) for k, s in enumerate(shapes_of_block)]
        y = transformer_block(y, *weights, heads=heads, xp=np)
    roots = [to_term(y.expr)]

    def forms() -> tuple[list[list[Term]], SaturationReport]:
        found, _, report, _ = optimizer._optimize_algebra(
            roots, Limits(), Progress(enabled=False), (), False
        )
        return found, report

    one, report = forms()
    assert report.nodes > optimizer.ALGEBRA_FORMS_UP_TO_NODES
    monkeypatch.setattr(optimizer, "ALGEBRA_FORMS_UP_TO_NODES", report.nodes)
    several, _ = forms()
    assert len(one) == 1 and one[0] == several[0]
