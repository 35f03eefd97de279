"""Identities of the layout ops: transpose, broadcast, reshape, slice.

Transposes are pushed toward the inputs, where they compose and cancel; a transpose applied to
both operands of an elementwise op is pulled out again, so the cost model can keep the cheaper
side. A permutation p maps result axis i to input axis p[i] (numpy.transpose).

Slices are pushed toward the inputs through elementwise ops and matmuls, so that only the
elements kept are computed: `(A @ B)[:10]` multiplies ten rows of A, `exp(x)[::2]` takes the
exponential of every second element. A slice is (starts, steps, extents), one each per
dimension (`TExpr.slice`).

Elementwise ops move into the parts of a concatenation, so that the e-graph holds both
spellings of `relu(concatenate([A @ W, B @ V]))`. Stage 1 prices them alike, and for that
program the loop stage makes equally fast nests of both (docs/MEASUREMENTS.md).
"""

from __future__ import annotations

from egglog import String, Vec, eq, i64
from egglog.egraph import FactLike

from eqsat.core.terms import TExpr
from eqsat.rewrites.algebra_facts import (
    gather,
    has_shape,
    is_scalar,
    same_rank,
    same_shape,
    shape_of,
)
from eqsat.rewrites.rule import Identity

INTS = Vec[i64]  # a permutation or a shape
XP = {"x": TExpr, "p": INTS}
XS = {"x": TExpr, "s": INTS}
OPXYP = {"op": String, "x": TExpr, "y": TExpr, "p": INTS}


def composed(p: Vec[i64], q: Vec[i64], g: Vec[i64]) -> list[FactLike]:
    """g = [p[i] for i in q], the permutation of transposing by p, then by q."""
    return [eq(g).to(gather(p, q))]


def identity_permutation(p: Vec[i64]) -> list[FactLike]:
    """p = (0, 1, ..., len(p) - 1)."""
    return [eq(p).to(p.length().range())]


def scalar_left(x: TExpr) -> list[FactLike]:
    """x has rank 0."""
    return is_scalar(x)


def scalar_right(y: TExpr) -> list[FactLike]:
    """y has rank 0."""
    return is_scalar(y)


def scalar_constant(c: TExpr) -> list[FactLike]:
    """c has rank 0."""
    return is_scalar(c)


def shape_of_right(y: TExpr, s: Vec[i64]) -> list[FactLike]:
    """s is the shape of y."""
    return has_shape(y, s)


TRANSPOSE = (
    Identity(
        "transpose-compose",
        "transpose(transpose(x, p), q) -> transpose(x, [p[i] for i in q])",
        {"x": TExpr, "p": INTS, "q": INTS, "g": INTS},
        lambda x, p, q: TExpr.transpose(TExpr.transpose(x, p), q),
        lambda x, g: TExpr.transpose(x, g),
        guard=(composed,),
    ),
    Identity(
        "transpose-identity",
        "transpose(x, (0, 1, ..., r-1)) -> x",
        XP,
        lambda x, p: TExpr.transpose(x, p),
        lambda x: x,
        guard=(identity_permutation,),
    ),
    Identity(
        "transpose-unary",
        "transpose(f(x), p) -> f(transpose(x, p))",
        {"op": String, "x": TExpr, "p": INTS},
        lambda op, x, p: TExpr.transpose(TExpr.unary(op, x), p),
        lambda op, x, p: TExpr.unary(op, TExpr.transpose(x, p)),
    ),
    # An operand of lower rank would need its own broadcast first; rank 0 needs none.
    Identity(
        "transpose-binary",
        "transpose(x ∘ y, p) -> transpose(x, p) ∘ transpose(y, p)",
        OPXYP,
        lambda op, x, y, p: TExpr.transpose(TExpr.binary(op, x, y), p),
        lambda op, x, y, p: TExpr.binary(op, TExpr.transpose(x, p), TExpr.transpose(y, p)),
        guard=(same_rank,),
    ),
    Identity(
        "transpose-binary-scalar-right",
        "transpose(x ∘ y, p) -> transpose(x, p) ∘ y",
        OPXYP,
        lambda op, x, y, p: TExpr.transpose(TExpr.binary(op, x, y), p),
        lambda op, x, y, p: TExpr.binary(op, TExpr.transpose(x, p), y),
        guard=(scalar_right,),
    ),
    Identity(
        "transpose-binary-scalar-left",
        "transpose(x ∘ y, p) -> x ∘ transpose(y, p)",
        OPXYP,
        lambda op, x, y, p: TExpr.transpose(TExpr.binary(op, x, y), p),
        lambda op, x, y, p: TExpr.binary(op, x, TExpr.transpose(y, p)),
        guard=(scalar_left,),
    ),
    Identity(
        "binary-of-transposes",
        "transpose(x, p) ∘ transpose(y, p) -> transpose(x ∘ y, p)",
        OPXYP,
        lambda op, x, y, p: TExpr.binary(op, TExpr.transpose(x, p), TExpr.transpose(y, p)),
        lambda op, x, y, p: TExpr.transpose(TExpr.binary(op, x, y), p),
    ),
)

