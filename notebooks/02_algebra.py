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
# # Stage 1: algebra — matrix chains and factoring
#
# The first e-graph holds tensor expressions. Rewrite rules such as
# `matmul-assoc-right: (x@y)@z -> x@(y@z)` add equivalent forms without removing any, so after
# saturation one e-class holds every parenthesization of a matrix chain at once, and the cost
# model extracts the cheapest. Here we watch that happen: the e-graph growing round by round,
# why the driver stopped, and the order it chose.
#
# Reordering a chain and factoring hold only for finite numbers: with an inf among the inputs,
# `(A@B)@C` and `A@(B@C)` can differ (one NaN, the other inf). eqsat keeps numpy's NaN and inf
# by default, so these identities (marked `finite_only`, starred in `python -m eqsat rules`)
# fire only when you promise finite inputs with `assume_finite=True`, like a C compiler's
# `-ffinite-math-only`; this notebook does, and `report()` says so.

# %%
import functools
import math
import operator

import numpy as np
from egglog import EGraph
from IPython.display import display

import eqsat
from eqsat.core import shapes
from eqsat.core.interp import evaluate
from eqsat.core.pretty import format_loops, format_tensor
from eqsat.core.saturate import Limits, SaturationReport, saturate
from eqsat.core.terms import Term, to_egglog, to_term
from eqsat.extract.extractor import SerializedGraph
from eqsat.extract.tensor_cost import TensorCost, work_flops
from eqsat.rewrites.algebra import algebra_rules
from eqsat.rewrites.algebra_facts import algebra_facts
from eqsat.view.plot import Point, scatter

# %% [markdown]
# ## Three matrices
#
# `A @ B @ C` means `(A @ B) @ C` in Python, and numpy computes it in that order: a
# 1000×1000 intermediate. Multiplying `B @ C` first gives a 10×10 one.


# %%
def matmul_flops(term: Term) -> int:
    """2·m·k·n for every matmul in a tensor term."""
    own = 0
    if term.op == "TExpr.matmul":
        m, k = shapes.infer(term.args[0])[-2:]
        n = shapes.infer(term.args[1])[-1]
        own = 2 * m * k * n
    return own + sum(matmul_flops(arg) for arg in term.args if isinstance(arg, Term))


A = eqsat.tensor("A", (1000, 10))
B = eqsat.tensor("B", (10, 1000))
C = eqsat.tensor("C", (1000, 10))
best = eqsat.optimize(A @ B @ C, assume_finite=True)
print(best.report())

# %% [markdown]
# The chosen form is `A @ (B @ C)`, found by `matmul-assoc-left` and `matmul-assoc-right`, and
# it needs a hundredth of the flops of the order as written.

# %%
(written,), (chosen,) = best.original, best.chosen
print(f"written {format_tensor(written)}: {matmul_flops(written):,} flops")
print(f"chosen  {format_tensor(chosen)}: {matmul_flops(chosen):,} flops")
assert best.expr == "(A @ (B @ C))"
assert matmul_flops(chosen) * 100 == matmul_flops(written)
assert best.stages[0].matches["matmul-assoc-left"] > 0
assert best.stages[0].matches["matmul-assoc-right"] > 0
assert "assume_finite=True" in best.report()

# %% [markdown]
# Without the promise, the chain keeps the order it was written in, as numpy computes it.

# %%
as_written = eqsat.optimize(A @ B @ C)
print(as_written.expr)
assert as_written.expr == "((A @ B) @ C)"

# %% [markdown]
# ## Watching the e-graph grow
#
# `eqsat.optimize` runs stage 1 with the saturation driver, `eqsat.core.saturate.saturate`: each
# round runs the shape analyses (`algebra_facts`) to saturation, then every algebra rule once,
# and checks the limits. Its `progress` callback sees the report after every round. We run it
# by hand on a chain of ten matrices and extract with the stage's cost model
# (`TensorCost`: flops and bytes), as `optimize` does.


# %%
def algebra_stage(expr: eqsat.Tensor, limits: Limits) -> tuple[Term, SaturationReport, list]:
    """Saturate the algebra e-graph of `expr` within `limits`; the cheapest form, the report,
    and (round, e-nodes) after every round."""
    egraph = EGraph()
    egraph.let("root", to_egglog(to_term(expr.expr)))
    growth = []
    report = saturate(
        egraph,
        algebra_rules(assume_finite=True),
        limits,
        "algebra",
        facts=algebra_facts,
        progress=lambda report: growth.append((report.iterations, report.nodes)),
    )
    graph = SerializedGraph(egraph)
    form, _ = graph.extract(graph.root("root"), TensorCost())
    return form, report, growth


