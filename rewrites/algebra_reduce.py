"""Identities of the reductions: sums commute with sums, scalars, broadcasts and matmul.

`TExpr.reduce(op, axis, x)` removes `axis` from x's shape. A sum over an axis that a factor does
not vary along is taken before multiplying (fewer flops); a sum over a matmul's output axis is a
matrix-vector product.
"""

from __future__ import annotations

from egglog import String, Vec, eq, f64, i64
from egglog.egraph import FactLike

from eqsat.core.terms import TExpr
from eqsat.rewrites.algebra_elementwise import const, mul
from eqsat.rewrites.algebra_facts import has_shape, same_shape, shape_of
from eqsat.rewrites.rule import Identity, Predicate

INTS = Vec[i64]


def reduce(op: str | String, axis: i64, x: TExpr) -> TExpr:
    return TExpr.reduce(op, axis, x)


def total(axis: i64, x: TExpr) -> TExpr:
    return TExpr.reduce("sum", axis, x)


def invariant_along(y: TExpr, x: TExpr, axis: i64, combined: TExpr) -> list[FactLike]:
    """`y` (right-aligned) has no dim at `axis` of `x`, and `combined` (x ∘ y) has x's shape.

    So y is constant along `axis` and x keeps its shape."""
    return [
        shape_of(y).length() + axis < shape_of(x).length(),
        eq(shape_of(combined)).to(shape_of(x)),
    ]


# ---------------------------------------------------------------- guards


def ordered_axes(i: i64, j: i64) -> list[FactLike]:
    """j >= i: the same op twice in the other order is the same e-class."""
    return [j >= i]


def _invariant_term(op: str) -> Predicate:
    """The guard of sum(x ∘ y, i) -> sum(x, i) ∘ y * n for `op` ∘ (add or sub)."""

    def invariant_term(i: i64, x: TExpr, y: TExpr, n: f64) -> list[FactLike]:
        """y has no dim at axis i of x and x ∘ y has x's shape (n = shape(x)[i])."""
        return [
            *invariant_along(y, x, i, TExpr.binary(op, x, y)),
            eq(n).to(f64.from_i64(shape_of(x)[i])),
        ]

    return invariant_term


def invariant_factor(i: i64, x: TExpr, y: TExpr) -> list[FactLike]:
    """y has no dim at axis i of x and x * y has x's shape."""
    return invariant_along(y, x, i, mul(x, y))


def sum_over_added_axis(i: i64, x: TExpr, s: INTS, t: INTS, n: f64) -> list[FactLike]:
    """Axis i is one the broadcast adds in front of x (t: the result shape, n = s[i])."""
    return [
        shape_of(x).length() + i < s.length(),
        *has_shape(total(i, TExpr.broadcast(x, s)), t),
        eq(n).to(f64.from_i64(s[i])),
    ]


def max_over_added_axis(i: i64, x: TExpr, s: INTS, t: INTS) -> list[FactLike]:
    """Axis i is one the broadcast adds in front of x (t: the result shape)."""
    return [
        shape_of(x).length() + i < s.length(),
        *has_shape(reduce("max", i, TExpr.broadcast(x, s)), t),
    ]


def over_columns(i: i64, x: TExpr, y: TExpr, s: INTS, t: INTS) -> list[FactLike]:
    """i is the last axis (s: the shape of y, t: the result shape)."""
    return [
        *has_shape(y, s),
        eq(i).to(s.length() - 1),
        *has_shape(total(i, TExpr.matmul(x, y)), t),
    ]


def over_rows(i: i64, x: TExpr, y: TExpr, s: INTS, t: INTS, k: i64) -> list[FactLike]:
    """i is the second-to-last axis (s: the shape of x, k: its last dim, t: the result shape)."""
    return [
        *has_shape(x, s),
        eq(i).to(s.length() - 2),
        eq(k).to(s[s.length() - 1]),
        *has_shape(total(i, TExpr.matmul(x, y)), t),
    ]


AXES = (
    Identity(
        "reduce-swap",
        "reduce(reduce(x, i), j) -> reduce(reduce(x, j+1), i)",
        {"op": String, "i": i64, "j": i64, "x": TExpr},
        lambda op, i, j, x: reduce(op, j, reduce(op, i, x)),
        lambda op, i, j, x: reduce(op, i, reduce(op, j + 1, x)),
        guard=(ordered_axes,),
    ),
)

