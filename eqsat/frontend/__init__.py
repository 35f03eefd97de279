"""The user-facing symbolic array: numpy-like operations that build `TExpr` terms (as Terms,
by `eqsat.core.term.texpr`, without egglog).

Every operation checks shapes (`eqsat.core.shapes`) and dtypes as it is built, so a `Tensor` always
holds a well-formed term. Elementwise ops broadcast implicitly (numpy rules, no broadcast node);
matmul gets explicit `TExpr.broadcast` nodes so that its batch dims are equal. Composite ops
(softmax, gelu, layernorm) are built from the primitives::

    x = tensor("x", (4, 8))
    softmax(x)  ->  e / sum(e, -1, keepdims)  with  e = exp(x - max(x, -1, keepdims))

Plain numpy calls on tensors build the same terms (NEP 13 and NEP 18): `np.maximum(x @ W, 0)` is
`maximum(matmul(x, W), 0)`. `Tensor`'s numpy hooks hand the call to `numpy_protocol`,
whose tables `_NUMPY_UFUNCS` and `_NUMPY_FUNCTIONS` map each supported numpy
function to its frontend function; anything else is an `UnsupportedError` naming it.
"""

from __future__ import annotations

from eqsat.frontend.contractions import einsum, matmul
from eqsat.frontend.elementwise import (
    abs,
    arange,
    ceil,
    clip,
    cos,
    erf,
    exp,
    expm1,
    floor,
    floor_divide,
    isfinite,
    isinf,
    isnan,
    log,
    log1p,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    maximum,
    minimum,
    relu,
    remainder,
    rint,
    round,
    sigmoid,
    sign,
    sin,
    sqrt,
    tanh,
    tril,
    triu,
    trunc,
    where,
)
from eqsat.frontend.indexing import transpose
from eqsat.frontend.joins import array_split, concatenate, pad, repeat, split, stack, tile
from eqsat.frontend.layers import gelu, layernorm, softmax
from eqsat.frontend.reductions import max, mean, min, norm, prod, std, sum, var
from eqsat.frontend.tensor import Tensor, tensor

# not in __all__: what the rest of eqsat takes from the frontend (tracing, compile, optimize)
from eqsat.frontend.tensor import output_tensors as output_tensors
from eqsat.frontend.tensor import traced_scalar as traced_scalar

__all__ = [
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
]
