"""Annotations: how a loop runs (Vector, Parallel). They never change what a loop computes.

The guards keep annotations to loops where they are legal and can pay off:
- Vector(w): an innermost loop (its body is one store or accumulate) over a named axis or the
  inner half of a split of one (unit stride); a store must write contiguously along the loop (its
  last index is the loop's axis, maybe after another axis's multiple: `h*64 + d`), so a strided
  store is refused. The emitter re-checks the loads and keeps the loop scalar where it cannot
  vectorize them.
- Parallel: a loop outside every other loop (OpenMP regions do not nest, and each costs a
  thread-team start) whose iterations are independent (analysis.independent): no two touch the
  same element of a written buffer, so there is no race and no reduction across threads.
- Parallel sum: a loop outside every other loop whose iterations share buffers they only sum
  into (analysis.shares_only_sums: a column sum's rows, `x.T @ r`'s contraction): each thread
  sums its iterations into its own copy of those buffers, added in thread order after the loop.
- Unroll(n): a loop of n <= MAX_UNROLL iterations around a straight-line body (one store or
  accumulate, maybe inside vector or unrolled loops). Inside a loop that carries a register
  tile this is unroll-and-jam: the emitter keeps the n x vectors accumulators in registers.
"""

from __future__ import annotations

from collections.abc import Iterable

from egglog import Ruleset, String, eq, i64, ne, relation, rule, ruleset
from egglog.egraph import FactLike, RewriteOrRule

from eqsat.core.terms import Axis, Index, IndexList, LoopKind, Scalar, Stmt
from eqsat.rewrites.analysis import (
    analysis,
    base_of,
    extent,
    independent,
    register_in_order,
    shares_only_sums,
    top_loop,
)
from eqsat.rewrites.rule import Identity

SERIAL = LoopKind.serial()

MAX_UNROLL = 8

ends_with = relation("ends_with", IndexList, Axis)
unit_stride = relation("unit_stride", Axis, Axis)  # a loop over a walks c with stride 1
straight = relation("straight", Stmt)  # one store or accumulate, maybe in vector/unrolled loops


def _ends_with_rules(
    ix: IndexList, head: Index, rest: IndexList, axis: Axis, other: Axis, other_base: Axis, n: i64
) -> Iterable[RewriteOrRule]:
    # ends_with(cons(plain axis, nil), axis)
    yield rule(
        eq(ix).to(IndexList.cons(Index.axis(axis), IndexList.nil())), name="ends-with-last"
    ).then(ends_with(ix, axis))
    # ... and of cons(other * n + axis, nil) for an axis of another named axis: a head merge's
    # store [s, h*64 + d] walks d contiguously
    offset_last = Index.add(Index.scale(Index.axis(other), n), Index.axis(axis))
    yield rule(
        eq(ix).to(IndexList.cons(offset_last, IndexList.nil())),
        base_of(other, other_base),
        ne(other_base).to(axis),
        name="ends-with-offset-last",
    ).then(ends_with(ix, axis))
    # ends_with(rest, axis) gives ends_with(cons(head, rest), axis)
    yield rule(
        eq(ix).to(IndexList.cons(head, rest)), ends_with(rest, axis), name="ends-with-of-cons"
    ).then(ends_with(ix, axis))


def _unit_stride_rules(
    axis: Axis, parent: Axis, base: Axis, axis_name: String, size: i64, tile: i64
) -> Iterable[RewriteOrRule]:
    # unit_stride(axis, axis) for a named axis
    yield rule(eq(axis).to(Axis.named(axis_name, size)), name="unit-stride-of-named").then(
        unit_stride(axis, axis)
    )
    # unit_stride(parent, base) gives unit_stride(parent.inner(tile), base)
    yield rule(
        eq(axis).to(Axis.inner(parent, tile)),
        unit_stride(parent, base),
        name="unit-stride-of-inner",
    ).then(unit_stride(axis, base))


def _straight_rules(
    stmt: Stmt,
    body: Stmt,
    axis: Axis,
    buffer: String,
    ix: IndexList,
    value: Scalar,
    op: String,
    n: i64,
) -> Iterable[RewriteOrRule]:
    # straight(buffer[ix] = value)
    yield rule(eq(stmt).to(Stmt.store(buffer, ix, value)), name="straight-store").then(
        straight(stmt)
    )
    # straight(buffer[ix] op= value)
    yield rule(
        eq(stmt).to(Stmt.accumulate(buffer, ix, op, value)), name="straight-accumulate"
    ).then(straight(stmt))
    for form, kind in (("vector", LoopKind.vector(n)), ("unroll", LoopKind.unroll(n))):
        # straight(body) gives straight(for axis (vector or unroll): body)
        yield rule(
            eq(stmt).to(Stmt.loop(axis, kind, body)), straight(body), name=f"straight-{form}-loop"
        ).then(straight(stmt))