def chain(dims: list[int]) -> eqsat.Tensor:
    """M0 @ M1 @ ... where matrix i is dims[i] × dims[i+1]."""
    mats = [eqsat.tensor(f"M{i}", (dims[i], dims[i + 1])) for i in range(len(dims) - 1)]
    return functools.reduce(operator.matmul, mats)


dims = [5, 40, 3, 70, 2, 90, 4, 60, 7, 30, 8]
ten = chain(dims)
form, report, growth = algebra_stage(ten, Limits())
print(report.summary())
for round_, nodes in growth:
    print(f"round {round_}: {nodes:4} e-nodes")
display(
    scatter(
        [Point(round_, nodes) for round_, nodes in growth],
        title="ten-matrix chain: e-graph size after each round",
        x_label="round",
        y_label="e-nodes",
        log_x=False,
        log_y=False,
    )
)

# %% [markdown]
# The e-graph grows for a few rounds, then shrinks a little: once two parenthesizations of a
# sub-chain are in one e-class, the nodes above them become identical and are merged
# (congruence). In the last round no rule added anything new, so the driver stopped with
# `saturated`. Ten matrices have 4,862 parenthesizations; the e-graph holds them all in under
# two hundred e-nodes because sub-chains are shared.

# %%
assert report.stop_reason == "saturated"
assert growth[-1][1] == growth[-2][1]  # the last round added nothing
assert max(nodes for _, nodes in growth) > growth[-1][1]  # merges shrank it on the way
assert report.nodes < 200
assert math.comb(18, 9) // 10 == 4862  # the Catalan number C(9): orders of ten matrices

# %% [markdown]
# ## Is the chosen order optimal?
#
# The classical dynamic program over split points gives the fewest flops of any order. The
# e-graph's choice matches it, and is well under half of the flops of the order as written.


# %%
def optimal_chain_flops(dims: list[int]) -> int:
    """The fewest flops of any parenthesization of the chain: matrix i is dims[i] × dims[i+1]."""
    count = len(dims) - 1
    best = {(i, i): 0 for i in range(count)}
    for length in range(2, count + 1):
        for i in range(count - length + 1):
            j = i + length - 1
            best[i, j] = min(
                best[i, k] + best[k + 1, j] + 2 * dims[i] * dims[k + 1] * dims[j + 1]
                for k in range(i, j)
            )
    return best[0, count - 1]


written_flops = matmul_flops(to_term(ten.expr))
print(f"written: {written_flops:,} flops   chosen: {matmul_flops(form):,} flops")
print(f"chosen order: {format_tensor(form)}")
assert matmul_flops(form) == optimal_chain_flops(dims)
assert matmul_flops(form) * 2 < written_flops

# %% [markdown]
# The same holds for random chains (the test suite checks it on many more with hypothesis):

# %%
rng = np.random.default_rng(1)
for _ in range(4):
    random_dims = [int(d) for d in rng.integers(1, 300, size=rng.integers(5, 8))]
    random_form, random_report, _ = algebra_stage(chain(random_dims), Limits())
    assert random_report.stop_reason == "saturated"
    assert matmul_flops(random_form) == optimal_chain_flops(random_dims)
    print(f"{random_dims}: {matmul_flops(random_form):,} flops, optimal")

# %% [markdown]
# ## Stopping early
#
# egglog itself has no node or time limit, so the driver checks them between rounds, and does not
# start a round predicted to pass one (the last round's growth again). With a limit of 150 e-nodes
# it stops after round 2 at 75 e-nodes, predicting round 3 past the limit, and reports
# `node limit`. A limit is never an
# error: the cheapest form found so far is extracted. It is still equal to the chain (checked
# with the reference interpreter), and cheaper than the order as written, but not optimal.

# %%
early_form, early_report, _ = algebra_stage(ten, Limits(nodes=150))
print(early_report.summary())
print(f"{format_tensor(early_form)}: {matmul_flops(early_form):,} flops")
inputs = {f"M{i}": rng.standard_normal((dims[i], dims[i + 1])) for i in range(len(dims) - 1)}
np.testing.assert_allclose(evaluate(early_form, inputs), evaluate(form, inputs), rtol=1e-9)
assert early_report.stop_reason == "node limit" and early_report.stop_predicted
assert early_report.iterations == 2 and early_report.nodes < 150
assert optimal_chain_flops(dims) < matmul_flops(early_form) < written_flops