RESHAPE_BROADCAST = (
    Identity(
        "broadcast-noop",
        "broadcast(x, shape(x)) -> x",
        XS,
        lambda x, s: TExpr.broadcast(x, s),
        lambda x: x,
        guard=(has_shape,),
    ),
    Identity(
        "broadcast-broadcast",
        "broadcast(broadcast(x, s), t) -> broadcast(x, t)",
        {"x": TExpr, "s": INTS, "t": INTS},
        lambda x, s, t: TExpr.broadcast(TExpr.broadcast(x, s), t),
        lambda x, t: TExpr.broadcast(x, t),
    ),
    # numpy broadcasts the other operand implicitly to the same shape
    Identity(
        "binary-unbroadcast-right",
        "x ∘ broadcast(y, shape(x)) -> x ∘ y",
        {"op": String, "x": TExpr, "y": TExpr, "s": INTS},
        lambda op, x, y, s: TExpr.binary(op, x, TExpr.broadcast(y, s)),
        lambda op, x, y: TExpr.binary(op, x, y),
        guard=(has_shape,),
    ),
    Identity(
        "binary-unbroadcast-left",
        "broadcast(x, shape(y)) ∘ y -> x ∘ y",
        {"op": String, "x": TExpr, "y": TExpr, "s": INTS},
        lambda op, x, y, s: TExpr.binary(op, TExpr.broadcast(x, s), y),
        lambda op, x, y: TExpr.binary(op, x, y),
        guard=(shape_of_right,),
    ),
    Identity(
        "reshape-noop",
        "reshape(x, shape(x)) -> x",
        XS,
        lambda x, s: TExpr.reshape(x, s),
        lambda x: x,
        guard=(has_shape,),
    ),
    Identity(
        "reshape-reshape",
        "reshape(reshape(x, s), t) -> reshape(x, t)",
        {"x": TExpr, "s": INTS, "t": INTS},
        lambda x, s, t: TExpr.reshape(TExpr.reshape(x, s), t),
        lambda x, t: TExpr.reshape(x, t),
    ),
)

SLICED = {"x": TExpr, "a": INTS, "b": INTS, "e": INTS}  # x[a + b * i] for i < e


def contracted(x: TExpr, k: i64) -> list[FactLike]:
    """k is the last extent of x: the contraction of x @ y."""
    shape = shape_of(x)
    return [eq(k).to(shape[shape.length() - 1])]


def sliced(x: TExpr, a: Vec[i64], b: Vec[i64], e: Vec[i64]) -> TExpr:
    return TExpr.slice(x, a, b, e)


def whole_dim(a: Vec[i64], b: Vec[i64], e: Vec[i64], d: i64, k: i64) -> tuple[Vec[i64], ...]:
    """The slice (a, b, e) with dimension `d` taken whole (k elements from 0, step 1)."""
    return a.set(d, i64(0)), b.set(d, i64(1)), e.set(d, k)


def slice_of_binary(name: str, text: str, scalar: str | None) -> Identity:
    """`(x ∘ y)[s]` with the slice on both operands (of one shape, `scalar` None), or on x alone
    when y, on the `scalar` side ("left" or "right"), has rank 0."""

    def pair(x: TExpr, y: TExpr) -> tuple[TExpr, TExpr]:
        return (y, x) if scalar == "left" else (x, y)

    def rhs(op: String, x: TExpr, y: TExpr, a: Vec[i64], b: Vec[i64], e: Vec[i64]) -> TExpr:
        other = y if scalar else sliced(y, a, b, e)
        return TExpr.binary(op, *pair(sliced(x, a, b, e), other))

    return Identity(
        name,
        text,
        {"op": String, "y": TExpr, **SLICED},
        lambda op, x, y, a, b, e: sliced(TExpr.binary(op, *pair(x, y)), a, b, e),
        rhs,
        guard=(scalar_right,) if scalar else (same_shape,),
    )


