"""Algebraic identities over tensor terms (stage 1). Grouped by the operator they match.

Every identity holds with numpy broadcasting: both sides have the same shape whenever the left
side is well-shaped. The full rule set is the algebra issue's; these are its first members.
"""

from __future__ import annotations

from egglog import Ruleset, ruleset

from eqsat.terms import TExpr
from rewrites.rule import Identity

X = {"x": TExpr}
XY = {"x": TExpr, "y": TExpr}
XYZ = {"x": TExpr, "y": TExpr, "z": TExpr}


def _add(a: TExpr, b: TExpr) -> TExpr:
    return TExpr.binary("add", a, b)


def _mul(a: TExpr, b: TExpr) -> TExpr:
    return TExpr.binary("mul", a, b)


IDENTITIES = (
    # add
    Identity("add-comm", "x + y -> y + x", XY, lambda x, y: _add(x, y), lambda x, y: _add(y, x)),
    Identity("add-zero", "x + 0 -> x", X, lambda x: _add(x, TExpr.const(0.0)), lambda x: x),
    Identity(
        "factor-mul",
        "x*z + y*z -> (x + y)*z",
        XYZ,
        lambda x, y, z: _add(_mul(x, z), _mul(y, z)),
        lambda x, y, z: _mul(_add(x, y), z),
    ),
    Identity(
        "factor-matmul",
        "x@y + x@z -> x@(y + z)",
        XYZ,
        lambda x, y, z: _add(TExpr.matmul(x, y), TExpr.matmul(x, z)),
        lambda x, y, z: TExpr.matmul(x, _add(y, z)),
    ),
    # mul
    Identity("mul-comm", "x * y -> y * x", XY, lambda x, y: _mul(x, y), lambda x, y: _mul(y, x)),
    Identity("mul-one", "x * 1 -> x", X, lambda x: _mul(x, TExpr.const(1.0)), lambda x: x),
    # matmul
    Identity(
        "matmul-assoc-right",
        "(x@y)@z -> x@(y@z)",
        XYZ,
        lambda x, y, z: TExpr.matmul(TExpr.matmul(x, y), z),
        lambda x, y, z: TExpr.matmul(x, TExpr.matmul(y, z)),
    ),
    Identity(
        "matmul-assoc-left",
        "x@(y@z) -> (x@y)@z",
        XYZ,
        lambda x, y, z: TExpr.matmul(x, TExpr.matmul(y, z)),
        lambda x, y, z: TExpr.matmul(TExpr.matmul(x, y), z),
    ),
    # unary
    Identity(
        "neg-neg",
        "-(-x) -> x",
        X,
        lambda x: TExpr.unary("neg", TExpr.unary("neg", x)),
        lambda x: x,
    ),
    Identity(
        "relu-idempotent",
        "relu(relu(x)) -> relu(x)",
        X,
        lambda x: TExpr.unary("relu", TExpr.unary("relu", x)),
        lambda x: TExpr.unary("relu", x),
    ),
    # transpose
    Identity(
        "transpose-involution-2d",
        "transpose(transpose(x, (1,0)), (1,0)) -> x",
        X,
        lambda x: TExpr.transpose(TExpr.transpose(x, (1, 0)), (1, 0)),
        lambda x: x,
    ),
)


def algebra_rules() -> Ruleset:
    """The egglog ruleset of every identity above."""
    rules = ruleset(name="algebra")
    rules.register(*(identity.egglog_rule() for identity in IDENTITIES))
    return rules
