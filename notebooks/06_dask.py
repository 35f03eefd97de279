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
# # Beyond one machine: an eqsat function on a dask cluster
#
# An `@eqsat.jit` function called with a dask array returns a dask array. Here a row softmax
# runs on an array of several chunks on a `dask.distributed` LocalCluster of two worker
# processes. What runs where:
#
# - **in this process** (the client): the function is traced at the whole array's shape, eqsat
#   decides which axes may stay chunked (the rows: no op of a row softmax mixes rows), and
#   compiles one kernel per distinct chunk shape (optimizer, C build, check);
# - **on the workers**: each worker receives the kernels once (one key of the graph, which the
#   chunks' tasks depend on) and each task its chunk; a kernel pickles by its C source, so
#   a worker loads the built library from the compile cache (or compiles the C) and runs it.
#   Workers never run the optimizer.

# %%
import sys

import dask.array as da
import numpy as np
from distributed import Client, LocalCluster

import eqsat

cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
client = Client(cluster)


@eqsat.jit
def softmax_rows(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# %% [markdown]
# 2,500 rows in chunks of 1,000: two chunks of 1,000 rows and one of 500, so two kernels.

# %%
data = np.random.default_rng(0).standard_normal((2500, 256)).astype(np.float32)
x = da.from_array(data, chunks=(1000, 256))
y = softmax_rows(x)  # nothing computed yet: a dask array of the same chunks
print(type(y).__name__, y.chunks)
assert y.chunks == ((1000, 1000, 500), (256,))
kernels = [key for key in dict(y.dask) if str(key).startswith("eqsat-kernels")]
print(kernels)  # the one key of the graph holding both kernels, which every chunk's task reads
assert len(kernels) == 1

# %% [markdown]
# Computing on the cluster gives numpy's softmax.

# %%
got = client.compute(y).result()
wide = data.astype(np.float64)
e = np.exp(wide - wide.max(axis=1, keepdims=True))
want = e / e.sum(axis=1, keepdims=True)
print("largest difference from numpy (float64):", np.abs(got - want).max())
assert np.allclose(got, want, rtol=1e-4, atol=1e-6)

# %% [markdown]
# The workers ran the kernels without the optimizer (nor egglog) ever being imported there.

# %%
loaded = client.run(lambda: sorted({"eqsat.optimizer", "egglog"} & set(sys.modules)))
print(loaded)
assert all(modules == [] for modules in loaded.values())

# %% [markdown]
# A program that reduces across chunks needs that axis whole: column sums over row chunks are
# rechunked when the blocks stay within dask's `array.chunk-size`; otherwise eqsat raises an
# error naming the argument and the axis to rechunk.

# %%
column_share = eqsat.jit(lambda x: x / x.sum(axis=0))
z = column_share(x)
print(z.chunks)
assert z.chunks == ((2500,), (256,))
assert np.allclose(z.compute(), data / data.sum(axis=0), rtol=1e-3, atol=1e-4)

# %%
client.close()
cluster.close()
