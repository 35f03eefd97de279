"""Analyses over loop terms: facts that add no program, saturated before the rules that read them.

Facts (all conservative: a merge of two e-classes only ever widens them):
- `writes(s)`, `reads(s)`: buffers a statement stores/accumulates into, and loads from;
  `stores(s)`, `sums(s)`, `maxes(s)`, `prods(s)`: the buffers written by each kind of write.
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
- `order_dependent(s, c)`: the buffers of `mixed(s, c)` that `s` writes and does not only
  accumulate with one op, computed once per pair here rather than on every match of the rule
  that reads it (`reorderable`, interchange's guard).
- Helpers: `loads(v)` and `scalar_footprint(v, b)`, the same for a scalar expression;
  `asks_footprint(f, c)`, the footprints `shared_dims` is asked for; `length(ix)`; and
  `not_axis(h, c)`: index `h` is not the plain named axis `c`.

Each rule is named after the fact it derives and the form it matches (`extent-of-outer`), with a
comment stating the fact; one generator per fact (`_extent_rules`, ...) yields them, and
`register_in_order` keeps their order. The guards built from these facts are `independent` and
`reorderable` at the bottom.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import get_type_hints

from egglog import (
    EGraph,
    Ruleset,
    Set,
    String,
    Vec,
    eq,
    f64,
    function,
    i64,
    ne,
    relation,
    rule,
    ruleset,
    set_,
    union,
    var,
)
from egglog.egraph import FactLike, RewriteOrRule

from eqsat.core.terms import (
    REDUCE_OPS,
    Axis,
    Footprint,
    Index,
    IndexList,
    LoopKind,
    Scalar,
    Stmt,
)

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
def prods(s: Stmt) -> Set[String]: ...


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


# The buffers that make the iterations of `s` over axis `axis` depend on their order
# (`reorderable`). It only grows as the facts it is made of widen (`_order_dependent_rules`), so a
# merge by union keeps the value computed from the latest facts.
@function(merge=lambda old, new: old | new)
def order_dependent(s: Stmt, axis: Axis) -> Set[String]: ...


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

RuleGenerator = Callable[..., Iterable[RewriteOrRule]]


def register_in_order(rules: Ruleset, *generators: RuleGenerator) -> None:
    """Register the rules `generators` yield on `rules`, in the order listed.

    Each generator is called like one given to `Ruleset.register`: with an egglog variable per
    parameter, named and typed by it. One deferred generator calls them all, so their rules keep
    the order listed: egglog calls a ruleset's deferred generators last-registered first, and
    the order of a ruleset's rules is the order their matches make e-nodes in, which decides
    e-class ids and so extraction ties.
    """

    def in_order() -> Iterable[RewriteOrRule]:
        for generator in generators:
            hints = get_type_hints(generator)
            names = inspect.signature(generator).parameters
            yield from generator(*(var(name, hints[name]) for name in names))

    rules.register(in_order)


# ---------------------------------------------------------------- facts about scalars


def _loads_rules(
    value: Scalar,
    x: Scalar,
    y: Scalar,
    z: Scalar,
    buffer: String,
    op: String,
    ix: IndexList,
    number: f64,
    position: Index,
    loads_x: Set[String],
    loads_y: Set[String],
    loads_z: Set[String],
) -> Iterable[RewriteOrRule]:
    # loads(buffer[ix]) = {buffer}; scalar_footprint(buffer[ix], buffer) = at(ix)
    yield rule(eq(value).to(Scalar.load(buffer, ix)), name="loads-of-load").then(
        set_(loads(value)).to(Set(buffer)),
        set_(scalar_footprint(value, buffer)).to(Footprint.at(ix)),
    )
    # loads(number) = {}
    yield rule(eq(value).to(Scalar.const(number)), name="loads-of-const").then(
        set_(loads(value)).to(EMPTY)
    )
    # loads(index value) = {}
    yield rule(eq(value).to(Scalar.index(position)), name="loads-of-index").then(
        set_(loads(value)).to(EMPTY)
    )
    # loads(op(x)) = loads(x)
    yield rule(
        eq(value).to(Scalar.unary(op, x)), eq(loads_x).to(loads(x)), name="loads-of-unary"
    ).then(set_(loads(value)).to(loads_x))
    # loads(x op y) = loads(x) | loads(y)
    yield rule(
        eq(value).to(Scalar.binary(op, x, y)),
        eq(loads_x).to(loads(x)),
        eq(loads_y).to(loads(y)),
        name="loads-of-binary",
    ).then(set_(loads(value)).to(loads_x | loads_y))
    # loads(where(x, y, z)) = loads(x) | loads(y) | loads(z)
    yield rule(
        eq(value).to(Scalar.where(x, y, z)),
        eq(loads_x).to(loads(x)),
        eq(loads_y).to(loads(y)),
        eq(loads_z).to(loads(z)),
        name="loads-of-where",
    ).then(set_(loads(value)).to(loads_x | loads_y | loads_z))


def _scalar_footprint_rules(
    value: Scalar, x: Scalar, y: Scalar, z: Scalar, buffer: String, op: String, fp: Footprint
) -> Iterable[RewriteOrRule]:
    # scalar_footprint(op(x), buffer) joins scalar_footprint(x, buffer)
    yield rule(
        eq(value).to(Scalar.unary(op, x)),
        eq(fp).to(scalar_footprint(x, buffer)),
        name="scalar-footprint-of-unary",
    ).then(set_(scalar_footprint(value, buffer)).to(fp))
    # scalar_footprint(x op y, buffer) joins the operand's, for each operand
    for side, operand in (("left", x), ("right", y)):
        yield rule(
            eq(value).to(Scalar.binary(op, x, y)),
            eq(fp).to(scalar_footprint(operand, buffer)),
            name=f"scalar-footprint-of-binary-{side}",
        ).then(set_(scalar_footprint(value, buffer)).to(fp))
    # scalar_footprint(where(x, y, z), buffer) joins the operand's, for each operand
    for part, operand in (("condition", x), ("then", y), ("else", z)):
        yield rule(
            eq(value).to(Scalar.where(x, y, z)),
            eq(fp).to(scalar_footprint(operand, buffer)),
            name=f"scalar-footprint-of-where-{part}",
        ).then(set_(scalar_footprint(value, buffer)).to(fp))


# ---------------------------------------------------------------- facts about statements

BUFFER_SETS = {
    "writes": writes,
    "stores": stores,
    "sums": sums,
    "maxes": maxes,
    "prods": prods,
    "reads": reads,
}
ACCUMULATED = {"sum": sums, "max": maxes, "prod": prods}  # each REDUCE_OPS op's buffer set


def _buffer_sets(prefix: str) -> dict[str, Set[String]]:
    """A variable for each of the buffer sets of one statement, named `prefix_<set>`."""
    return {name: var(f"{prefix}_{name}", Set[String]) for name in BUFFER_SETS}


def _write_rules(
    stmt: Stmt, buffer: String, ix: IndexList, value: Scalar, loaded: Set[String]
) -> Iterable[RewriteOrRule]:
    # buffer[ix] = value: writes = stores = {buffer}, reads = loads(value), footprint = at(ix)
    yield rule(
        eq(stmt).to(Stmt.store(buffer, ix, value)),
        eq(loaded).to(loads(value)),
        name="buffers-of-store",
    ).then(
        set_(writes(stmt)).to(Set(buffer)),
        set_(stores(stmt)).to(Set(buffer)),
        *(set_(kind(stmt)).to(EMPTY) for kind in ACCUMULATED.values()),
        set_(reads(stmt)).to(loaded),
        set_(footprint(stmt, buffer)).to(Footprint.at(ix)),
    )
    for op, kind in ACCUMULATED.items():
        # buffer[ix] op= value: writes = the op's set = {buffer}, reads = loads(value), at(ix)
        yield rule(
            eq(stmt).to(Stmt.accumulate(buffer, ix, op, value)),
            eq(loaded).to(loads(value)),
            name=f"buffers-of-accumulate-{op}",
        ).then(
            set_(writes(stmt)).to(Set(buffer)),
            set_(stores(stmt)).to(EMPTY),
            *(set_(other(stmt)).to(EMPTY) for other in ACCUMULATED.values() if other is not kind),
            set_(kind(stmt)).to(Set(buffer)),
            set_(reads(stmt)).to(loaded),
            set_(footprint(stmt, buffer)).to(Footprint.at(ix)),
        )


def _value_footprint_rules(
    stmt: Stmt, buffer: String, ix: IndexList, value: Scalar, read: String, fp: Footprint
) -> Iterable[RewriteOrRule]:
    for op in REDUCE_OPS:
        # footprint(buffer[ix] op= value, read) joins scalar_footprint(value, read)
        yield rule(
            eq(stmt).to(Stmt.accumulate(buffer, ix, op, value)),
            eq(fp).to(scalar_footprint(value, read)),
            name=f"footprint-of-accumulate-{op}-value",
        ).then(set_(footprint(stmt, read)).to(fp))
    # footprint(buffer[ix] = value, read) joins scalar_footprint(value, read)
    yield rule(
        eq(stmt).to(Stmt.store(buffer, ix, value)),
        eq(fp).to(scalar_footprint(value, read)),
        name="footprint-of-store-value",
    ).then(set_(footprint(stmt, read)).to(fp))


def _nest_rules(
    stmt: Stmt,
    body: Stmt,
    axis: Axis,
    kind: LoopKind,
    buffer: String,
    shape: Vec[i64],
    touched: String,
    fp: Footprint,
) -> Iterable[RewriteOrRule]:
    inner = _buffer_sets("body")
    for form, nest in (
        ("loop", Stmt.loop(axis, kind, body)),
        ("alloc", Stmt.alloc(buffer, shape, body)),
    ):
        # each buffer set of the nest (BUFFER_SETS) is its body's
        yield rule(
            eq(stmt).to(nest),
            *(eq(inner[name]).to(fact(body)) for name, fact in BUFFER_SETS.items()),
            name=f"buffers-of-{form}",
        ).then(*(set_(fact(stmt)).to(inner[name]) for name, fact in BUFFER_SETS.items()))
        # footprint(nest, touched) joins footprint(body, touched)
        yield rule(
            eq(stmt).to(nest), eq(fp).to(footprint(body, touched)), name=f"footprint-of-{form}"
        ).then(set_(footprint(stmt, touched)).to(fp))


def _seq_rules(
    stmt: Stmt, first: Stmt, second: Stmt, touched: String, fp: Footprint
) -> Iterable[RewriteOrRule]:
    of_first, of_second = _buffer_sets("first"), _buffer_sets("second")
    # each buffer set of first; second is the union of theirs
    yield rule(
        eq(stmt).to(Stmt.seq(first, second)),
        *(eq(of_first[name]).to(fact(first)) for name, fact in BUFFER_SETS.items()),
        *(eq(of_second[name]).to(fact(second)) for name, fact in BUFFER_SETS.items()),
        name="buffers-of-seq",
    ).then(
        *(
            set_(fact(stmt)).to(of_first[name] | of_second[name])
            for name, fact in BUFFER_SETS.items()
        )
    )
    # footprint(first; second, touched) joins the footprint of each part
    for label, part in (("first", first), ("second", second)):
        yield rule(
            eq(stmt).to(Stmt.seq(first, second)),
            eq(fp).to(footprint(part, touched)),
            name=f"footprint-of-seq-{label}",
        ).then(set_(footprint(stmt, touched)).to(fp))


# ---------------------------------------------------------------- facts about axes and nests


def _footprint_join_rules(joined: Footprint, fp: Footprint) -> Iterable[RewriteOrRule]:
    # join(fp, fp) = fp
    yield rule(eq(joined).to(Footprint.join(fp, fp)), name="join-idempotent").then(
        union(joined).with_(fp)
    )


def _extent_rules(
    axis: Axis, parent: Axis, axis_name: String, size: i64, tile: i64
) -> Iterable[RewriteOrRule]:
    # extent(named(axis_name, size)) = size; base_of(axis, axis): a named axis walks itself
    yield rule(eq(axis).to(Axis.named(axis_name, size)), name="extent-of-named").then(
        base_of(axis, axis), set_(extent(axis)).to(size)
    )
    # extent(parent.inner(tile)) = tile
    yield rule(eq(axis).to(Axis.inner(parent, tile)), name="extent-of-inner").then(
        set_(extent(axis)).to(tile)
    )
    # extent(parent.outer(tile)) = ceil(extent(parent) / tile): a remainder tile counts
    yield rule(
        eq(axis).to(Axis.outer(parent, tile)), eq(size).to(extent(parent)), name="extent-of-outer"
    ).then(set_(extent(axis)).to((size + tile - i64(1)) / tile))


def _top_rules(
    stmt: Stmt,
    first: Stmt,
    second: Stmt,
    body: Stmt,
    axis: Axis,
    kind: LoopKind,
    buffer: String,
    shape: Vec[i64],
) -> Iterable[RewriteOrRule]:
    # top(first; second) gives top(first) and top(second)
    yield rule(top(stmt), eq(stmt).to(Stmt.seq(first, second)), name="top-of-seq").then(
        top(first), top(second)
    )
    # top(alloc buffer: body) gives top(body)
    yield rule(top(stmt), eq(stmt).to(Stmt.alloc(buffer, shape, body)), name="top-of-alloc").then(
        top(body)
    )
    # top(for axis: body) gives top_loop(axis, body)
    yield rule(top(stmt), eq(stmt).to(Stmt.loop(axis, kind, body)), name="top-loop").then(
        top_loop(axis, body)
    )


def _base_of_rules(axis: Axis, parent: Axis, tile: i64, base: Axis) -> Iterable[RewriteOrRule]:
    # base_of(parent, base) gives base_of(parent.outer(tile), base)
    yield rule(
        eq(axis).to(Axis.outer(parent, tile)), base_of(parent, base), name="base-of-outer"
    ).then(base_of(axis, base))
    # base_of(parent, base) gives base_of(parent.inner(tile), base)
    yield rule(
        eq(axis).to(Axis.inner(parent, tile)), base_of(parent, base), name="base-of-inner"
    ).then(base_of(axis, base))


def _asks_rules(
    stmt: Stmt,
    body: Stmt,
    first: Stmt,
    second: Stmt,
    axis: Axis,
    kind: LoopKind,
    base: Axis,
    buffer: String,
    shape: Vec[i64],
) -> Iterable[RewriteOrRule]:
    # asks(body, base) for the body of a loop over an axis that walks base
    yield rule(
        eq(stmt).to(Stmt.loop(axis, kind, body)), base_of(axis, base), name="asks-of-loop-axis"
    ).then(asks(body, base))
    # asks(stmt, base) gives asks(body, base) for the body of loop stmt
    yield rule(
        eq(stmt).to(Stmt.loop(axis, kind, body)), asks(stmt, base), name="asks-of-loop-body"
    ).then(asks(body, base))
    # asks(stmt, base) gives asks(body, base) for the body of alloc stmt
    yield rule(
        eq(stmt).to(Stmt.alloc(buffer, shape, body)), asks(stmt, base), name="asks-of-alloc-body"
    ).then(asks(body, base))
    # asks(first; second, base) gives asks(first, base) and asks(second, base)
    yield rule(
        eq(stmt).to(Stmt.seq(first, second)), asks(stmt, base), name="asks-of-seq-parts"
    ).then(asks(first, base), asks(second, base))


def _mixed_rules(
    stmt: Stmt,
    base: Axis,
    buffer: String,
    fp: Footprint,
    left: Footprint,
    right: Footprint,
    ix: IndexList,
    dims: Set[i64],
    other_dims: Set[i64],
) -> Iterable[RewriteOrRule]:
    # Buffers NOT partitioned by base. Only this complement may be derived, and only from a
    # complete fact: shared_dims of a footprint exists once every index list in it is known, and
    # it only shrinks as the footprint widens, so "no shared dimension" is final.
    # mixed(stmt, base) = {} for every asked pair, before any buffer is found mixed
    yield rule(asks(stmt, base), name="mixed-of-asked").then(set_(mixed(stmt, base)).to(EMPTY))
    # asks_footprint(footprint(stmt, buffer), base) for every buffer an asked stmt touches
    yield rule(
        asks(stmt, base), eq(footprint(stmt, buffer)).to(fp), name="asks-footprint-of-asked"
    ).then(asks_footprint(fp, base))
    # asks_footprint(join(left, right), base) gives it for left and right
    yield rule(
        asks_footprint(fp, base),
        eq(fp).to(Footprint.join(left, right)),
        name="asks-footprint-of-join-parts",
    ).then(asks_footprint(left, base), asks_footprint(right, base))
    # shared_dims(at(ix), base) = plain_dims(ix, base)
    yield rule(
        asks_footprint(fp, base),
        eq(fp).to(Footprint.at(ix)),
        eq(dims).to(plain_dims(ix, base)),
        name="shared-dims-of-at",
    ).then(set_(shared_dims(fp, base)).to(dims))
    # shared_dims(join(left, right), base) = shared_dims(left, base) & shared_dims(right, base)
    yield rule(
        eq(fp).to(Footprint.join(left, right)),
        eq(dims).to(shared_dims(left, base)),
        eq(other_dims).to(shared_dims(right, base)),
        name="shared-dims-of-join",
    ).then(set_(shared_dims(fp, base)).to(dims & other_dims))
    # mixed(stmt, base) holds buffer if shared_dims(footprint(stmt, buffer), base) is empty
    yield rule(
        asks(stmt, base),
        eq(fp).to(footprint(stmt, buffer)),
        eq(shared_dims(fp, base)).to(EMPTY_DIMS),
        name="mixed-of-unshared",
    ).then(set_(mixed(stmt, base)).to(Set(buffer)))


def _order_dependent_rules(
    stmt: Stmt,
    base: Axis,
    unpartitioned: Set[String],
    written: Set[String],
    stored: Set[String],
    summed: Set[String],
    maxed: Set[String],
    multiplied: Set[String],
    loaded: Set[String],
) -> Iterable[RewriteOrRule]:
    # order_dependent(stmt, base) = (writes & mixed) - the buffers only accumulated with one op,
    # never stored nor read. Each rule sets all six buffer sets of a statement at once, so a
    # written buffer is always stored or accumulated: once in this set it stays (a buffer stored,
    # read, or accumulated with two ops stays so as the sets widen), and the set only grows.
    only_summed = summed - maxed - multiplied
    only_maxed = maxed - summed - multiplied
    only_multiplied = multiplied - summed - maxed
    only_accumulated = (only_summed | only_maxed | only_multiplied) - stored - loaded
    yield rule(
        eq(unpartitioned).to(mixed(stmt, base)),
        eq(written).to(writes(stmt)),
        eq(stored).to(stores(stmt)),
        eq(summed).to(sums(stmt)),
        eq(maxed).to(maxes(stmt)),
        eq(multiplied).to(prods(stmt)),
        eq(loaded).to(reads(stmt)),
        name="order-dependent-of-asked",
    ).then(set_(order_dependent(stmt, base)).to((written & unpartitioned) - only_accumulated))


def _length_rules(ix: IndexList, head: Index, rest: IndexList, n: i64) -> Iterable[RewriteOrRule]:
    # length(nil) = 0
    yield rule(eq(ix).to(IndexList.nil()), name="length-of-nil").then(set_(length(ix)).to(i64(0)))
    # length(cons(head, rest)) = length(rest) + 1
    yield rule(
        eq(ix).to(IndexList.cons(head, rest)), eq(n).to(length(rest)), name="length-of-cons"
    ).then(set_(length(ix)).to(n + 1))


def _plain_dims_rules(
    ix: IndexList,
    head: Index,
    rest: IndexList,
    base: Axis,
    axis_name: String,
    size: i64,
    dims: Set[i64],
    dim: i64,
) -> Iterable[RewriteOrRule]:
    # plain_dims(nil, base) = {} for a named axis base
    yield rule(eq(base).to(Axis.named(axis_name, size)), name="plain-dims-of-nil").then(
        set_(plain_dims(IndexList.nil(), base)).to(EMPTY_DIMS)
    )
    # plain_dims(cons(plain base, rest), base) = plain_dims(rest, base) | {length(rest)}
    yield rule(
        eq(ix).to(IndexList.cons(Index.axis(base), rest)),
        eq(dims).to(plain_dims(rest, base)),
        eq(dim).to(length(rest)),
        name="plain-dims-of-cons-plain",
    ).then(set_(plain_dims(ix, base)).to(dims | Set(dim)))
    # plain_dims(cons(head, rest), base) = plain_dims(rest, base) when head is not plain base
    yield rule(
        eq(ix).to(IndexList.cons(head, rest)),
        eq(dims).to(plain_dims(rest, base)),
        not_axis(head, base),
        name="plain-dims-of-cons-other",
    ).then(set_(plain_dims(ix, base)).to(dims))


def _not_axis_rules(
    index: Index,
    left: Index,
    right: Index,
    k: i64,
    base: Axis,
    axis_name: String,
    size: i64,
    other_name: String,
    other_size: i64,
) -> Iterable[RewriteOrRule]:
    named = Axis.named(axis_name, size)
    for form, other in (
        ("const", Index.const(k)),
        ("add", Index.add(left, right)),
        ("scale", Index.scale(left, k)),
        ("div", Index.div(left, k)),
        ("mod", Index.mod(left, k)),
    ):
        # not_axis(index, base) for an index of this form and a named axis base
        yield rule(eq(index).to(other), eq(base).to(named), name=f"not-axis-{form}").then(
            not_axis(index, base)
        )
    for differs_in, differs in (
        ("name", ne(axis_name).to(other_name)),
        ("extent", ne(size).to(other_size)),
    ):
        # not_axis(index, base) for plain another named axis, of another name or extent
        yield rule(
            eq(index).to(Index.axis(Axis.named(other_name, other_size))),
            eq(base).to(named),
            differs,
            name=f"not-axis-other-{differs_in}",
        ).then(not_axis(index, base))


# annotate.py registers its facts on this ruleset after these, so they come first (see
# `register_in_order`); keep the order: it is the order the rules' matches make e-nodes in.
register_in_order(
    analysis,
    _footprint_join_rules,
    _extent_rules,
    _top_rules,
    _base_of_rules,
    _asks_rules,
    _mixed_rules,
    _order_dependent_rules,
    _length_rules,
    _plain_dims_rules,
    _not_axis_rules,
    _write_rules,
    _value_footprint_rules,
    _nest_rules,
    _seq_rules,
    _loads_rules,
    _scalar_footprint_rules,
)


def mark_program(egraph: EGraph, body: Stmt) -> None:
    """Seed the facts about the whole program (`top`); call once on a new kernel e-graph."""
    egraph.register(top(body))


def independent(body: Stmt, c: Axis) -> list[FactLike]:
    """Iterations of body over c touch disjoint elements of every buffer it writes.

    A loop over (a split of) named axis `c` around `body` may then run its iterations in any
    order or in parallel."""
    return [eq(writes(body) & mixed(body, c)).to(EMPTY)]


def reorderable(body: Stmt, c: Axis) -> list[FactLike]:
    """Iterations of body over c commute: each written buffer is partitioned or only accumulated.

    They may run in any order (not in parallel): every buffer `body` writes is partitioned by
    `c`, or only accumulated with one op and never loaded or stored (reassociating float sums
    is allowed, ARCHITECTURE §4). The fact `order_dependent` holds the buffers that are not."""
    return [eq(order_dependent(body, c)).to(EMPTY)]


def shares_only_sums(body: Stmt, c: Axis) -> list[FactLike]:
    """Iterations of body over c share some written buffers, and only ever sum into them.

    Every buffer body writes that c does not partition is only accumulated with op sum, never
    loaded or stored; each thread may then sum its own iterations into a copy of such a
    buffer, the copies added after the loop (reassociating float sums is allowed,
    ARCHITECTURE §4)."""
    shared = writes(body) & mixed(body, c)
    only_summed = sums(body) - maxes(body) - prods(body) - stores(body) - reads(body)
    return [ne(shared).to(EMPTY), eq(shared - only_summed).to(EMPTY)]
