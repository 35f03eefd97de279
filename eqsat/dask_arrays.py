"""`@eqsat.jit` functions on dask arrays: dask arrays in, a dask array out (ARCHITECTURE §5f).

    y = softmax_rows(x)   # x: a dask array in chunks of rows -> a dask array, nothing computed
    y.compute()           # one kernel per distinct chunk shape, run on every chunk

The function is traced once at the arrays' whole shapes. `eqsat.core.subset.along` tells along
which output axes no op mixes positions, and which axis of each input follows such an axis: those
axes stay chunked, and each output chunk is the program over the matching chunks of its inputs.
Every other input axis (one a program reduces or contracts over, or one broadcast whole) must be a
single chunk: it is rechunked when the blocks stay within dask's `array.chunk-size`, else
ArgumentError names the argument and the axis. Numpy array arguments count as one-chunk dask
arrays; floats are traced (passed to every chunk's kernel), other values are static.

Kernels are compiled here, in the calling process, one per distinct combination of chunk shapes,
with `threads=1` unless the function's options name `threads` (dask runs the chunks in parallel),
and they travel in the graph, as one key the chunks' tasks depend on (a worker receives them
once): a Kernel pickles by its C source, so a worker loads its library from the compile cache or
builds the C, and never optimizes. Any dask scheduler runs them.

The module is not named `dask`: `import dask` inside the package would then find it.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from eqsat import api
from eqsat.backend_c.kernel import Kernel
from eqsat.core import shapes
from eqsat.core.errors import ArgumentError, UnsupportedError
from eqsat.core.subset import along
from eqsat.core.term import Term
from eqsat.frontend import Tensor, output_tensors

if TYPE_CHECKING:
    import dask.array as da

# The letters of dask's blockwise index notation, one per axis.
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


class Traceable(Protocol):
    """What `apply` needs of an `eqsat.jit` function (`eqsat.tracing.JitFunction`, which also
    carries the decorated function's `__qualname__`)."""

    @property
    def options(self) -> Mapping[str, Any]: ...

    def trace(self, arguments: Mapping[str, Any]) -> Any: ...


def has_dask_array(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    """Whether a dask array is among the arguments (never imports dask: without `dask.array`
    loaded, there is none)."""
    module = sys.modules.get("dask.array")
    if module is None:
        return False
    return any(isinstance(value, module.Array) for value in (*args, *kwargs.values()))


def apply(function: Traceable, arguments: dict[str, Any]) -> Any:
    """`function` over `arguments` (by parameter name, some of them dask arrays) as a dask array,
    chunked like its inputs along the axes the program keeps apart (module docstring): a
    `dask.array.Array`.

    It requires: the arguments bind to the function (as `JitFunction._bind` gives them). Raises
    ArgumentError for an axis that must be one chunk and is too large to rechunk, UnsupportedError
    for a function of several outputs or one whose chunks are not the whole program's."""
    import dask
    import dask.array as da

    name = _name(function)
    arrays = {
        key: value if isinstance(value, da.Array) else da.from_array(value, chunks=value.shape)
        for key, value in arguments.items()
        if isinstance(value, da.Array | np.ndarray)
    }
    whole = _traced(function, arguments, {key: a.shape for key, a in arrays.items()}).expr
    out_shape = shapes.infer(whole)
    followed = {axis: _followed(whole, axis) for axis in range(len(out_shape))}
    letters = iter(LETTERS)
    out_letters = [next(letters) for _ in out_shape]
    indices: dict[str, str] = {}
    for key, array in arrays.items():
        index = [
            next((out_letters[o] for o, f in followed.items() if f.get(key) == axis), "")
            or next(letters)
            for axis in range(array.ndim)
        ]
        arrays[key] = _with_whole_axes(array, index, out_letters, f"{name}: argument {key!r}")
        indices[key] = "".join(index)
    chunks, unified = da.core.unify_chunks(*_pairs(arrays, indices))
    arrays = dict(zip(arrays, unified, strict=True))
    kept = [letter for letter in out_letters if letter in chunks]
    kernels = {}
    for sizes in itertools.product(*(sorted(set(chunks[letter])) for letter in kept)):
        block = dict(zip(kept, sizes, strict=True))
        block_shapes = {
            key: tuple(
                block.get(letter, extent)
                for letter, extent in zip(indices[key], a.shape, strict=True)
            )
            for key, a in arrays.items()
        }
        kernels[tuple(block_shapes.values())] = _block_kernel(
            function,
            arguments,
            block_shapes,
            whole,
            {out_letters.index(k): n for k, n in block.items()},
        )
    kernel = next(iter(kernels.values()))
    dtype = kernel.outputs[0].dtype or kernel.dtype
    scalars = {
        key: value
        for key, value in arguments.items()
        if key in kernel.input_names and key not in arrays
    }
    # One graph key holds the kernels, so a worker receives and unpickles them once, not with
    # every task; named by their sources, so equal calls build equal graphs.
    run = BlockKernels(kernels, tuple(arrays), scalars)
    token = hashlib.sha256(repr((sorted(kernels), run.names, scalars)).encode())
    for block_kernel in kernels.values():
        token.update(block_kernel.c_source.encode())
    return da.blockwise(
        _run,
        "".join(out_letters),
        dask.delayed(run, name=f"eqsat-kernels-{token.hexdigest()[:32]}"),
        None,
        *_pairs(arrays, indices),
        new_axes={
            letter: extent
            for letter, extent in zip(out_letters, out_shape, strict=True)
            if letter not in kept
        },
        dtype=dtype,
        meta=np.empty((0,) * len(out_shape), dtype),
        concatenate=True,
    )


@dataclass(frozen=True)
class BlockKernels:
    """The kernel of each combination of chunk shapes, run on the chunks it is called with. It
    pickles with its kernels (by their C source)."""

    kernels: dict[tuple[tuple[int, ...], ...], Kernel]  # by the array arguments' chunk shapes
    names: tuple[str, ...]  # the array arguments, in the order the chunks are passed
    scalars: dict[str, float]  # traced floats, passed to every kernel as 0-d inputs

    def __call__(self, *blocks: np.ndarray) -> np.ndarray:
        kernel = self.kernels[tuple(block.shape for block in blocks)]
        values = dict(zip(self.names, blocks, strict=True))
        values.update({key: np.asarray(v, kernel.dtype) for key, v in self.scalars.items()})
        return kernel(**{key: values[key] for key in kernel.input_names})  # type: ignore[return-value]


def _name(function: Traceable) -> str:
    return str(getattr(function, "__qualname__", function))


def _pairs(arrays: Mapping[str, da.Array], indices: Mapping[str, str]) -> list[Any]:
    """array, index, array, index, ...: dask's blockwise argument order."""
    return [item for key in arrays for item in (arrays[key], indices[key])]


def _run(kernels: BlockKernels, *blocks: np.ndarray) -> np.ndarray:
    """One output chunk: what a task of `apply`'s graph calls."""
    return kernels(*blocks)


def _traced(
    function: Traceable, arguments: Mapping[str, Any], array_shapes: Mapping[str, tuple[int, ...]]
) -> Tensor:
    """The one output of `function` traced with arrays of `array_shapes` (dtypes as in
    `arguments`; what tracing reads of an array is its shape and dtype, so each is a zero
    broadcast to its shape, which holds no memory)."""
    placeholders = {
        key: np.broadcast_to(np.zeros((), np.dtype(arguments[key].dtype)), shape)
        for key, shape in array_shapes.items()
    }
    tensors, several = output_tensors(function.trace({**arguments, **placeholders}))
    if several:
        raise UnsupportedError(
            f"{_name(function)}: on dask arrays a function returns one array, not a tuple "
            "(make one function per output)"
        )
    return tensors[0]


def _followed(root: Term, axis: int) -> dict[str, int]:
    """{input: its axis} for the inputs taken along output axis `axis` of `root`, when no op
    mixes positions along it and each input is taken along one axis only and never used whole;
    else {} (the axis is computed whole)."""
    subset = along([root], axis, 1)
    if subset is None:
        return {}
    taken: dict[str, set[int]] = {}
    for key, input_axis in subset.taken.values():
        taken.setdefault(key, set()).add(input_axis)
    if any(len(axes) > 1 or key in subset.whole for key, axes in taken.items()):
        return {}
    return {key: axes.pop() for key, axes in taken.items()}


def _with_whole_axes(array: da.Array, index: list[str], kept: list[str], what: str) -> da.Array:
    """`array` rechunked to one chunk along every axis whose letter is not an output's (`kept`),
    if its largest block then stays within dask's `array.chunk-size`; else ArgumentError."""
    import dask
    from dask.utils import format_bytes, parse_bytes

    split = [
        axis
        for axis, letter in enumerate(index)
        if letter not in kept and array.numblocks[axis] > 1
    ]
    if not split:
        return array
    block = math.prod(
        array.shape[axis] if axis in split else max(array.chunks[axis], default=0)
        for axis in range(array.ndim)
    )
    limit = parse_bytes(dask.config.get("array.chunk-size"))
    size = block * array.dtype.itemsize
    if size > limit:
        axes = ", ".join(f"axis {axis} ({array.numblocks[axis]} chunks)" for axis in split)
        raise ArgumentError(
            f"{what}: the program reduces or mixes positions along {axes}, so each chunk needs "
            f"that axis whole, and blocks of it would be {format_bytes(size)}, "
            f"above dask's array.chunk-size ({format_bytes(limit)}); rechunk it to one chunk along "
            f"that axis and smaller along the others, e.g. .rechunk({{{split[0]}: -1}})"
        )
    return array.rechunk({axis: -1 for axis in split})


def _block_kernel(
    function: Traceable,
    arguments: Mapping[str, Any],
    block_shapes: Mapping[str, tuple[int, ...]],
    whole: Term,
    block: Mapping[int, int],
) -> Kernel:
    """The kernel of the chunks of `block_shapes`, after checking that the function traced at
    them is `whole` over `block` (output axis -> chunk extent): a program that uses an array's
    shape as a value (`x / x.shape[0]`) is not, and would give wrong chunks."""
    traced = _traced(function, arguments, block_shapes)
    expected = [whole]
    for axis, extent in block.items():
        subset = along(expected, axis, extent)
        expected = subset.roots if subset is not None else []
    if not expected or _unsuffixed(expected[0], {}) != traced.expr:
        raise UnsupportedError(
            f"{_name(function)}: traced at chunk shapes {dict(block_shapes)} it is not "
            "the whole program over those chunks (does it use an array's shape as a value?); "
            "give the arrays one chunk"
        )
    options = {"threads": 1, "progress": False, **function.options}
    return api.compile(traced, **options)


def _unsuffixed(term: Term, memo: dict[Term, Term]) -> Term:
    """`term` with the inputs `along` renamed (`x#0#1`) named as written (`x`)."""
    if term not in memo:
        if term.op == "TExpr.input":
            key, *rest = term.args
            memo[term] = Term(term.op, (str(key).split("#")[0], *rest))
        else:
            args = tuple(_unsuffixed(a, memo) if isinstance(a, Term) else a for a in term.args)
            memo[term] = Term(term.op, args)
    return memo[term]
