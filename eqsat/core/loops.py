"""Queries about loop terms shared by the cost model and the emitter (no egglog here)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from eqsat.core.term import Term, index_items, index_list

# Ops the C backend has a vector form for; any other op keeps a loop scalar.
# (log1p, expm1, sin and cos have no vector form yet: their loops run libm's scalar functions)
VECTOR_UNARY = frozenset(
    {"neg", "abs", "sqrt", "relu", "exp", "log", "tanh", "sigmoid", "erf", "sign"}
    | {"floor", "ceil", "rint", "trunc"}
)


# Accumulators a register tile may hold, per ISA: 32 zmm (16 ymm) registers, minus the ones
# the operands of one step need.
REGISTER_BUDGET = {"avx512": 24, "avx2": 12, "scalar": 8}
MASKED_ISAS = frozenset({"avx512"})  # vector loops end in a masked vector (else a scalar tail)
# register tiles may hold a partial vector, loaded and stored under a lane mask (AVX2: maskload
# and maskstore; a partial tile of plain loops made narrow products 1.5-2.7x slower there)
MASKED_TILE_ISAS = frozenset({"avx512", "avx2"})
# the loop kinds that run their iterations on threads (a parallel sum: `privatized`)
PARALLEL_KINDS = frozenset({"LoopKind.parallel", "LoopKind.parallel_sum"})


def base_axis(axis: Term) -> Term | None:
    """The named axis a loop walks with unit stride: itself, or the root of a chain of inner
    splits (a.inner(T1).inner(T2)...)."""
    while axis.op == "Axis.inner":
        parent = axis.args[0]
        assert isinstance(parent, Term)
        axis = parent
    return axis if axis.op == "Axis.named" else None


def pieces_of(axis: Term) -> list[Term]:
    """`axis` and every axis it was split from, innermost first."""
    chain = [axis]
    while chain[-1].op != "Axis.named":
        parent = chain[-1].args[0]
        assert isinstance(parent, Term)
        chain.append(parent)
    return chain


def depends_on(index_list: Term, axis: Term) -> bool:
    """True when some index of `index_list` changes when a loop over `axis` advances."""
    return any(moves_with(item, axis) for item in index_items(index_list))


def moves_with(index: Term, axis: Term) -> bool:
    """True when the value of one index changes when a loop over `axis` advances: it names the
    axis, an axis it was split from, or a piece split from it."""
    if index.op == "Index.axis":
        used = index.args[0]
        assert isinstance(used, Term)
        return used in pieces_of(axis) or axis in pieces_of(used)
    return any(isinstance(a, Term) and moves_with(a, axis) for a in index.args)


def unit_stride_axes(axis: Term) -> list[Term]:
    """The axes whose value grows by one per iteration of a loop over `axis`: the axis itself and
    the axes it was split from through inner pieces only (`a = a.outer * T + a.inner`)."""
    chain = [axis]
    while chain[-1].op == "Axis.inner":
        parent = chain[-1].args[0]
        assert isinstance(parent, Term)
        chain.append(parent)
    return chain


def without_offset(index: Term) -> Term:
    """`i` for an index that adds other terms to a plain axis `i` (`i + c`: a slice's start;
    `h*64 + i`: a head split's column, `eqsat.rewrites.lowering.reshape_index`), else `index`
    itself (`offset_terms` are the others)."""
    return _split_offset(index)[0]


def offset_terms(index: Term) -> list[Term]:
    """What `index` adds to its plain axis `without_offset(index)` (nothing if it is none)."""
    return _split_offset(index)[1]


def _split_offset(index: Term) -> tuple[Term, list[Term]]:
    if index.op == "Index.add":
        for base, offset in (index.args, index.args[::-1]):
            assert isinstance(base, Term) and isinstance(offset, Term)
            plain, others = _split_offset(base)
            if plain.op == "Index.axis":
                return plain, [*others, offset]
    return index, []


def access_kind(index_list: Term, axis: Term) -> str | None:
    """How an access moves along a loop over `axis`: "uniform" (no index moves), "contiguous"
    (the last index names a unit-stride axis of the loop, `unit_stride_axes`, plus terms that do
    not move with it or not (a slice's view `x[:, 1:]`, a head's columns `h*64 + d`), and no
    other index moves) or None (strided or gathered).

    Trailing indices that are named axes of extent 1 are skipped: lowering names an axis after
    the dimension it walks, so they index dimensions of size 1 (`t[k, i1]` with t of shape
    (n, 1) walks t contiguously along k); unless they move with the loop."""
    # (the loop's own axis stays: a target indexed by it is not uniform)
    items = without_unit_tail(index_items(index_list), keep=axis)
    if not any(moves_with(i, axis) for i in items):
        return "uniform"
    last, others = without_offset(items[-1]), [*items[:-1], *offset_terms(items[-1])]
    unit_stride = last.op == "Index.axis" and last.args[0] in unit_stride_axes(axis)
    return "contiguous" if unit_stride and not any(moves_with(i, axis) for i in others) else None


def without_unit_tail(items: list[Term], keep: Term | None = None) -> list[Term]:
    """`items` (of an index list) without the trailing ones that walk a dimension of size 1 (a
    named axis of extent 1: lowering names an axis after the dimension it walks), keeping at
    least one, and any that moves with a loop over `keep`."""
    items = list(items)
    while len(items) > 1 and _walks_a_unit_dimension(items[-1]):
        if keep is not None and moves_with(items[-1], keep):
            break
        items.pop()
    return items


def _walks_a_unit_dimension(index: Term) -> bool:
    if index.op != "Index.axis":
        return False
    axis = index.args[0]
    return isinstance(axis, Term) and axis.op == "Axis.named" and axis.args[1] == 1


def loads_in(scalar: Term) -> list[Term]:
    """Every Scalar.load inside a scalar expression."""
    if scalar.op == "Scalar.load":
        return [scalar]
    return [load for a in scalar.args if isinstance(a, Term) for load in loads_in(a)]


def _vector_ops_ok(scalar: Term, axis: Term) -> bool:
    """Every op of `scalar` has a vector form in a loop over `axis` (an index's value does when
    it is the same in every lane or steps by one a lane)."""
    if scalar.op == "Scalar.unary" and scalar.args[0] not in VECTOR_UNARY:
        return False
    if scalar.op == "Scalar.index":
        return access_kind(index_list([scalar.args[0]]), axis) is not None  # type: ignore[list-item]
    return all(_vector_ops_ok(a, axis) for a in scalar.args if isinstance(a, Term))


def vectorizable(axis: Term, body: Term) -> bool:
    """True when the emitter can run a loop over `axis` with `body` as a SIMD loop."""
    base = base_axis(axis)
    if base is None or body.op not in ("Stmt.store", "Stmt.accumulate"):
        return False
    buffer, target, value = body.args[0], body.args[1], body.args[-1]
    assert isinstance(target, Term) and isinstance(value, Term)
    loads = loads_in(value)
    if any(load.args[0] == buffer for load in loads) or not _vector_ops_ok(value, axis):
        return False
    if any(access_kind(load.args[1], axis) is None for load in loads):  # type: ignore[arg-type]
        return False
    return access_kind(target, axis) == "contiguous" or horizontal(axis, body)


def transposed_loads(outer: Term, inner: Term, body: Term) -> list[Term] | None:
    """The loads a `for outer: for inner: body` copy reads across its rows, when the nest runs
    as blocks of lanes x lanes (`backend_c.emit`: a vector loaded along `outer` from each of
    `lanes` rows, transposed in registers, then `lanes` vector steps along `inner`); else None.
    It requires: `body` is a store contiguous along `inner` whose value has vector ops along
    `inner` and does not read its own buffer; at least one load moves with `inner` by one
    plain unit-stride index and is contiguous along `outer` (the transposed loads); every other
    load is uniform or contiguous along `inner`."""
    if base_axis(outer) is None or base_axis(inner) is None or body.op != "Stmt.store":
        return None
    buffer, target, value = body.args
    assert isinstance(target, Term) and isinstance(value, Term)
    if access_kind(target, inner) != "contiguous" or not _vector_ops_ok(value, inner):
        return None
    transposed = []
    for load in loads_in(value):
        index = load.args[1]
        assert isinstance(index, Term)
        if load.args[0] == buffer:
            return None
        if access_kind(index, inner) is not None:
            continue
        moving = [item for item in index_items(index) if moves_with(item, inner)]
        if (
            access_kind(index, outer) != "contiguous"
            or len(moving) != 1
            or moving[0].op != "Index.axis"
            or moving[0].args[0] not in unit_stride_axes(inner)
        ):
            return None
        if load not in transposed:
            transposed.append(load)
    return transposed or None


def transposed_copy(axis: Term, kind: Term, body: Term) -> tuple[Term, Term, list[Term]] | None:
    """(outer axis, inner loop, transposed loads) of a serial `for axis: for inner: store` copy
    that runs in blocks of lanes x lanes (`transposed_loads`; the emitter's and the cost
    model's one test), or None. The copy may run interchanged, `for inner: for axis: store`,
    when both loops are serial and over different axes: a store whose value reads nothing it
    writes gives every element the same value in either order (a transpose stored along the
    outer loop, read along the inner one: 15% of a 1024 x 768 pairwise-distances kernel ran as
    scalar stores 4 KiB apart)."""
    if kind.op != "LoopKind.serial" or body.op != "Stmt.loop":
        return None
    inner, inner_kind, store = body.args
    assert isinstance(inner, Term) and isinstance(inner_kind, Term) and isinstance(store, Term)
    if inner_kind.op not in ("LoopKind.serial", "LoopKind.vector"):
        return None
    loads = transposed_loads(axis, inner, store)
    if loads is not None:
        return axis, body, loads
    if inner_kind.op != "LoopKind.serial" or pieces_of(axis)[-1] == pieces_of(inner)[-1]:
        return None
    loads = transposed_loads(inner, axis, store)
    if loads is None:
        return None
    return inner, Term("Stmt.loop", (axis, inner_kind, store)), loads


def horizontal(axis: Term, body: Term) -> bool:
    """True when a vector loop over `axis` around `body` is a horizontal reduction: an
    accumulate into one element that does not move along the loop. The emitter keeps its
    partial results in vector registers and reduces them into the element after the loop; the
    cost model prices it that way (no load/store of the element per step)."""
    base = base_axis(axis)
    if base is None or body.op != "Stmt.accumulate":
        return False
    target = body.args[1]
    assert isinstance(target, Term)
    return access_kind(target, axis) == "uniform"


STREAM_MIN_BYTES = 8 << 20  # outputs at least this large are stored around the caches


def caller_input(buffer: str) -> bool:
    """True for an input buffer (`in{i}`, `LoopProgram`): the caller's array, aligned only to
    its dtype (numpy's: 16 bytes), unlike the kernel's line-aligned temporaries."""
    return buffer.startswith("in")


def caller_output(buffer: str) -> bool:
    """True for an output buffer (`out{i}`, `LoopProgram`): the caller's array, dense."""
    return buffer.startswith("out")


def large_output(buffer: str, shape: tuple[int, ...], item_bytes: int) -> bool:
    """True when `buffer` is an output of STREAM_MIN_BYTES or more: too large to stay in cache
    for its reader (its stores may bypass the caches, `streamed_store`)."""
    return caller_output(buffer) and math.prod(shape) * item_bytes >= STREAM_MIN_BYTES


def streamed_store(
    buffer: str, shape: tuple[int, ...], item_bytes: int, target: Term, axis: Term, lanes: int
) -> bool:
    """True when the whole-vector stores of a vector loop over `axis` into `buffer[target]`
    (`buffer` of `shape`) are non-temporal in the emitted C, unless the kernel reads `buffer`
    back: `buffer` is a `large_output` (so it comes 64-byte aligned,
    `backend_c.kernel.OutputPool`), its rows are whole vectors (or it has one row: a flattened
    program's output, `eqsat.rewrites.flatten`), and the loop's vectors start on vector
    boundaries (each split between `axis` and the last index's axis has a tile of whole
    vectors). Such stores skip reading each line before writing it."""
    if not large_output(buffer, shape, item_bytes) or lanes == 1:
        return False
    if math.prod(shape[:-1]) > 1 and shape[-1] % lanes:
        return False  # rows after the first start off vector boundaries
    last = index_items(target)[-1]
    walked = last.args[0] if last.op == "Index.axis" else None
    if walked not in unit_stride_axes(axis):
        return False
    piece = axis
    while piece != walked:
        if int(piece.args[1]) % lanes:  # type: ignore[arg-type]
            return False
        piece = piece.args[0]  # type: ignore[assignment]
    return True


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


@dataclass(frozen=True)
class RegisterTile:
    """A loop whose body is a register tile: Unroll loops (maybe none), then maybe one Vector
    loop of whole vectors, around one accumulate whose element does not move with the loop and
    differs between the copies (its index holds each unrolled axis plainly).
    The emitter keeps the `count` accumulators in registers for the whole loop (loaded before
    it, stored after it); `unrolled` and `vector_axis` are the axes inside, outermost first."""

    unrolled: tuple[Term, ...]
    vector_axis: Term | None
    accumulate: Term
    count: int


def _loop_parts(statement: Term) -> tuple[Term, str, Term]:
    """(axis, kind op, body) of a Stmt.loop term."""
    axis, kind, body = statement.args
    assert isinstance(axis, Term) and isinstance(kind, Term) and isinstance(body, Term)
    return axis, kind.op, body


def register_tile(axis: Term, body: Term, isa: str, lanes: int) -> RegisterTile | None:
    """The register tile of a serial loop over `axis` around `body`, or None when there is none.

    `lanes` is the vector width for the kernel's dtype on `isa` (1 for scalar). On an ISA of
    MASKED_TILE_ISAS, the vector loop's last vector may be partial: its accumulator is loaded
    and stored under a mask."""
    unrolled: list[Term] = []
    while body.op == "Stmt.loop" and _loop_parts(body)[1] == "LoopKind.unroll":
        inner_axis, _, body = _loop_parts(body)
        unrolled.append(inner_axis)
    vector_axis: Term | None = None
    vectors = 1
    if body.op == "Stmt.loop" and _loop_parts(body)[1] == "LoopKind.vector":
        vector_axis, _, body = _loop_parts(body)
        extent = axis_extent(vector_axis)
        base = base_axis(vector_axis)
        if isa == "scalar" or (extent % lanes and isa not in MASKED_TILE_ISAS) or base is None:
            return None
        target = body.args[1]
        assert isinstance(target, Term)
        if not vectorizable(vector_axis, body) or access_kind(target, vector_axis) != "contiguous":
            return None
        vectors = -(-extent // lanes)
    if body.op != "Stmt.accumulate" or not (unrolled or vector_axis):
        return None
    buffer, target, value = body.args[0], body.args[1], body.args[3]
    assert isinstance(target, Term) and isinstance(value, Term)
    if depends_on(target, axis) or any(load.args[0] == buffer for load in loads_in(value)):
        return None
    # Each copy must own its element: the target holds every unrolled axis, or an axis it was
    # split from, plainly (a sum over the unrolled axis, t[i] += x[r, i] with r unrolled, would
    # alias the copies).
    plain = set(index_items(target))
    if any(all(Term("Index.axis", (p,)) not in plain for p in pieces_of(a)) for a in unrolled):
        return None
    count = vectors * math.prod(axis_extent(a) for a in unrolled)
    if count > REGISTER_BUDGET[isa]:
        return None
    return RegisterTile(tuple(unrolled), vector_axis, body, count)


def axis_extent(axis: Term) -> int:
    """The most iterations a loop over `axis` runs (`trip_runs` has them all)."""
    return max(trip_runs(axis))


@functools.cache
def trip_runs(axis: Term) -> Mapping[int, int]:
    """How many times a loop over `axis` runs each number of iterations, per run of its named
    axis. A split by T of an extent E that T does not divide ends in a remainder tile:
    `a.inner(T)` runs T iterations in each full tile and E mod T in the last one (clipped to the
    extent), and `a.outer(T)` runs ceil(E/T) times. One entry when every split above `axis`
    divides its extent. (Cached: read-only.)"""
    a = axis.args
    if axis.op == "Axis.named":
        return {int(a[1]): 1}  # type: ignore[arg-type]
    if axis.op not in ("Axis.outer", "Axis.inner"):
        raise ValueError(f"not an axis: {axis.op}")
    parent, tile = a[0], int(a[1])  # type: ignore[arg-type]
    assert isinstance(parent, Term)
    runs: dict[int, int] = {}
    for trips, count in trip_runs(parent).items():
        if axis.op == "Axis.outer":
            pieces = {-(-trips // tile): count}
        else:
            pieces = {tile: count * (trips // tile), trips % tile: count}
        for piece_trips, piece_count in pieces.items():
            if piece_trips and piece_count:
                runs[piece_trips] = runs.get(piece_trips, 0) + piece_count
    return MappingProxyType(runs)


def trips_here(
    axis: Term, outer_value: Callable[[Term], int], assumed: Mapping[Term, int] | None = None
) -> int:
    """The iterations a loop over `axis` runs in one place of a nest: an inner piece clipped to
    its extent reads the value of its outer piece (`outer_value`, from the loops around it).
    `assumed` fixes the iterations of some pieces (a register-tile variant's)."""
    if assumed is not None and axis in assumed:
        return assumed[axis]
    runs = trip_runs(axis)
    if len(runs) == 1:
        return next(iter(runs))
    parent, tile = axis.args[0], int(axis.args[1])  # type: ignore[arg-type]
    assert isinstance(parent, Term)
    above = trips_here(parent, outer_value, assumed)
    if axis.op == "Axis.outer":
        return -(-above // tile)
    return min(tile, above - outer_value(Term("Axis.outer", (parent, tile))) * tile)


def has_remainder(axis: Term) -> bool:
    """True when a loop over `axis` does not always run the same number of iterations."""
    return len(trip_runs(axis)) > 1


def mean_trips(axis: Term) -> float:
    """The iterations of a loop over `axis`, averaged over its runs."""
    runs = trip_runs(axis)
    return sum(trips * count for trips, count in runs.items()) / sum(runs.values())


def mean_vectors(axis: Term, lanes: int) -> float:
    """The vectors of `lanes` elements (a partial last one counted whole) that a vector loop
    over `axis` runs, averaged over its runs."""
    runs = trip_runs(axis)
    vectors = sum(-(-trips // lanes) * count for trips, count in runs.items())
    return vectors / sum(runs.values())


ACCESS_OPS = ("Scalar.load", "Stmt.store", "Stmt.accumulate")  # their args: buffer, index list


def buffers_accessed(term: Term) -> frozenset[str]:
    """The buffers `term` loads, stores or accumulates anywhere inside it. Memoized on each term
    object, as its hash is (terms share subterms, and the cost model asks it of every candidate
    nest of a program: without a memo, a transformer block's row-block fusion walked its
    statements 10 million times). A memo table keyed by value was slower: a statement rebuilt
    equal to one it held was compared with it node by node, a third of that fusion's time."""
    known: frozenset[str] | None = getattr(term, _BUFFERS_ACCESSED, None)
    if known is None:
        found = {str(term.args[0])} if term.op in ACCESS_OPS else set()
        for arg in term.args:
            if isinstance(arg, Term):
                found |= buffers_accessed(arg)
        known = frozenset(found)
        object.__setattr__(term, _BUFFERS_ACCESSED, known)  # (a frozen dataclass)
    return known


_BUFFERS_ACCESSED = "_buffers_accessed"  # `buffers_accessed`'s memo attribute on a Term


@functools.lru_cache(maxsize=1 << 16)
def accesses(term: Term, buffer: str) -> tuple[Term, ...]:
    """Index lists through which `term` loads, stores or accumulates `buffer`. Memoized, as
    `buffers_accessed` (the cost model asks it of every candidate nest's temporaries)."""
    if buffer not in buffers_accessed(term):
        return ()
    found: list[Term] = []
    if term.op in ACCESS_OPS and term.args[0] == buffer:
        found.append(term.args[1])  # type: ignore[arg-type]
    for arg in term.args:
        if isinstance(arg, Term):
            found.extend(accesses(arg, buffer))
    return tuple(found)


def statements_in(statement: Term) -> Iterator[Term]:
    """Every statement inside `statement`, `statement` included, outermost first."""
    yield statement
    for a in statement.args:
        if isinstance(a, Term) and a.op.startswith("Stmt."):
            yield from statements_in(a)


def top_allocations(body: Term) -> tuple[list[tuple[str, tuple[int, ...]]], Term]:
    """The temporaries allocated at the top of `body` (name, shape), outermost first, and the
    statement under them."""
    allocations = []
    while body.op == "Stmt.alloc":
        name, shape, body = body.args  # type: ignore[assignment]
        allocations.append((str(name), tuple(shape)))  # type: ignore[arg-type]
    return allocations, body


def allocated(allocations: Sequence[tuple[str, tuple[int, ...]]], body: Term) -> Term:
    """`body` under `allocations` (`top_allocations`' form), the first outermost."""
    for name, shape in reversed(allocations):
        body = Term("Stmt.alloc", (name, shape, body))
    return body


def top_statements(statement: Term) -> list[Term]:
    """The statements of a nest of Seq run one after the other, in order."""
    if statement.op == "Stmt.seq":
        return [s for part in statement.args for s in top_statements(part)]  # type: ignore[arg-type]
    return [statement]


def without_first_index(term: Term, buffers: frozenset[str]) -> Term:
    """`term` with the first index of every access to `buffers` dropped: inside a loop that
    indexes them by its axis first, or a block that indexes a one-row temporary by 0, the
    buffers of the other dimensions that one iteration reads and writes."""
    args = tuple(without_first_index(a, buffers) if isinstance(a, Term) else a for a in term.args)
    if term.op in ACCESS_OPS and args[0] in buffers:
        args = (args[0], index_list(index_items(args[1])[1:]), *args[2:])  # type: ignore[arg-type]
    return Term(term.op, args)


def with_first_index(term: Term, buffers: frozenset[str], first: Term) -> Term:
    """`term` with index `first` put first in every access to `buffers` (`without_first_index`
    undone)."""
    args = tuple(
        with_first_index(a, buffers, first) if isinstance(a, Term) else a for a in term.args
    )
    if term.op in ACCESS_OPS and args[0] in buffers:
        items = [first, *index_items(args[1])]  # type: ignore[arg-type]
        args = (args[0], index_list(items), *args[2:])
    return Term(term.op, args)


def row_loop_of(statements: list[Term], buffer: str, shape: tuple[int, ...]) -> Term | None:
    """The one statement touching temporary `buffer`, when it is a loop over its rows (a named
    axis `a` of extent shape[0], or a.outer(T)) and every access indexes the buffer by plain `a`
    first; else None. Such a temporary can live one row (or T rows) at a time inside the loop."""
    users = [s for s in statements if buffer in buffers_accessed(s)]
    if len(users) != 1 or users[0].op != "Stmt.loop" or len(shape) < 2:
        return None
    loop = users[0]
    axis = loop.args[0]
    assert isinstance(axis, Term)
    row_axis = axis.args[0] if axis.op == "Axis.outer" else axis
    assert isinstance(row_axis, Term)
    if row_axis.op != "Axis.named" or row_axis.args[1] != shape[0]:
        return None
    plain = Term("Index.axis", (row_axis,))
    return loop if all(index_items(ix)[0] == plain for ix in accesses(loop, buffer)) else None


@functools.lru_cache(maxsize=1 << 12)
def privatized(axis: Term, body: Term) -> tuple[str, ...]:
    """The buffers a parallel-sum loop over `axis` around `body` sums into per thread: those
    `body` accumulates with op sum, other than the temporaries it allocates, that its iterations
    share: no dimension holds the plain named axis `axis` walks in every index list through which
    `body` touches the buffer (the complement of `eqsat.rewrites.analysis`' partitioned buffers).
    The emitter gives each thread a zeroed copy of each, and adds the copies into the buffer in
    thread order after the loop; the cost model prices that. In sorted order. (Cached.)"""
    named = pieces_of(axis)[-1]
    plain = Term("Index.axis", (named,))
    own = {str(s.args[0]) for s in statements_in(body) if s.op == "Stmt.alloc"}
    summed = {
        str(s.args[0])
        for s in statements_in(body)
        if s.op == "Stmt.accumulate" and s.args[2] == "sum"
    }
    shared = []
    for buffer in sorted(summed - own):
        lists = [index_items(ix) for ix in accesses(body, buffer)]
        dims = set.intersection(
            *({d for d, item in enumerate(items) if item == plain} for items in lists)
        )
        if not dims:
            shared.append(buffer)
    return tuple(shared)
