"""Annotations: how a loop runs (Vector, Parallel). They never change what a loop computes.

The guards keep annotations to loops where they are legal and can pay off:
- Vector(w): an innermost loop (its body is one store or accumulate) over a named axis or the
  inner half of a split of one (unit stride); a store must write contiguously along the loop (its
  last index is the loop's axis), so a strided store is refused. The emitter re-checks the loads
  and keeps the loop scalar where it cannot vectorize them.
- Parallel: a loop outside every other loop (OpenMP regions do not nest, and each costs a
  thread-team start) whose iterations are independent (analysis.independent): no two touch the
  same element of a written buffer, so there is no race and no reduction across threads.
- Unroll(n): a loop of n <= MAX_UNROLL iterations around a straight-line body (one store or
  accumulate, maybe inside vector or unrolled loops). Inside a loop that carries a register
  tile this is unroll-and-jam: the emitter keeps the n x vectors accumulators in registers.
"""

from __future__ import annotations

from collections.abc import Iterable

from egglog import Ruleset, String, eq, i64, relation, rule, ruleset
from egglog.egraph import RewriteOrRule

from eqsat.core.terms import Axis, Index, IndexList, LoopKind, Scalar, Stmt
from eqsat.rewrites.analysis import analysis, base_of, extent, independent, top_loop
from eqsat.rewrites.rule import Identity

SERIAL = LoopKind.serial()

MAX_UNROLL = 8

ends_with = relation("ends_with", IndexList, Axis)
unit_stride = relation("unit_stride", Axis, Axis)  # a loop over a walks c with stride 1
straight = relation("straight", Stmt)  # one store or accumulate, maybe in vector/unrolled loops


@analysis.register
def _vector_facts(
    ix: IndexList,
    tail: IndexList,
    head: Index,
    a: Axis,
    p: Axis,
    c: Axis,
    name: String,
    size: i64,
    tile: i64,
    s: Stmt,
    body: Stmt,
    v: Scalar,
    op: String,
) -> Iterable[RewriteOrRule]:
    yield rule(eq(ix).to(IndexList.cons(Index.axis(a), IndexList.nil()))).then(ends_with(ix, a))
    yield rule(eq(ix).to(IndexList.cons(head, tail)), ends_with(tail, a)).then(ends_with(ix, a))
    named = Axis.named(name, size)
    yield rule(eq(a).to(named)).then(unit_stride(a, a))
    yield rule(eq(a).to(Axis.inner(p, tile)), unit_stride(p, c)).then(unit_stride(a, c))
    yield rule(eq(s).to(Stmt.store(name, ix, v))).then(straight(s))
    yield rule(eq(s).to(Stmt.accumulate(name, ix, op, v))).then(straight(s))
    for kind in (LoopKind.vector(tile), LoopKind.unroll(tile)):
        yield rule(eq(s).to(Stmt.loop(a, kind, body)), straight(body)).then(straight(s))


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
            guard=lambda a, c, ix: [unit_stride(a, c), ends_with(ix, c)],
            guard_text="a has unit stride over c; the store's last index is plain c",
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
            guard=lambda a, c: [unit_stride(a, c)],
            guard_text="a has unit stride over c",
        ),
    )


PARALLEL = Identity(
    "parallelize",
    "for a: body -> for a parallel: body",
    {"a": Axis, "c": Axis, "body": Stmt},
    lhs=lambda a, body: Stmt.loop(a, SERIAL, body),
    rhs=lambda a, body: Stmt.loop(a, LoopKind.parallel(), body),
    guard=lambda a, c, body: [top_loop(a, body), base_of(a, c), *independent(body, c)],
    guard_text="the loop is outside every other loop; iterations over a are independent "
    "(analysis.independent)",
)

UNROLL = Identity(
    "unroll",
    "for a: body -> for a unroll(n): body",
    {"a": Axis, "body": Stmt, "n": i64},
    lhs=lambda a, body: Stmt.loop(a, SERIAL, body),
    rhs=lambda a, body, n: Stmt.loop(a, LoopKind.unroll(n), body),
    guard=lambda a, body, n: [
        eq(n).to(extent(a)),
        n > i64(1),
        n <= i64(MAX_UNROLL),
        straight(body),
    ],
    guard_text=f"a has n iterations, 1 < n <= {MAX_UNROLL}; the body is straight-line",
)


def annotate_identities(width: int, cores: int) -> tuple[Identity, ...]:
    """Vector marks of the machine's width, Unroll; Parallel only on a machine with several
    cores."""
    return (*vector_identities(width), UNROLL, *((PARALLEL,) if cores > 1 else ()))


def annotate_rules(width: int, cores: int) -> Ruleset:
    rules = ruleset(name="annotate")
    rules.register(*(identity.egglog_rule() for identity in annotate_identities(width, cores)))
    return rules
