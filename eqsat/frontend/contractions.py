"""Products summed over shared axes: matmul, numpy.dot and einsum."""

from __future__ import annotations

import string
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from eqsat.core import dtypes, shapes
from eqsat.core.errors import ShapeError, UnsupportedError
from eqsat.core.subscripts import Labels, parse_subscripts
from eqsat.core.term import texpr
from eqsat.frontend.derived import _derived
from eqsat.frontend.elementwise import _binary_range, _operands
from eqsat.frontend.indexing import _broadcast_to, _reshape
from eqsat.frontend.tensor import Tensor, _require


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """numpy.matmul: (..., m, k) @ (..., k, n) with broadcast batch dims.

    It requires: both ranks >= 1; equal contraction dims. A 1-D `a` is a row (1, k) and a 1-D
    `b` a column (k, 1), and that dim is removed from the result. Operands whose batch dims must
    grow get a `TExpr.broadcast` node, so `TExpr.matmul` always sees equal batch dims.
    """
    a = _require(a, "matmul")
    b = _require(b, "matmul")
    dtype = dtypes.result_dtype("matmul", np.matmul, a.dtype, b.dtype)
    if not a.ndim or not b.ndim:
        raise ShapeError(f"matmul: shapes {a.shape} and {b.shape} need rank >= 1")
    k_a, k_b = a.shape[-1], b.shape[0 if b.ndim == 1 else -2]
    if k_a != k_b:
        raise ShapeError(
            f"matmul: shapes {a.shape} and {b.shape} are incompatible ({k_a} != {k_b})"
        )
    a2 = _reshape(a, (1, *a.shape)) if a.ndim == 1 else a
    b2 = _reshape(b, (*b.shape, 1)) if b.ndim == 1 else b
    shape = shapes.matmul(a2.shape, b2.shape)
    batch = shape[:-2]
    a3 = _broadcast_to(a2, batch + a2.shape[-2:])
    b3 = _broadcast_to(b2, batch + b2.shape[-2:])
    values = None
    if dtypes.dtype_range(dtype) is not None:
        products = _binary_range("mul", a.integer_range, b.integer_range)  # type: ignore[arg-type]
        values = (k_a * products[0], k_a * products[1])
    result = _derived("matmul", texpr.matmul(a3.expr, b3.expr), shape, dtype, (a, b), values)
    if a.ndim == 1:
        shape = shape[:-2] + shape[-1:]
    if b.ndim == 1:
        shape = shape[:-1]
    return _reshape(result, shape)


def einsum(subscripts: str | Tensor, *operands: object, optimize: object = False) -> Tensor:
    """numpy.einsum: `einsum("ij,jk->ik", a, b)` is `a @ b`. The subscripts are numpy's
    (`eqsat.core.subscripts`: implicit or explicit output, `...`, size-1 dims broadcast, a
    letter repeated in one operand for a diagonal); the operands are tensors or scalars.
    numpy's interleaved form, `einsum(a, [0, 1], b, [1, 2], [0, 2])` (each operand followed by
    its indices as ints below 52 or `...`, then the output's, optional), is the same.

    Each operand's diagonals are taken first (`_diagonals`); the operands are then contracted
    left to right, two at a time, into matmuls, transposes, broadcasting multiplies and sums,
    which eqsat's rules then optimize like any program: a pair is a matmul, batched over the
    other labels, when one label is summed over, both operands have it with one extent, and one
    operand has a label the other lacks; else a multiply and a sum. `optimize` is accepted for
    numpy's signature and ignored.

    It requires: `subscripts` a str, as `parse_subscripts` requires (or the interleaved form);
    at least one Tensor; the Tensors share one dtype.
    """
    del optimize  # numpy's contraction order option: eqsat orders and optimizes the work itself
    if not isinstance(subscripts, str):
        subscripts, operands = _interleaved_subscripts((subscripts, *operands))
    tensors = _operands("einsum", operands)
    spec = parse_subscripts(subscripts, [t.shape for t in tensors])
    views = [_diagonals(t, labels) for t, labels in zip(tensors, spec.inputs, strict=True)]
    result, labels = views[0]
    for position in range(1, len(views)):
        needed = set(spec.output).union(*spec.inputs[position + 1 :])
        result, labels = _contract(result, labels, *views[position], needed)
    result, labels = _sum_labels(result, labels, set(spec.output))
    return result.transpose([labels.index(label) for label in spec.output])


