# mypy: disable-error-code="empty-body"
"""Analyses over tensor terms (stage 1): facts the algebra guards read; they add no terms.

- `shape_of(x)`: the numpy shape of `x` as a Vec of dims (rank 0 = the empty Vec), for every
  rank. It has no merge function on purpose: merging two e-classes of different shapes is an
  egglog panic, which the driver reports as `UnsoundMergeError`, so a rule that changes a result
  shape cannot go unnoticed.
- `operands(op, x)`: the number of operands of the smallest `op`-tree ("add" or "mul") in x's
  e-class; a term whose root is not `op` counts 1 (so a factored sum counts 1). Associativity
  only builds trees of at most AC_MAX_OPERANDS operands (`few_operands`), and distribution
  only multiplies a sum by a non-sum (`single_operand`); together they keep each sum's part
  of the e-graph within about 3**AC_MAX_OPERANDS nodes, where unbounded AC plus distribution
  grew a product of two 6-term sums past a million e-nodes in one step.
- Helpers computed on request by recursion over the Vec, so no rank is special:
  `broadcast_shape(a, b)` (asked by `wants_broadcast`), `gather(v, i) = [v[j] for j in i]`
  (asked by `wants_gather`; it composes permutations and permutes shapes) and
  `without(v, k)`, v with entry k removed (asked by `wants_without`).

egglog's vec-remove and vec-set panic (a Rust panic, not an error) on an index out of range, and
in our tests egglog did evaluate an action's vec-remove on an out-of-range index, depending on
hash order; so no rule here or in the algebra calls them, nor divides in an action: vectors are
taken apart with vec-pop (empty stays empty) and with vec-get or division in queries (out of
range or a zero divisor is no match). Precondition of every rule: the e-graph holds well-shaped
terms (the frontend builds only those, and every rule keeps shapes).
"""

from __future__ import annotations

from collections.abc import Iterable

from egglog import (
    Action,
    String,
    Vec,
    eq,
    f64,
    function,
    i64,
    ne,
    relation,
    rule,
    ruleset,
    set_,
)
from egglog.egraph import FactLike, RewriteOrRule

from eqsat.core.terms import TExpr

AC_MAX_OPERANDS = 6  # the largest sum (or product) associativity rebuilds; 3**6 = 729 nodes

Shape = Vec[i64]


@function
def shape_of(x: TExpr) -> Vec[i64]: ...


@function(merge=lambda old, new: old.min(new))
def operands(op: String, x: TExpr) -> i64: ...


@function
def broadcast_shape(a: Vec[i64], b: Vec[i64]) -> Vec[i64]: ...


@function
def gather(values: Vec[i64], indices: Vec[i64]) -> Vec[i64]: ...


@function
def without(values: Vec[i64], index: i64) -> Vec[i64]: ...


wants_broadcast = relation("wants_broadcast", Vec[i64], Vec[i64])
wants_gather = relation("wants_gather", Vec[i64], Vec[i64])
wants_without = relation("wants_without", Vec[i64], i64)

algebra_facts = ruleset(name="algebra-facts")


