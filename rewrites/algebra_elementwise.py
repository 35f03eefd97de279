"""Identities of the elementwise ops: + - * /, neg, exp/log, relu/max/min, constant folding.

Every identity holds with numpy broadcasting: when the left side is well-shaped, the right side
is too and has its shape. Commutativity needs no bound (it adds at most one node per node);
associativity does (`few_operands`). The frontend spells integer powers as products (x**2 is
x*x, x**-1 is 1/x), so they need no rule of their own.
"""

from __future__ import annotations

from collections.abc import Callable

from egglog import Vec, eq, f64, i64, ne
from egglog.egraph import FactLike

from eqsat.core.terms import TExpr
from eqsat.rewrites.algebra_facts import few_operands, has_shape, single_operand
from eqsat.rewrites.rule import Identity, Predicate

X = {"x": TExpr}
XY = {"x": TExpr, "y": TExpr}
XYZ = {"x": TExpr, "y": TExpr, "z": TExpr}
XS = {"x": TExpr, "s": Vec[i64]}
AB = {"a": f64, "b": f64}


def add(a: TExpr, b: TExpr) -> TExpr:
    return TExpr.binary("add", a, b)


def sub(a: TExpr, b: TExpr) -> TExpr:
    return TExpr.binary("sub", a, b)


def mul(a: TExpr, b: TExpr) -> TExpr:
    return TExpr.binary("mul", a, b)


def const(value: f64 | float) -> TExpr:
    return TExpr.const(value)


def zeros(shape: Vec[i64]) -> TExpr:
    """A tensor of zeros of `shape` (a no-op broadcast for rank 0, which broadcast-noop drops)."""
    return TExpr.broadcast(const(0.0), shape)


# ---------------------------------------------------------------- guards


def few_terms(x: TExpr, y: TExpr, z: TExpr) -> list[FactLike]:
    """x, y and z hold at most AC_MAX_OPERANDS operands of + in all."""
    return few_operands("add", x, y, z)


def few_factors(x: TExpr, y: TExpr, z: TExpr) -> list[FactLike]:
    """x, y and z hold at most AC_MAX_OPERANDS operands of * in all."""
    return few_operands("mul", x, y, z)


def small_sum(x: TExpr, y: TExpr) -> list[FactLike]:
    """x and y hold at most AC_MAX_OPERANDS operands of + in all."""
    return few_operands("add", x, y)


def not_a_sum(z: TExpr) -> list[FactLike]:
    """z has a form that is not a sum."""
    return single_operand("add", z)


def zeros_like(x: TExpr, s: Vec[i64]) -> list[FactLike]:
    """s is the shape of x, of rank at least 1 (binds s).

    A rank-0 x may be a constant c, and c * 0 -> 0 would put c * 0 in the e-class of 0, where
    associativity folds every power of c (see `new_value`)."""
    return [*has_shape(x, s), s.length() > 0]


def normal_reciprocal(c: f64, r: f64) -> list[FactLike]:
    """1e-30 <= |c| <= 1e30, so r = 1/c is a normal float32."""
    return [abs(c) >= 1e-30, abs(c) <= 1e30, eq(r).to(f64(1.0) / c)]


def nonzero_divisor(a: f64, b: f64, q: f64) -> list[FactLike]:
    """b != 0 and q = a / b is neither a nor b (binds q; `new_value` says why)."""
    return [ne(b).to(f64(0.0)), eq(q).to(a / b), ne(q).to(a), ne(q).to(b)]


def new_value(fold: Callable[[f64, f64], f64]) -> Predicate:
    """The guard of folding const(a) ∘ const(b): the result r is neither a nor b.

    A fold that gives back an operand (c * 0 = 0, c + inf = inf, c * nan = nan, c * 1 = c)
    puts the term in the e-class of its own operand, and associativity then folds every power
    of the other constant (0 = c * 0 = c * c * 0 = ...) until the limits stop the stage."""

    def new_value(a: f64, b: f64, r: f64) -> list[FactLike]:
        """r = a ∘ b is neither a nor b (binds r)."""
        return [eq(r).to(fold(a, b)), ne(r).to(a), ne(r).to(b)]

    return new_value


