# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Writing your own rule
#
# In eqsat a rewrite is defined once, as data: an `Identity` names the rule, states it in one
# line, gives the sort of each variable and two functions that build the left and right sides
# as egglog terms (plus, optionally, a guard). From that one definition eqsat builds both the
# egglog rule and its soundness test. Here we add a rule, get its test for free, watch the test
# catch a plausible but wrong rule with a shrunk counterexample, and see the new rule fire in a
# saturation.

# %%
import numpy as np

import eqsat
from eqsat.core.interp import evaluate
from eqsat.core.pretty import format_tensor
from eqsat.core.terms import TExpr
from eqsat.rewrites.algebra import IDENTITIES
from eqsat.rewrites.algebra_elementwise import add
from eqsat.rewrites.rule import Identity
from eqsat.rewrites.soundness import (
    UnsoundIdentityError,
    check_identity,
    fired_instances,
    input_shapes,
)

# %% [markdown]
# ## A correct rule
#
# `relu(x) + relu(-x)` is `|x|`: one of the two terms is zero. The built-in rules do not know
# this. The sides are built with egglog's `TExpr` constructors (`add` is the helper the
# built-in elementwise rules use).


# %%
def relu(x: TExpr) -> TExpr:
    return TExpr.unary("relu", x)


def neg(x: TExpr) -> TExpr:
    return TExpr.unary("neg", x)


relu_pair = Identity(
    name="relu-pair-is-abs",
    identity="relu(x) + relu(-x) -> abs(x)",
    variables={"x": TExpr},
    lhs=lambda x: add(relu(x), relu(neg(x))),
    rhs=lambda x: TExpr.unary("abs", x),
)
print(relu_pair.describe())
assert relu_pair.name not in {identity.name for identity in IDENTITIES}

# %% [markdown]
# `check_identity` is the test. It searches for well-shaped instances of the left side (inputs
# of random shapes of rank 0 to 3), runs the egglog rule on them to get the right side it
# builds, checks that the shape is kept, then lets hypothesis draw instances, a dtype and
# inputs — including inf, -inf and nan, since the rule is not marked `finite_only` — and
# compares both sides in the reference interpreter. It returns quietly: the rule is sound on
# every example. Three of the instances it used, from the smallest to the largest:

# %%
check_identity(relu_pair)
instances = fired_instances(relu_pair)  # smallest first
for pair in (instances[0], instances[len(instances) // 2], instances[-1]):
    print(f"{format_tensor(pair.left)} -> {format_tensor(pair.right)}   {input_shapes(pair.left)}")

# %% [markdown]
# ## A plausible, wrong rule
#
# `log(x * y) = log(x) + log(y)` holds for positive numbers only. When `x` and `y` are both
# negative, `x * y` is positive and the left side is a number, but `log(x)` is nan.

# %%
log_of_product = Identity(
    name="log-of-product",
    identity="log(x * y) -> log(x) + log(y)",
    variables={"x": TExpr, "y": TExpr},
    lhs=lambda x, y: TExpr.unary("log", TExpr.binary("mul", x, y)),
    rhs=lambda x, y: add(TExpr.unary("log", x), TExpr.unary("log", y)),
)
try:
    check_identity(log_of_product, derandomize=True)  # the same counterexample on every run
except UnsoundIdentityError as error:
    caught = error
    print(error)
    print()
    print(error.__notes__[0])  # hypothesis's own report of the shrunk example
else:
    raise AssertionError("check_identity accepted log(x * y) -> log(x) + log(y)")

# %% [markdown]
# Hypothesis shrank the failing example: the instance is the smallest one the rule fired on
# (`x` and `y` single numbers), and the inputs are both negative. The error carries the
# instance, the inputs and both values, so the counterexample can be replayed in the
# interpreter.

# %%
x_value, y_value = caught.inputs["x"], caught.inputs["y"]
assert caught.left == fired_instances(log_of_product)[0].left
assert x_value.shape == y_value.shape == ()
assert x_value < 0 and y_value < 0
assert np.isfinite(evaluate(caught.left, caught.inputs))
assert np.isnan(evaluate(caught.right, caught.inputs))

# %% [markdown]
# ## The new rule at work
#
# `eqsat.optimize` and `eqsat.compile` take identities of your own through `extra_rules`: stage 1
# runs them with the built-in rules, and its report counts their matches by name.

# %%
x = eqsat.tensor("x", (1024,))
expression = eqsat.relu(x) + eqsat.relu(-x)
without = eqsat.optimize(expression, progress=False)
with_rule = eqsat.optimize(expression, progress=False, extra_rules=[relu_pair])
print("built-in rules:", without.expr, "\n ", without.stages[0].summary())
print("with the rule: ", with_rule.expr, "\n ", with_rule.stages[0].summary())

# %% [markdown]
# The new rule matched once, merged `abs(x)` into the root e-class, and the cost model picked
# it: one pass over `x` instead of two relus and an addition. The compiled kernel agrees with
# numpy.

# %%
assert with_rule.stages[0].matches[relu_pair.name] == 1
assert relu_pair.name not in without.stages[0].matches
assert without.expr == "(relu(x) + relu(-x))"
assert with_rule.expr == "abs(x)"
kernel = eqsat.compile(expression, progress=False, extra_rules=[relu_pair])
xs = np.random.default_rng(0).standard_normal(1024).astype(np.float32)
np.testing.assert_allclose(kernel(xs), np.abs(xs), rtol=1e-6)

# %% [markdown]
# To make a rule part of eqsat, add it to the `IDENTITIES` of the `rewrites/algebra_*.py` file
# of its operator family: `eqsat.optimize` and `eqsat.compile` then use it, and
# `tests/test_algebra.py` runs `check_identity` on it like on every other rule.