SLICES = (
    Identity(
        "slice-unary",
        "f(x)[s] -> f(x[s])",
        {"op": String, **SLICED},
        lambda op, x, a, b, e: sliced(TExpr.unary(op, x), a, b, e),
        lambda op, x, a, b, e: TExpr.unary(op, sliced(x, a, b, e)),
    ),
    slice_of_binary("slice-binary", "(x ∘ y)[s] -> x[s] ∘ y[s] (x, y of one shape)", None),
    slice_of_binary("slice-binary-scalar-right", "(x ∘ y)[s] -> x[s] ∘ y (y of rank 0)", "right"),
    slice_of_binary("slice-binary-scalar-left", "(y ∘ x)[s] -> y ∘ x[s] (y of rank 0)", "left"),
    # rows (and batches) of the product come from x, its columns from y
    Identity(
        "slice-matmul",
        "(x @ y)[..., rows, columns] -> x[..., rows, :] @ y[..., :, columns]",
        {"y": TExpr, "k": i64, **SLICED},
        lambda x, y, a, b, e: sliced(TExpr.matmul(x, y), a, b, e),
        lambda x, y, a, b, e, k: TExpr.matmul(
            sliced(x, *whole_dim(a, b, e, a.length() - 1, k)),
            sliced(y, *whole_dim(a, b, e, a.length() - 2, k)),
        ),
        guard=(contracted,),
    ),
)


def aligned_parts(x: TExpr, u: TExpr) -> list[FactLike]:
    """x and u have one shape: two concatenations along one axis split at one place."""
    return same_shape(x, u)


CONCATENATED = {"op": String, "x": TExpr, "y": TExpr, "d": i64}  # concat(x, y, d) and an op

CONCATS = (
    Identity(
        "concat-unary",
        "f(concat(x, y, d)) -> concat(f(x), f(y), d)",
        CONCATENATED,
        lambda op, x, y, d: TExpr.unary(op, TExpr.concat(x, y, d)),
        lambda op, x, y, d: TExpr.concat(TExpr.unary(op, x), TExpr.unary(op, y), d),
    ),
    Identity(
        "concat-binary",
        "concat(x, y, d) ∘ concat(u, v, d) -> concat(x ∘ u, y ∘ v, d) (x, u of one shape)",
        {**CONCATENATED, "u": TExpr, "v": TExpr},
        lambda op, x, y, u, v, d: TExpr.binary(op, TExpr.concat(x, y, d), TExpr.concat(u, v, d)),
        lambda op, x, y, u, v, d: TExpr.concat(TExpr.binary(op, x, u), TExpr.binary(op, y, v), d),
        guard=(aligned_parts,),
    ),
    Identity(
        "concat-binary-scalar-right",
        "concat(x, y, d) ∘ c -> concat(x ∘ c, y ∘ c, d) (c of rank 0)",
        {**CONCATENATED, "c": TExpr},
        lambda op, x, y, c, d: TExpr.binary(op, TExpr.concat(x, y, d), c),
        lambda op, x, y, c, d: TExpr.concat(TExpr.binary(op, x, c), TExpr.binary(op, y, c), d),
        guard=(scalar_constant,),
    ),
    Identity(
        "concat-binary-scalar-left",
        "c ∘ concat(x, y, d) -> concat(c ∘ x, c ∘ y, d) (c of rank 0)",
        {**CONCATENATED, "c": TExpr},
        lambda op, x, y, c, d: TExpr.binary(op, c, TExpr.concat(x, y, d)),
        lambda op, x, y, c, d: TExpr.concat(TExpr.binary(op, c, x), TExpr.binary(op, c, y), d),
        guard=(scalar_constant,),
    ),
)

IDENTITIES = TRANSPOSE + RESHAPE_BROADCAST + SLICES + CONCATS