ARITHMETIC = (
    Identity("add-comm", "x + y -> y + x", XY, lambda x, y: add(x, y), lambda x, y: add(y, x)),
    Identity(
        "add-assoc",
        "(x + y) + z -> x + (y + z)",
        XYZ,
        lambda x, y, z: add(add(x, y), z),
        lambda x, y, z: add(x, add(y, z)),
        guard=(few_terms,),
    ),
    Identity("add-zero", "x + 0 -> x", X, lambda x: add(x, const(0.0)), lambda x: x),
    Identity("sub-zero", "x - 0 -> x", X, lambda x: sub(x, const(0.0)), lambda x: x),
    Identity(
        "zero-sub", "0 - x -> -x", X, lambda x: sub(const(0.0), x), lambda x: TExpr.unary("neg", x)
    ),
    Identity(
        "sub-self",
        "x - x -> zeros(shape(x))",
        XS,
        lambda x: sub(x, x),
        lambda s: zeros(s),
        guard=(has_shape,),
        finite_only=True,
    ),
    Identity(
        "add-neg",
        "x + (-y) -> x - y",
        XY,
        lambda x, y: add(x, TExpr.unary("neg", y)),
        lambda x, y: sub(x, y),
    ),
    Identity(
        "sub-neg",
        "x - (-y) -> x + y",
        XY,
        lambda x, y: sub(x, TExpr.unary("neg", y)),
        lambda x, y: add(x, y),
    ),
    Identity("mul-comm", "x * y -> y * x", XY, lambda x, y: mul(x, y), lambda x, y: mul(y, x)),
    Identity(
        "mul-assoc",
        "(x * y) * z -> x * (y * z)",
        XYZ,
        lambda x, y, z: mul(mul(x, y), z),
        lambda x, y, z: mul(x, mul(y, z)),
        guard=(few_factors,),
    ),
    Identity("mul-one", "x * 1 -> x", X, lambda x: mul(x, const(1.0)), lambda x: x),
    Identity(
        "mul-neg-one",
        "x * -1 -> -x",
        X,
        lambda x: mul(x, const(-1.0)),
        lambda x: TExpr.unary("neg", x),
    ),
    Identity(
        "mul-zero",
        "x * 0 -> zeros(shape(x))",
        XS,
        lambda x: mul(x, const(0.0)),
        lambda s: zeros(s),
        guard=(zeros_like,),
        finite_only=True,
    ),
    Identity(
        "div-const",
        "x / c -> x * (1/c)",
        {"x": TExpr, "c": f64, "r": f64},
        lambda x, c: TExpr.binary("div", x, const(c)),
        lambda x, r: mul(x, const(r)),
        guard=(normal_reciprocal,),
    ),
    Identity(
        "neg-neg",
        "-(-x) -> x",
        X,
        lambda x: TExpr.unary("neg", TExpr.unary("neg", x)),
        lambda x: x,
    ),
)

# Factoring never adds flops; distributing exposes matmul chains and sums to other rules.
DISTRIBUTIVE = tuple(
    identity
    for op, sign in (("add", "+"), ("sub", "-"))
    for identity in (
        Identity(
            f"factor-mul-{op}",
            f"x*z {sign} y*z -> (x {sign} y)*z",
            XYZ,
            lambda x, y, z, op=op: TExpr.binary(op, mul(x, z), mul(y, z)),
            lambda x, y, z, op=op: mul(TExpr.binary(op, x, y), z),
            finite_only=True,
        ),
        Identity(
            f"distribute-mul-{op}",
            f"(x {sign} y)*z -> x*z {sign} y*z",
            XYZ,
            lambda x, y, z, op=op: mul(TExpr.binary(op, x, y), z),
            lambda x, y, z, op=op: TExpr.binary(op, mul(x, z), mul(y, z)),
            guard=(small_sum, not_a_sum),
            finite_only=True,
        ),
    )
)

