"""Neural-network layers built from the primitives: softmax, gelu, layernorm."""

from __future__ import annotations

import math

from eqsat.core import shapes
from eqsat.core.errors import ArgumentError
from eqsat.frontend.elementwise import _binary, erf, exp, sqrt, tanh
from eqsat.frontend.tensor import Tensor, _require


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) over one axis (max subtracted for stability)."""
    x = _require(x, "softmax")
    axis = shapes.normalize_axis("softmax", axis, x.shape)
    e = exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


_GELU_FORMS = {"tanh": "tanh", True: "tanh", "none": "none", False: "none"}


def gelu(x: Tensor, approximate: str | bool = "tanh") -> Tensor:
    """GELU, x times the standard normal CDF of x, in one of two forms:

    - `approximate="tanh"` (the default, or True as in jax):
      0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)));
    - `approximate="none"` (or False), the exact form: 0.5 * x * (1 + erf(x / sqrt(2))).

    The names are torch's (`torch.nn.functional.gelu(x, approximate='none'|'tanh')`) and the
    booleans jax's (`jax.nn.gelu(x, approximate=True)`). The default is jax's and eqsat's
    before the exact form existed, so a program keeps its values; torch's default is "none".
    It requires: `approximate` one of "tanh", "none", True, False (else ArgumentError).
    """
    x = _require(x, "gelu")
    form = _GELU_FORMS.get(approximate) if isinstance(approximate, str | bool) else None
    if form is None:
        raise ArgumentError(
            f"gelu: approximate must be 'tanh' or 'none' (or True or False), got {approximate!r}"
        )
    if form == "none":
        return 0.5 * x * (1.0 + erf(x * math.sqrt(0.5)))
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
    return 0.5 * x * (1.0 + tanh(inner))


def layernorm(
    x: Tensor,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    axis: int = -1,
    eps: float = 1e-5,
) -> Tensor:
    """(x - mean) / sqrt(var + eps) over one axis, then `* weight` and `+ bias` when given.

    It requires: `weight` and `bias` (Tensors) broadcast against `x`.
    """
    x = _require(x, "layernorm")
    axis = shapes.normalize_axis("layernorm", axis, x.shape)
    centered = x - x.mean(axis, keepdims=True)
    variance = (centered**2).mean(axis, keepdims=True)
    out = centered / sqrt(variance + eps)
    if weight is not None:
        out = _binary("mul", out, _require(weight, "layernorm"), "layernorm")
    if bias is not None:
        out = _binary("add", out, _require(bias, "layernorm"), "layernorm")
    return out
