"""eqsat: an equality-saturation optimizer for tensor programs.

    import numpy as np, eqsat
    x = eqsat.tensor("x", (256, 1024)); W = eqsat.tensor("W", (1024, 512))
    b = eqsat.tensor("b", (512,))
    kernel = eqsat.compile(eqsat.relu(x @ W + b))
    out = kernel(x=xa, W=Wa, b=ba)

The public names load on first use (PEP 562): the lower layers (rewrites, extract, backend_c)
import `eqsat.terms` and friends, and must not pull in the API that is built on top of them.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "Kernel": "backend_c.kernel",
    "Limits": "eqsat.saturate",
    "Optimized": "eqsat.api",
    "compile": "eqsat.api",
    "draw_egraph": "eqsat.egraph_view",
    "optimize": "eqsat.api",
    "jit": "eqsat.tracing",
    **dict.fromkeys(
        ["CompileError", "DTypeError", "EqsatError", "ShapeError", "UnsupportedError"],
        "eqsat.errors",
    ),
    **dict.fromkeys(
        [
            "Tensor", "abs", "exp", "gelu", "layernorm", "log", "matmul", "max", "maximum",
            "mean", "minimum", "relu", "sigmoid", "softmax", "sqrt", "sum", "tanh", "tensor",
            "transpose", "where",
        ],
        "eqsat.frontend",
    ),
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'eqsat' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
