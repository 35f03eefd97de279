"""Analyses over loop terms: facts that add no program, saturated before the rules that read them.

Facts (all conservative: a merge of two e-classes only ever widens them):
- `writes(s)`, `reads(s)`: buffers a statement stores/accumulates into, and loads from;
  `stores(s)`, `sums(s)`, `maxes(s)`: the buffers written by each kind of write.
- `footprint(s, b)`: the one index list through which `s` touches buffer `b` (reads and writes),
  or a `Footprint.join` of several when it touches `b` in more than one way.
- `base_of(a, c)`: `c` is the named axis that axis `a` (a split of a split, maybe) walks.
- `extent(a)`: the number of iterations of a loop over axis `a`.
- `top(s)`: `s` runs outside every loop (seeded on the program by `mark_program`).
- `top_loop(a, body)`: a loop over `a` around `body` runs outside every other loop.
- `asks(s, c)`: `s` runs inside a loop over (a split of) `c`. The per-axis fact below is only
  computed for these pairs, which keeps it finite.
- `plain_dims(ix, c)`: the dimensions (counted from the last, 0-based) where index list `ix` is
  the plain axis `c`; `shared_dims(f, c)` the dimensions plain `c` in every index list of a
  footprint (an intersection: it only shrinks as the footprint widens).
- `mixed(s, c)`: buffers that `s` touches through index lists with no common dimension holding
  plain `c`. Every other buffer is partitioned by `c` along that dimension: iterations with
  different values of `c` touch disjoint elements of it.

The guards built from these facts are `independent` and `reorderable` at the bottom.
"""

from __future__ import annotations

from collections.abc import Iterable

from egglog import (
    EGraph,
    Set,
    String,
    Vec,
    eq,
    f64,
    function,
    i64,
    ne,
    relation,
    rewrite,
    rule,
    ruleset,
    set_,
)
from egglog.egraph import FactLike, RewriteOrRule

from eqsat.core.terms import Axis, Footprint, Index, IndexList, LoopKind, Scalar, Stmt

EMPTY = Set[String].empty()
EMPTY_DIMS = Set[i64].empty()


@function(merge=lambda old, new: old | new)
def writes(s: Stmt) -> Set[String]: ...


@function(merge=lambda old, new: old | new)
def stores(s: Stmt) -> Set[String]: ...


@function(merge=lambda old, new: old | new)
def sums(s: Stmt) -> Set[String]: ...


@function(merge=lambda old, new: old | new)
def maxes(s: Stmt) -> Set[String]: ...


@function(merge=lambda old, new: old | new)
def reads(s: Stmt) -> Set[String]: ...


@function(merge=lambda old, new: old | new)
def loads(v: Scalar) -> Set[String]: ...


@function(merge=lambda old, new: Footprint.join(old, new))
def footprint(s: Stmt, buffer: String) -> Footprint: ...


@function(merge=lambda old, new: Footprint.join(old, new))
def scalar_footprint(v: Scalar, buffer: String) -> Footprint: ...


@function(merge=lambda old, new: old | new)
def mixed(s: Stmt, axis: Axis) -> Set[String]: ...


@function
def plain_dims(ix: IndexList, axis: Axis) -> Set[i64]: ...


@function(merge=lambda old, new: old & new)
def shared_dims(f: Footprint, axis: Axis) -> Set[i64]: ...


@function
def length(ix: IndexList) -> i64: ...


@function
def extent(a: Axis) -> i64: ...


base_of = relation("base_of", Axis, Axis)
top = relation("top", Stmt)
top_loop = relation("top_loop", Axis, Stmt)
asks = relation("asks", Stmt, Axis)
asks_footprint = relation("asks_footprint", Footprint, Axis)
not_axis = relation("not_axis", Index, Axis)

analysis = ruleset(name="analysis")


@analysis.register
def _scalar_loads(
    v: Scalar,
    x: Scalar,
    y: Scalar,
    z: Scalar,
    b: String,
    op: String,
    ix: IndexList,
    value: f64,
    s1: Set[String],
    s2: Set[String],
    s3: Set[String],
    f1: Footprint,
    f2: Footprint,
    f3: Footprint,
) -> Iterable[RewriteOrRule]:
    yield rule(eq(v).to(Scalar.load(b, ix))).then(
        set_(loads(v)).to(Set(b)), set_(scalar_footprint(v, b)).to(Footprint.at(ix))
    )
    yield rule(eq(v).to(Scalar.const(value))).then(set_(loads(v)).to(EMPTY))
    yield rule(eq(v).to(Scalar.unary(op, x)), eq(s1).to(loads(x))).then(set_(loads(v)).to(s1))
    yield rule(eq(v).to(Scalar.binary(op, x, y)), eq(s1).to(loads(x)), eq(s2).to(loads(y))).then(
        set_(loads(v)).to(s1 | s2)
    )
    yield rule(
        eq(v).to(Scalar.where(x, y, z)),
        eq(s1).to(loads(x)),
        eq(s2).to(loads(y)),
        eq(s3).to(loads(z)),
    ).then(set_(loads(v)).to(s1 | s2 | s3))
    # footprints flow up from every operand
    yield rule(eq(v).to(Scalar.unary(op, x)), eq(f1).to(scalar_footprint(x, b))).then(
        set_(scalar_footprint(v, b)).to(f1)
    )
    for operand in (x, y):
        yield rule(eq(v).to(Scalar.binary(op, x, y)), eq(f1).to(scalar_footprint(operand, b))).then(
            set_(scalar_footprint(v, b)).to(f1)
        )
    for operand in (x, y, z):
        yield rule(eq(v).to(Scalar.where(x, y, z)), eq(f1).to(scalar_footprint(operand, b))).then(
            set_(scalar_footprint(v, b)).to(f1)
        )
    del f2, f3


