"""Whole programs for the benchmark: models, as numpy users write them, run by eqsat (the same
code traced on symbolic tensors), by numpy and, where jax is installed, by `jax.jit` (the same
code on `jax.numpy`).

Each program takes its arrays by name and the array module as `xp` (numpy for eqsat's symbolic
tensors too: `np.*` calls dispatch to eqsat on them); head counts and other static facts are
bound with `functools.partial` before the program reaches a `Workload`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np

from eqsat.tools.workloads import Workload

Program = Callable[..., Any]


def softmax(x: Any, xp: ModuleType) -> Any:
    e = xp.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layernorm(x: Any, weight: Any, bias: Any, xp: ModuleType) -> Any:
    centered = x - x.mean(axis=-1, keepdims=True)
    variance = (centered * centered).mean(axis=-1, keepdims=True)
    return centered / xp.sqrt(variance + 1e-5) * weight + bias


def gelu(x: Any, xp: ModuleType) -> Any:
    return 0.5 * x * (1 + xp.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))


def attention_heads(x: Any, Wq: Any, Wk: Any, Wv: Any, Wo: Any, heads: int, xp: ModuleType) -> Any:
    """Multi-head self-attention: x @ Wq, x @ Wk, x @ Wv split into `heads` heads by reshape and
    transpose, softmax(q @ kᵀ / sqrt(head size)) @ v, heads merged, @ Wo."""
    seq, model = x.shape
    size = model // heads

    def split(t: Any) -> Any:
        return t.reshape(seq, heads, size).transpose(1, 0, 2)

    q, k, v = split(x @ Wq), split(x @ Wk), split(x @ Wv)
    weights = softmax(q @ k.transpose(0, 2, 1) * (1 / math.sqrt(size)), xp)
    return (weights @ v).transpose(1, 0, 2).reshape(seq, model) @ Wo


def heads_attention(q: Any, k: Any, v: Any, heads: int, xp: ModuleType) -> Any:
    """Scaled dot-product attention of given q, k and v over `heads` heads (an inference
    kernel's, the projections done elsewhere): split by reshape and transpose, softmax(q @ kᵀ /
    sqrt(head size)) @ v, heads merged."""
    seq, model = q.shape
    size = model // heads

    def split(t: Any) -> Any:
        return t.reshape(seq, heads, size).transpose(1, 0, 2)

    weights = softmax(split(q) @ split(k).transpose(0, 2, 1) * (1 / math.sqrt(size)), xp)
    return (weights @ split(v)).transpose(1, 0, 2).reshape(seq, model)


def causal_attention(q: Any, k: Any, v: Any, xp: ModuleType) -> Any:
    """One causal attention head; the mask from numpy's (or jax's) arange comparison."""
    seq, size = q.shape
    scores = q @ k.T * (1 / math.sqrt(size))
    mask = xp.arange(seq)[:, None] >= xp.arange(seq)
    return softmax(xp.where(mask, scores, -xp.inf), xp) @ v


def transformer_block(
    x: Any,
    g1: Any,
    b1: Any,
    Wq: Any,
    Wk: Any,
    Wv: Any,
    Wo: Any,
    g2: Any,
    b2: Any,
    W1: Any,
    c1: Any,
    W2: Any,
    c2: Any,
    heads: int,
    xp: ModuleType,
) -> Any:
    """A pre-LN transformer block: layernorm, multi-head attention, residual; layernorm,
    gelu(x @ W1 + c1) @ W2 + c2, residual."""
    x = x + attention_heads(layernorm(x, g1, b1, xp), Wq, Wk, Wv, Wo, heads, xp)
    return x + gelu(layernorm(x, g2, b2, xp) @ W1 + c1, xp) @ W2 + c2


# A transformer block's weights, in `transformer_block`'s order.
BLOCK_WEIGHTS = ("g1", "b1", "Wq", "Wk", "Wv", "Wo", "g2", "b2", "W1", "c1", "W2", "c2")


def stacked_blocks(x: Any, heads: int, xp: ModuleType, **weights: Any) -> Any:
    """Pre-LN transformer blocks one after the other, a model's stack: block k's weights are
    named as `transformer_block`'s with `_k` appended (`g1_0`, ..., `c2_1`)."""
    for layer in range(len(weights) // len(BLOCK_WEIGHTS)):
        own = [weights[f"{name}_{layer}"] for name in BLOCK_WEIGHTS]
        x = transformer_block(x, *own, heads=heads, xp=xp)
    return x


def mlp_two_layers(x: Any, W1: Any, c1: Any, W2: Any, c2: Any, xp: ModuleType) -> Any:
    """gelu(x @ W1 + c1) @ W2 + c2."""
    return gelu(x @ W1 + c1, xp) @ W2 + c2


def rmsnorm_swiglu(x: Any, g: Any, W1: Any, W3: Any, W2: Any, xp: ModuleType) -> Any:
    """RMSNorm, then a SwiGLU feed-forward: (silu(h @ W1) * (h @ W3)) @ W2."""
    h = x / xp.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6) * g
    gate = h @ W1
    return (gate / (1 + xp.exp(-gate)) * (h @ W3)) @ W2


