"""einsum's subscript language, checked against the operands' shapes.

`parse_subscripts("ij,jk->ik", [(2, 3), (3, 4)])` names each axis of each operand and of the
result by a label: `Subscripts(inputs=(("i", "j"), ("j", "k")), output=("i", "k"))`. A letter
(a-z, A-Z) is its own label. The dims that `...` stands for are labelled from the right
(`ellipsis_labels`: "...1" is the last), so that they line up across operands as numpy
broadcasting lines them up. Without `->` the output is numpy's implicit one: the `...` dims,
then the letters that appear once in the subscripts, in ASCII order (uppercase first). A label's
extents in different operands must be equal or 1 (the 1 broadcasts, as in numpy); a letter
repeated within one operand (a diagonal, 'ii->i', or a trace, 'ii') names axes of one extent.

Errors are `ShapeError`s (ValueErrors, as numpy raises) that name what is wrong: subscripts that
are malformed or do not fit the operands.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from eqsat.core import shapes
from eqsat.core.errors import ShapeError
from eqsat.core.shapes import Shape

Labels = tuple[str, ...]


class Subscripts(NamedTuple):
    """One label per axis of each operand (`inputs`) and of the result (`output`)."""

    inputs: tuple[Labels, ...]
    output: Labels


def ellipsis_labels(count: int) -> Labels:
    """The labels of the last `count` dims that `...` stands for, in axis order."""
    return tuple(f"...{i}" for i in range(count, 0, -1))


def _is_ellipsis(label: str) -> bool:
    """Whether `label` is one of `ellipsis_labels`, not a letter."""
    return label.startswith("...")


def parse_subscripts(subscripts: str, operand_shapes: Sequence[Shape]) -> Subscripts:
    """The labels of `subscripts` ("ij,jk->ik", "...ij,...jk"; spaces between the letters,
    `...`, `,` and `->` ignored) for operands of `operand_shapes`.

    It requires: one comma-separated term per operand, each with one letter per axis, or fewer
    and one `...` for the rest; a letter's axes in one operand of one extent; each letter's
    extents, and the `...` dims, equal or 1 across operands; an explicit output of distinct
    letters that appear in the inputs, with a `...` if the inputs' `...` stand for any dims.
    """
    if subscripts.count("->") > 1:
        raise ShapeError(f"einsum: subscripts {subscripts!r} have more than one '->'")
    inputs_text, arrow, output_text = subscripts.partition("->")
    terms = inputs_text.split(",")
    if len(terms) != len(operand_shapes):
        raise ShapeError(
            f"einsum: subscripts {subscripts!r} name {len(terms)} operand(s), "
            f"got {len(operand_shapes)}"
        )
    inputs = tuple(
        _operand_labels(term, shape, position)
        for position, (term, shape) in enumerate(zip(terms, operand_shapes, strict=True))
    )
    _check_extents(inputs, operand_shapes)
    ellipsis_rank = max(sum(map(_is_ellipsis, labels)) for labels in inputs)
    if arrow:
        output = _output_labels(output_text, inputs, ellipsis_rank)
    else:
        letters = [label for labels in inputs for label in labels if not _is_ellipsis(label)]
        once = sorted(letter for letter in set(letters) if letters.count(letter) == 1)
        output = (*ellipsis_labels(ellipsis_rank), *once)
    return Subscripts(inputs, output)


def _split_term(term: str, where: str) -> tuple[str, str, bool]:
    """The letters of `term` before and after its `...`, and whether it has one (spaces are
    ignored, as numpy ignores them); `where` names the term in errors ("operand 0", "the
    output")."""
    before, ellipsis, after = (part.replace(" ", "") for part in term.partition("..."))
    for char in before + after:
        if char == ".":
            raise ShapeError(f"einsum: {where} ({term!r}) has a '.' that is not part of one '...'")
        if not (char.isascii() and char.isalpha()):
            raise ShapeError(
                f"einsum: {where} ({term!r}) has {char!r}; indices are letters a-z, A-Z"
            )
    return before, after, bool(ellipsis)


def _repeated(letters: str) -> str | None:
    """The first letter that appears twice in `letters`, if any."""
    return next((c for i, c in enumerate(letters) if c in letters[:i]), None)


def _operand_labels(term: str, shape: Shape, position: int) -> Labels:
    """The labels of operand `position`'s axes, from its term of the subscripts."""
    where = f"operand {position}"
    before, after, has_ellipsis = _split_term(term, where)
    ellipsis_rank = len(shape) - len(before) - len(after)
    if ellipsis_rank < 0 or (ellipsis_rank > 0 and not has_ellipsis):
        raise ShapeError(
            f"einsum: {where} has shape {shape} ({len(shape)} dims), but its subscripts "
            f"{term!r} name {len(before) + len(after)}"
            + ("" if has_ellipsis else " and have no '...' for the rest")
        )
    labels = (*before, *ellipsis_labels(ellipsis_rank), *after)
    for letter in dict.fromkeys(before + after):
        extents = sorted({n for label, n in zip(labels, shape, strict=True) if label == letter})
        if len(extents) > 1:
            raise ShapeError(
                f"einsum: index {letter!r} appears more than once in {where} ({term!r}), on "
                f"axes of extents {' and '.join(map(str, extents))}; a diagonal needs one extent"
            )
    return labels


def _check_extents(inputs: Sequence[Labels], operand_shapes: Sequence[Shape]) -> None:
    """A ShapeError naming the label whose extents neither agree nor broadcast (equal or 1)."""
    extents: dict[str, dict[int, int]] = {}  # label -> operand -> extent
    for position, (labels, shape) in enumerate(zip(inputs, operand_shapes, strict=True)):
        for label, extent in zip(labels, shape, strict=True):
            extents.setdefault(label, {})[position] = extent
    for label, found in extents.items():
        try:
            shapes.broadcast("einsum", *((extent,) for extent in found.values()))
        except ShapeError:
            name = f"the dim {label} of '...'" if _is_ellipsis(label) else f"index {label!r}"
            listed = ", ".join(f"{extent} in operand {at}" for at, extent in found.items())
            raise ShapeError(
                f"einsum: {name} has extents {listed}; they must be equal (or 1, to broadcast)"
            ) from None


def _output_labels(term: str, inputs: Sequence[Labels], ellipsis_rank: int) -> Labels:
    """The labels of the result's axes, from the subscripts' explicit output `term`."""
    before, after, has_ellipsis = _split_term(term, "the output")
    repeated = _repeated(before + after)
    if repeated:
        raise ShapeError(f"einsum: index {repeated!r} appears twice in the output ({term!r})")
    known = {label for labels in inputs for label in labels}
    unknown = next((letter for letter in before + after if letter not in known), None)
    if unknown:
        raise ShapeError(
            f"einsum: the output ({term!r}) has index {unknown!r}, which no operand has"
        )
    if ellipsis_rank and not has_ellipsis:
        raise ShapeError(
            f"einsum: the operands' '...' stand for {ellipsis_rank} dim(s), but the output "
            f"({term!r}) has no '...' to put them in"
        )
    return (*before, *(ellipsis_labels(ellipsis_rank) if has_ellipsis else ()), *after)
