"""Loop interchange: swap two perfectly nested serial loops where the body allows it.

Two loops over pieces of one axis (a split's outer and inner halves) are never swapped: that
order is the split's meaning of "tile", and allowing it would only add useless strided nests.
This keeps the interchange space of a tiled nest to the interleavings of its axes' pieces.
"""

from __future__ import annotations

from egglog import Ruleset, ne, ruleset
from egglog.egraph import FactLike

from eqsat.core.terms import Axis, LoopKind, Stmt
from eqsat.rewrites.analysis import base_of, reorderable
from eqsat.rewrites.rule import Identity

SERIAL = LoopKind.serial()


def different_axes(a: Axis, b: Axis, c: Axis, d: Axis) -> list[FactLike]:
    """a and b are pieces of different named axes c and d."""
    return [base_of(a, c), base_of(b, d), ne(c).to(d)]


IDENTITIES = (
    Identity(
        "interchange",
        "for a: for b: body -> for b: for a: body",
        {"a": Axis, "b": Axis, "body": Stmt, "c": Axis, "d": Axis},
        lhs=lambda a, b, body: Stmt.loop(a, SERIAL, Stmt.loop(b, SERIAL, body)),
        rhs=lambda a, b, body: Stmt.loop(b, SERIAL, Stmt.loop(a, SERIAL, body)),
        # Swapping reorders only iteration pairs that differ in a; reorderable over c, the axis
        # a walks, makes every such pair commute.
        guard=(different_axes, reorderable),
    ),
)


def interchange_rules() -> Ruleset:
    rules = ruleset(name="interchange")
    rules.register(*(identity.egglog_rule() for identity in IDENTITIES))
    return rules