def cosine_similarity(a: Any, b: Any, xp: ModuleType) -> Any:
    """The cosine-similarity matrix of the rows of a and of b."""
    a_unit = a / xp.sqrt((a * a).sum(axis=1, keepdims=True))
    b_unit = b / xp.sqrt((b * b).sum(axis=1, keepdims=True))
    return a_unit @ b_unit.T


def correlation(x: Any, xp: ModuleType) -> Any:
    """The correlation matrix of the columns of x (numpy's `corrcoef(x, rowvar=False)`): the
    centered columns' gram matrix over the outer product of their norms."""
    centered = x - x.mean(axis=0)
    norms = xp.sqrt((centered * centered).sum(axis=0))
    return (centered.T @ centered) / (norms[:, None] * norms[None, :])


def logistic_gradient(x: Any, w: Any, y: Any, xp: ModuleType) -> Any:
    """The gradient of the mean logistic loss: xᵀ(σ(x w) − y) / n."""
    predicted = 1 / (1 + xp.exp(-(x @ w)))
    return x.T @ (predicted - y) * (1 / x.shape[0])


def kmeans_assign(x: Any, centers: Any, xp: ModuleType) -> Any:
    """The nearest center of each row, by ‖x‖² − 2x·c + ‖c‖²."""
    distances = (x * x).sum(axis=1, keepdims=True) - 2 * x @ centers.T
    return xp.argmin(distances + (centers * centers).sum(axis=1), axis=1)


def pairwise_distances(a: Any, b: Any, xp: ModuleType) -> Any:
    """Euclidean distances between the rows of a and of b, by ‖a‖² − 2a·b + ‖b‖² (clipped at 0)."""
    squared = (a * a).sum(axis=1, keepdims=True) - 2 * a @ b.T + (b * b).sum(axis=1)
    return xp.sqrt(xp.maximum(squared, 0))


def cross_entropy(logits: Any, onehot: Any, xp: ModuleType) -> Any:
    """The mean softmax cross-entropy of `logits` against one-hot labels, per row."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_sum = xp.log(xp.exp(shifted).sum(axis=1))
    return log_sum - (shifted * onehot).sum(axis=1)


def jax_baseline(program: Program) -> dict[str, Callable[..., np.ndarray]]:
    """{"jax": `program` on jax.numpy under jax.jit, returning a numpy array}, or {} where jax
    is not installed (an optional baseline)."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return {}
    jitted = jax.jit(partial(program, xp=jnp))

    def run(**inputs: np.ndarray) -> np.ndarray:
        return np.asarray(jitted(**inputs).block_until_ready())

    return {"jax": run}


def whole_program_workload(
    name: str,
    description: str,
    shapes: Mapping[str, tuple[int, ...]],
    program: Program,
    target: float,
    flops: float,
    weights: Sequence[str] = (),
) -> Workload:
    """`program` (taking `xp`) as eqsat, numpy and jax.jit run it; the `weights` matrices drawn
    scaled by 1/sqrt(their rows), as a model's are."""
    on_numpy = partial(program, xp=np)
    return Workload(
        name,
        description,
        shapes,
        on_numpy,
        on_numpy,
        target=target,
        flops=flops,
        others=jax_baseline(program),
        scales={name: shapes[name][0] ** -0.5 for name in weights},
    )


