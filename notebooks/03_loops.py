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
# # Stage 2: loops — interchange, tiling and fusion
#
# Stage 2 lowers the chosen tensor expression to canonical loop nests (one nest per operator,
# in textbook order), then grows a second e-graph with loop rewrites: interchange, splitting a
# loop into outer and inner pieces (tiling), fusing sibling loops, and marking loops
# `vector`, `unroll` or `parallel`. The cost model predicts the cycles of every nest the
# e-graph holds and extracts the cheapest. Here we compare the chosen nest with the canonical
# one, then with other candidates of the same e-graph: predicted against measured time.

# %%
import os
from functools import partial

import numpy as np
from IPython.display import display

import eqsat
from eqsat.api import build
from eqsat.core.measure import interleaved_medians, random_inputs
from eqsat.core.pretty import format_loops
from eqsat.core.terms import LoopProgram
from eqsat.extract.loop_cost import LoopCost
from eqsat.optimizer import after_extraction
from eqsat.tools import model_check
from eqsat.view.plot import Point, scatter

# %% [markdown]
# ## Matmul, 256³
#
# The canonical nest zeroes the output, then runs `i0, i1, k` with `k` innermost: every step
# of `k` reads `B` down a column, and nothing is vectorized.

# %%
A = eqsat.tensor("A", (256, 256))
B = eqsat.tensor("B", (256, 256))
matmul = eqsat.optimize(A @ B)
canonical_nest = format_loops(matmul.canonical.body)
print(canonical_nest)
assert "vector" not in canonical_nest
assert canonical_nest.splitlines()[-2].strip() == "for k in 0..256:"

# %% [markdown]
# The chosen nest is a register tile: `i0` and `i1` are split (`i0.outer`, `i0.inner`, ...),
# `k` is interchanged outside the tile's loops, the tile's rows are unrolled and its columns
# vectorized, so each step of `k` updates a block of accumulators held in registers. Whether a
# loop runs on all cores depends on what starting threads costs on this machine, as its
# calibration measured it: at 256³ a 2-core guest chose parallel nests on some calibrations
# and serial ones on others, so this notebook does not assert either. When a
# loop runs several blocks of rows over one block of `B` (at 1024³; at 512³ too on a machine
# with a 1 MiB L2, not with 2 MiB), that block is first copied into a contiguous panel `pk0`
# (panel packing, `rewrites/packing.py`, a pass after extraction), so the tile reads `B` at
# unit stride instead of a row of `B` apart.

# %%
chosen_nest = format_loops(matmul.program.body)
print(chosen_nest)
lines = chosen_nest.splitlines()
k_line = next(  # the register tile's loop: over (a piece of) k, around the unrolled rows
    n
    for n, line in enumerate(lines)
    if line.lstrip().startswith("for k") and "unroll(" in lines[n + 1]
)
assert "i0.inner" in lines[k_line + 1] and "unroll(" in lines[k_line + 1]
assert "i1.inner" in lines[k_line + 2] and "vector(" in lines[k_line + 2]
larger = eqsat.optimize(eqsat.tensor("A", (1024, 1024)) @ eqsat.tensor("B", (1024, 1024)))
packed_nest = format_loops(larger.program.body)
print(packed_nest)
assert "alloc pk0" in packed_nest and "* pk0[" in packed_nest

# %% [markdown]
# ## Why it wins, in the cost model's terms
#
# The model's estimate of a nest (`extract/loop_cost.py`) has three parts: compute, the issue
# cycles of its loads, arithmetic and stores on one core (a vector loop counts its vectors);
# the bytes fetched into each cache level, from the footprint of each statement; and the
# overheads of loop iterations and of starting threads. The predicted time is a roofline: the
# largest of compute and each level's traffic over its bandwidth, plus part of the others.
# The canonical nest is scalar and reads `B` down its columns: its compute estimate is more
# than ten times the chosen nest's, and it moves more bytes into L1. The report gives the
# chosen nest's breakdown; the lines below compare the two nests.

# %%
print(matmul.report().split("loop nest:")[0])
cost = LoopCost(matmul.machine, "float32")
canonical, chosen = cost.estimate(matmul.canonical.body), cost.estimate(matmul.program.body)
for name, estimate in (("canonical", canonical), ("chosen", chosen)):
    print(
        f"{name:9} compute {estimate.compute:12,.0f} cycles a core, "
        f"{estimate.traffic[0] / 1e6:6.2f} MB fetched into L1"
    )