register_in_order(analysis, _ends_with_rules, _unit_stride_rules, _straight_rules)


# ---------------------------------------------------------------- guards


def unit_stride_over(a: Axis, c: Axis) -> list[FactLike]:
    """A loop over a walks named axis c with stride 1 (c itself or an inner piece of it)."""
    return [unit_stride(a, c)]


def stores_along(ix: IndexList, c: Axis) -> list[FactLike]:
    """The store's last index is plain c, so it writes contiguously along the loop."""
    return [ends_with(ix, c)]


def outermost(a: Axis, c: Axis, body: Stmt) -> list[FactLike]:
    """The loop over a, a piece of named axis c, runs outside every other loop."""
    return [top_loop(a, body), base_of(a, c)]


def few_iterations(a: Axis, n: i64) -> list[FactLike]:
    """A loop over a runs n iterations, 1 < n <= MAX_UNROLL."""
    return [eq(n).to(extent(a)), n > i64(1), n <= i64(MAX_UNROLL)]


def straight_line(body: Stmt) -> list[FactLike]:
    """body is one store or accumulate, maybe inside vector or unrolled loops."""
    return [straight(body)]


def vector_identities(width: int) -> tuple[Identity, ...]:
    store_vars = {"a": Axis, "c": Axis, "buffer": String, "ix": IndexList, "value": Scalar}
    return (
        Identity(
            f"vectorize-store-{width}",
            f"for a: buffer[.., a] = value -> for a vector({width}): buffer[.., a] = value",
            store_vars,
            lhs=lambda a, buffer, ix, value: Stmt.loop(a, SERIAL, Stmt.store(buffer, ix, value)),
            rhs=lambda a, buffer, ix, value: Stmt.loop(
                a, LoopKind.vector(width), Stmt.store(buffer, ix, value)
            ),
            guard=(unit_stride_over, stores_along),
        ),
        Identity(
            f"vectorize-accumulate-{width}",
            f"for a: buffer[ix] op= value -> for a vector({width}): buffer[ix] op= value",
            {**store_vars, "op": String},
            lhs=lambda a, buffer, ix, op, value: Stmt.loop(
                a, SERIAL, Stmt.accumulate(buffer, ix, op, value)
            ),
            rhs=lambda a, buffer, ix, op, value: Stmt.loop(
                a, LoopKind.vector(width), Stmt.accumulate(buffer, ix, op, value)
            ),
            guard=(unit_stride_over,),
        ),
    )


PARALLEL = Identity(
    "parallelize",
    "for a: body -> for a parallel: body",
    {"a": Axis, "c": Axis, "body": Stmt},
    lhs=lambda a, body: Stmt.loop(a, SERIAL, body),
    rhs=lambda a, body: Stmt.loop(a, LoopKind.parallel(), body),
    guard=(outermost, independent),
)

PARALLEL_SUM = Identity(
    "parallelize-sum",
    "for a: body -> for a parallel sum: body",
    {"a": Axis, "c": Axis, "body": Stmt},
    lhs=lambda a, body: Stmt.loop(a, SERIAL, body),
    rhs=lambda a, body: Stmt.loop(a, LoopKind.parallel_sum(), body),
    # the emitter gives each thread its own zeroed copy of the shared buffers
    # (`eqsat.core.loops.privatized`) and adds the copies in thread order
    guard=(outermost, shares_only_sums),
)

UNROLL = Identity(
    "unroll",
    "for a: body -> for a unroll(n): body",
    {"a": Axis, "body": Stmt, "n": i64},
    lhs=lambda a, body: Stmt.loop(a, SERIAL, body),
    rhs=lambda a, body, n: Stmt.loop(a, LoopKind.unroll(n), body),
    guard=(few_iterations, straight_line),
)


def annotate_identities(width: int, cores: int) -> tuple[Identity, ...]:
    """Vector marks of the machine's width, Unroll; Parallel and Parallel-sum only on a machine
    with several cores."""
    return (*vector_identities(width), UNROLL, *((PARALLEL_SUM, PARALLEL) if cores > 1 else ()))


def annotate_rules(width: int, cores: int) -> Ruleset:
    rules = ruleset(name="annotate")
    rules.register(*(identity.egglog_rule() for identity in annotate_identities(width, cores)))
    return rules