def mha_workload(
    seq: int, heads: int, size: int, target: float = 1.5, name: str = "mha"
) -> Workload:
    """Multi-head self-attention over `seq` positions, `heads` heads of `size` (model
    heads * size)."""
    model = heads * size
    projections = {name: (model, model) for name in ("Wq", "Wk", "Wv", "Wo")}
    return whole_program_workload(
        name,
        f"multi-head self-attention, seq {seq}, model {model}, {heads} heads",
        {"x": (seq, model), **projections},
        partial(attention_heads, heads=heads),
        target=target,
        flops=_attention_flops(seq, model),
        weights=tuple(projections),
    )


def block_workload(seq: int, heads: int, size: int, target: float = 1.3) -> Workload:
    """A pre-LN transformer block: `heads` heads of `size`, a feed-forward layer 4x as wide as
    the model (as models have it)."""
    model = heads * size
    hidden = 4 * model
    norms = {name: (model,) for name in ("g1", "b1", "g2", "b2")}
    projections = {name: (model, model) for name in ("Wq", "Wk", "Wv", "Wo")}
    return whole_program_workload(
        "block",
        f"pre-LN transformer block, seq {seq}, model {model}, {heads} heads, ffn {hidden}",
        {"x": (seq, model), **norms, **projections, **_feed_forward(model, hidden)},
        partial(transformer_block, heads=heads),
        target=target,
        flops=_attention_flops(seq, model) + 4.0 * seq * model * hidden,
        weights=(*projections, "W1", "W2"),
    )


def stacked_blocks_workload(
    layers: int, seq: int, heads: int, size: int, target: float = 1.3
) -> Workload:
    """`layers` pre-LN transformer blocks (`block_workload`'s) one after the other."""
    model = heads * size
    hidden = 4 * model
    block = {
        **{name: (model,) for name in ("g1", "b1", "g2", "b2")},
        **{name: (model, model) for name in ("Wq", "Wk", "Wv", "Wo")},
        **_feed_forward(model, hidden),
    }
    shapes = {f"{name}_{layer}": shape for layer in range(layers) for name, shape in block.items()}
    return whole_program_workload(
        f"blocks{layers}",
        f"{layers} stacked pre-LN transformer blocks, seq {seq}, model {model}, {heads} heads",
        {"x": (seq, model), **shapes},
        partial(stacked_blocks, heads=heads),
        target=target,
        flops=layers * (_attention_flops(seq, model) + 4.0 * seq * model * hidden),
        weights=tuple(name for name in shapes if name[0] == "W"),
    )


def swiglu_workload(seq: int, model: int, hidden: int, target: float = 1.0) -> Workload:
    return whole_program_workload(
        "swiglu",
        f"RMSNorm + SwiGLU MLP, x {seq}x{model}, hidden {hidden}",
        {
            "x": (seq, model),
            "g": (model,),
            "W1": (model, hidden),
            "W3": (model, hidden),
            "W2": (hidden, model),
        },
        rmsnorm_swiglu,
        target=target,
        flops=6.0 * seq * model * hidden,
        weights=("W1", "W3", "W2"),
    )


def cosine_workload(rows: int, other_rows: int, width: int, target: float = 1.0) -> Workload:
    return whole_program_workload(
        "cosine",
        f"cosine-similarity matrix, {rows}x{width} by {other_rows}x{width}",
        {"a": (rows, width), "b": (other_rows, width)},
        cosine_similarity,
        target=target,
        flops=2.0 * rows * other_rows * width,
    )


def _feed_forward(model: int, hidden: int) -> dict[str, tuple[int, ...]]:
    """The shapes of a feed-forward layer's weights and biases, model -> hidden -> model."""
    return {"W1": (model, hidden), "c1": (hidden,), "W2": (hidden, model), "c2": (model,)}