assert canonical.compute > 10 * chosen.compute
assert canonical.traffic[0] > chosen.traffic[0]

# %% [markdown]
# ## Softmax, 512×512: fusion
#
# Softmax over rows lowers to six nests over the rows `i0`: initialise the row maxima, reduce
# them, store `exp(x - max)`, initialise and reduce the row sums, divide. Fusion merges sibling
# loops over the same axis when every buffer they share is touched row-wise, so all six become
# one loop over (blocks of) rows; each row's exponentials then stay in cache, in a temporary of
# one block of rows instead of a 512×512 buffer.


# %%
def top_level_loops(program: LoopProgram) -> int:
    """The loops of `program` that no other loop encloses."""
    lines = format_loops(program.body).splitlines()
    loops = [line for line in lines if line.lstrip().startswith("for ")]
    outermost = min(len(line) - len(line.lstrip()) for line in loops)
    return sum(1 for line in loops if len(line) - len(line.lstrip()) == outermost)


x = eqsat.tensor("x", (512, 512))
softmax = eqsat.optimize(eqsat.softmax(x))
print(format_loops(softmax.canonical.body))
print(format_loops(softmax.program.body))
assert top_level_loops(softmax.canonical) == 6
assert top_level_loops(softmax.program) == 1
assert "alloc t0[512, 512]" in format_loops(softmax.canonical.body)
assert "alloc t0[512, 512]" not in format_loops(softmax.program.body)

# %% [markdown]
# ## Attention, 1024×64: row blocks across the nests
#
# `softmax(Q @ K.T / 8) @ V` lowers to a copy of `K.T / 8`, the scores `Q @ K.T`, the softmax
# passes and `P @ V`, all but the copy over the rows `i0`. The e-graph fuses sibling loops, but
# its work budget stops it after four rounds: on this project's host the nest extracted from
# it keeps the scores in a parallel loop over blocks of columns, the softmax and `P @ V` in
# loops over blocks of rows, with the 1024×1024 scores and exponentials written out whole
# between them. Row-block fusion (`rewrites/row_blocks.py`, a pass after extraction) then runs
# them all as one loop over blocks of rows: the loops over rows take a common block, and the
# scores' matmul, which writes each row's own elements, runs whole inside each block with its
# row loops walking the block. Every buffer they share is read row by row, and the cost model
# predicts it faster, within blocks whose temporaries fit half of L2; temporary contraction
# keeps the block's scores and exponentials there. The cell builds both nests and times them
# interleaved (on this project's Intel host: 2.45 ms before row-block fusion, 1.4 ms after,
# numpy 4.4 ms; docs/MEASUREMENTS.md).

# %%
Q, K, V = (eqsat.tensor(name, (1024, 64)) for name in "QKV")
# (the clock's safety nets out of reach, so that a busy machine stops the search where this
# text says: on the work budget)
unhurried = eqsat.Limits(seconds=120.0, extraction_seconds=120.0)
attention = eqsat.optimize(eqsat.softmax(Q @ K.T / 8) @ V, limits=unhurried)
print(attention.stages[1].summary())
extracted_nest = format_loops(attention.extracted)
print(extracted_nest)
print(format_loops(attention.program.body))
cost = LoopCost(attention.machine, "float32")
extracted_cycles = cost.estimate(attention.extracted).cycles
assert top_level_loops(attention.program) < top_level_loops(
    LoopProgram(attention.extracted, (), (), "float32")
)
assert attention.cost < extracted_cycles
assert "alloc t1[1024, 1024]" in extracted_nest  # the exponentials, whole
assert "alloc t1[1024, 1024]" not in format_loops(attention.program.body)

# %%
unfused = after_extraction(attention.program, attention.extracted)
kernels = {"extracted": build(unfused, attention), "fused": build(attention.program, attention)}
values = random_inputs(dict.fromkeys("QKV", (1024, 64)), "float32", np.random.default_rng(3))
scores = values["Q"] @ values["K"].T / 8
weights = np.exp(scores - scores.max(axis=1, keepdims=True))
want = weights / weights.sum(axis=1, keepdims=True) @ values["V"]
for name, kernel in kernels.items():
    np.testing.assert_allclose(kernel(**values), want, rtol=1e-4, atol=1e-5, err_msg=name)