# numpy's letters for the interleaved form's integer indices, in order.
_EINSUM_LETTERS = string.ascii_lowercase + string.ascii_uppercase


def _interleaved_subscripts(arguments: Sequence[object]) -> tuple[str, tuple[object, ...]]:
    """The subscripts and operands of numpy's interleaved einsum arguments: operand, its
    indices, operand, its indices, ..., and optionally the output's indices. Without them the
    output is, as numpy has it, `...` if an operand has one, then the indices that occur once,
    in the order of their numbers (not of their letters: 'B' is 27, after 'b')."""
    pairs = len(arguments) // 2
    operands = arguments[0 : 2 * pairs : 2]
    sublists = [_sublist(s, f"operand {k}") for k, s in enumerate(arguments[1 : 2 * pairs : 2])]
    if not sublists:
        raise TypeError("einsum: at least one operand, followed by its list of indices")
    if len(arguments) % 2:
        output = _sublist(arguments[-1], "the output")
    else:
        counts = Counter(index for sublist in sublists for index in sublist)
        ellipsis = [Ellipsis] if counts.pop(Ellipsis, 0) else []
        output = ellipsis + sorted(index for index, count in counts.items() if count == 1)
    terms = ",".join(map(_sublist_term, sublists))
    return terms + "->" + _sublist_term(output), tuple(operands)


def _sublist(indices: object, where: str) -> list[Any]:
    """An interleaved einsum's list of indices, checked: ints in [0, 52) and Ellipsis."""
    if not isinstance(indices, list | tuple):
        raise ShapeError(f"einsum: the indices of {where} must be a list, got {indices!r}")
    checked: list[Any] = []
    for index in indices:
        if index is Ellipsis:
            checked.append(index)
        elif isinstance(index, int | np.integer) and 0 <= index < len(_EINSUM_LETTERS):
            checked.append(int(index))
        else:
            raise ShapeError(
                f"einsum: index {index!r} of {where} is neither an int in [0, 52) nor ..."
            )
    return checked


def _sublist_term(sublist: Sequence[Any]) -> str:
    """A checked list of indices (`_sublist`) as a term of subscripts: 0 is 'a', 26 is 'A'."""
    return "".join("..." if index is Ellipsis else _EINSUM_LETTERS[index] for index in sublist)


def _diagonals(t: Tensor, labels: Labels) -> tuple[Tensor, Labels]:
    """`t` (one label per axis) with the axes of each label it repeats replaced by one axis,
    their diagonal (numpy.einsum's 'ii->i'), and the labels of its axes. A diagonal is a view:
    the two axes moved last, merged into one of n*n elements and read with step n + 1.

    It requires: the axes of a label have one extent.
    """
    while len(set(labels)) < len(labels):
        label = next(label for at, label in enumerate(labels) if label in labels[:at])
        first = labels.index(label)
        second = labels.index(label, first + 1)
        others = [axis for axis in range(len(labels)) if axis not in (first, second)]
        n = t.shape[first]
        moved = t.transpose([*others, first, second])
        t = moved.reshape(*moved.shape[:-2], n * n)[..., :: n + 1]
        labels = (*(labels[axis] for axis in others), label)
    return t, labels


# einsum: labels of the size-1 axes that stand in for a matrix product's missing row or column
# (a vector operand), removed from the product.
_ROW, _COLUMN = "(row)", "(column)"


