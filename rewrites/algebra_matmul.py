"""Identities of matmul: chain order, factoring and distributing, scalars, transposes.

`TExpr.matmul` multiplies (..., m, k) by (..., k, n) with equal batch dims. Associativity in both
directions puts every bracketing of a chain in the e-graph (O(n^3) nodes for n matrices); the
stage-1 cost then picks the order with the fewest flops.
"""

from __future__ import annotations

import math

from egglog import UnstableFn, Vec, eq, f64, i64, ne
from egglog.egraph import FactLike

from eqsat.core.terms import TExpr
from eqsat.rewrites.algebra_elementwise import XYZ, mul
from eqsat.rewrites.algebra_facts import (
    few_operands,
    is_scalar,
    same_shape,
    shape_of,
    single_operand,
)
from eqsat.rewrites.rule import Identity

XYC = {"x": TExpr, "y": TExpr, "c": TExpr}
XYP = {"x": TExpr, "y": TExpr, "p": Vec[i64]}
XYR = {"x": TExpr, "y": TExpr, "r": TExpr}
XYV = {"x": TExpr, "y": TExpr, "v": f64}
# what key_halves binds
KEY_HALVES = {"x_shape": Vec[i64], "y_shape": Vec[i64], "k": i64, "h": i64, "d": i64}


def matmul(a: TExpr, b: TExpr) -> TExpr:
    return TExpr.matmul(a, b)


def swaps_last_two(p: Vec[i64]) -> list[FactLike]:
    """p is (0, 1, ..., r-3, r-1, r-2), the matrix transpose of a batch (^T)."""
    rank = p.length()
    return [
        eq(p.pop().pop()).to((rank - 2).range()),
        eq(p[rank - 1]).to(rank - 2),
        eq(p[rank - 2]).to(rank - 1),
    ]


def scalar_factor(c: TExpr) -> list[FactLike]:
    """c has rank 0."""
    return is_scalar(c)


CHAINS = (
    Identity(
        "matmul-assoc-right",
        "(x@y)@z -> x@(y@z)",
        XYZ,
        lambda x, y, z: matmul(matmul(x, y), z),
        lambda x, y, z: matmul(x, matmul(y, z)),
        finite_only=True,
    ),
    Identity(
        "matmul-assoc-left",
        "x@(y@z) -> (x@y)@z",
        XYZ,
        lambda x, y, z: matmul(x, matmul(y, z)),
        lambda x, y, z: matmul(matmul(x, y), z),
        finite_only=True,
    ),
)


def distributable(x: TExpr, y: TExpr, z: TExpr) -> list[FactLike]:
    """y and z have one shape and at most AC_MAX_OPERANDS operands of + in all; x is not a sum.

    Distributing x over y ± z: y and z are each a valid operand of the product on their own (one
    shape), the sum is small and x is not a sum (which keeps the expansion of a product of sums
    out of the e-graph)."""
    return [*same_shape(y, z), *few_operands("add", y, z), *single_operand("add", x)]


# x@y ± x@z: the two products share m and k, so only n can broadcast (a column of 1), and a
# broadcast column commutes with the product; factoring needs no guard.
DISTRIBUTIVE = tuple(
    identity
    for op, sign in (("add", "+"), ("sub", "-"))
    for identity in (
        Identity(
            f"factor-matmul-left-{op}",
            f"x@y {sign} x@z -> x@(y {sign} z)",
            XYZ,
            lambda x, y, z, op=op: TExpr.binary(op, matmul(x, y), matmul(x, z)),
            lambda x, y, z, op=op: matmul(x, TExpr.binary(op, y, z)),
            finite_only=True,
        ),
        Identity(
            f"factor-matmul-right-{op}",
            f"y@x {sign} z@x -> (y {sign} z)@x",
            XYZ,
            lambda x, y, z, op=op: TExpr.binary(op, matmul(y, x), matmul(z, x)),
            lambda x, y, z, op=op: matmul(TExpr.binary(op, y, z), x),
            finite_only=True,
        ),
        Identity(
            f"distribute-matmul-left-{op}",
            f"x@(y {sign} z) -> x@y {sign} x@z",
            XYZ,
            lambda x, y, z, op=op: matmul(x, TExpr.binary(op, y, z)),
            lambda x, y, z, op=op: TExpr.binary(op, matmul(x, y), matmul(x, z)),
            guard=(distributable,),
            finite_only=True,
        ),
        Identity(
            f"distribute-matmul-right-{op}",
            f"(y {sign} z)@x -> y@x {sign} z@x",
            XYZ,
            lambda x, y, z, op=op: matmul(TExpr.binary(op, y, z), x),
            lambda x, y, z, op=op: TExpr.binary(op, matmul(y, x), matmul(z, x)),
            guard=(distributable,),
            finite_only=True,
        ),
    )
)

