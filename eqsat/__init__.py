"""eqsat: an equality-saturation optimizer for tensor programs.

    import numpy as np, eqsat
    x = eqsat.tensor("x", (256, 1024)); W = eqsat.tensor("W", (1024, 512))
    b = eqsat.tensor("b", (512,))
    kernel = eqsat.compile(eqsat.relu(x @ W + b))
    out = kernel(x=xa, W=Wa, b=ba)

The public names load on first use (PEP 562), so that importing a lower layer (`eqsat.core`,
`eqsat.rewrites`, ...) does not load the whole compiler; docs/ARCHITECTURE.md gives the layers.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

# In a source checkout, rewrites/, extract/ and backend_c/ sit beside this folder (pyproject's
# package-dir installs them as eqsat.rewrites, ...): a checkout on sys.path (`python -m pytest`
# from its root) finds them as subpackages through the checkout's root.
_CHECKOUT = Path(__file__).resolve().parent.parent
if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "backend_c" / "__init__.py").is_file():
    __path__.append(str(_CHECKOUT))

if TYPE_CHECKING:  # what type checkers see; at run time the names load lazily (`_PUBLIC`)
    from eqsat.api import compile
    from eqsat.backend_c.kernel import Kernel
    from eqsat.core.errors import (
        ArgumentError,
        CompileError,
        DTypeError,
        EqsatError,
        IndexingError,
        InexactInputError,
        IsaError,
        ShapeError,
        UnsupportedError,
    )
    from eqsat.core.limits import Limits
    from eqsat.frontend import *  # noqa: F403 - its __all__: Tensor and the numpy-like functions
    from eqsat.optimizer import Optimized, optimize
    from eqsat.tracing import jit
    from eqsat.view.egraph_view import draw_egraph

# Each public name and the module it loads from.
_PUBLIC = {
    "Kernel": "eqsat.backend_c.kernel",
    "Limits": "eqsat.core.limits",
    "Optimized": "eqsat.optimizer",
    "compile": "eqsat.api",
    "draw_egraph": "eqsat.view.egraph_view",
    "optimize": "eqsat.optimizer",
    "jit": "eqsat.tracing",
    **dict.fromkeys(
        [
            "ArgumentError",
            "CompileError",
            "DTypeError",
            "EqsatError",
            "IndexingError",
            "InexactInputError",
            "IsaError",
            "ShapeError",
            "UnsupportedError",
        ],
        "eqsat.core.errors",
    ),
    **dict.fromkeys(
        [
            "Tensor",
            "abs",
            "arange",
            "array_split",
            "ceil",
            "clip",
            "concatenate",
            "cos",
            "einsum",
            "erf",
            "exp",
            "expm1",
            "floor",
            "floor_divide",
            "gelu",
            "isfinite",
            "isinf",
            "isnan",
            "layernorm",
            "log",
            "log1p",
            "logical_and",
            "logical_not",
            "logical_or",
            "logical_xor",
            "matmul",
            "max",
            "maximum",
            "mean",
            "min",
            "minimum",
            "norm",
            "pad",
            "prod",
            "relu",
            "remainder",
            "repeat",
            "rint",
            "round",
            "sigmoid",
            "sign",
            "sin",
            "softmax",
            "split",
            "sqrt",
            "stack",
            "std",
            "sum",
            "tanh",
            "tensor",
            "tile",
            "transpose",
            "tril",
            "triu",
            "trunc",
            "var",
            "where",
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
