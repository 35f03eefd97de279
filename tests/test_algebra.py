"""Stage 1: every algebraic identity is sound, the harness catches wrong ones, the optimizer finds
the known wins (chain order, factoring, transposes, x - x), tripwires stop unsound runs, and the
driver's limits hold on e-graphs that grow.

Soundness harness, built from each `Identity` alone:
1. Instances. The left side is read back as a pattern; a seeded depth-first search fills its
   variables with well-shaped values (inputs of random shapes with dims 1-3 and ranks 0-3, axes,
   permutations, constants), so no instance is ever rejected afterwards.
2. Right sides. A probe version of the egglog rule (same match and guard) records the right
   side it builds for each instance, guard-bound variables included; the real rule must merge
   the same pairs, and each right side must have its left side's shape.
3. Examples. Hypothesis draws an instance the rule fired on, a dtype and random inputs (with
   inf, -inf and nan unless the identity is `finite_only`); both sides run through the
   interpreter and must agree within DESIGN §9's tolerance, the left side in float64 being the
   reference.
"""

from __future__ import annotations

import functools
import math
import operator
import random
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import permutations
from typing import Any

import numpy as np
import pytest
from egglog import (
    EGraph,
    String,
    Vec,
    f64,
    function,
    get_callable_args,
    get_callable_fn,
    get_literal_value,
    get_var_name,
    i64,
    ruleset,
    var,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import eqsat
from eqsat import shapes
from eqsat.errors import ShapeError, UnsoundMergeError
from eqsat.interp import evaluate
from eqsat.pretty import format_tensor
from eqsat.saturate import Limits, SaturationReport, saturate
from eqsat.terms import BINARY_OPS, REDUCE_OPS, UNARY_OPS, Term, TExpr, to_egglog, to_term
from extract.extractor import SerializedGraph
from extract.tensor_cost import TensorCost
from rewrites.algebra import IDENTITIES, algebra_rules
from rewrites.algebra_elementwise import sub, zeros
from rewrites.algebra_facts import algebra_facts, has_shape
from rewrites.rule import Identity
from tests.programs import assert_close


@function(unextractable=True)
def rhs_of(lhs: TExpr) -> TExpr:
    """Probe: the right side a rule built for the left side `lhs` (see Identity.egglog_rule)."""


# ---------------------------------------------------------------- 1. instances of a left side

DIMS = (1, 2, 3)
ALL_SHAPES = [tuple(DIMS[i] for i in s) for rank in range(4) for s in np.ndindex(*(3,) * rank)]
PERMUTATIONS = [p for rank in range(1, 4) for p in permutations(range(rank))]
CONSTANTS = (0.0, 1.0, -1.0, 2.0, 0.5, -3.0, 1e-40, 1e30)  # all finite in float32
NON_FINITE = (math.inf, -math.inf, math.nan)
OPS = {"TExpr.unary": UNARY_OPS, "TExpr.binary": BINARY_OPS, "TExpr.reduce": REDUCE_OPS}


@dataclass(frozen=True)
class Var:
    """A variable of a left-side pattern."""

    name: str


def read_pattern(expr: Any) -> Any:
    """An egglog pattern as a Term tree whose variables are `Var` leaves."""
    name = get_var_name(expr)
    if name is not None:
        return Var(name)
    literal = get_literal_value(expr)
    if literal is not None:
        return literal
    args = tuple(read_pattern(a) for a in get_callable_args(expr))
    fn = str(get_callable_fn(expr))
    return args if fn.startswith("Vec") else Term(fn, args)


def lhs_pattern(identity: Identity) -> Term:
    pattern = identity.call(identity.lhs, {n: var(n, s) for n, s in identity.variables.items()})
    return read_pattern(pattern)  # type: ignore[no-any-return]


def variables_in_order(pattern: Any, sorts: Mapping[str, type]) -> list[str]:
    """The pattern's variables, each once: tensors first, the most deeply nested first (they
    meet in inner nodes, which then check them together), then the axes, shapes and constants
    that must fit them, so the search prunes early."""
    depth: dict[str, int] = {}

    def visit(node: Any, level: int) -> None:
        if isinstance(node, Var):
            depth[node.name] = max(depth.get(node.name, 0), level)
        children = node.args if isinstance(node, Term) else node if isinstance(node, tuple) else ()
        for child in children:
            visit(child, level + 1)

    visit(pattern, 0)
    return sorted(depth, key=lambda name: (sorts[name] is not TExpr, -depth[name]))


def substitute(pattern: Any, values: Mapping[str, Any]) -> Any:
    """The pattern with its assigned variables replaced by their values."""
    if isinstance(pattern, Var):
        return values.get(pattern.name, pattern)
    if isinstance(pattern, tuple):
        return tuple(substitute(p, values) for p in pattern)
    if isinstance(pattern, Term):
        return Term(pattern.op, tuple(substitute(a, values) for a in pattern.args))
    return pattern


def open_shape(node: Any) -> tuple[int, ...] | None:
    """Shape of a partly instantiated tensor term; None while a variable in it is open.

    Raises ShapeError or ValueError as soon as a fully known part is ill-formed."""
    if isinstance(node, Var):
        return None
    children = [open_shape(a) if isinstance(a, Term | Var) else a for a in node.args]
    literals = [a for a in node.args if not isinstance(a, Term | Var)]
    flat = [x for a in literals for x in (a if isinstance(a, tuple) else (a,))]
    if None in children or any(isinstance(x, Var) for x in flat):
        return None
    if node.op in OPS and node.args[0] not in OPS[node.op]:
        raise ValueError(f"{node.op} has no op {node.args[0]!r}")
    shallow = tuple(
        Term("TExpr.input", ("child", c, "float64")) if isinstance(a, Term) else a
        for a, c in zip(node.args, children, strict=True)
    )
    return shapes.infer(Term(node.op, shallow))


def candidates(sort: type, rng: random.Random, used: list[Any], non_finite: bool) -> list[Any]:
    """Values to try for a variable of `sort`, in a random order that favours what guards ask
    for: rank 0, shapes other variables already have (same shape, reshape to it), and those
    shapes with a last dimension of 1 (a factor per row)."""
    if sort is TExpr or sort == Vec[i64]:
        pool = ALL_SHAPES + PERMUTATIONS if sort == Vec[i64] else ALL_SHAPES
        first = [()] if rng.random() < 0.35 else []
        first += rng.sample(used, len(used)) if rng.random() < 0.6 else []
        rows = [(*shape[:-1], 1) for shape in used if shape]
        first += rng.sample(rows, len(rows)) if rng.random() < 0.3 else []
        return list(dict.fromkeys(first + rng.sample(pool, len(pool))))
    if sort is i64:
        return rng.sample(range(4), 4)
    if sort is f64:
        pool = [rng.uniform(-3, 3), rng.uniform(-3, 3), *CONSTANTS]
        pool += NON_FINITE if non_finite else ()
        return rng.sample(pool, len(pool))
    if sort is String:
        names = [*UNARY_OPS, *BINARY_OPS, *REDUCE_OPS]
        return rng.sample(names, len(names))
    raise TypeError(f"no candidates for sort {sort}")


SEARCH_BUDGET = 400  # well-formedness checks per attempt before the search starts over


def instance(identity: Identity, rng: random.Random, non_finite: bool) -> Term:
    """A well-shaped instance of the left side: a depth-first search over shuffled candidates,
    started over when an early choice leads to a dead end (e.g. a rank-0 matmul operand).

    Tensor variables become float64 inputs named after the variable (the declared dtype plays
    no part in the rules or the interpreter; the examples run both dtypes)."""
    pattern = lhs_pattern(identity)
    names = variables_in_order(pattern, identity.variables)
    while True:
        search = _Search(identity, pattern, rng, non_finite)
        if search.extend(names):
            return substitute(pattern, search.values)  # type: ignore[no-any-return]


@dataclass
class _Search:
    """One attempt of `instance`: at most SEARCH_BUDGET well-formedness checks."""

    identity: Identity
    pattern: Term
    rng: random.Random
    non_finite: bool
    checks: int = 0
    values: dict[str, Any] = field(default_factory=dict)

    def extend(self, names: list[str]) -> bool:
        """Assign `names` in order; True when all are assigned and the pattern is well-formed."""
        if not names:
            return True
        name, sort = names[0], self.identity.variables[names[0]]
        used = [v.args[1] for v in self.values.values() if isinstance(v, Term)]
        for value in candidates(sort, self.rng, used, self.non_finite):
            if self.checks >= SEARCH_BUDGET:
                break
            self.checks += 1
            tensor = Term("TExpr.input", (name, value, "float64"))
            self.values[name] = tensor if sort is TExpr else value
            if well_formed(substitute(self.pattern, self.values)) and self.extend(names[1:]):
                return True
        self.values.pop(name, None)
        return False


def well_formed(term: Term) -> bool:
    try:
        open_shape(term)
    except (ShapeError, ValueError):
        return False
    return True


# ---------------------------------------------------------------- 2. the right sides


@dataclass(frozen=True)
class Fired:
    """An instance the rule fired on, the right side it built, and whether its literals are
    all finite."""

    left: Term
    right: Term
    finite: bool


BATCH, BATCHES, MIN_FIRED = 60, 6, 20


def fired_instances(identity: Identity) -> list[Fired]:
    """The rule on batches of BATCH random well-shaped instances (seeded by its name), until it
    fired on MIN_FIRED: those instances, with the right side it built. Asserts that it fires
    that often within BATCHES batches, that every right side keeps the shape, and that the real
    rule merges each pair."""
    rng = random.Random(zlib.crc32(identity.name.encode()))
    fired: dict[Term, Fired] = {}
    for _ in range(BATCHES):
        batch = [instance(identity, rng, not identity.finite_only) for _ in range(BATCH)]
        fired.update((pair.left, pair) for pair in fire(identity, list(dict.fromkeys(batch))))
        if len(fired) >= MIN_FIRED:
            return list(fired.values())
    raise AssertionError(f"{identity.name} fired on {len(fired)} instances only")


def fire(identity: Identity, lefts: list[Term]) -> list[Fired]:
    """The instances among `lefts` the rule fires on, each with the right side it builds.

    Both sides are read back from the e-graph (egglog-python's check of an equality between
    expression objects rebuilt from terms proved unreliable across e-graphs)."""
    egraph = EGraph()
    egraph.register(*(to_egglog(left) for left in lefts))
    probe = ruleset(identity.egglog_rule(probe=rhs_of), name=f"probe-{identity.name}")
    egraph.run(algebra_facts.saturate() + probe)
    fired = [
        Fired(left, right, all(map(math.isfinite, literals(left))))
        for left, right in probed(egraph)
    ]
    for pair in fired:
        left_shape, right_shape = shapes.infer(pair.left), shapes.infer(pair.right)
        assert left_shape == right_shape, f"{identity.name}: {pair} changes the shape"
    egraph.run(ruleset(identity.egglog_rule(), name=f"only-{identity.name}"))
    unmerged = [(left, right) for left, right in probed(egraph) if repr(left) != repr(right)]
    assert not unmerged, f"{identity.name}: the rule does not merge {unmerged[0]}"
    return fired


def probed(egraph: EGraph) -> list[tuple[Term, Term]]:
    """(left, right) for each probe row; once the two are merged, both read back the same
    (compared by repr, where nan equals nan)."""
    rows = egraph.function_values(rhs_of)
    return [(to_term(get_callable_args(k)[0]), to_term(v)) for k, v in rows.items()]  # type: ignore[misc]


def literals(term: Term) -> list[float]:
    """The values of the constants in `term`."""
    if term.op == "TExpr.const":
        return [float(term.args[0])]  # type: ignore[arg-type]
    return [x for a in term.args if isinstance(a, Term) for x in literals(a)]


# ---------------------------------------------------------------- 3. the examples


def random_inputs(
    term: Term, dtype: str, rng: np.random.Generator, non_finite: bool
) -> dict[str, np.ndarray]:
    """Values in [-2, 2] for every input of `term`; with `non_finite`, a quarter of the
    entries are inf, -inf, nan or 0 (0 meets inf in products)."""
    inputs = {}
    for name, shape in sorted(input_shapes(term).items()):
        value = rng.uniform(-2, 2, size=shape)
        if non_finite:
            special = rng.choice([np.inf, -np.inf, np.nan, 0.0], size=shape)
            value = np.where(rng.random(size=shape) < 0.25, special, value)
        inputs[name] = value.astype(dtype)
    return inputs


def input_shapes(term: Term) -> dict[str, tuple[int, ...]]:
    if term.op == "TExpr.input":
        return {str(term.args[0]): term.args[1]}  # type: ignore[dict-item]
    return {k: v for a in term.args if isinstance(a, Term) for k, v in input_shapes(a).items()}


def assert_agree(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    """nan, inf and -inf at the same places; the finite entries within DESIGN §9's tolerance."""
    for where in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(where(got), where(want))
    finite = np.isfinite(want)
    assert_close(got[finite], want[finite], dtype)


def soundness_property(identity: Identity, examples: int = 200) -> Callable[[], None]:
    """The hypothesis test of `identity`: `examples` draws of (fired instance, dtype, inputs)."""
    fired = fired_instances(identity)

    @settings(max_examples=examples, deadline=None, database=None)
    @given(
        index=st.integers(0, len(fired) - 1),
        dtype=st.sampled_from(["float32", "float64"]),
        non_finite=st.booleans(),
        seed=st.integers(0, 2**32 - 1),
    )
    def both_sides_agree(index: int, dtype: str, non_finite: bool, seed: int) -> None:
        non_finite = non_finite and not identity.finite_only
        pairs = [pair for pair in fired if pair.finite or non_finite]
        pair = pairs[index % len(pairs)]
        inputs = random_inputs(pair.left, dtype, np.random.default_rng(seed), non_finite)
        want = evaluate(pair.left, {k: v.astype(np.float64) for k, v in inputs.items()})
        got = evaluate(pair.right, inputs)
        assert_agree(got, want, str(got.dtype))  # a term without inputs runs in float32

    return both_sides_agree


@pytest.mark.parametrize("identity", IDENTITIES, ids=lambda i: i.name)
def test_algebra_identity_is_sound(identity: Identity) -> None:
    soundness_property(identity)()


def test_every_identity_states_its_guard_and_a_unique_kebab_case_name() -> None:
    assert len({identity.name for identity in IDENTITIES}) == len(IDENTITIES)
    for identity in IDENTITIES:
        assert "->" in identity.identity, identity.name
        assert (identity.guard is None) == (identity.guard_text == "none"), identity.name


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
        guard=lambda x, s: has_shape(x, s),
        guard_text="s = shape(x)",
    ),
    Identity(
        "transpose-drop",
        "transpose(x, p) -> x",
        {"x": TExpr, "p": Vec[i64]},
        lambda x, p: TExpr.transpose(x, p),
        lambda x: x,
    ),
)