TRANSCENDENTAL = (
    Identity(
        "exp-add",
        "exp(x) * exp(y) -> exp(x + y)",
        XY,
        lambda x, y: mul(TExpr.unary("exp", x), TExpr.unary("exp", y)),
        lambda x, y: TExpr.unary("exp", add(x, y)),
    ),
    Identity(
        "exp-sub",
        "exp(x) / exp(y) -> exp(x - y)",
        XY,
        lambda x, y: TExpr.binary("div", TExpr.unary("exp", x), TExpr.unary("exp", y)),
        lambda x, y: TExpr.unary("exp", sub(x, y)),
    ),
    Identity(
        "log-exp",
        "log(exp(x)) -> x",
        X,
        lambda x: TExpr.unary("log", TExpr.unary("exp", x)),
        lambda x: x,
    ),
)

MAX_MIN = (
    Identity(
        "relu-idempotent",
        "relu(relu(x)) -> relu(x)",
        X,
        lambda x: TExpr.unary("relu", TExpr.unary("relu", x)),
        lambda x: TExpr.unary("relu", x),
    ),
    Identity(
        "relu-as-max",
        "relu(x) -> max(x, 0)",
        X,
        lambda x: TExpr.unary("relu", x),
        lambda x: TExpr.binary("max", x, const(0.0)),
    ),
    Identity(
        "max-zero-as-relu",
        "max(x, 0) -> relu(x)",
        X,
        lambda x: TExpr.binary("max", x, const(0.0)),
        lambda x: TExpr.unary("relu", x),
    ),
    *(
        identity
        for op in ("max", "min")
        for identity in (
            Identity(
                f"{op}-comm",
                f"{op}(x, y) -> {op}(y, x)",
                XY,
                lambda x, y, op=op: TExpr.binary(op, x, y),
                lambda x, y, op=op: TExpr.binary(op, y, x),
            ),
            Identity(
                f"{op}-self",
                f"{op}(x, x) -> x",
                X,
                lambda x, op=op: TExpr.binary(op, x, x),
                lambda x: x,
            ),
        )
    ),
)

# f64 arithmetic in egglog is float64's; a float32 program rounds the folded constant once.
CONSTANT_FOLDING = (
    *(
        Identity(
            f"fold-{op}",
            f"const(a) {sign} const(b) -> const(a {sign} b)",
            {"a": f64, "b": f64, "r": f64},
            lambda a, b, op=op: TExpr.binary(op, const(a), const(b)),
            lambda r: const(r),
            guard=(new_value(fold),),
        )
        for op, sign, fold in (
            ("add", "+", lambda a, b: a + b),
            ("sub", "-", lambda a, b: a - b),
            ("mul", "*", lambda a, b: a * b),
        )
    ),
    Identity(
        "fold-div",
        "const(a) / const(b) -> const(a / b)",
        {"a": f64, "b": f64, "q": f64},
        lambda a, b: TExpr.binary("div", const(a), const(b)),
        lambda q: const(q),
        guard=(nonzero_divisor,),
    ),
    # egglog orders nan above every number: its max propagates nan like numpy, its min does not
    Identity(
        "fold-max",
        "max(const(a), const(b)) -> const(max(a, b))",
        AB,
        lambda a, b: TExpr.binary("max", const(a), const(b)),
        lambda a, b: const(a.max(b)),
    ),
    Identity(
        "fold-min",
        "min(const(a), const(b)) -> const(min(a, b))",
        AB,
        lambda a, b: TExpr.binary("min", const(a), const(b)),
        lambda a, b: const(a.min(b)),
        finite_only=True,
    ),
    Identity(
        "fold-neg",
        "-const(a) -> const(-a)",
        {"a": f64},
        lambda a: TExpr.unary("neg", const(a)),
        lambda a: const(-a),
    ),
    Identity(
        "fold-abs",
        "abs(const(a)) -> const(|a|)",
        {"a": f64},
        lambda a: TExpr.unary("abs", const(a)),
        lambda a: const(abs(a)),
    ),
    Identity(
        "fold-relu",
        "relu(const(a)) -> const(max(a, 0))",
        {"a": f64},
        lambda a: TExpr.unary("relu", const(a)),
        lambda a: const(a.max(0.0)),
    ),
)

IDENTITIES = ARITHMETIC + DISTRIBUTIVE + TRANSCENDENTAL + MAX_MIN + CONSTANT_FOLDING
