"""The soundness check of an `Identity`, built from its definition alone (ARCHITECTURE §4).

    check_identity(Identity("mul-two", "x * 2 -> x + x", {"x": TExpr},
                            lambda x: mul(x, const(2.0)), lambda x: add(x, x)))
    # passes silently; an unsound identity raises UnsoundIdentityError (an AssertionError)
    # carrying hypothesis's shrunk counterexample: the instance, the inputs and both values

1. Instances. The left side is read back as a pattern; a seeded depth-first search fills its
   variables with well-shaped values (inputs of random shapes with dims 1-3 and ranks 0-3, axes,
   permutations, constants), so no instance is ever rejected afterwards.
2. Right sides. A probe version of the egglog rule (same match and guard) records the right
   side it builds for each instance, guard-bound variables included; the real rule must merge
   the same pairs, and each right side must have its left side's shape.
3. Examples. Hypothesis draws an instance the rule fired on (the smallest first, so that a
   counterexample shrinks to a small one), a dtype and random inputs (with inf, -inf and nan
   unless the identity is `finite_only`); both sides run through the interpreter and must agree
   within ARCHITECTURE §9's tolerance, the left side in float64 being the reference.
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import permutations
from typing import Any

import numpy as np
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

from eqsat.core import shapes
from eqsat.core.errors import EqsatError, ShapeError
from eqsat.core.interp import evaluate
from eqsat.core.measure import agreement
from eqsat.core.pretty import format_tensor
from eqsat.core.terms import (
    BINARY_OPS,
    REDUCE_OPS,
    UNARY_OPS,
    Term,
    TExpr,
    owned_egraph,
    to_egglog,
    to_term,
)
from eqsat.rewrites.algebra_facts import algebra_facts
from eqsat.rewrites.lowering import collect_inputs
from eqsat.rewrites.rule import Identity


class UnsoundIdentityError(EqsatError, AssertionError):
    """The two sides of an identity disagree on an instance: hypothesis's shrunk counterexample.

    `left` and `right` are the instance the rule fired on and the right side it built, `inputs`
    the values drawn (of `dtype`), `want` the left side in float64 and `got` the right side."""

    def __init__(
        self,
        identity: Identity,
        left: Term,
        right: Term,
        inputs: Mapping[str, np.ndarray],
        want: np.ndarray,
        got: np.ndarray,
        why: str,
    ) -> None:
        self.identity, self.left, self.right = identity, left, right
        self.inputs, self.want, self.got = dict(inputs), want, got
        dtype = next(iter(inputs.values())).dtype.name if inputs else "float32"
        lines = [
            f"rule {identity.name} ({identity.identity}) is unsound: {why}",
            f"  instance:   {format_tensor(left)}",
            f"  right side: {format_tensor(right)}",
            f"  inputs ({dtype}):",
            *(f"    {name} = {_array_text(value)}" for name, value in inputs.items()),
            f"  left side (float64): {_array_text(want)}",
            f"  right side:          {_array_text(got)}",
        ]
        super().__init__("\n".join(lines))


def check_identity(identity: Identity, examples: int = 200, derandomize: bool = False) -> None:
    """Check `identity` on `examples` hypothesis draws of (fired instance, dtype, inputs);
    `derandomize` draws the same examples on every run (a reproducible counterexample).

    It requires: the identity's sides are tensor terms (`TExpr`), and its left side has
    well-shaped instances the rule fires on (see the module docstring).
    Raises UnsoundIdentityError with the shrunk counterexample when the sides disagree, and
    AssertionError when the rule rarely fires, changes a shape or does not merge what it built.
    """
    fired = fired_instances(identity)

    @settings(max_examples=examples, deadline=None, database=None, derandomize=derandomize)
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
        inputs = interpreter_inputs(pair.left, dtype, np.random.default_rng(seed), non_finite)
        want = evaluate(pair.left, {k: v.astype(np.float64) for k, v in inputs.items()})
        got = evaluate(pair.right, inputs)
        why = disagreement(got, want, str(got.dtype))  # a term without inputs runs in float32
        if why is not None:
            raise UnsoundIdentityError(identity, pair.left, pair.right, inputs, want, got, why)

    both_sides_agree()


# ---------------------------------------------------------------- 1. instances of a left side

DIMS = (1, 2, 3)
ALL_SHAPES = [tuple(DIMS[i] for i in s) for rank in range(4) for s in np.ndindex(*(3,) * rank)]
PERMUTATIONS = [p for rank in range(1, 4) for p in permutations(range(rank))]
CONSTANTS = (0.0, 1.0, -1.0, 2.0, 0.5, -3.0, 1e-40, 1e30)  # all finite in float32
NON_FINITE = (math.inf, -math.inf, math.nan)
OPS = {"TExpr.unary": UNARY_OPS, "TExpr.binary": BINARY_OPS, "TExpr.reduce": REDUCE_OPS}
SEARCH_BUDGET = 400  # well-formedness checks per attempt before the search starts over


@dataclass(frozen=True)
class _Var:
    """A variable of a left-side pattern."""

    name: str


def _read_pattern(expr: Any) -> Any:
    """An egglog pattern as a Term tree whose variables are `_Var` leaves."""
    name = get_var_name(expr)
    if name is not None:
        return _Var(name)
    literal = get_literal_value(expr)
    if literal is not None:
        return literal
    args = tuple(_read_pattern(a) for a in get_callable_args(expr))
    fn = str(get_callable_fn(expr))
    return args if fn.startswith("Vec") else Term(fn, args)


def _lhs_pattern(identity: Identity) -> Term:
    pattern = identity.call(identity.lhs, {n: var(n, s) for n, s in identity.variables.items()})
    return _read_pattern(pattern)  # type: ignore[no-any-return]


def _variables_in_order(pattern: Any, sorts: Mapping[str, type]) -> list[str]:
    """The pattern's variables, each once: tensors first, the most deeply nested first (they
    meet in inner nodes, which then check them together), then the axes, shapes and constants
    that must fit them, so the search prunes early."""
    depth: dict[str, int] = {}

    def visit(node: Any, level: int) -> None:
        if isinstance(node, _Var):
            depth[node.name] = max(depth.get(node.name, 0), level)
        children = node.args if isinstance(node, Term) else node if isinstance(node, tuple) else ()
        for child in children:
            visit(child, level + 1)

    visit(pattern, 0)
    return sorted(depth, key=lambda name: (sorts[name] is not TExpr, -depth[name]))


def _substitute(pattern: Any, values: Mapping[str, Any]) -> Any:
    """The pattern with its assigned variables replaced by their values. A subterm whose
    variables have the values they had before is the same object as before (`_substituted`),
    so that `_open_shape` finds it remembered."""
    names = _variables_of(pattern)
    return _substituted(pattern, names, tuple(values.get(name) for name in names))


@lru_cache(maxsize=1 << 16)
def _substituted(pattern: Any, names: tuple[str, ...], assigned: tuple[Any, ...]) -> Any:
    """`_substitute` of `pattern` whose variables `names` have the values `assigned` (None:
    open)."""
    if isinstance(pattern, _Var):
        value = assigned[0]
        return pattern if value is None else value
    values = {name: value for name, value in zip(names, assigned, strict=True) if value is not None}
    if isinstance(pattern, tuple):
        return tuple(_substitute(p, values) for p in pattern)
    if isinstance(pattern, Term):
        return Term(pattern.op, tuple(_substitute(a, values) for a in pattern.args))
    return pattern


@lru_cache(maxsize=1 << 12)
def _variables_of(pattern: Any) -> tuple[str, ...]:
    """The names of the variables in `pattern`, each once, sorted."""
    if isinstance(pattern, _Var):
        return (pattern.name,)
    children = (
        pattern.args if isinstance(pattern, Term) else pattern if isinstance(pattern, tuple) else ()
    )
    return tuple(sorted({name for child in children for name in _variables_of(child)}))


@lru_cache(maxsize=1 << 16)
def _open_shape(node: Any) -> tuple[int, ...] | None:
    """Shape of a partly instantiated tensor term; None while a variable in it is open.
    Remembered: the search checks each assignment's whole term, most of whose subterms it has
    checked before.

    Raises ShapeError or ValueError as soon as a fully known part is ill-formed."""
    if isinstance(node, _Var):
        return None
    children: list[Any] = [_open_shape(a) if isinstance(a, Term | _Var) else a for a in node.args]
    literals = [a for a in node.args if not isinstance(a, Term | _Var)]
    flat = [x for a in literals for x in (a if isinstance(a, tuple) else (a,))]
    if node.op == "TExpr.slice" and children[0] is not None:
        _check_open_slice(children[0], node.args[1:])
    if None in children or any(isinstance(x, _Var) for x in flat):
        return None
    if node.op in OPS and node.args[0] not in OPS[node.op]:
        raise ValueError(f"{node.op} has no op {node.args[0]!r}")
    shallow = tuple(
        Term("TExpr.input", ("child", c, "float64")) if isinstance(a, Term) else a
        for a, c in zip(node.args, children, strict=True)
    )
    return shapes.infer(Term(node.op, shallow))


def _check_open_slice(shape: tuple[int, ...], vectors: tuple[Any, ...]) -> None:
    """Raises ShapeError when a known vector of a slice of `shape` (starts, steps, extents;
    the others still open) has another rank, a start outside its dimension or a zero step."""
    starts, steps, extents = (v if isinstance(v, tuple) else None for v in vectors)
    for vector in (starts, steps, extents):
        if vector is not None and len(vector) != len(shape):
            raise ShapeError(f"slice: {vector} for a tensor of rank {len(shape)}")
    if starts is not None and not all(0 <= a < n for a, n in zip(starts, shape, strict=True)):
        raise ShapeError(f"slice: starts {starts} outside a tensor of shape {shape}")
    if steps is not None and 0 in steps:
        raise ShapeError(f"slice: a step of 0 in {steps}")


def _candidates(sort: type, rng: random.Random, used: list[Any], non_finite: bool) -> list[Any]:
    """Values to try for a variable of `sort`, in a random order that favours what guards ask
    for: rank 0, shapes other variables already have (same shape, reshape to it), and those
    shapes with a last dimension of 1 (a factor per row); for an int vector also the starts,
    steps and extents of slices of those shapes (`_slice_vectors`)."""
    if sort is TExpr or sort == Vec[i64]:
        pool = ALL_SHAPES + PERMUTATIONS if sort == Vec[i64] else ALL_SHAPES
        first = [()] if rng.random() < 0.35 else []
        first += rng.sample(used, len(used)) if rng.random() < 0.6 else []
        rows = [(*shape[:-1], 1) for shape in used if shape]
        first += rng.sample(rows, len(rows)) if rng.random() < 0.3 else []
        if sort == Vec[i64] and rng.random() < 0.7:
            first += rng.sample(slices := _slice_vectors(used, rng), len(slices))
        return list(dict.fromkeys(first + rng.sample(pool, len(pool))))
    if sort is i64:
        return rng.sample(range(4), 4)
    if sort is f64:
        floats = [rng.uniform(-3, 3), rng.uniform(-3, 3), *CONSTANTS]
        floats += NON_FINITE if non_finite else ()
        return rng.sample(floats, len(floats))
    if sort is String:
        names = [*UNARY_OPS, *BINARY_OPS, *REDUCE_OPS]
        return rng.sample(names, len(names))
    raise TypeError(f"no candidates for sort {sort}")


def _slice_vectors(used: list[Any], rng: random.Random) -> list[tuple[int, ...]]:
    """Starts, steps and extents that slice the shapes in `used`: all 0, all 1 and all -1, the
    last index of every dimension, and random extents."""
    shapes = [shape for shape in used if shape]
    return [
        *((value,) * len(shape) for shape in shapes for value in (0, 1, -1)),
        *(tuple(n - 1 for n in shape) for shape in shapes),
        *(tuple(rng.randint(1, n) for n in shape) for shape in shapes),
    ]


def _instance(
    identity: Identity, pattern: Term, names: list[str], rng: random.Random, non_finite: bool
) -> Term:
    """A well-shaped instance of the left side `pattern` (`_lhs_pattern(identity)`, its
    variables `names` in `_variables_in_order`): a depth-first search over shuffled candidates,
    started over when an early choice leads to a dead end (e.g. a rank-0 matmul operand).

    Tensor variables become float64 inputs named after the variable (the declared dtype plays
    no part in the rules or the interpreter; the examples run both dtypes)."""
    while True:
        search = _Search(identity, pattern, rng, non_finite)
        if search.extend(names):
            return _substitute(pattern, search.values)  # type: ignore[no-any-return]


@dataclass
class _Search:
    """One attempt of `_instance`: at most SEARCH_BUDGET well-formedness checks."""

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
        for value in _candidates(sort, self.rng, used, self.non_finite):
            if self.checks >= SEARCH_BUDGET:
                break
            self.checks += 1
            tensor = Term("TExpr.input", (name, value, "float64"))
            self.values[name] = tensor if sort is TExpr else value
            if _well_formed(_substitute(self.pattern, self.values)) and self.extend(names[1:]):
                return True
        self.values.pop(name, None)
        return False


def _well_formed(term: Term) -> bool:
    try:
        _open_shape(term)
    except (ShapeError, ValueError):
        return False
    return True


# ---------------------------------------------------------------- 2. the right sides


@function(unextractable=True)
def rhs_of(lhs: TExpr) -> TExpr:  # type: ignore[empty-body]
    """Probe: the right side a rule built for the left side `lhs` (see Identity.egglog_rule)."""


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
    fired on MIN_FIRED: those instances with the right side it built, smallest inputs first.
    Asserts that it fires that often within BATCHES batches, that every right side keeps the
    shape, and that the real rule merges each pair."""
    rng = random.Random(zlib.crc32(identity.name.encode()))
    pattern = _lhs_pattern(identity)
    names = _variables_in_order(pattern, identity.variables)
    non_finite = not identity.finite_only
    fired: dict[Term, Fired] = {}
    for _ in range(BATCHES):
        batch = [_instance(identity, pattern, names, rng, non_finite) for _ in range(BATCH)]
        fired.update((pair.left, pair) for pair in _fire(identity, list(dict.fromkeys(batch))))
        if len(fired) >= MIN_FIRED:
            return sorted(fired.values(), key=lambda pair: _size(pair.left))
    raise AssertionError(f"{identity.name} fired on {len(fired)} instances only")


