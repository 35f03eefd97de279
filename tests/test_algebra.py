"""Stage 1: every algebraic identity is sound, the harness catches wrong ones, the optimizer finds
the known wins (chain order, factoring, transposes, x - x), tripwires stop unsound runs, and the
driver's limits hold on e-graphs that grow.

Soundness harness: the left side of an identity is read as a pattern; a seeded backtracking
search fills its variables with well-shaped values (inputs of random shapes with dims 1-3, axes,
permutations, constants), so no example is rejected. A probe version of the egglog rule records
the right side it builds; both sides then run through the interpreter on the same random inputs
and must agree within DESIGN §9's tolerance — with inf and nan among the inputs unless the
identity is `finite_only`.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
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
from eqsat.terms import (
    BINARY_OPS,
    CONSTRUCTORS,
    REDUCE_OPS,
    UNARY_OPS,
    Term,
    TExpr,
    to_egglog,
    to_term,
)
from extract.extractor import SerializedGraph
from extract.tensor_cost import TensorCost
from rewrites.algebra import IDENTITIES, algebra_rules
from rewrites.algebra_facts import algebra_facts
from rewrites.rule import Identity
from tests.programs import assert_close


@function(unextractable=True)
def rhs_of(lhs: TExpr) -> TExpr:
    """Probe: the right side a rule built for the left side `lhs` (see Identity.egglog_rule)."""


# ---------------------------------------------------------------- instances of a left side

DIMS = (1, 2, 3)
ALL_SHAPES = [tuple(DIMS[i] for i in s) for rank in range(4) for s in np.ndindex(*(3,) * rank)]
PERMUTATIONS = [p for rank in range(1, 4) for p in permutations(range(rank))]
CONSTANTS = (0.0, 1.0, -1.0, 2.0, 0.5, -3.0, 1e-40, 1e40)
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
    return args if str(get_callable_fn(expr)).startswith("Vec") else Term(
        str(get_callable_fn(expr)), args
    )


@functools.cache
def lhs_pattern(name: str) -> Term:
    identity = BY_NAME[name]
    pattern = identity.call(identity.lhs, {n: var(n, s) for n, s in identity.variables.items()})
    return read_pattern(pattern)  # type: ignore[no-any-return]


def variables_in_order(pattern: Any, sorts: Mapping[str, type]) -> list[str]:
    """The pattern's variables, children first, each once, tensors before the axes, shapes and
    constants that must fit them (so the search prunes early)."""
    order: list[str] = []

    def visit(node: Any) -> None:
        if isinstance(node, Var) and node.name not in order:
            order.append(node.name)
        for child in node.args if isinstance(node, Term) else node if isinstance(node, tuple) else ():
            visit(child)

    visit(pattern)
    return sorted(order, key=lambda name: sorts[name] is not TExpr)


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
    literals = [a for a in node.args if not isinstance(a, Term)]
    if None in children or any(isinstance(x, Var) for a in literals for x in _flat(a)):
        return None
    if node.op in OPS and node.args[0] not in OPS[node.op]:
        raise ValueError(f"{node.op} has no op {node.args[0]!r}")
    shallow = tuple(
        Term("TExpr.input", ("child", shape, "float64")) if isinstance(a, Term) else a
        for a, shape in zip(node.args, children, strict=True)
    )
    return shapes.infer(Term(node.op, shallow))


def _flat(arg: Any) -> tuple[Any, ...]:
    return arg if isinstance(arg, tuple) else (arg,)


def candidates(sort: type, rng: random.Random, used: list[Any], non_finite: bool) -> list[Any]:
    """Values to try for a variable of `sort`; for tensors, shapes already used come first
    (more often than chance, so guards such as "same shape" hold often)."""
    if sort is TExpr:
        reuse = rng.sample(used, len(used)) if rng.random() < 0.6 else []
        return list(dict.fromkeys(reuse + rng.sample(ALL_SHAPES, len(ALL_SHAPES))))
    if sort is i64:
        return rng.sample(range(4), 4)
    if sort is f64:
        pool = list(CONSTANTS + (NON_FINITE if non_finite else ()))
        return [rng.uniform(-3, 3), *rng.sample(pool, len(pool))]
    if sort is String:
        names = [*UNARY_OPS, *BINARY_OPS, *REDUCE_OPS]
        return rng.sample(names, len(names))
    if sort == Vec[i64]:
        return rng.sample(PERMUTATIONS + ALL_SHAPES, len(PERMUTATIONS) + len(ALL_SHAPES))
    raise TypeError(f"no candidates for sort {sort}")


def instance(name: str, rng: random.Random, dtype: str, non_finite: bool) -> Term:
    """A well-shaped instance of a left side: a depth-first search over shuffled candidates.

    Tensor variables become inputs named after the variable."""
    pattern = lhs_pattern(name)
    sorts = BY_NAME[name].variables
    names = variables_in_order(pattern, sorts)
    values: dict[str, Any] = {}

    def well_formed() -> bool:
        try:
            open_shape(substitute(pattern, values))
        except (ShapeError, ValueError):
            return False
        return True

    def extend(position: int) -> bool:
        if position == len(names):
            return True
        var_name = names[position]
        sort = sorts[var_name]
        used = [v.args[1] for v in values.values() if isinstance(v, Term)]
        for value in candidates(sort, rng, used, non_finite):
            is_tensor = sort is TExpr
            values[var_name] = Term("TExpr.input", (var_name, value, dtype)) if is_tensor else value
            if well_formed() and extend(position + 1):
                return True
        del values[var_name]
        return False

    assert extend(0), f"{name}: no well-shaped instance"
    return substitute(pattern, values)  # type: ignore[no-any-return]


# ---------------------------------------------------------------- the soundness check


@functools.cache
def egglog_term(term: Any) -> Any:
    """`to_egglog`, memoized per sub-term (inputs recur across instances)."""
    if isinstance(term, Term):
        return CONSTRUCTORS[term.op](*(egglog_term(a) for a in term.args))
    return tuple(egglog_term(a) for a in term) if isinstance(term, tuple) else term


class Bench:
    """An e-graph with the analyses and one identity's probe rule declared. Each call runs in a
    pushed frame that is popped afterwards, so calls do not see each other's terms."""

    def __init__(self, identity: Identity) -> None:
        probe = ruleset(identity.egglog_rule(probe=rhs_of), name=f"probe-{identity.name}")
        self.schedule = algebra_facts.saturate() + probe
        self.egraph = EGraph()
        self.egraph.run(self.schedule)  # declares the rules once

    def right_sides(self, lefts: list[Term]) -> dict[Term, Term]:
        """The right side the rule builds for each left side it fires on."""
        self.egraph.push()
        try:
            self.egraph.register(*(egglog_term(left) for left in lefts))
            self.egraph.run(self.schedule)
            rows = self.egraph.function_values(rhs_of)
        finally:
            self.egraph.pop()
        return {to_term(get_callable_args(k)[0]): to_term(v) for k, v in rows.items()}  # type: ignore[misc]


