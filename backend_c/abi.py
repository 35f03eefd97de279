"""The C calling convention of every eqsat kernel: the one place its signature is spelled.

A kernel is `void <symbol>(const T *in0, ..., T *out0, ...)`: inputs first, then outputs, every
buffer dense row-major (C order) and of one element type `T`.
"""

from __future__ import annotations

C_TYPES = {"float32": "float", "float64": "double"}


def prototype(symbol: str, n_inputs: int, n_outputs: int, dtype: str, *, for_cdef: bool) -> str:
    """Return the C prototype of a kernel, without the trailing semicolon.

    It requires:
    1. `symbol` is a valid C identifier (callers mangle user names; this function does not);
    2. `dtype` is a key of `C_TYPES`; `n_inputs >= 0` and `n_outputs >= 1`.

    `for_cdef=True` gives cffi's declaration: every buffer a `void *` (the same calling
    convention), so a call passes numpy's buffers without a per-argument type conversion, and
    no `restrict`, which cffi's cdef parser rejects.

    >>> prototype("k", 2, 1, "float32", for_cdef=False)
    'void k(const float *restrict in0, const float *restrict in1, float *restrict out0)'
    >>> prototype("k", 2, 1, "float32", for_cdef=True)
    'void k(const void *in0, const void *in1, void *out0)'
    """
    if dtype not in C_TYPES:
        raise ValueError(f"unsupported dtype {dtype!r}; expected one of {sorted(C_TYPES)}")
    if n_inputs < 0 or n_outputs < 1:
        raise ValueError(f"a kernel needs >= 0 inputs and >= 1 output, got {n_inputs}, {n_outputs}")
    c_type = "void" if for_cdef else C_TYPES[dtype]
    pointer = "*" if for_cdef else "*restrict "
    inputs = [f"const {c_type} {pointer}in{i}" for i in range(n_inputs)]
    outputs = [f"{c_type} {pointer}out{i}" for i in range(n_outputs)]
    return f"void {symbol}({', '.join(inputs + outputs)})"