def _size(term: Term) -> tuple[int, int]:
    """(input elements, length of the printed term): the order in which examples shrink."""
    elements = sum(math.prod(shape) for shape in input_shapes(term).values())
    return elements, len(format_tensor(term))


def _fire(identity: Identity, lefts: list[Term]) -> list[Fired]:
    """The instances among `lefts` the rule fires on, each with the right side it builds.

    Both sides are read back from the e-graph (egglog-python's check of an equality between
    expression objects rebuilt from terms proved unreliable across e-graphs)."""
    with owned_egraph(EGraph()) as egraph:  # never left to another thread's cycle collector
        return _fire_in(egraph, identity, lefts)


def _fire_in(egraph: EGraph, identity: Identity, lefts: list[Term]) -> list[Fired]:
    """`_fire` in the empty e-graph `egraph`."""
    egraph.register(*(to_egglog(left) for left in lefts))
    probe = ruleset(identity.egglog_rule(probe=rhs_of), name=f"probe-{identity.name}")
    egraph.run(algebra_facts.saturate() + probe)
    fired = [
        Fired(left, right, all(map(math.isfinite, _literals(left))))
        for left, right in _probed(egraph)
    ]
    # The probe merges no left side, so each is an instance: a row mixing two instances was
    # egglog misreading egglog-python's sharing lets (`eqsat.core.terms.LET_BASE`).
    registered = {repr(left) for left in lefts}  # by repr, where nan equals nan
    strays = [pair.left for pair in fired if repr(pair.left) not in registered]
    assert not strays, f"{identity.name}: a probe row's left side was never registered: {strays[0]}"
    for pair in fired:
        left_shape, right_shape = shapes.infer(pair.left), shapes.infer(pair.right)
        assert left_shape == right_shape, f"{identity.name}: {pair} changes the shape"
    egraph.run(ruleset(identity.egglog_rule(), name=f"only-{identity.name}"))
    unmerged = [(left, right) for left, right in _probed(egraph) if repr(left) != repr(right)]
    assert not unmerged, f"{identity.name}: the rule does not merge {unmerged[0]}"
    return fired