@algebra_facts.register
def _vector_helpers(a: Shape, b: Shape, c: Shape, k: i64, n: i64) -> Iterable[RewriteOrRule]:
    # numpy broadcasting, from the last dim: equal dims or a 1 (the max), missing dims copied
    yield rule(wants_broadcast(a, b), eq(a.length()).to(i64(0))).then(
        set_(broadcast_shape(a, b)).to(b)
    )
    yield rule(wants_broadcast(a, b), eq(b.length()).to(i64(0)), a.length() > 0).then(
        set_(broadcast_shape(a, b)).to(a)
    )
    yield rule(wants_broadcast(a, b), a.length() > 0, b.length() > 0).then(
        wants_broadcast(a.pop(), b.pop())
    )
    yield rule(
        wants_broadcast(a, b),
        eq(c).to(broadcast_shape(a.pop(), b.pop())),
        eq(k).to(a[a.length() - 1].max(b[b.length() - 1])),
    ).then(set_(broadcast_shape(a, b)).to(c.push(k)))
    # gather(a, b) = [a[j] for j in b]
    yield rule(wants_gather(a, b), eq(b.length()).to(i64(0))).then(
        set_(gather(a, b)).to(Vec[i64].empty())
    )
    yield rule(wants_gather(a, b), b.length() > 0).then(wants_gather(a, b.pop()))
    yield rule(
        wants_gather(a, b), eq(c).to(gather(a, b.pop())), eq(k).to(a[b[b.length() - 1]])
    ).then(set_(gather(a, b)).to(c.push(k)))
    # without(a, n): a with entry n removed, rebuilt from the end
    yield rule(wants_without(a, n), eq(n).to(a.length() - 1)).then(set_(without(a, n)).to(a.pop()))
    yield rule(wants_without(a, n), n < a.length() - 1).then(wants_without(a.pop(), n))
    yield rule(
        wants_without(a, n), eq(c).to(without(a.pop(), n)), eq(k).to(a[a.length() - 1])
    ).then(set_(without(a, n)).to(c.push(k)))


@algebra_facts.register
def _shapes(
    r: TExpr,
    x: TExpr,
    y: TExpr,
    z: TExpr,
    name: String,
    dtype: String,
    op: String,
    value: f64,
    axis: i64,
    s: Shape,
    a: Shape,
    b: Shape,
    c: Shape,
    k: i64,
) -> Iterable[RewriteOrRule]:
    def shape_is(result: Shape) -> Action:
        return set_(shape_of(r)).to(result)

    yield rule(eq(r).to(TExpr.input(name, s, dtype))).then(shape_is(s))
    yield rule(eq(r).to(TExpr.const(value))).then(shape_is(Vec[i64].empty()))
    yield rule(eq(r).to(TExpr.arange(k))).then(shape_is(Vec[i64].empty().push(k)))
    yield rule(eq(r).to(TExpr.unary(op, x)), eq(a).to(shape_of(x))).then(shape_is(a))
    yield rule(eq(r).to(TExpr.binary(op, x, y)), eq(a).to(shape_of(x)), eq(b).to(shape_of(y))).then(
        wants_broadcast(a, b)
    )
    yield rule(
        eq(r).to(TExpr.binary(op, x, y)), eq(c).to(broadcast_shape(shape_of(x), shape_of(y)))
    ).then(shape_is(c))
    yield rule(eq(r).to(TExpr.where(x, y, z)), eq(a).to(shape_of(x)), eq(b).to(shape_of(y))).then(
        wants_broadcast(a, b)
    )
    yield rule(
        eq(r).to(TExpr.where(x, y, z)),
        eq(c).to(broadcast_shape(shape_of(x), shape_of(y))),
        eq(b).to(shape_of(z)),
    ).then(wants_broadcast(c, b))
    yield rule(
        eq(r).to(TExpr.where(x, y, z)),
        eq(c).to(broadcast_shape(broadcast_shape(shape_of(x), shape_of(y)), shape_of(z))),
    ).then(shape_is(c))
    yield rule(eq(r).to(TExpr.reduce(op, axis, x)), eq(a).to(shape_of(x))).then(
        wants_without(a, axis)
    )
    yield rule(eq(r).to(TExpr.reduce(op, axis, x)), eq(c).to(without(shape_of(x), axis))).then(
        shape_is(c)
    )
    yield rule(
        eq(r).to(TExpr.matmul(x, y)),
        eq(a).to(shape_of(x)),
        eq(b).to(shape_of(y)),
        eq(k).to(b[b.length() - 1]),
    ).then(shape_is(a.pop().push(k)))
    yield rule(eq(r).to(TExpr.transpose(x, s)), eq(a).to(shape_of(x))).then(wants_gather(a, s))
    yield rule(eq(r).to(TExpr.transpose(x, s)), eq(c).to(gather(shape_of(x), s))).then(shape_is(c))
    yield rule(eq(r).to(TExpr.broadcast(x, s))).then(shape_is(s))
    yield rule(eq(r).to(TExpr.reshape(x, s))).then(shape_is(s))
    yield rule(eq(r).to(TExpr.slice(x, a, b, s))).then(shape_is(s))
    yield rule(
        eq(r).to(TExpr.concat(x, y, axis)), eq(a).to(shape_of(x)), eq(b).to(shape_of(y))
    ).then(shape_is(a.set(axis, a[axis] + b[axis])))
    # the composed permutation of a transpose of a transpose (rule transpose-compose reads it)
    yield rule(eq(r).to(TExpr.transpose(TExpr.transpose(x, a), b))).then(wants_gather(a, b))