measured = interleaved_medians({name: partial(k, **values) for name, k in kernels.items()}, 9)
predicted = {"extracted": extracted_cycles, "fused": attention.cost}
clock = attention.machine.clock_hz()
for name in kernels:
    print(
        f"{name}: predicted {predicted[name] / clock * 1e3:.2f} ms, "
        f"measured {measured[name] * 1e3:.2f} ms (median of 9, interleaved)"
    )

# %% [markdown]
# ## Candidates: predicted against measured
#
# `eqsat.tools.model_check.check_workload` (the cost-model check of notebook 5) optimizes a workload
# again and takes candidates from its kernel e-graph with `Optimized.candidates`: the `best`
# cheapest distinct nests under the cost model (the first is the chosen one), then random
# ones, which reach slow corners (untiled, strided, scalar). It builds each with
# `eqsat.api.build`, checks it against the reference interpreter in float64, and times them
# all in interleaved rounds (medians). The chosen nest is usually predicted fastest, but not
# always: the search's extraction keeps the 4 cheapest sub-nests of each e-class, not every
# combination, and the model's roofline is not a sum over sub-nests, so the wider extraction
# of `candidates` (6 a class here) or a random draw can find a whole predicted cheaper; which
# one does depends on this machine's calibration. The cell prints it when that happens. Every
# candidate computes the same result.

# %%
workloads = [  # (what the notebook optimized above, the same program as a workload)
    (
        matmul,
        model_check.Workload(
            "matmul", "A @ B, 256^3", {"A": (256, 256), "B": (256, 256)}, lambda A, B: A @ B
        ),
    ),
    (
        softmax,
        model_check.Workload("softmax", "row softmax, 512x512", {"x": (512, 512)}, eqsat.softmax),
    ),
]
mix = model_check.Mix(best=6, sampled=10, perturbed=0)
checks = {}  # workload name -> its candidates, the chosen one first, checked and timed
for optimized, workload in workloads:
    check = model_check.check_workload(workload, optimized.machine, mix, repeats=15)
    assert check.failure is None, check.failure
    assert check.candidates[0].nest == format_loops(optimized.program.body)
    missed = min(check.candidates, key=lambda c: c.predicted)
    if missed.predicted < check.candidates[0].predicted:
        print(
            f"{workload.name}: a {missed.source} candidate is predicted "
            f"{check.candidates[0].predicted / missed.predicted:.3f}x faster than the chosen one"
        )
    assert check.wrong == 0 and check.failed == 0
    assert len(check.pairs()) == len(check.candidates)  # all of them timed
    checks[workload.name] = check
    print(f"{workload.name}: {len(check.candidates)} candidates built, checked and timed")

# %% [markdown]
# Predicted cycles are converted to milliseconds at the model's clock, so a point on the dashed
# diagonal is a nest whose time the model predicted exactly; a point above it ran slower than
# predicted. If the model ranks nests the way the machine runs them, each workload's points
# rise from left to right.

# %%
load = os.getloadavg()[0]
display(
    scatter(
        [
            Point(cycles / clock * 1e3, seconds * 1e3, name, "chosen" if number == 0 else "")
            for name, check in checks.items()
            for number, (cycles, seconds) in enumerate(check.pairs())
        ],
        title=f"candidates: predicted vs measured (load average {load:.1f}, {os.cpu_count()} cpus)",
        x_label="predicted ms",
        y_label="measured ms",
        diagonal=True,
    )
)
for name, check in checks.items():
    times = sorted(seconds for _, seconds in check.pairs())
    chosen_seconds = check.pairs()[0][1]
    print(
        f"{name}: chosen nest measured {chosen_seconds * 1e3:.3f} ms, rank "
        f"{times.index(chosen_seconds) + 1} of {len(times)} (fastest {times[0] * 1e3:.3f} ms, "
        f"slowest {times[-1] * 1e3:.3f} ms)"
    )

# %% [markdown]
# The measured ranks depend on the machine and its load: the chosen nests run their outer loop
# on every core, and on a busy machine a parallel loop waits for its slowest thread.
# Notebook 5 measures the model's calibration over more candidates, and
# `python -m eqsat bench --only calibration` over full-size workloads.
