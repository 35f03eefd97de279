"""Masked blocks: a block of a product whose every result a mask discards is not computed.

    for i0.outer(32) parallel:                 for i0.outer(32) parallel:
      alloc t2[32, n]:                           alloc t2[32, n]:
        for i1.outer(32):                 ->       for i1.outer(32):
          for k: ... t2[i0.inner, i1] += ...         if 32*i1.outer - 32*i0.outer <= 31:
        ... where(i1 - i0 <= 0, t2[i0.inner, i1], -inf)  for k: ... t2[i0.inner, i1] += ...

Causal attention reads each score only where its mask holds (`where(j <= i, scores, -inf)`),
and a mask written with `np.arange` arrives as that predicate on the loop indices, not as an
array (`eqsat.core.array_constants`). After extraction the scores are a temporary computed block
by block; the blocks above the diagonal are never read. `skip_masked_blocks` wraps the body of
such a block loop in a `Stmt.guard`, which runs an iteration only if the mask may hold for an
element it writes.

This is a pass after extraction, like `eqsat.rewrites.packing`: the guard's bound depends on the
block's loops, which only the extracted nest has. The cost model prices a guard by the share
of work it lets its busiest thread run (`eqsat.core.affine.guard_fraction`): extraction prices
each parallel loop with the guards `with_guards` gives it, and the optimizer compares the
scheduled forms and lowerings with theirs. It is sound whatever the values, NaN and ±inf
included, because a skipped element is never read. A temporary B is masked by M when
1. every load of B is under a `where` whose condition is M or its negation, and the load stands
   in the branch M selects (loads of B elsewhere, in a condition say, make B unmasked);
2. M is an affine comparison of indices (`float(j) - float(i) <= 0`), integral, and exact in
   floating point: its terms stay below 2**24;
3. written over B's element coordinates (the load's plain-axis indices) and the loops around
   B's allocation, every load's conditions imply M: the same comparison, or one stronger in
   its constant (a mirrored symmetric product reads t[i, j] where i <= j and t[j, i] where
   i > j, both elements e0 - e1 <= 0; `eqsat.rewrites.lowering`).
A serial or parallel loop L inside B's allocation gets a guard when every statement in its body
writes B at affine indices, or a buffer allocated inside the body; when its body is a block
(not one statement) and L is not a register tile's or a copy's loop, which the emitter shapes
from its body (an unrolled or vector loop, a loop around one statement); and when the guard can
fail. The guard bounds M over
the iteration's elements: the loops L and around it fixed, those inside ranging over their
extents (a remainder tile over-approximated by a full one), so the iteration runs whenever the
mask may hold.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence

from eqsat.core.affine import Affine, index_affine
from eqsat.core.loops import axis_extent, split_tile, statements_in, top_allocations
from eqsat.core.term import Term, index_items

EXACT_BELOW = 2**24  # integers a float32 holds exactly: a mask's comparison is exact below it
GUARD_KINDS = ("LoopKind.serial", "LoopKind.parallel", "LoopKind.parallel_sum")
ELEMENT = "#element"  # a key of Affine: ("#element", d) is the d-th index of the masked buffer


def skip_masked_blocks(body: Term) -> Term:
    """`body` with a guard on every loop of a masked temporary's producer that can skip work
    (module doc)."""
    return _Guarding().statement(body, ())


def top_masks(body: Term) -> dict[str, Affine]:
    """The masks of the temporaries allocated at the top of loop program body `body`, by name:
    those `with_guards` can skip blocks of in any statement of the program."""
    allocations, statement = top_allocations(body)
    masks = {}
    for name, _ in allocations:
        mask = masking(name, statement, ())
        if mask is not None:
            masks[name] = mask
    return masks


def with_guards(statement: Term, masks: Mapping[str, Affine]) -> Term:
    """`statement`, a statement of a program outside every loop whose top-level temporaries
    are masked by `masks` (`top_masks`), with the guards `skip_masked_blocks` gives its loops.
    The cost model prices extracted nests so (`LoopCost`'s `guarded`)."""
    for buffer, mask in masks.items():
        statement = _guarded(statement, buffer, mask, (), ())
    return statement


class _Guarding:
    def statement(self, s: Term, loops: tuple[Term, ...]) -> Term:
        """`s`, inside `loops` (their axes, outermost first), with its masked temporaries'
        producers guarded."""
        a = s.args
        if s.op == "Stmt.loop":
            axis, kind, body = a
            assert isinstance(axis, Term) and isinstance(body, Term)
            return Term(s.op, (axis, kind, self.statement(body, (*loops, axis))))
        if s.op == "Stmt.seq":
            return Term(s.op, tuple(self.statement(x, loops) for x in a))  # type: ignore[arg-type]
        if s.op != "Stmt.alloc":
            return s
        name, shape, body = a
        assert isinstance(body, Term)
        body = self.statement(body, loops)
        mask = masking(str(name), body, loops)
        if mask is not None:
            body = _guarded(body, str(name), mask, loops, ())
        return Term(s.op, (name, shape, body))


def masking(buffer: str, body: Term, around: Sequence[Term]) -> Affine | None:
    """The mask M (`M <= 0` where an element of temporary `buffer` may be read), over its element
    coordinates and the loops `around` its allocation, of `buffer` allocated around `body`; or
    None if it has none (module doc, conditions 1-3)."""
    # M + c <= 0 implies M + c' <= 0 for every c' <= c: per direction M (the coefficients),
    # the least constant c of the strongest condition of each load read so far
    common: dict[tuple[tuple[object, int], ...], int] | None = None
    for statement, _ in _leaves(body, ()):
        value = statement.args[-1]
        assert isinstance(value, Term)
        for load, conditions in _guarded_loads(value, ()):
            if load.args[0] != buffer:
                continue
            items = index_items(load.args[1])  # type: ignore[arg-type]
            strongest: dict[tuple[tuple[object, int], ...], int] = {}
            for condition in conditions:
                mask = _over_elements(condition, items, around)
                if mask is not None:
                    known = strongest.get(mask.coefficients, mask.constant)
                    strongest[mask.coefficients] = max(known, mask.constant)
            if common is not None:
                strongest = {m: min(c, common[m]) for m, c in strongest.items() if m in common}
            common = strongest
            if not common:
                return None
    if not common:
        return None
    return min((Affine(m, c) for m, c in common.items()), key=str)


def _leaves(s: Term, loops: tuple[Term, ...]) -> Iterator[tuple[Term, tuple[Term, ...]]]:
    """The stores and accumulates inside `s`, each with the axes of the loops around it."""
    if s.op in ("Stmt.store", "Stmt.accumulate"):
        yield s, loops
    elif s.op == "Stmt.loop":
        yield from _leaves(s.args[2], (*loops, s.args[0]))  # type: ignore[arg-type]
    else:  # a sequence, an allocation, a guard: their statements
        for arg in s.args:
            if isinstance(arg, Term) and arg.op.startswith("Stmt."):
                yield from _leaves(arg, loops)


def _guarded_loads(
    value: Term, conditions: tuple[Affine, ...]
) -> Iterator[tuple[Term, tuple[Affine, ...]]]:
    """Each load in scalar `value`, with the masks (`M <= 0`) that hold wherever its value is
    used: the affine conditions of the `where` branches it stands in."""
    if value.op == "Scalar.load":
        yield value, conditions
        return
    if value.op == "Scalar.where":
        condition, chosen, other = value.args
        assert isinstance(condition, Term) and isinstance(chosen, Term)
        assert isinstance(other, Term)
        yield from _guarded_loads(condition, conditions)
        mask = _mask(condition)
        if mask is None:
            yield from _guarded_loads(chosen, conditions)
            yield from _guarded_loads(other, conditions)
            return
        negated = Affine.of({}, 1).plus(mask, -1)  # not (M <= 0)  <=>  1 - M <= 0
        yield from _guarded_loads(chosen, (*conditions, mask))
        yield from _guarded_loads(other, (*conditions, negated))
        return
    for arg in value.args:
        if isinstance(arg, Term):
            yield from _guarded_loads(arg, conditions)


def _mask(condition: Term) -> Affine | None:
    """M, over axis terms, with `M <= 0` exactly where scalar `condition` is nonzero, if it
    compares affine functions of indices exactly (module doc, condition 2); else None."""
    if condition.op == "Scalar.where" and condition.args[1:] == (_const(1.0), _const(0.0)):
        return _mask(condition.args[0])  # type: ignore[arg-type]
    if condition.op != "Scalar.binary" or condition.args[0] not in ("lt", "le", "gt", "ge"):
        return None
    op, left, right = condition.args
    lhs, rhs = _scalar_affine(left), _scalar_affine(right)  # type: ignore[arg-type]
    if lhs is None or rhs is None:
        return None
    difference = lhs.plus(rhs, -1)
    largest = abs(difference.constant) + sum(
        abs(c) * (axis_extent(key) - 1)
        for key, c in difference.coefficients  # type: ignore
    )
    if largest >= EXACT_BELOW:
        return None
    return {
        "le": difference,
        "lt": difference.plus(Affine.of({}, 1)),
        "ge": Affine.of({}).plus(difference, -1),
        "gt": Affine.of({}, 1).plus(difference, -1),
    }[str(op)]


def _const(value: float) -> Term:
    return Term("Scalar.const", (value,))


def _scalar_affine(s: Term) -> Affine | None:
    """Scalar `s` as an integral affine function of axes (indices read as numbers), or None."""
    a = s.args
    match s.op:
        case "Scalar.index":
            return index_affine(a[0])  # type: ignore[arg-type]
        case "Scalar.const":
            value = float(a[0])  # type: ignore[arg-type]
            return Affine.of({}, int(value)) if value.is_integer() else None
        case "Scalar.unary" if a[0] == "neg":
            inner = _scalar_affine(a[1])  # type: ignore[arg-type]
            return None if inner is None else Affine.of({}).plus(inner, -1)
        case "Scalar.binary" if a[0] in ("add", "sub", "mul"):
            x, y = _scalar_affine(a[1]), _scalar_affine(a[2])  # type: ignore[arg-type]
            if x is None or y is None:
                return None
            if a[0] != "mul":
                return x.plus(y, 1 if a[0] == "add" else -1)
            for factor, other in ((x, y), (y, x)):
                if not factor.coefficients:
                    return Affine.of({}).plus(other, factor.constant)
    return None


def _over_elements(mask: Affine, items: Sequence[Term], around: Sequence[Term]) -> Affine | None:
    """`mask` (over the axes of the loops where a load with index `items` stands) over the
    load's element coordinates and the loops `around` the allocation, or None if it reads
    another loop."""
    known: dict[Term, Affine] = {
        item.args[0]: Affine.of({(ELEMENT, d): 1})  # type: ignore[misc]
        for d, item in enumerate(items)
        if item.op == "Index.axis"
    }
    known.update({axis: Affine.of({axis: 1}) for axis in around if axis not in known})
    values = {}
    for key, _ in mask.coefficients:
        value = _value(key, known)  # type: ignore[arg-type]
        if value is None:
            return None
        values[key] = value
    return mask.substituted(values)


def _value(axis: Term, known: Mapping[Term, Affine]) -> Affine | None:
    """`axis`'s value from `known` ones: itself, or outer * tile + inner of its split."""
    if axis in known:
        return known[axis]
    tile = split_tile(axis, known)
    if tile is None:
        return None
    outer = _value(Term("Axis.outer", (axis, tile)), known)
    inner = _value(Term("Axis.inner", (axis, tile)), known)
    if outer is None or inner is None:
        return None
    return Affine.of({}).plus(outer, tile).plus(inner)


def _guarded(
    s: Term, buffer: str, mask: Affine, around: tuple[Term, ...], inside: tuple[Term, ...]
) -> Term:
    """`s` (inside `inside`, loops within the allocation of `buffer`, which `around` enclose)
    with a guard on the outermost loops that can skip writes of `buffer` masked by `mask`."""
    if s.op == "Stmt.seq":
        return Term(s.op, tuple(_guarded(x, buffer, mask, around, inside) for x in s.args))  # type: ignore
    if s.op == "Stmt.alloc":
        name, shape, body = s.args
        if name == buffer:
            return s  # another buffer of that name, which `mask` does not describe
        return Term(s.op, (name, shape, _guarded(body, buffer, mask, around, inside)))  # type: ignore
    if s.op != "Stmt.loop" or s.args[1].op not in GUARD_KINDS:  # type: ignore[union-attr]
        return s
    axis, kind, body = s.args
    assert isinstance(axis, Term) and isinstance(body, Term)
    if body.op == "Stmt.guard":
        return s  # guarded already (`with_guards` of a nest with guards)
    guard = _guard(body, buffer, mask, (*around, *inside, axis)) if _shaped_freely(body) else None
    if guard is not None:
        return Term(s.op, (axis, kind, Term("Stmt.guard", (*guard, body))))
    return Term(s.op, (axis, kind, _guarded(body, buffer, mask, around, (*inside, axis))))


def _shaped_freely(body: Term) -> bool:
    """Whether `body` is a block worth a guard whose loop the emitter shapes from nothing in
    it: not one statement (an element, not a block), nor an unrolled or vector loop (a register
    tile's), nor a loop around one statement (a copy)."""
    if body.op in ("Stmt.store", "Stmt.accumulate"):
        return False
    if body.op != "Stmt.loop":
        return True
    kind, inner = body.args[1], body.args[2]
    assert isinstance(kind, Term) and isinstance(inner, Term)
    leaf = inner.op in ("Stmt.store", "Stmt.accumulate")
    return kind.op in ("LoopKind.serial", "LoopKind.parallel") and not leaf


@functools.lru_cache(maxsize=1 << 14)  # extraction prices a body under many candidate loops
def _guard(
    body: Term, buffer: str, mask: Affine, fixed: tuple[Term, ...]
) -> tuple[Term, int] | None:
    """(index, limit) such that `body`, run with the loops `fixed` fixed, may write an element
    of `buffer` that `mask` lets be read only where `index <= limit`; None if `body` writes
    another buffer, or the guard would always hold."""
    own = {str(s.args[0]) for s in statements_in(body) if s.op == "Stmt.alloc"}
    bounds: set[Affine] = set()
    for statement, loops in _leaves(body, ()):
        written = str(statement.args[0])
        if written in own:
            continue
        if written != buffer:
            return None
        elements = [index_affine(item) for item in index_items(statement.args[1])]  # type: ignore
        if any(e is None for e in elements):
            return None
        known = {axis: Affine.of({axis: 1}) for axis in (*fixed, *loops)}
        values: dict[object, Affine] = {}
        for d, element in enumerate(elements):
            assert element is not None
            over_loops = [_value(key, known) for key, _ in element.coefficients]  # type: ignore
            if any(v is None for v in over_loops):
                return None
            values[(ELEMENT, d)] = element.substituted(
                {key: v for (key, _), v in zip(element.coefficients, over_loops, strict=True)}
            )
        over = mask.substituted(values)
        # the least value of the terms of loops inside `body` (ranging over their extents)
        least = sum(min(0, c * (axis_extent(k) - 1)) for k, c in over.coefficients if k in loops)  # type: ignore
        kept = {k: c for k, c in over.coefficients if k not in loops}
        if any(k not in fixed for k in kept):
            return None
        bounds.add(Affine.of(kept, over.constant + least))
    if len(bounds) != 1:
        return None
    (bound,) = bounds
    most = bound.constant + sum(max(0, c * (axis_extent(k) - 1)) for k, c in bound.coefficients)  # type: ignore
    if most <= 0:
        return None  # the guard always holds
    index: Term = Term("Index.const", (0,))
    for key, coefficient in bound.coefficients:
        term = Term("Index.axis", (key,))
        term = term if coefficient == 1 else Term("Index.scale", (term, coefficient))
        index = term if index == Term("Index.const", (0,)) else Term("Index.add", (index, term))
    return index, -bound.constant
