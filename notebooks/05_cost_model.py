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
# # The cost model: predicted against measured time on this machine
#
# eqsat never times a nest to choose it (unless asked to autotune): it predicts cycles with an
# analytical model of the machine — vector width, cores, cache sizes — and extracts the
# cheapest nest. The model is only as good as its ranking: does a nest it predicts faster
# actually run faster here? This notebook measures that with `eqsat.tools.model_check`, the same
# check as `python -m eqsat bench --only calibration`, at small sizes.

# %%
import math
import os

from IPython.display import display

import eqsat
from eqsat.extract.machine import host
from eqsat.tools import model_check
from eqsat.view.plot import Point, scatter

# %% [markdown]
# ## The machine, as the model sees it

# %%
machine = host()
print(machine)
print(f"clock used to convert cycles to time: {machine.clock_hz() / 1e9:.2f} GHz")

# %% [markdown]
# ## Candidates, built, checked and timed
#
# For each workload, `model_check.check_workload` optimizes the program, takes candidate nests
# from its kernel e-graph — the model's cheapest, random extractions, and extractions under
# randomly perturbed costs, which land between the two — builds each, checks its output
# against the reference interpreter in float64 (a wrong output would be a soundness bug, and
# would be printed), and times all of them in interleaved rounds (medians).

# %%
workloads = [
    model_check.Workload(
        "matmul", "A @ B, 128^3", {"A": (128, 128), "B": (128, 128)}, lambda A, B: A @ B
    ),
    model_check.Workload("softmax", "row softmax, 256x256", {"x": (256, 256)}, eqsat.softmax),
]
mix = model_check.Mix(best=6, sampled=12, perturbed=12)
checks = [model_check.check_workload(workload, machine, mix, repeats=9) for workload in workloads]

# %% [markdown]
# Every candidate computed the right result and was timed, at least thirty per workload.

# %%
for check in checks:
    assert check.failure is None, check.failure
    assert check.wrong == 0 and check.failed == 0
    assert len(check.pairs()) == len(check.candidates) >= 30

# %% [markdown]
# ## The calibration plot
#
# Predicted cycles are converted to milliseconds at the model's clock. A point on the dashed
# diagonal was predicted exactly; what matters for choosing is the order: if the model ranks
# nests as the machine runs them, each workload's points rise from left to right. The model's
# pick (its cheapest prediction) is labelled.

# %%
clock = machine.clock_hz()
points = []
for check in checks:
    pairs = check.pairs()
    pick = min(range(len(pairs)), key=lambda k: pairs[k][0])
    for k, (cycles, seconds) in enumerate(pairs):
        label = "pick" if k == pick else ""
        points.append(Point(cycles / clock * 1e3, seconds * 1e3, check.name, label))
load = os.getloadavg()[0]
display(
    scatter(
        points,
        title=f"cost model calibration (load average {load:.1f}, {os.cpu_count()} cpus)",
        x_label="predicted ms",
        y_label="measured ms",
        diagonal=True,
    )
)

# %% [markdown]
# ## The figures
#
# - **Spearman**: the rank correlation between predicted and measured times over all
#   candidates (1: the same order; 0: unrelated), and over the model's ten cheapest ("top-10":
#   does it order the good nests?).
# - **Regret**: the measured time of the model's pick over the fastest measured time (1: the
#   pick was the fastest).
#
# The project's goal is Spearman ≥ 0.8 and regret ≤ 1.10 (`SPEARMAN_GOAL`, `REGRET_GOAL`).
# The table reports what this run measured, whether or not it meets the goal; both figures
# are finite numbers.

# %%
print(model_check.TABLE_TITLE)
print(model_check.table_header())
for check in checks:
    print(model_check.format_check(check))
for check in checks:
    assert check.spearman is not None and math.isfinite(check.spearman)
    assert check.regret is not None and math.isfinite(check.regret) and check.regret >= 1

# %% [markdown]
# ## Where the model is most wrong
#
# The candidate whose measured/predicted ratio is furthest above its workload's median ratio
# shows what the model misses most. Its nest:

# %%
for check in checks:
    measured = [c for c in check.candidates if c.seconds is not None]
    ratios = sorted(c.seconds / c.predicted for c in measured)
    median = ratios[len(ratios) // 2]
    worst = max(measured, key=lambda c: c.seconds / c.predicted)
    print(
        f"{check.name}: a {worst.source} candidate, predicted {worst.predicted / clock * 1e3:.3f}"
        f" ms, measured {worst.seconds * 1e3:.3f} ms: "
        f"{worst.seconds / worst.predicted / median:.0f}x the median measured/predicted ratio"
    )
    print(worst.nest)
