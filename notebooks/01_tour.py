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
# # A tour of eqsat: one MLP layer, from numpy-style code to C
#
# We write a dense layer with a ReLU, `relu(x @ W + b)`, on symbolic tensors and follow it
# through eqsat's stages: the e-graph of algebraic forms, the loop nest the cost model
# chooses, the C it emits, and how fast that C runs next to numpy. Every claim in the text is
# checked by an `assert` in the cell below it.

# %%
import os

import numpy as np
from IPython.display import display

import eqsat
from eqsat.core.measure import agreement, interleaved_medians, random_inputs

# %% [markdown]
# ## The algorithm
#
# `eqsat.tensor` makes a symbolic input (float32 by default). Operators build an expression;
# shapes are checked as it is built, with numpy's broadcasting rules (`b` is added to every
# row).

# %%
x = eqsat.tensor("x", (256, 512))
W = eqsat.tensor("W", (512, 256))
b = eqsat.tensor("b", (256,))
y = eqsat.relu(x @ W + b)
assert y.shape == (256, 256) and y.dtype == "float32"
print(y)

# %% [markdown]
# ## What the optimizer chose
#
# `eqsat.optimize` runs both stages without building C. Stage 1 ("algebra") grows an e-graph
# of equivalent tensor expressions; stage 2 ("loops") lowers the chosen one to loop nests and
# grows an e-graph of schedules (interchange, tiling, fusion, vector and parallel marks). The
# report lists, per stage, why saturation stopped, the e-graph size and how often each rule
# matched; then the predicted time and the chosen loop nest.

# %%
best = eqsat.optimize(y)
print(best.report())

# %% [markdown]
# Both stages ran to saturation: no limit was hit, so every program the rules can reach was
# in the e-graph when the cost model picked one. The chosen nest is predicted more than ten
# times cheaper than the canonical one (the textbook loops that lowering produces).

# %%
assert [stage.stop_reason for stage in best.stages] == ["saturated", "saturated"]
assert best.cost * 10 < best.canonical_cost
print(f"predicted speed-up over the canonical nest: {best.canonical_cost / best.cost:.0f}x")

# %% [markdown]
# ## The e-graphs
#
# An e-class (dashed box) is a set of equivalent terms; an e-node (white box) is one operator
# whose arguments are e-classes (the arrows). The chosen term is drawn in orange. In stage 1
# the root e-class holds three e-nodes: `relu(t)`, `max(t, 0)` and `max(0, t)` — the rules
# `relu-as-max` and `max-comm` merged them, and the cost model kept `relu`.

# %%
algebra = best.algebra_graph
assert algebra is not None
assert len(algebra.classes[algebra.root("root0")]) == 3
display(best.draw("algebra"))

# %% [markdown]
# Stage 2's e-graph is much larger; the picture shows the first 30 e-classes reached from the
# root, the chosen nest's first.

# %%
loops_picture = best.draw("loops", max_classes=30)
assert loops_picture.total_nodes > 10 * best.draw("algebra").total_nodes
print(loops_picture.summary)
display(loops_picture)

# %% [markdown]
# ## The C kernel
#
# `eqsat.compile` runs the same stages, emits C with SIMD intrinsics for this machine, builds
# it with gcc (cached on disk) and loads it with cffi. `explain()` is the report above.

# %%
kernel = eqsat.compile(y)
print(kernel.explain())
assert kernel.input_names == ("x", "W", "b")

# %% [markdown]
# The heart of the kernel is the `k` loop of the register tile: each step broadcasts one
# element of `x`, loads a few vectors of row `k` of `W` (from `pk0`, the block of `W` copied
# into a contiguous panel before the row blocks run, `rewrites/packing.py`), and updates
# accumulators (`acc0`, `acc1`, ...) that stay in registers, with fused multiply-adds (`fmadd`)
# on an AVX-512 or AVX2 machine.

# %%
lines = kernel.c_source.splitlines()
tile_loops = [n for n, line in enumerate(lines) if "acc0 = " in lines[min(n + 1, len(lines) - 1)]]
start = next(n for n in tile_loops if lines[n].lstrip().startswith("for (int64_t k"))
excerpt = "\n".join(lines[start : start + 6])
print(excerpt)
assert "acc0 = " in excerpt and "acc1 = " in excerpt
assert best.machine.isa == "scalar" or "fmadd" in excerpt

# %% [markdown]
# ## Is it right, and is it fast?
#
# The kernel takes numpy arrays by name. Its result agrees with numpy's, computed in float64,
# within eqsat's tolerance for float32 (relative 1e-4). Then both are timed in interleaved
# rounds (medians), so that a busy machine slows both alike.

# %%
shapes = {"x": x.shape, "W": W.shape, "b": b.shape}
xa, Wa, ba = random_inputs(shapes, "float32", np.random.default_rng(0)).values()


def numpy_layer(x, W, b):
    return np.maximum(x @ W + b, 0)


reference = numpy_layer(xa.astype(np.float64), Wa.astype(np.float64), ba.astype(np.float64))
out = kernel(x=xa, W=Wa, b=ba)
assert agreement(out, reference, "float32").ok

times = interleaved_medians(
    {"eqsat": lambda: kernel(x=xa, W=Wa, b=ba), "numpy": lambda: numpy_layer(xa, Wa, ba)},
    repeats=21,
)
for name, seconds in times.items():
    print(f"{name:6} {seconds * 1e3:7.3f} ms")
print(f"numpy time / eqsat time: {times['numpy'] / times['eqsat']:.2f}")
print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus)")

# %% [markdown]
# The ratio depends on the machine and on how busy it is (eqsat's kernel and numpy's BLAS both
# run threads, and a thread that waits for a busy core slows the whole call);
# `python -m eqsat bench` measures it on the full set of workloads.
#
# ## The same layer as plain numpy code
#
# `@eqsat.jit` traces a Python function of numpy arrays on its first call for each set of
# shapes and dtypes: the arguments become symbolic tensors named after the parameters, and
# `np.maximum`, `@` and `+` build the same expression. Here tracing gives the loop nest
# compiled above, with `max(t, 0)` where that one has `relu(t)`: the two cost the same, and a tie
# goes to the program as written. A call with another batch size compiles a second kernel.


# %%
@eqsat.jit
def dense_relu(x, W, b):
    return np.maximum(x @ W + b, 0)


assert np.array_equal(dense_relu(xa, Wa, ba), out)
assert "= max((" in dense_relu.kernel_for(xa, Wa, ba).explain() and "= relu((" in kernel.explain()
small = dense_relu(xa[:64], Wa, ba)
assert agreement(small, reference[:64], "float32").ok
assert len(dense_relu.kernels) == 2
print(dense_relu)