@functools.cache
def bench(name: str) -> Bench:
    return Bench(BY_NAME[name])


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
    found: dict[str, tuple[int, ...]] = {}
    for arg in term.args:
        if isinstance(arg, Term):
            found.update(input_shapes(arg))
    return found


def assert_agree(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    """nan, inf and -inf at the same places; the finite entries within DESIGN §9's tolerance."""
    for where in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(where(got), where(want))
    finite = np.isfinite(want)
    assert_close(got[finite], want[finite], dtype)


BATCHES = (1, 2, 4, 8)  # instances tried, until the rule fires on one


def check_identity(identity: Identity, seed: int, dtype: str, non_finite: bool) -> int:
    """Check `identity` on well-shaped instances drawn from `seed`; returns how many it fired on.

    Fails if the rule fires on none of sum(BATCHES) instances (the test would be vacuous), if
    a right side changes the shape, or if the two sides disagree under the interpreter (the left
    side in float64 is the reference)."""
    rng = random.Random(seed)
    fired: list[tuple[Term, Term]] = []
    for size in BATCHES:
        lefts = [instance(identity.name, rng, dtype, non_finite) for _ in range(size)]
        rights = bench(identity.name).right_sides(lefts)
        fired = [(left, rights[left]) for left in dict.fromkeys(lefts) if left in rights]
        if fired:
            break
    assert fired, f"{identity.name} fired on none of {sum(BATCHES)} well-shaped instances"
    values = np.random.default_rng(seed)
    for left, right in fired:
        shape = shapes.infer(left)
        assert shapes.infer(right) == shape, f"{identity.name}: {left} -> {right} changes the shape"
        inputs = random_inputs(left, dtype, values, non_finite)
        want = evaluate(left, {k: v.astype(np.float64) for k, v in inputs.items()})
        got = evaluate(right, inputs)
        assert_agree(got, want, str(got.dtype))  # a term without inputs evaluates in float32
    return len(fired)


BY_NAME: dict[str, Identity] = {identity.name: identity for identity in IDENTITIES}


@pytest.mark.parametrize("identity", IDENTITIES, ids=lambda i: i.name)
@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from(["float32", "float64"]),
       non_finite=st.booleans())
def test_algebra_identity_is_sound(
    identity: Identity, seed: int, dtype: str, non_finite: bool
) -> None:
    check_identity(identity, seed, dtype, non_finite and not identity.finite_only)
