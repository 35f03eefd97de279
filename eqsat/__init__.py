"""eqsat: an equality-saturation optimizer for tensor programs.

    import numpy as np, eqsat
    x = eqsat.tensor("x", (256, 1024)); W = eqsat.tensor("W", (1024, 512))
    b = eqsat.tensor("b", (512,))
    kernel = eqsat.compile(eqsat.relu(x @ W + b))
    out = kernel(x=xa, W=Wa, b=ba)
"""

from backend_c.kernel import Kernel
from eqsat.api import Optimized, compile, optimize
from eqsat.errors import CompileError, DTypeError, EqsatError, ShapeError
from eqsat.frontend import (
    Tensor,
    abs,
    exp,
    gelu,
    layernorm,
    log,
    matmul,
    max,
    maximum,
    mean,
    minimum,
    relu,
    sigmoid,
    softmax,
    sqrt,
    sum,
    tanh,
    tensor,
    transpose,
    where,
)
from eqsat.saturate import Limits

__all__ = [
    "CompileError", "DTypeError", "EqsatError", "Kernel", "Limits", "Optimized", "ShapeError",
    "Tensor", "abs", "compile", "exp", "gelu", "layernorm", "log", "matmul", "max", "maximum",
    "mean", "minimum", "optimize", "relu", "sigmoid", "softmax", "sqrt", "sum", "tanh", "tensor",
    "transpose", "where",
]