@pytest.mark.parametrize("wrong", WRONG, ids=lambda i: i.name)
def test_harness_fail_wrong_rule(wrong: Identity) -> None:
    with pytest.raises(AssertionError):
        soundness_property(wrong, examples=100)()


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


def test_tripwire_fail_shape_changed() -> None:
    transpose_drop = WRONG[-1]
    x = eqsat.tensor("x", (2, 3))
    step = algebra_rules() + ruleset(transpose_drop.egglog_rule(), name="wrong")
    with pytest.raises(UnsoundMergeError, match="shape"):
        saturate(algebra_egraph(x.T + 1.0), step, Limits(), "algebra", facts=algebra_facts)


# ---------------------------------------------------------------- rewrites that must be found


def best_form(expr: eqsat.Tensor, limits: Limits | None = None) -> tuple[Term, SaturationReport]:
    """The algebra stage as eqsat.api runs it: saturate, then extract with TensorCost."""
    egraph = algebra_egraph(expr)
    report = saturate(egraph, algebra_rules(), limits or Limits(), "algebra", facts=algebra_facts)
    graph = SerializedGraph(egraph)
    return graph.extract(graph.root("root"), TensorCost())[0], report


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
    "sum-of-scaled": ((X * 3.0).sum(axis=0), "(sum(x, axis=0) * 3)"),
    "exp-product": (eqsat.exp(X) * eqsat.exp(Y), "exp((x + y))"),
}


@pytest.mark.parametrize("case", FOUND, ids=str)
def test_algebra_finds(case: str) -> None:
    expr, want = FOUND[case]
    chosen, report = best_form(expr)
    assert report.stop_reason == "saturated"
    assert format_tensor(chosen) == want


def test_optimize_finds_x_minus_x_is_zero() -> None:
    assert eqsat.optimize(X - X).expr == "broadcast_to(0, (8, 8))"


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
    if reason == "node limit":  # crossed during the last step, not before it
        _, before = best_form(expr, Limits(iterations=report.iterations - 1))
        assert before.nodes < limits.nodes <= report.nodes
    original = to_term(expr.expr)
    assert isinstance(original, Term)
    inputs = random_inputs(original, "float64", np.random.default_rng(0), non_finite=False)
    assert_close(evaluate(chosen, inputs), evaluate(original, inputs), "float64")


@pytest.mark.parametrize("build", [six_term_matmul_sum, long_chain], ids=lambda f: f.__name__)
def test_unlimited_algebra_saturates_small(build: Callable[[], eqsat.Tensor]) -> None:
    _, report = best_form(build())
    assert report.stop_reason == "saturated"
    assert report.nodes < 5_000 and report.seconds < 2.0