@analysis.register
def _statement_buffers(
    s: Stmt,
    x: Stmt,
    y: Stmt,
    v: Scalar,
    a: Axis,
    k: LoopKind,
    b: String,
    c: String,
    ix: IndexList,
    shape: Vec[i64],
    f1: Footprint,
    s1: Set[String],
    s2: Set[String],
    s3: Set[String],
    s4: Set[String],
    s5: Set[String],
    t1: Set[String],
    t2: Set[String],
    t3: Set[String],
    t4: Set[String],
    t5: Set[String],
) -> Iterable[RewriteOrRule]:
    yield rule(eq(s).to(Stmt.store(b, ix, v)), eq(s1).to(loads(v))).then(
        set_(writes(s)).to(Set(b)),
        set_(stores(s)).to(Set(b)),
        set_(sums(s)).to(EMPTY),
        set_(maxes(s)).to(EMPTY),
        set_(reads(s)).to(s1),
        set_(footprint(s, b)).to(Footprint.at(ix)),
    )
    for op, kind, other in (("sum", sums, maxes), ("max", maxes, sums)):
        yield rule(eq(s).to(Stmt.accumulate(b, ix, op, v)), eq(s1).to(loads(v))).then(
            set_(writes(s)).to(Set(b)),
            set_(stores(s)).to(EMPTY),
            set_(kind(s)).to(Set(b)),
            set_(other(s)).to(EMPTY),
            set_(reads(s)).to(s1),
            set_(footprint(s, b)).to(Footprint.at(ix)),
        )
    for op in ("sum", "max"):
        yield rule(eq(s).to(Stmt.accumulate(b, ix, op, v)), eq(f1).to(scalar_footprint(v, c))).then(
            set_(footprint(s, c)).to(f1)
        )
    yield rule(eq(s).to(Stmt.store(b, ix, v)), eq(f1).to(scalar_footprint(v, c))).then(
        set_(footprint(s, c)).to(f1)
    )
    facts = (writes, stores, sums, maxes, reads)
    for wrapper in (Stmt.loop(a, k, x), Stmt.alloc(b, shape, x)):
        yield rule(
            eq(s).to(wrapper),
            *(eq(t).to(f(x)) for t, f in zip((s1, s2, s3, s4, s5), facts, strict=True)),
        ).then(*(set_(f(s)).to(t) for t, f in zip((s1, s2, s3, s4, s5), facts, strict=True)))
        yield rule(eq(s).to(wrapper), eq(f1).to(footprint(x, c))).then(set_(footprint(s, c)).to(f1))
    yield rule(
        eq(s).to(Stmt.seq(x, y)),
        *(eq(t).to(f(x)) for t, f in zip((s1, s2, s3, s4, s5), facts, strict=True)),
        *(eq(t).to(f(y)) for t, f in zip((t1, t2, t3, t4, t5), facts, strict=True)),
    ).then(
        *(
            set_(f(s)).to(p | q)
            for p, q, f in zip((s1, s2, s3, s4, s5), (t1, t2, t3, t4, t5), facts, strict=True)
        )
    )
    for part in (x, y):
        yield rule(eq(s).to(Stmt.seq(x, y)), eq(f1).to(footprint(part, c))).then(
            set_(footprint(s, c)).to(f1)
        )