def _attention_flops(seq: int, model: int) -> float:
    """Flops of multi-head attention's four projections and its two products."""
    return 8.0 * seq * model * model + 4.0 * seq * seq * model


def whole_programs(quick: bool = False) -> list[Workload]:
    """The benchmark's whole programs (models, distances, losses, a gradient) at the bench's
    shapes (sequence 512, model 768, 12 heads, feed-forward 3072; multi-head attention over
    2048 positions, 8 heads of 64; causal attention 1024 x 64),
    or small ones where `quick`."""
    seq, heads, size = (32, 4, 16) if quick else (512, 12, 64)
    model = heads * size
    hidden = 4 * model
    causal = 64 if quick else 1024
    rows = 64 if quick else 1024  # cosine similarity and distances: rows of each operand
    row_pairs = {"a": (rows, model), "b": (rows, model)}
    pair, pair_flops = f"{rows}x{model} by {rows}x{model}", 2.0 * rows * rows * model
    samples, features, centers = (128, 16, 8) if quick else (16384, 256, 64)
    classes = 32 if quick else 1000
    return [
        mha_workload(seq, heads, size),
        # a long context: each head's 2048 x 2048 scores spill L3 (row blocks per head)
        mha_workload(*((64, 2, 16) if quick else (2048, 8, 64)), name="mha-long"),
        whole_program_workload(
            "sdpa",
            f"scaled dot-product attention of given q, k, v, seq {seq}, {heads} heads of {size}",
            {name: (seq, model) for name in ("q", "k", "v")},
            partial(heads_attention, heads=heads),
            target=1.5,
            flops=4.0 * seq * seq * model,
        ),
        whole_program_workload(
            "causal",
            f"causal attention (np.arange mask), {causal}x64",
            {name: (causal, 64) for name in ("q", "k", "v")},
            causal_attention,
            target=2.0,
            flops=2.0 * causal * causal * 64,  # half of the scores are masked
        ),
        block_workload(seq, heads, size),
        # a model's stack: its compile grows with its distinct parts (ARCHITECTURE §10)
        stacked_blocks_workload(2, seq, heads, size),
        swiglu_workload(seq, model, hidden),
        cosine_workload(rows, rows, model),
        whole_program_workload(
            "correlation",
            f"correlation matrix of the columns of x {samples // 4}x{2 * features}",
            {"x": (samples // 4, 2 * features)},
            correlation,
            target=1.0,
            # the product as a symmetric rank-k update: one triangle and the diagonal
            flops=1.0 * samples // 4 * (2 * features) * (2 * features + 1),
        ),
        whole_program_workload(
            "logreg-grad",
            f"logistic-regression gradient, x {samples}x{features}",
            {"x": (samples, features), "w": (features, 1), "y": (samples, 1)},
            logistic_gradient,
            target=1.0,
            flops=4.0 * samples * features,
        ),
        whole_program_workload(
            "kmeans",
            f"k-means assignment, {samples}x{features} points, {centers} centers",
            {"x": (samples, features), "centers": (centers, features)},
            kmeans_assign,
            target=1.0,
            flops=2.0 * samples * centers * features,
        ),
        whole_program_workload(
            "distances",
            f"pairwise Euclidean distances, {pair}",
            row_pairs,
            pairwise_distances,
            target=1.0,
            flops=pair_flops,
        ),
        whole_program_workload(
            "cross-entropy",
            f"softmax cross-entropy per row, {samples}x{classes} logits",
            {"logits": (samples, classes), "onehot": (samples, classes)},
            cross_entropy,
            target=1.0,
            flops=5.0 * samples * classes,
        ),
        whole_program_workload(
            "mlp2",
            f"gelu(x @ W1 + c1) @ W2 + c2, x {seq}x{model}, hidden {hidden}",
            {"x": (seq, model), **_feed_forward(model, hidden)},
            mlp_two_layers,
            target=1.0,
            flops=4.0 * seq * model * hidden,
            weights=("W1", "W2"),
        ),
    ]