# A rank-0 factor can scale whichever operand (or the result) is smallest: (x*c)@y -> (x@y)*c
# and back, as (name, identity, left side, right side) over a factor f.
SCALAR_MOVES = (
    ("out-left", "(x*{f})@y -> (x@y)*{f}", lambda x, y, f: matmul(mul(x, f), y),
     lambda x, y, f: mul(matmul(x, y), f)),
    ("out-right", "x@(y*{f}) -> (x@y)*{f}", lambda x, y, f: matmul(x, mul(y, f)),
     lambda x, y, f: mul(matmul(x, y), f)),
    ("in-left", "(x@y)*{f} -> (x*{f})@y", lambda x, y, f: mul(matmul(x, y), f),
     lambda x, y, f: matmul(mul(x, f), y)),
    ("in-right", "(x@y)*{f} -> x@(y*{f})", lambda x, y, f: mul(matmul(x, y), f),
     lambda x, y, f: matmul(x, mul(y, f))),
)  # fmt: skip


def finite_nonzero(v: f64) -> list[FactLike]:
    """v is finite and not 0 (v times x is ±inf or NaN exactly where x is, and 0 where x is)."""
    return [ne(v).to(f64(0.0)), abs(v) < f64(math.inf)]


# Any rank-0 factor c is finite-only: a 0 or an inf in c makes NaN in one order only (0 * inf).
# A finite nonzero constant scales each term of the product's sums alike, so moving it holds
# for inf and NaN too, and the optimizer uses it by default (`matmul-const-*`).
SCALARS = tuple(
    identity
    for move, text, lhs, rhs in SCALAR_MOVES
    for identity in (
        Identity(
            f"matmul-scalar-{move}",
            text.format(f="c"),
            XYC,
            lambda x, y, c, lhs=lhs: lhs(x, y, c),
            lambda x, y, c, rhs=rhs: rhs(x, y, c),
            guard=(scalar_factor,),
            finite_only=True,
        ),
        Identity(
            f"matmul-const-{move}",
            text.format(f="const(v)"),
            XYV,
            lambda x, y, v, lhs=lhs: lhs(x, y, TExpr.const(v)),
            lambda x, y, v, rhs=rhs: rhs(x, y, TExpr.const(v)),
            guard=(finite_nonzero,),
        ),
    )
)


def is_row_scale(r: TExpr, x: TExpr) -> list[FactLike]:
    """r has the shape of x with a last dimension of 1 (one factor per row of x)."""
    return [eq(shape_of(r)).to(shape_of(x).pop().push(i64(1)))]


# Scaling the rows of the left operand scales the rows of the product (softmax's division by
# the row sums before @V moves after it: m*n divisions instead of m*k).
ROW_SCALES = tuple(
    identity
    for op, sign in (("mul", "*"), ("div", "/"))
    for identity in (
        Identity(
            f"matmul-row-{op}-out",
            f"(x {sign} r)@y -> (x@y) {sign} r",
            XYR,
            lambda x, y, r, op=op: matmul(TExpr.binary(op, x, r), y),
            lambda x, y, r, op=op: TExpr.binary(op, matmul(x, y), r),
            guard=(is_row_scale,),
            finite_only=True,
        ),
        Identity(
            f"matmul-row-{op}-in",
            f"(x@y) {sign} r -> (x {sign} r)@y",
            XYR,
            lambda x, y, r, op=op: TExpr.binary(op, matmul(x, y), r),
            lambda x, y, r, op=op: matmul(TExpr.binary(op, x, r), y),
            guard=(is_row_scale,),
            finite_only=True,
        ),
    )
)


def softmax_parts(x: TExpr, i: i64, s: Vec[i64]) -> tuple[TExpr, TExpr]:
    """The numerator e = exp(x - max(x, i)) and denominator sum(e, i) of the frontend's
    softmax over axis i, the max and the sum kept as shape s."""
    e = TExpr.unary("exp", TExpr.binary("sub", x, TExpr.reshape(TExpr.reduce("max", i, x), s)))
    return e, TExpr.reshape(TExpr.reduce("sum", i, e), s)


def per_row(x: TExpr, i: i64, s: Vec[i64]) -> list[FactLike]:
    """s is x's shape with a last dimension of 1, and s[i] = 1.

    So i is the last axis (or x's is 1 there): each row of x loses its own max, and the sums
    are one factor per row of x@y."""
    return [eq(s).to(shape_of(x).pop().push(i64(1))), eq(s[i]).to(i64(1))]


def key_halves(
    x: TExpr, y: TExpr, i: i64, x_shape: Vec[i64], y_shape: Vec[i64], k: i64, h: i64, d: i64
) -> list[FactLike]:
    """x is (..., n, k), k >= 2, softmax over its last axis i; y is (..., k, d); h = k / 2."""
    return [
        eq(x_shape).to(shape_of(x)),
        eq(y_shape).to(shape_of(y)),
        x_shape.length() >= i64(2),
        eq(i).to(x_shape.length() - 1),
        eq(k).to(x_shape[i]),
        k >= i64(2),
        eq(h).to(k / 2),
        eq(d).to(y_shape[i]),
    ]


def _zeros_ones(shape: Vec[i64]) -> tuple[Vec[i64], Vec[i64]]:
    """Vectors of zeros and of ones as long as `shape`: a slice's starts and steps."""
    zeros = shape.map(UnstableFn(i64.__mul__, i64(0)))
    return zeros, zeros.map(UnstableFn(i64.__add__, i64(1)))