@analysis.register
def _axes(
    s: Stmt,
    x: Stmt,
    y: Stmt,
    a: Axis,
    c: Axis,
    k: LoopKind,
    b: String,
    t: i64,
    n: String,
    e: i64,
    h: Index,
    ix: IndexList,
    tail: IndexList,
    parent: Axis,
    shape: Vec[i64],
    fp: Footprint,
    fp2: Footprint,
    n2: String,
    e2: i64,
    h2: Index,
    h3: Index,
    fp3: Footprint,
    d: Set[i64],
    d2: Set[i64],
) -> Iterable[RewriteOrRule]:
    yield rewrite(Footprint.join(fp, fp)).to(fp)
    yield rule(eq(a).to(Axis.named(n, e))).then(base_of(a, a), set_(extent(a)).to(e))
    yield rule(eq(a).to(Axis.inner(parent, t))).then(set_(extent(a)).to(t))
    yield rule(eq(a).to(Axis.outer(parent, t)), eq(e).to(extent(parent))).then(
        set_(extent(a)).to((e + t - i64(1)) / t)  # ceil: a remainder tile counts
    )
    yield rule(top(s), eq(s).to(Stmt.seq(x, y))).then(top(x), top(y))
    yield rule(top(s), eq(s).to(Stmt.alloc(b, shape, x))).then(top(x))
    yield rule(top(s), eq(s).to(Stmt.loop(a, k, x))).then(top_loop(a, x))
    yield rule(eq(a).to(Axis.outer(parent, t)), base_of(parent, c)).then(base_of(a, c))
    yield rule(eq(a).to(Axis.inner(parent, t)), base_of(parent, c)).then(base_of(a, c))
    # which statements run inside a loop over (a split of) c
    yield rule(eq(s).to(Stmt.loop(a, k, x)), base_of(a, c)).then(asks(x, c))
    yield rule(eq(s).to(Stmt.loop(a, k, x)), asks(s, c)).then(asks(x, c))
    yield rule(eq(s).to(Stmt.alloc(b, shape, x)), asks(s, c)).then(asks(x, c))
    yield rule(eq(s).to(Stmt.seq(x, y)), asks(s, c)).then(asks(x, c), asks(y, c))
    # Buffers NOT partitioned by c. Only this complement may be derived, and only from a
    # complete fact: shared_dims of a footprint exists once every index list in it is known, and
    # it only shrinks as the footprint widens, so "no shared dimension" is final.
    yield rule(asks(s, c)).then(set_(mixed(s, c)).to(EMPTY))
    yield rule(asks(s, c), eq(footprint(s, b)).to(fp)).then(asks_footprint(fp, c))
    yield rule(asks_footprint(fp, c), eq(fp).to(Footprint.join(fp2, fp3))).then(
        asks_footprint(fp2, c), asks_footprint(fp3, c)
    )
    yield rule(
        asks_footprint(fp, c), eq(fp).to(Footprint.at(ix)), eq(d).to(plain_dims(ix, c))
    ).then(set_(shared_dims(fp, c)).to(d))
    yield rule(
        eq(fp).to(Footprint.join(fp2, fp3)),
        eq(d).to(shared_dims(fp2, c)),
        eq(d2).to(shared_dims(fp3, c)),
    ).then(set_(shared_dims(fp, c)).to(d & d2))
    yield rule(
        asks(s, c), eq(fp).to(footprint(s, b)), eq(shared_dims(fp, c)).to(EMPTY_DIMS)
    ).then(set_(mixed(s, c)).to(Set(b)))
    named = Axis.named(n, e)
    yield rule(eq(ix).to(IndexList.nil())).then(set_(length(ix)).to(i64(0)))
    yield rule(eq(ix).to(IndexList.cons(h, tail)), eq(t).to(length(tail))).then(
        set_(length(ix)).to(t + 1)
    )
    yield rule(eq(c).to(named)).then(set_(plain_dims(IndexList.nil(), c)).to(EMPTY_DIMS))
    yield rule(
        eq(ix).to(IndexList.cons(Index.axis(c), tail)),
        eq(d).to(plain_dims(tail, c)),
        eq(t).to(length(tail)),
    ).then(set_(plain_dims(ix, c)).to(d | Set(t)))
    yield rule(
        eq(ix).to(IndexList.cons(h, tail)), eq(d).to(plain_dims(tail, c)), not_axis(h, c)
    ).then(set_(plain_dims(ix, c)).to(d))
    for other in (
        Index.const(t),
        Index.add(h, h2),
        Index.scale(h, t),
        Index.div(h, t),
        Index.mod(h, t),
    ):
        yield rule(eq(h3).to(other), eq(c).to(named)).then(not_axis(h3, c))
    for differs in (ne(n).to(n2), ne(e).to(e2)):
        yield rule(eq(h).to(Index.axis(Axis.named(n2, e2))), eq(c).to(named), differs).then(
            not_axis(h, c)
        )


def mark_program(egraph: EGraph, body: Stmt) -> None:
    """Seed the facts about the whole program (`top`); call once on a new kernel e-graph."""
    egraph.register(top(body))


def independent(body: Stmt, base: Axis) -> list[FactLike]:
    """Guard: iterations of a loop over (a split of) `base` around `body` touch disjoint
    elements of every buffer the body writes, so they may run in any order or in parallel."""
    return [eq(writes(body) & mixed(body, base)).to(EMPTY)]


def reorderable(body: Stmt, base: Axis) -> list[FactLike]:
    """Guard: iterations over `base` may run in any order (not in parallel): every written
    buffer is partitioned, or only accumulated with one op and never loaded or stored
    (reassociating float sums is allowed, ARCHITECTURE §4)."""
    commutative = ((sums(body) - maxes(body)) | (maxes(body) - sums(body))) - stores(body)
    only_accumulated = commutative - reads(body)
    return [eq((writes(body) & mixed(body, base)) - only_accumulated).to(EMPTY)]
