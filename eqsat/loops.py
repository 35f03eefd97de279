"""Queries about loop terms shared by the cost model and the emitter (no egglog here)."""

from __future__ import annotations

from collections.abc import Iterable

from eqsat.terms import Term, index_items

# Ops the C backend has a vector form for; any other op keeps a loop scalar.
VECTOR_UNARY = frozenset({"neg", "abs", "sqrt", "relu"})


def base_axis(axis: Term) -> Term | None:
    """The named axis a loop walks with unit stride: itself, or the parent of an inner split."""
    if axis.op == "Axis.named":
        return axis
    parent = axis.args[0]
    if axis.op == "Axis.inner" and isinstance(parent, Term) and parent.op == "Axis.named":
        return parent
    return None


def mentions(index: Term, axis: Term) -> bool:
    if index.op == "Index.axis":
        return index.args[0] == axis
    return any(isinstance(a, Term) and mentions(a, axis) for a in index.args)


def access_kind(index_list: Term, axis: Term) -> str | None:
    """How an access moves along `axis`: "uniform", "contiguous" (last index is the axis,
    nothing else mentions it) or None (strided or gathered)."""
    items = index_items(index_list)
    if not any(mentions(i, axis) for i in items):
        return "uniform"
    if items[-1] == Term("Index.axis", (axis,)) and not any(mentions(i, axis) for i in items[:-1]):
        return "contiguous"
    return None


def _loads(scalar: Term) -> list[Term]:
    if scalar.op == "Scalar.load":
        return [scalar]
    return [load for a in scalar.args if isinstance(a, Term) for load in _loads(a)]


def _vector_ops_ok(scalar: Term) -> bool:
    if scalar.op == "Scalar.unary" and scalar.args[0] not in VECTOR_UNARY:
        return False
    return all(_vector_ops_ok(a) for a in scalar.args if isinstance(a, Term))


def vectorizable(axis: Term, body: Term) -> bool:
    """True when the emitter can run a loop over `axis` with `body` as a SIMD loop."""
    base = base_axis(axis)
    if base is None or body.op not in ("Stmt.store", "Stmt.accumulate"):
        return False
    buffer, target, value = body.args[0], body.args[1], body.args[-1]
    assert isinstance(target, Term) and isinstance(value, Term)
    loads = _loads(value)
    if any(load.args[0] == buffer for load in loads) or not _vector_ops_ok(value):
        return False
    if any(access_kind(load.args[1], base) is None for load in loads):  # type: ignore[arg-type]
        return False
    target_kind = access_kind(target, base)
    horizontal = body.op == "Stmt.accumulate" and target_kind == "uniform"
    return target_kind == "contiguous" or horizontal


def contains_parallel(statement: Term) -> bool:
    """True when a Parallel loop runs somewhere inside `statement` (OpenMP does not nest)."""
    if statement.op == "Stmt.loop":
        kind = statement.args[1]
        assert isinstance(kind, Term)
        if kind.op == "LoopKind.parallel":
            return True
    return any(
        isinstance(a, Term) and a.op.startswith("Stmt.") and contains_parallel(a)
        for a in statement.args
    )


def split_tile(axis: Term, bound: Iterable[Term]) -> int | None:
    """The tile T of the split of `axis` whose halves (maybe split again) are among `bound`."""
    for node in bound:
        while node.op in ("Axis.outer", "Axis.inner"):
            parent = node.args[0]
            assert isinstance(parent, Term)
            if parent == axis:
                return int(node.args[1])  # type: ignore[arg-type]
            node = parent
    return None