LINEARITY = (
    Identity(
        "sum-neg",
        "sum(-x, i) -> -sum(x, i)",
        {"i": i64, "x": TExpr},
        lambda i, x: total(i, TExpr.unary("neg", x)),
        lambda i, x: TExpr.unary("neg", total(i, x)),
    ),
    *(
        identity
        for op, sign in (("add", "+"), ("sub", "-"))
        for identity in (
            Identity(
                f"sum-split-{op}",
                f"sum(x {sign} y, i) -> sum(x, i) {sign} sum(y, i)",
                {"i": i64, "x": TExpr, "y": TExpr},
                lambda i, x, y, op=op: total(i, TExpr.binary(op, x, y)),
                lambda i, x, y, op=op: TExpr.binary(op, total(i, x), total(i, y)),
                guard=(same_shape,),
            ),
            Identity(
                f"sum-merge-{op}",
                f"sum(x, i) {sign} sum(y, i) -> sum(x {sign} y, i)",
                {"i": i64, "x": TExpr, "y": TExpr},
                lambda i, x, y, op=op: TExpr.binary(op, total(i, x), total(i, y)),
                lambda i, x, y, op=op: total(i, TExpr.binary(op, x, y)),
                guard=(same_shape,),
            ),
            Identity(
                f"sum-{op}-invariant",
                f"sum(x {sign} y, i) -> sum(x, i) {sign} y * n   (n = shape(x)[i])",
                {"i": i64, "x": TExpr, "y": TExpr, "n": f64},
                lambda i, x, y, op=op: total(i, TExpr.binary(op, x, y)),
                lambda i, x, y, n, op=op: TExpr.binary(op, total(i, x), mul(y, const(n))),
                guard=(_invariant_term(op),),
            ),
        )
    ),
    Identity(
        "sum-mul-invariant",
        "sum(x * y, i) -> sum(x, i) * y",
        {"i": i64, "x": TExpr, "y": TExpr},
        lambda i, x, y: total(i, mul(x, y)),
        lambda i, x, y: mul(total(i, x), y),
        guard=(invariant_factor,),
        finite_only=True,
    ),
)

BROADCASTS = (
    Identity(
        "sum-broadcast",
        "sum(broadcast(x, s), i) -> broadcast(x, s without i) * s[i]",
        {"i": i64, "x": TExpr, "s": INTS, "t": INTS, "n": f64},
        lambda i, x, s: total(i, TExpr.broadcast(x, s)),
        lambda x, t, n: mul(TExpr.broadcast(x, t), const(n)),
        guard=(sum_over_added_axis,),
    ),
    Identity(
        "max-broadcast",
        "max(broadcast(x, s), i) -> broadcast(x, s without i)",
        {"i": i64, "x": TExpr, "s": INTS, "t": INTS},
        lambda i, x, s: reduce("max", i, TExpr.broadcast(x, s)),
        lambda x, t: TExpr.broadcast(x, t),
        guard=(max_over_added_axis,),
    ),
)

# sum over n of x@y (..., m, n) is x @ (y summed over n), as a column; over m, likewise a row.
MATMUL_VARIABLES = {"i": i64, "x": TExpr, "y": TExpr, "s": INTS, "t": INTS, "k": i64}
MATMUL = (
    Identity(
        "sum-matmul-columns",
        "sum(x@y, -1) -> reshape(x @ reshape(sum(y, -1), (..., k, 1)), (..., m))",
        MATMUL_VARIABLES,
        lambda i, x, y: total(i, TExpr.matmul(x, y)),
        lambda i, x, y, s, t: TExpr.reshape(
            TExpr.matmul(x, TExpr.reshape(total(i, y), s.pop().push(1))), t
        ),
        guard=(over_columns,),
        finite_only=True,
    ),
    Identity(
        "sum-matmul-rows",
        "sum(x@y, -2) -> reshape(reshape(sum(x, -2), (..., 1, k)) @ y, (..., n))",
        MATMUL_VARIABLES,
        lambda i, x, y: total(i, TExpr.matmul(x, y)),
        lambda i, x, y, s, t, k: TExpr.reshape(
            TExpr.matmul(TExpr.reshape(total(i, x), s.pop().pop().push(1).push(k)), y), t
        ),
        guard=(over_rows,),
        finite_only=True,
    ),
)

IDENTITIES = AXES + LINEARITY + BROADCASTS + MATMUL