def _probed(egraph: EGraph) -> list[tuple[Term, Term]]:
    """(left, right) for each probe row; once the two are merged, both read back the same
    (compared by repr, where nan equals nan)."""
    rows = egraph.function_values(rhs_of)
    return [(to_term(get_callable_args(k)[0]), to_term(v)) for k, v in rows.items()]  # type: ignore[misc]


def _literals(term: Term) -> list[float]:
    """The values of the constants in `term`."""
    if term.op == "TExpr.const":
        return [float(term.args[0])]  # type: ignore[arg-type]
    return [x for a in term.args if isinstance(a, Term) for x in _literals(a)]


# ---------------------------------------------------------------- 3. the examples


def interpreter_inputs(
    term: Term, dtype: str, rng: np.random.Generator, non_finite: bool
) -> dict[str, np.ndarray]:
    """Values in [-2, 2] of `dtype` for every input of `term`, by name; with `non_finite`, a
    quarter of the entries are inf, -inf, nan or 0 (0 meets inf in products)."""
    inputs = {}
    for name, shape in sorted(input_shapes(term).items()):
        value = rng.uniform(-2, 2, size=shape)
        if non_finite:
            special = rng.choice([np.inf, -np.inf, np.nan, 0.0], size=shape)
            value = np.where(rng.random(size=shape) < 0.25, special, value)
        inputs[name] = value.astype(dtype)
    return inputs


def input_shapes(term: Term) -> dict[str, tuple[int, ...]]:
    """The shape of every input of the tensor term `term`, by name, in first-visit order.

    Raises ShapeError or DTypeError when one name is used with two shapes or dtypes."""
    return {name: shape for name, shape, _ in collect_inputs([term])}


def disagreement(got: np.ndarray, want: np.ndarray, dtype: str) -> str | None:
    """Why `got` (of `dtype`) differs from the reference `want`, or None when it agrees: the
    same shape, nan, inf and -inf at the same places, and the finite entries within
    ARCHITECTURE §9's tolerance."""
    if got.shape != want.shape:
        return f"shape {got.shape} instead of {want.shape}"
    for name, where in (("nan", np.isnan), ("inf", np.isposinf), ("-inf", np.isneginf)):
        if not np.array_equal(where(got), where(want)):
            return f"{name} at different places"
    finite = np.isfinite(want)
    found = agreement(got[finite], want[finite], dtype)
    if not found.ok:
        return f"max error {found.max_error:.3g} above the tolerance {found.tolerance:.3g}"
    return None


def _array_text(value: np.ndarray) -> str:
    return np.array2string(value, precision=4, threshold=24).replace("\n", " ")