@algebra_facts.register
def _operands(
    r: TExpr,
    x: TExpr,
    y: TExpr,
    z: TExpr,
    name: String,
    dtype: String,
    op: String,
    value: f64,
    axis: i64,
    s: Shape,
    steps: Shape,
    extents: Shape,
    m: i64,
    n: i64,
) -> Iterable[RewriteOrRule]:
    others = (
        TExpr.input(name, s, dtype),
        TExpr.const(value),
        TExpr.arange(m),
        TExpr.unary(op, x),
        TExpr.where(x, y, z),
        TExpr.reduce(op, axis, x),
        TExpr.matmul(x, y),
        TExpr.transpose(x, s),
        TExpr.broadcast(x, s),
        TExpr.reshape(x, s),
        TExpr.slice(x, s, steps, extents),
        TExpr.concat(x, y, axis),
    )
    for tree_op in ("add", "mul"):
        for node in others:
            yield rule(eq(r).to(node)).then(set_(operands(String(tree_op), r)).to(i64(1)))
        yield rule(eq(r).to(TExpr.binary(op, x, y)), ne(op).to(String(tree_op))).then(
            set_(operands(String(tree_op), r)).to(i64(1))
        )
        yield rule(
            eq(r).to(TExpr.binary(String(tree_op), x, y)),
            eq(m).to(operands(String(tree_op), x)),
            eq(n).to(operands(String(tree_op), y)),
        ).then(set_(operands(String(tree_op), r)).to(m + n))


# ---------------------------------------------------------------- guards built from the facts
# A guard predicate's parameters are the variables of the identities that use it (rule.py).


def has_shape(x: TExpr, s: Shape) -> list[FactLike]:
    """s is the shape of x (binds s when it is a fresh variable)."""
    return [eq(s).to(shape_of(x))]


def same_shape(x: TExpr, y: TExpr) -> list[FactLike]:
    """x and y have one shape (no broadcasting between them)."""
    return [eq(shape_of(x)).to(shape_of(y))]


def same_rank(x: TExpr, y: TExpr) -> list[FactLike]:
    """x and y have one rank (broadcasting between them stretches dims of 1 only)."""
    return [eq(shape_of(x).length()).to(shape_of(y).length())]


def is_scalar(x: TExpr) -> list[FactLike]:
    """x has rank 0."""
    return [eq(shape_of(x)).to(Vec[i64].empty())]


def few_operands(op: str, *parts: TExpr) -> list[FactLike]:
    """`parts`, joined by `op`, make an `op`-tree of at most AC_MAX_OPERANDS operands.

    Each part counts by its own smallest `op`-tree, so the bound holds for the tree being
    rewritten even when its e-class also holds a smaller form (a factored sum, say)."""
    total = operands(String(op), parts[0])
    for part in parts[1:]:
        total = total + operands(String(op), part)
    return [total <= AC_MAX_OPERANDS]


def single_operand(op: str, x: TExpr) -> list[FactLike]:
    """`x` has a form that is not an `op`-tree (it is not a sum, for "add")."""
    return [eq(operands(String(op), x)).to(i64(1))]