def _key_columns(x: TExpr, shape: Vec[i64], start: i64, keys: i64) -> TExpr:
    """x[..., start : start + keys], x of `shape`. (Vectors are rebuilt with pop and push:
    egglog's vec-set panics on an index out of range: `eqsat.rewrites.algebra_facts`.)"""
    zeros, ones = _zeros_ones(shape)
    return TExpr.slice(x, zeros.pop().push(start), ones, shape.pop().push(keys))


def _key_rows(y: TExpr, shape: Vec[i64], start: i64, keys: i64, d: i64) -> TExpr:
    """y[..., start : start + keys, :], y of `shape` with d columns."""
    zeros, ones = _zeros_ones(shape)
    starts = zeros.pop().pop().push(start).push(i64(0))
    return TExpr.slice(y, starts, ones, shape.pop().pop().push(keys).push(d))


def online_softmax(
    x: TExpr,
    y: TExpr,
    i: i64,
    s: Vec[i64],
    x_shape: Vec[i64],
    y_shape: Vec[i64],
    k: i64,
    h: i64,
    d: i64,
) -> TExpr:
    """The right side of online-softmax-matmul: two key blocks, each normalized by its own
    maximum, rescaled to the larger of the two (FlashAttention's running max, sum and
    accumulator, for one step)."""

    def key_block(start: i64, keys: i64) -> tuple[TExpr, TExpr, TExpr]:
        """The unnormalized attention exp(x_b - m_b) @ y_b of keys start .. start + keys
        (columns of x's last axis i, rows of y), its row sums and its row maxima m_b."""
        x_block = _key_columns(x, x_shape, start, keys)
        y_block = _key_rows(y, y_shape, start, keys, d)
        numerator, sums = softmax_parts(x_block, i, s)
        maxima = TExpr.reshape(TExpr.reduce("max", i, x_block), s)
        return matmul(numerator, y_block), sums, maxima

    first, first_sums, first_max = key_block(i64(0), h)
    second, second_sums, second_max = key_block(h, k - h)
    top = TExpr.binary("max", first_max, second_max)
    scale_first = TExpr.unary("exp", TExpr.binary("sub", first_max, top))
    scale_second = TExpr.unary("exp", TExpr.binary("sub", second_max, top))

    def rescaled(a: TExpr, b: TExpr) -> TExpr:
        return TExpr.binary("add", mul(a, scale_first), mul(b, scale_second))

    return TExpr.binary("div", rescaled(first, second), rescaled(first_sums, second_sums))


# A softmax's row sums are in [1, n] (exp(0) = 1 at the max, exp(<= 0) elsewhere) or NaN, so
# dividing by them commutes with the product's sums for inf and NaN too: attention divides
# after @ V (m*n divisions) by default, which matmul-row-div-out does only under assume_finite.
SOFTMAX = (
    Identity(
        "softmax-matmul",
        "(e / sum(e, i)) @ y -> (e @ y) / sum(e, i), e = exp(x - max(x, i))",
        {"x": TExpr, "y": TExpr, "i": i64, "s": Vec[i64]},
        lambda x, y, i, s: matmul(TExpr.binary("div", *softmax_parts(x, i, s)), y),
        lambda x, y, i, s: TExpr.binary(
            "div", matmul(softmax_parts(x, i, s)[0], y), softmax_parts(x, i, s)[1]
        ),
        guard=(per_row,),
    ),
    # Finite inputs only: a block whose scores are all -inf (a causal mask) has a NaN maximum
    # correction, where the whole row's softmax is finite.
    Identity(
        "online-softmax-matmul",
        "(e @ y) / sum(e, i) -> (e1 @ y1 * c1 + e2 @ y2 * c2) / (sum(e1) * c1 + sum(e2) * c2), "
        "keys split in halves, e_b = exp(x_b - m_b), c_b = exp(m_b - max(m1, m2))",
        {"x": TExpr, "y": TExpr, "i": i64, "s": Vec[i64], **KEY_HALVES},
        lambda x, y, i, s: TExpr.binary(
            "div", matmul(softmax_parts(x, i, s)[0], y), softmax_parts(x, i, s)[1]
        ),
        online_softmax,
        guard=(per_row, key_halves),
        finite_only=True,
    ),
)

TRANSPOSES = (
    Identity(
        "transpose-matmul",
        "(x@y)^T -> y^T @ x^T",
        XYP,
        lambda x, y, p: TExpr.transpose(matmul(x, y), p),
        lambda x, y, p: matmul(TExpr.transpose(y, p), TExpr.transpose(x, p)),
        guard=(swaps_last_two,),
    ),
    Identity(
        "matmul-of-transposes",
        "y^T @ x^T -> (x@y)^T",
        XYP,
        lambda x, y, p: matmul(TExpr.transpose(y, p), TExpr.transpose(x, p)),
        lambda x, y, p: TExpr.transpose(matmul(x, y), p),
        guard=(swaps_last_two,),
    ),
)

IDENTITIES = CHAINS + DISTRIBUTIVE + SCALARS + ROW_SCALES + SOFTMAX + TRANSPOSES
