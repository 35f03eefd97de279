"""Loop interchange: swap two perfectly nested serial loops where the body allows it."""

from __future__ import annotations

from egglog import Ruleset, ruleset

from eqsat.terms import Axis, LoopKind, Stmt
from rewrites.analysis import base_of, reorderable
from rewrites.rule import Identity

SERIAL = LoopKind.serial()

IDENTITIES = (
    Identity(
        "interchange",
        "for a: for b: body -> for b: for a: body",
        {"a": Axis, "b": Axis, "body": Stmt, "c": Axis},
        lhs=lambda a, b, body: Stmt.loop(a, SERIAL, Stmt.loop(b, SERIAL, body)),
        rhs=lambda a, b, body: Stmt.loop(b, SERIAL, Stmt.loop(a, SERIAL, body)),
        # Swapping reorders only iteration pairs that differ in a; reorderable over a makes
        # every such pair commute.
        guard=lambda a, body, c: [base_of(a, c), *reorderable(body, c)],
        guard_text="iterations of the body over a commute (analysis.reorderable)",
    ),
)


def interchange_rules() -> Ruleset:
    rules = ruleset(name="interchange")
    rules.register(*(identity.egglog_rule() for identity in IDENTITIES))
    return rules
