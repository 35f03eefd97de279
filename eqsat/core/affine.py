"""Integral affine functions of loop axes, and what a guard on one costs (no egglog here)."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from eqsat.core.loops import axis_extent
from eqsat.core.term import Term

# A guard whose index reads loops of more iterations than this together is priced as always
# holding (`guard_fraction`): counting them would cost more than the estimate is worth.
GUARD_COUNT_LIMIT = 1 << 20


@dataclass(frozen=True)
class Affine:
    """sum(coefficient * value of key) + constant, integral; a key is an axis term or a masked
    buffer's element coordinate (`eqsat.rewrites.masked_blocks.ELEMENT`, d)."""

    coefficients: tuple[tuple[object, int], ...]  # sorted by str(key), no zero coefficient
    constant: int = 0

    @staticmethod
    def of(coefficients: Mapping[object, int], constant: int = 0) -> Affine:
        kept = sorted(((k, c) for k, c in coefficients.items() if c), key=lambda kc: _order(kc[0]))
        return Affine(tuple(kept), constant)

    def plus(self, other: Affine, factor: int = 1) -> Affine:
        """self + factor * other."""
        total = dict(self.coefficients)
        for key, coefficient in other.coefficients:
            total[key] = total.get(key, 0) + factor * coefficient
        return Affine.of(total, self.constant + factor * other.constant)

    def substituted(self, values: Mapping[object, Affine]) -> Affine:
        """Each key in `values` replaced by its value."""
        result = Affine.of({}, self.constant)
        for key, coefficient in self.coefficients:
            value = values.get(key, Affine.of({key: 1}))
            result = result.plus(value, coefficient)
        return result


@functools.lru_cache(maxsize=4096)
def _order(key: object) -> str:
    """A key's place in `Affine.coefficients`: its text, the same in every process (a Term's
    text is built recursively: cached, the cost model sorts keys on every guard it prices)."""
    return str(key)


def index_affine(index: Term) -> Affine | None:
    """Index `index` as an affine function of axis terms, or None (a div or mod)."""
    a = index.args
    match index.op:
        case "Index.axis":
            return Affine.of({a[0]: 1})
        case "Index.const":
            return Affine.of({}, int(a[0]))  # type: ignore[arg-type]
        case "Index.add":
            x, y = index_affine(a[0]), index_affine(a[1])  # type: ignore[arg-type]
            return None if x is None or y is None else x.plus(y)
        case "Index.scale":
            x = index_affine(a[0])  # type: ignore[arg-type]
            return None if x is None else Affine.of({}).plus(x, int(a[1]))  # type: ignore
    return None


def guard_fraction(index: Term, limit: int, threads: int) -> float:
    """The share of the work of the loops whose axes `index` reads, each over its whole extent,
    that a guard `index <= limit` (`Stmt.guard`) lets run, as its busiest thread of `threads`
    sees it: relative to an even split, the most guarded iterations one thread runs when any one
    of those loops is parallel, its iterations dealt round-robin (the emitter's schedule for a
    guarded loop). 1.0 (an upper bound) where `index` is not affine or the loops run more than
    GUARD_COUNT_LIMIT iterations."""
    affine = index_affine(index)
    if affine is None:
        return 1.0
    extents = [axis_extent(key) for key, _ in affine.coefficients]  # type: ignore[arg-type]
    total = math.prod(extents)
    if total > GUARD_COUNT_LIMIT:
        return 1.0
    index_values: np.ndarray = np.zeros((1,) * len(extents), dtype=np.int64)
    for d, ((_, coefficient), extent) in enumerate(zip(affine.coefficients, extents, strict=True)):
        along = [1] * len(extents)
        along[d] = extent
        index_values = index_values + coefficient * np.arange(extent).reshape(along)
    runs = index_values <= limit - affine.constant
    busiest = float(np.count_nonzero(runs)) / threads  # an even split
    for d, extent in enumerate(extents):
        for thread in range(min(threads, extent)):
            dealt = np.take(runs, range(thread, extent, threads), axis=d)
            busiest = max(busiest, float(np.count_nonzero(dealt)))
    return min(1.0, busiest * threads / total)
