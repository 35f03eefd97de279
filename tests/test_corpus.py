"""Everyday numpy snippets (activations, normalizations, losses, distances, attention,
statistics) as a user writes them, through `@eqsat.jit`: each compiles and agrees with numpy in
float64 (ARCHITECTURE §9's tolerance). Small e-graph limits: these are about coverage, not speed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import eqsat
from eqsat.core.saturate import Limits
from tests.programs import assert_close

LIMITS = Limits(nodes=20_000, seconds=0.5, iterations=8, extraction_seconds=0.5)
N, D, K = 24, 40, 12  # rows, features, a second matrix's rows (or classes)


def _softmax(x: Any) -> Any:
    e = np.exp(x - np.max(x, axis=1, keepdims=True))
    return e / np.sum(e, axis=1, keepdims=True)


def _log_softmax(x: Any) -> Any:
    shifted = x - np.max(x, axis=1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))


def _layernorm(x: Any) -> Any:
    mean = np.mean(x, axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(np.var(x, axis=-1, keepdims=True) + 1e-5)


def _pairwise_sq_distances(a: Any, b: Any) -> Any:
    aa = np.sum(a * a, axis=1).reshape(-1, 1)
    bb = np.sum(b * b, axis=1).reshape(1, -1)
    return aa + bb - 2 * (a @ b.T)


def _huber(x: Any, y: Any) -> Any:
    d = np.abs(x - y)
    return np.mean(np.where(d < 1.0, 0.5 * d**2, d - 0.5))


# name -> (function, input shapes)
CORPUS: dict[str, tuple[Callable[..., Any], list[tuple[int, ...]]]] = {
    # activations
    "relu": (lambda x: np.maximum(x, 0), [(N, D)]),
    "leaky-relu": (lambda x: np.where(x > 0, x, 0.01 * x), [(N, D)]),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), [(N, D)]),
    "silu": (lambda x: x / (1 + np.exp(-x)), [(N, D)]),
    "gelu-tanh": (
        lambda x: 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x**3))),
        [(N, D)],
    ),
    "softplus": (lambda x: np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0), [(N, D)]),
    "elu": (lambda x: np.where(x > 0, x, np.expm1(x)), [(N, D)]),
    "hard-sigmoid": (lambda x: np.clip(x / 6 + 0.5, 0, 1), [(N, D)]),
    "soft-threshold": (lambda x: np.sign(x) * np.maximum(np.abs(x) - 0.5, 0), [(N, D)]),
    "mish-like": (lambda x: x * np.tanh(np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)), [(N, D)]),
    # normalizations
    "softmax": (_softmax, [(N, D)]),
    "log-softmax": (_log_softmax, [(N, D)]),
    "layernorm": (_layernorm, [(N, D)]),
    "layernorm-affine": (lambda x, w, b: _layernorm(x) * w + b, [(N, D), (D,), (D,)]),
    "rmsnorm": (
        lambda x, w: x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + 1e-6) * w,
        [(N, D), (D,)],
    ),
    "batchnorm": (
        lambda x: (x - x.mean(axis=0)) / np.sqrt(x.var(axis=0) + 1e-5),
        [(N, D)],
    ),
    "standardize-ddof1": (lambda x: (x - x.mean(0)) / x.std(0, ddof=1), [(N, D)]),
    "min-max-scale": (lambda x: (x - x.min(0)) / (x.max(0) - x.min(0) + 1e-6), [(N, D)]),
    "l2-normalize-rows": (
        lambda x: x / np.sqrt(np.sum(x * x, axis=1, keepdims=True)),
        [(N, D)],
    ),
    "residual-layernorm": (lambda x, y: _layernorm(x + 0.5 * y), [(N, D), (N, D)]),
    # losses
    "mse": (lambda x, y: np.mean((x - y) ** 2), [(N, D), (N, D)]),
    "mae": (lambda x, y: np.mean(np.abs(x - y)), [(N, D), (N, D)]),
    "huber": (_huber, [(N, D), (N, D)]),
    "cross-entropy": (lambda x, y: -np.mean(np.sum(y * _log_softmax(x), axis=1)), [(N, K), (N, K)]),
    "bce-with-logits": (
        lambda x, y: np.mean(np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x)))),
        [(N, D), (N, D)],
    ),
    "hinge": (lambda x, y: np.mean(np.maximum(0, 1 - x * y)), [(N, D), (N, D)]),
    # distances and similarities
    "pairwise-sq-distances": (_pairwise_sq_distances, [(N, D), (K, D)]),
    "cosine-similarity": (
        lambda a, b: (
            (a @ b.T)
            / (np.sqrt(np.sum(a * a, axis=1)).reshape(-1, 1) * np.sqrt(np.sum(b * b, axis=1)))
        ),
        [(N, D), (K, D)],
    ),
    "dot": (lambda u, v: np.dot(u, v), [(D,), (D,)]),
    "frobenius-norm": (lambda x: np.sqrt(np.sum(x * x)), [(N, D)]),
    # layers and attention
    "linear": (lambda x, w, b: x @ w + b, [(N, D), (D, K), (K,)]),
    "mlp-2-layers": (
        lambda x, w1, b1, w2: np.maximum(x @ w1 + b1, 0) @ w2,
        [(N, D), (D, 32), (32,), (32, K)],
    ),
    "attention": (
        lambda q, k, v: _softmax(q @ k.T / np.sqrt(16.0)) @ v,
        [(N, 16), (K, 16), (K, 16)],
    ),
    "masked-attention-scores": (
        lambda q, k, m: _softmax(np.where(m > 0, q @ k.T, -1e9)),
        [(N, 16), (K, 16), (N, K)],
    ),
    # statistics
    "variance-ddof1": (lambda x: np.var(x, axis=0, ddof=1), [(N, D)]),
    "covariance": (
        lambda x: (x - x.mean(0)).T @ (x - x.mean(0)) / (N - 1),
        [(N, D)],
    ),
    "log-sum-exp": (
        lambda x: np.max(x, 1) + np.log(np.sum(np.exp(x - np.max(x, 1, keepdims=True)), 1)),
        [(N, D)],
    ),
    "geometric-mean": (lambda x: np.exp(np.mean(np.log(np.abs(x) + 1), axis=1)), [(N, D)]),
    "row-products": (lambda x: np.prod(1 + 0.1 * x, axis=1), [(N, D)]),
    "fraction-above": (lambda x: np.mean(np.any(x > 1.5, axis=1)), [(N, D)]),
    "polynomial": (lambda x: 3 * x**3 - 2 * x**2 + x - 1, [(N, D)]),
    "power-features": (lambda x: np.abs(x) ** 1.5 + np.abs(x) ** 0.5, [(N, D)]),
    "sinusoid-features": (lambda x: np.sin(x) + np.cos(2 * x), [(N, D)]),
    "weighted-row-sum": (lambda x, w: np.sum(x * w, axis=1), [(N, D), (D,)]),
    # indexing, joins and splits
    "first-columns": (lambda x: x[:, :10] * 2, [(N, D)]),
    "differences": (lambda x: x[1:] - x[:-1], [(N, D)]),
    "outer-differences": (lambda a, b: np.abs(a[:, None] - b[None, :]), [(N,), (K,)]),
    "moving-average": (
        lambda x: (
            (np.pad(x, ((0, 0), (1, 1)))[:, :-2] + x + np.pad(x, ((0, 0), (1, 1)))[:, 2:]) / 3
        ),
        [(N, D)],
    ),
    "feature-concat": (
        lambda x, y, w: np.concatenate([x, y * y], axis=1) @ w,
        [(N, D), (N, K), (D + K, 8)],
    ),
    "glu": (
        lambda x: np.split(x, 2, axis=1)[0] / (1 + np.exp(-np.split(x, 2, axis=1)[1])),
        [(N, D)],
    ),
    "last-row-softmax": (lambda x: _softmax(x[-1:, ::-1]), [(N, D)]),
    # einsum
    "einsum-linear": (lambda x, w: np.einsum("nd,dk->nk", x, w), [(N, D), (D, K)]),
    "einsum-row-dots": (lambda x, y: np.einsum("nd,nd->n", x, y), [(N, D), (N, D)]),
    "einsum-bilinear": (
        lambda x, w, y: np.einsum("ni,ij,nj->n", x, w, y),
        [(N, D), (D, D), (N, D)],
    ),
    "einsum-batched-scores": (
        lambda q, k: np.einsum("bqd,bkd->bqk", q, k) / 4.0,
        [(2, N, 16), (2, K, 16)],
    ),
}


def test_the_corpus_has_at_least_40_snippets() -> None:
    assert len(CORPUS) >= 40


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_snippet_compiles_and_agrees_with_numpy(name: str) -> None:
    function, shapes = CORPUS[name]
    rng = np.random.default_rng(sorted(CORPUS).index(name))
    inputs = [rng.uniform(-2, 2, shape).astype(np.float32) for shape in shapes]
    got = eqsat.jit(function, limits=LIMITS, progress=False)(*inputs)
    with np.errstate(all="ignore"):
        want = function(*(a.astype(np.float64) for a in inputs))
    assert_close(np.asarray(got), np.asarray(want), "float32")
