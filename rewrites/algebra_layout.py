"""Identities of the layout ops: transpose, broadcast, reshape.

Transposes are pushed toward the inputs, where they compose and cancel; a transpose applied to
both operands of an elementwise op is pulled out again, so the cost model can keep the cheaper
side. A permutation p maps result axis i to input axis p[i] (numpy.transpose).
"""

from __future__ import annotations

from egglog import String, Vec, eq, i64

from eqsat.core.terms import TExpr
from eqsat.rewrites.algebra_facts import gather, has_shape, is_scalar, same_rank
from eqsat.rewrites.rule import Identity

INTS = Vec[i64]  # a permutation or a shape
XP = {"x": TExpr, "p": INTS}
XS = {"x": TExpr, "s": INTS}
OPXYP = {"op": String, "x": TExpr, "y": TExpr, "p": INTS}

TRANSPOSE = (
    Identity(
        "transpose-compose",
        "transpose(transpose(x, p), q) -> transpose(x, [p[i] for i in q])",
        {"x": TExpr, "p": INTS, "q": INTS, "g": INTS},
        lambda x, p, q: TExpr.transpose(TExpr.transpose(x, p), q),
        lambda x, g: TExpr.transpose(x, g),
        guard=lambda p, q, g: [eq(g).to(gather(p, q))],
        guard_text="g = [p[i] for i in q]",
    ),
    Identity(
        "transpose-identity",
        "transpose(x, (0, 1, ..., r-1)) -> x",
        XP,
        lambda x, p: TExpr.transpose(x, p),
        lambda x: x,
        guard=lambda p: [eq(p).to(p.length().range())],
        guard_text="p = range(len(p))",
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
        guard=lambda x, y: same_rank(x, y),
        guard_text="rank(x) = rank(y)",
    ),
    Identity(
        "transpose-binary-scalar-right",
        "transpose(x ∘ y, p) -> transpose(x, p) ∘ y",
        OPXYP,
        lambda op, x, y, p: TExpr.transpose(TExpr.binary(op, x, y), p),
        lambda op, x, y, p: TExpr.binary(op, TExpr.transpose(x, p), y),
        guard=lambda y: is_scalar(y),
        guard_text="y has rank 0",
    ),
    Identity(
        "transpose-binary-scalar-left",
        "transpose(x ∘ y, p) -> x ∘ transpose(y, p)",
        OPXYP,
        lambda op, x, y, p: TExpr.transpose(TExpr.binary(op, x, y), p),
        lambda op, x, y, p: TExpr.binary(op, x, TExpr.transpose(y, p)),
        guard=lambda x: is_scalar(x),
        guard_text="x has rank 0",
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
        guard=lambda x, s: has_shape(x, s),
        guard_text="s = shape(x)",
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
        guard=lambda x, s: has_shape(x, s),
        guard_text="s = shape(x)",
    ),
    Identity(
        "binary-unbroadcast-left",
        "broadcast(x, shape(y)) ∘ y -> x ∘ y",
        {"op": String, "x": TExpr, "y": TExpr, "s": INTS},
        lambda op, x, y, s: TExpr.binary(op, TExpr.broadcast(x, s), y),
        lambda op, x, y: TExpr.binary(op, x, y),
        guard=lambda y, s: has_shape(y, s),
        guard_text="s = shape(y)",
    ),
    Identity(
        "reshape-noop",
        "reshape(x, shape(x)) -> x",
        XS,
        lambda x, s: TExpr.reshape(x, s),
        lambda x: x,
        guard=lambda x, s: has_shape(x, s),
        guard_text="s = shape(x)",
    ),
    Identity(
        "reshape-reshape",
        "reshape(reshape(x, s), t) -> reshape(x, t)",
        {"x": TExpr, "s": INTS, "t": INTS},
        lambda x, s, t: TExpr.reshape(TExpr.reshape(x, s), t),
        lambda x, t: TExpr.reshape(x, t),
    ),
)

IDENTITIES = TRANSPOSE + RESHAPE_BROADCAST
