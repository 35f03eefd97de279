"""Annotations: how a loop runs (Vector, Parallel). They never change what a loop computes.

The guards keep annotations to loops where they are legal and can pay off:
- Vector(w): an innermost loop (its body is one store or accumulate) over a named axis or the
  inner half of a split of one (unit stride); a store must write contiguously along the loop (its
  last index is the loop's axis), so a strided store is refused. The emitter re-checks the loads
  and keeps the loop scalar where it cannot vectorize them.
- Parallel: iterations are independent (analysis.independent): no two touch the same element of
  a written buffer, so there is no race and no reduction across threads.
"""

from __future__ import annotations

from collections.abc import Iterable

from egglog import Ruleset, String, eq, i64, relation, rule, ruleset
from egglog.egraph import RewriteOrRule

from eqsat.terms import Axis, Index, IndexList, LoopKind, Scalar, Stmt
from rewrites.analysis import analysis, base_of, independent
from rewrites.rule import Identity

SERIAL = LoopKind.serial()

ends_with = relation("ends_with", IndexList, Axis)
unit_stride = relation("unit_stride", Axis, Axis)  # a loop over a walks c with stride 1


@analysis.register
def _vector_facts(
    ix: IndexList, tail: IndexList, head: Index, a: Axis, name: String, extent: i64, tile: i64
) -> Iterable[RewriteOrRule]:
    yield rule(eq(ix).to(IndexList.cons(Index.axis(a), IndexList.nil()))).then(ends_with(ix, a))
    yield rule(eq(ix).to(IndexList.cons(head, tail)), ends_with(tail, a)).then(ends_with(ix, a))
    named = Axis.named(name, extent)
    yield rule(eq(a).to(named)).then(unit_stride(a, a))
    yield rule(eq(a).to(Axis.inner(named, tile))).then(unit_stride(a, named))


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
    guard=lambda a, c, body: [base_of(a, c), *independent(body, c)],
    guard_text="iterations over a are independent (analysis.independent)",
)


def annotate_identities(width: int, cores: int) -> tuple[Identity, ...]:
    """Vector marks of the machine's width; Parallel only on a machine with several cores."""
    return vector_identities(width) + ((PARALLEL,) if cores > 1 else ())


def annotate_rules(width: int, cores: int) -> Ruleset:
    rules = ruleset(name="annotate")
    rules.register(*(identity.egglog_rule() for identity in annotate_identities(width, cores)))
    return rules
