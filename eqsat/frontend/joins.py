"""Joining and cutting along an axis: concatenate, stack, split, pad, tile, repeat."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

from eqsat.core import dtypes, shapes
from eqsat.core.errors import ShapeError, UnsupportedError
from eqsat.core.term import texpr
from eqsat.frontend.derived import _derived
from eqsat.frontend.elementwise import _full, _is_scalar, _operands, _union
from eqsat.frontend.indexing import _broadcast_to, _reshape
from eqsat.frontend.tensor import Tensor, _require


def concatenate(arrays: Sequence[Tensor], axis: int = 0) -> Tensor:
    """numpy.concatenate: `arrays` joined along `axis` (a copy into one buffer, as numpy).

    It requires: one or more tensors of one dtype and rank >= 1, equal shapes but along `axis`
    (ShapeError otherwise); `axis=None` (flatten first) is not supported.
    """
    parts = _sequence_of_tensors("concatenate", arrays)
    if axis is None:
        raise UnsupportedError("concatenate: axis=None is not supported; reshape(-1) each part")
    dim = shapes.normalize_axis("concatenate", axis, parts[0].shape)
    joined = parts[0]
    for part in parts[1:]:
        shape = shapes.concatenate(joined.shape, part.shape, dim)
        dtype = dtypes.result_dtype(
            "concatenate", lambda a, b: np.concatenate([a, b]), joined.dtype, part.dtype
        )
        values = None
        if dtypes.dtype_range(dtype) is not None:
            values = _union(joined.integer_range, part.integer_range)  # type: ignore[arg-type]
        expr = texpr.concat(joined.expr, part.expr, dim)
        joined = _derived("concatenate", expr, shape, dtype, (joined, part), values)
    return joined


def stack(arrays: Sequence[Tensor], axis: int = 0) -> Tensor:
    """numpy.stack: `arrays`, all of one shape, joined along a new dimension `axis`."""
    parts = _sequence_of_tensors("stack", arrays)
    if len({part.shape for part in parts}) > 1:
        shown = ", ".join(str(part.shape) for part in parts)
        raise ShapeError(f"stack: all arrays must have one shape, got {shown}")
    rank = parts[0].ndim + 1
    if not -rank <= axis < rank:
        raise ShapeError(f"stack: axis {axis} is out of range for a result of rank {rank}")
    dim = axis % rank
    expanded = [part.reshape(*part.shape[:dim], 1, *part.shape[dim:]) for part in parts]
    return concatenate(expanded, dim)


def split(x: Tensor, indices_or_sections: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """numpy.split: views of `x` cut along `axis`, into that many equal sections (an int, which
    must divide the extent) or at the given indices.

    It requires: no section is empty (eqsat tensors never are; ShapeError otherwise).
    """
    return _cut("split", x, indices_or_sections, axis, equal=True)


def array_split(x: Tensor, indices_or_sections: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """numpy.array_split: `split`, but an int need not divide the extent: of n sections of an
    extent L, the first L % n hold L // n + 1 elements and the others L // n.

    It requires: no section is empty, so n <= L (ShapeError otherwise).
    """
    return _cut("array_split", x, indices_or_sections, axis, equal=False)


def _cut(
    name: str, x: Tensor, indices_or_sections: int | Sequence[int], axis: int, *, equal: bool
) -> list[Tensor]:
    """The views of `split` (`equal`: sections must divide the extent) or `array_split`."""
    x = _require(x, name)
    dim = shapes.normalize_axis(name, axis, x.shape)
    extent = x.shape[dim]
    if isinstance(indices_or_sections, int | np.integer):
        sections = int(indices_or_sections)
        if sections < 1:
            raise ShapeError(f"{name}: the number of sections must be at least 1, got {sections}")
        if equal and extent % sections:
            raise ShapeError(
                f"{name}: {sections} sections do not divide extent {extent} of axis {dim} "
                "equally (numpy.array_split allows unequal sections)"
            )
        if sections > extent:
            raise ShapeError(
                f"{name}: {sections} sections of extent {extent} (axis {dim}) would leave "
                f"{sections - extent} empty; eqsat tensors are never empty"
            )
        larger, size = extent % sections, extent // sections
        lengths = [size + 1] * larger + [size] * (sections - larger)
        cuts = list(itertools.accumulate(lengths[:-1]))
    else:
        cuts = [int(cut) for cut in indices_or_sections]
    bounds = [0, *cuts, extent]
    before = (slice(None),) * dim
    return [x[(*before, slice(start, stop))] for start, stop in itertools.pairwise(bounds)]


def pad(
    x: Tensor,
    pad_width: int | Sequence[int] | Sequence[Sequence[int]],
    mode: str = "constant",
    constant_values: float = 0.0,
) -> Tensor:
    """numpy.pad: `x` with blocks added before and after each dimension (`pad_width` as numpy
    takes it: n, (before, after) or one pair per dimension), dimension by dimension as numpy
    pads them. `mode` "constant" fills them with `constant_values`; "edge" repeats the edge;
    "reflect" mirrors `x` without its edge, "symmetric" with it; "wrap" continues from the
    other end.

    It requires: one of those modes and one constant (UnsupportedError otherwise); widths >= 0;
    for "reflect" a width of at most the extent - 1, for "symmetric" and "wrap" at most the
    extent (numpy mirrors wider pads again; UnsupportedError).
    """
    x = _require(x, "pad")
    if mode not in _PAD_MODES:
        raise UnsupportedError(
            f"pad: mode={mode!r} is not supported; the modes are {sorted(_PAD_MODES)}"
        )
    if not _is_scalar(constant_values):
        raise UnsupportedError(
            f"pad: constant_values must be one number (not one per side), got {constant_values!r}"
        )
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (x.ndim, 2))
    if (widths < 0).any():
        raise ShapeError(f"pad: widths {pad_width} must not be negative")
    padded = x
    for dim, (before, after) in enumerate(widths.tolist()):
        parts = [padded]
        if before:
            parts.insert(0, _pad_block(padded, dim, before, mode, float(constant_values), True))
        if after:
            parts.append(_pad_block(padded, dim, after, mode, float(constant_values), False))
        padded = concatenate(parts, dim)
    return padded


# The widest pad each mode takes, as a function of the extent it pads.
_PAD_MODES: dict[str, Callable[[int], float]] = {
    "constant": lambda extent: math.inf,
    "edge": lambda extent: math.inf,
    "reflect": lambda extent: extent - 1,
    "symmetric": lambda extent: extent,
    "wrap": lambda extent: extent,
}


def _pad_block(x: Tensor, dim: int, width: int, mode: str, value: float, before: bool) -> Tensor:
    """The block of `width` that `pad` adds to `x` along `dim`, before or after it."""
    extent = x.shape[dim]
    widest = _PAD_MODES[mode](extent)
    if width > widest:
        raise UnsupportedError(
            f"pad: mode={mode!r} pads at most {widest} elements along axis {dim} of extent "
            f"{extent}, got {width} (numpy mirrors wider pads again)"
        )
    if mode == "constant":
        return _filled_like(x, dim, width, value)
    lead = (slice(None),) * dim
    if mode == "edge":
        edge = x[(*lead, slice(0, 1) if before else slice(extent - 1, extent))]
        return _broadcast_to(edge, (*x.shape[:dim], width, *x.shape[dim + 1 :]))
    if mode == "wrap":
        return x[(*lead, slice(extent - width, extent) if before else slice(0, width))]
    skip = 1 if mode == "reflect" else 0  # reflect leaves the edge out, symmetric repeats it
    start = skip if before else extent - width - skip
    return x[(*lead, slice(start, start + width))][(*lead, slice(None, None, -1))]


def _filled_like(x: Tensor, dim: int, extent: int, value: float) -> Tensor:
    """A tensor of `value`, cast to `x`'s dtype as numpy casts a pad's constant, shaped as `x`
    but with `extent` along `dim`."""
    cast = np.asarray(value).astype(x.dtype).item()
    return _full(cast, (*x.shape[:dim], extent, *x.shape[dim + 1 :]), x.dtype)


def _sequence_of_tensors(what: str, arrays: object) -> list[Tensor]:
    """`arrays` (a list or tuple) as tensors of one dtype and rank >= 1."""
    if isinstance(arrays, Tensor) or not isinstance(arrays, list | tuple) or not arrays:
        raise TypeError(f"{what}: expected a non-empty list or tuple of eqsat tensors")
    parts = _operands(what, arrays)
    if any(part.ndim == 0 for part in parts):
        raise ShapeError(f"{what}: zero-dimensional arrays cannot be concatenated")
    return parts


def tile(x: Tensor, reps: int | Sequence[int]) -> Tensor:
    """numpy.tile: `x` repeated `reps[d]` times along dimension d, as a view (a broadcast of
    a new axis before each dimension, then a reshape). Like numpy, a shorter `reps` is padded
    with leading 1s and a longer one gives `x` leading dimensions of 1."""
    x = _require(x, "tile")
    counts = _counts("tile", reps if isinstance(reps, Sequence) else (reps,))
    rank = len(counts) if len(counts) > x.ndim else x.ndim
    counts = (1,) * (rank - len(counts)) + counts
    shape = (1,) * (rank - x.ndim) + x.shape
    interleaved = [extent for n in shape for extent in (1, n)]
    copies = [extent for count, n in zip(counts, shape, strict=True) for extent in (count, n)]
    widened = _broadcast_to(_reshape(x, tuple(interleaved)), tuple(copies))
    return _reshape(widened, tuple(c * n for c, n in zip(counts, shape, strict=True)))


def repeat(x: Tensor, repeats: int, axis: int | None = None) -> Tensor:
    """numpy.repeat with one count: each element `repeats` times along `axis` (the flattened
    tensor when None), as a view (a broadcast of a new axis after `axis`, then a reshape).
    A count per element (an array of repeats) raises UnsupportedError."""
    x = _require(x, "repeat")
    if not isinstance(repeats, int | np.integer):
        raise UnsupportedError(
            f"numpy.repeat: repeats={repeats!r}; eqsat takes one int count for every element "
            "(a count per element is not supported)"
        )
    (count,) = _counts("repeat", (repeats,))
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = shapes.normalize_axis("repeat", axis, x.shape)
    split = (*x.shape[: axis + 1], 1, *x.shape[axis + 1 :])
    copies = (*x.shape[: axis + 1], count, *x.shape[axis + 1 :])
    joined = (*x.shape[:axis], x.shape[axis] * count, *x.shape[axis + 1 :])
    return _reshape(_broadcast_to(_reshape(x, split), copies), joined)


def _counts(what: str, values: Sequence[object]) -> tuple[int, ...]:
    """`values` as positive ints; a ShapeError naming `what` otherwise (tensors are never
    empty, so a count of 0 is refused)."""
    if not all(isinstance(v, int | np.integer) and v >= 1 for v in values):
        raise ShapeError(f"{what}: counts {tuple(values)} must be positive ints")
    return tuple(int(v) for v in values)  # type: ignore[call-overload]