def _contract(
    x: Tensor, x_labels: Labels, y: Tensor, y_labels: Labels, needed: set[str]
) -> tuple[Tensor, Labels]:
    """`x` times `y` (one label per axis each; equal labels multiply), summed over the labels
    not `needed` (later or in the output), and the labels of the result's axes."""
    order = tuple(dict.fromkeys((*x_labels, *y_labels)))
    summed = [label for label in order if label not in needed]
    if len(summed) == 1 and _is_matrix_product(x, x_labels, y, y_labels, summed[0]):
        return _matrix_product(x, x_labels, y, y_labels, summed[0])
    product = _arranged(x, x_labels, order) * _arranged(y, y_labels, order)
    return _sum_labels(product, order, needed)


def _is_matrix_product(x: Tensor, x_labels: Labels, y: Tensor, y_labels: Labels, k: str) -> bool:
    """Whether summing `x` times `y` over `k` alone is a matrix product: both have `k`, with one
    extent, and one has a label the other lacks (else it is a dot product, batched or not)."""
    return (
        k in x_labels
        and k in y_labels
        and x.shape[x_labels.index(k)] == y.shape[y_labels.index(k)]
        and set(x_labels) != set(y_labels)
    )


def _matrix_product(
    x: Tensor, x_labels: Labels, y: Tensor, y_labels: Labels, k: str
) -> tuple[Tensor, Labels]:
    """`x` times `y` summed over `k` as one `matmul`, and the labels of its axes: the last label
    only `x` has is the row dim, the last only `y` has the column dim (a size-1 axis stands in
    for a missing one), and every other label is a batch dim, which `matmul` broadcasts where an
    operand lacks it.

    It requires: `_is_matrix_product(x, x_labels, y, y_labels, k)`.
    """
    x_only = [label for label in x_labels if label not in y_labels]
    y_only = [label for label in y_labels if label not in x_labels]
    row = x_only.pop() if x_only else _ROW
    column = y_only.pop() if y_only else _COLUMN
    shared = [label for label in x_labels if label in y_labels and label != k]
    batch = (*shared, *x_only, *y_only)
    product = matmul(
        _arranged(x, x_labels, batch, (row, k)), _arranged(y, y_labels, batch, (k, column))
    )
    labels = (*batch, row, column)
    kept = tuple(label for label in labels if label not in (_ROW, _COLUMN))
    return _reshape(product, tuple(product.shape[labels.index(label)] for label in kept)), kept


def _arranged(t: Tensor, labels: Labels, outer: Labels, inner: Labels = ()) -> Tensor:
    """`t` (one label per axis) with its axes in the order of `outer` + `inner` and a size-1 axis
    for each of those labels it lacks, except the `outer` ones before its first (numpy
    broadcasting adds those in front).

    It requires: every label of `labels` is in `outer` + `inner`.
    """
    order = (*outer, *inner)
    present = [label for label in order if label in labels]
    t = t.transpose([labels.index(label) for label in present])
    start = next((i for i, label in enumerate(outer) if label in labels), len(outer))
    shape = tuple(
        t.shape[present.index(label)] if label in labels else 1 for label in order[start:]
    )
    return _reshape(t, shape)


def _sum_labels(t: Tensor, labels: Labels, kept: set[str]) -> tuple[Tensor, Labels]:
    """`t` (one label per axis) summed over the axes whose labels are not `kept`, and the
    labels of the axes left."""
    summed = tuple(axis for axis, label in enumerate(labels) if label not in kept)
    return t.sum(summed), tuple(label for label in labels if label in kept)


def _dot(a: Tensor, b: Tensor) -> Tensor:
    """numpy.dot where it equals matmul.

    It requires: both operands 1-D or 2-D (numpy.dot of higher ranks is not matmul).
    """
    a, b = _require(a, "dot"), _require(b, "dot")
    if not (1 <= a.ndim <= 2 and 1 <= b.ndim <= 2):
        raise UnsupportedError(
            f"numpy.dot: shapes {a.shape} and {b.shape}; eqsat supports 1-D and 2-D operands "
            "(where dot is matmul): use matmul or @"
        )
    return matmul(a, b)