# %% [markdown]
# ## Factoring
#
# `x@y + x@z -> x@(y + z)` (`factor-matmul-left-add`) turns two matrix products into one
# product and an addition. Its inverse, `distribute-matmul-left-add`, is in the rule set too:
# both forms end up in the root e-class. Stage 1 hands the two cheapest forms to stage 2 (the
# report's "form scheduled" lines), which schedules each and keeps the one predicted faster:
# the factored form. There `Y + Z` is computed once into a buffer: the product reuses each of its
# elements for all 256 rows of X, and computed inside the product's loop it would be added again
# for every block of rows (the lowering gives a computed matmul operand a buffer,
# `eqsat.rewrites.lowering`).

# %%
X = eqsat.tensor("X", (256, 128))
Y = eqsat.tensor("Y", (128, 64))
Z = eqsat.tensor("Z", (128, 64))
factored = eqsat.optimize(X @ Y + X @ Z, assume_finite=True)
print(factored.report())
assert factored.expr == "(X @ (Y + Z))"
assert factored.stages[0].matches["factor-matmul-left-add"] > 0
(factored_written,), (factored_chosen,) = factored.original, factored.chosen
assert 2 * matmul_flops(factored_chosen) == matmul_flops(factored_written)
assert len(factored.forms) == 2 and factored.cost == min(cost for _, cost in factored.forms)
factored_nest = format_loops(factored.program.body)
assert factored_nest.count("(in1[i0, i1] + in2[i0, i1])") == 1  # Y + Z, once
# the product reads it: directly, or through panels packed from it (`pk0[k, ...] = t0[k, i1]`),
# as the cost model of the host decides
assert "t0[k, i1]" in factored_nest
display(factored.draw("algebra"))

# %% [markdown]
# ## Attention's keys in two blocks: the online softmax
#
# `online-softmax-matmul` (finite-only) splits attention's keys in halves. Each block's scores
# are exponentiated against the block's own maximum, and both partial results are rescaled to
# the larger maximum, `exp(m_b - max(m1, m2))`: one step of FlashAttention's running max, sum
# and accumulator. Under `assume_finite` it fires once per attention. Stage 1 ranks forms by
# flops, and the split form has a few more (the rescaling), so the unsplit one is chosen: the
# split would pay only where a block of rows of the scores no longer fits in cache, which the
# stage-1 price does not see (ARCHITECTURE §10). Written out with slices, the split form
# computes the same values.

# %%
Q, K, V = (eqsat.tensor(name, (256, 32)) for name in "QKV")
attention = eqsat.optimize(eqsat.softmax(Q @ K.T / 8) @ V, assume_finite=True)
print(attention.expr)
assert attention.stages[0].matches["online-softmax-matmul"] == 1
assert "online-softmax-matmul" in attention.finite_only_fired


def key_block(keys: slice) -> tuple[eqsat.Tensor, eqsat.Tensor, eqsat.Tensor]:
    """exp(scores - m) @ V, the row sums and the row maxima m of the keys `keys`."""
    scores = Q @ (K[keys].T / 8)  # the scale on the keys, as in the chosen form
    top = scores.max(axis=1, keepdims=True)
    weights = eqsat.exp(scores - top)
    return weights @ V[keys], weights.sum(axis=1, keepdims=True), top


(first, first_sums, first_max), (second, second_sums, second_max) = map(
    key_block, (slice(0, 128), slice(128, 256))
)
top = np.maximum(first_max, second_max)
first_scale, second_scale = eqsat.exp(first_max - top), eqsat.exp(second_max - top)
online = (first * first_scale + second * second_scale) / (
    first_sums * first_scale + second_sums * second_scale
)
values = {name: np.random.default_rng(5).standard_normal((256, 32)) for name in "QKV"}
(chosen_attention,) = attention.chosen
split_attention = to_term(online.expr)
np.testing.assert_allclose(
    evaluate(split_attention, values), evaluate(chosen_attention, values), rtol=1e-9
)
chosen_flops, split_flops = work_flops([chosen_attention]), work_flops([split_attention])
print(f"flops: chosen {chosen_flops:,.0f}, split {split_flops:,.0f}")
assert chosen_flops < split_flops
