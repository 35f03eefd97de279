"""Fusion of sibling loops over the same axis: the producer-consumer and independent cases.

Only serial loops fuse: the annotated forms (Vector, Parallel, Unroll) of the fused loop come
from the annotate rules afterwards, so no form is lost and an annotation never spreads to a body
it was not checked for.

Canonical lowering names axes by role and extent, so the init, accumulate and epilogue nests of a
matmul, or the passes of a softmax, loop over the same axis terms: fusing them needs no renaming.
(Inlining a producer into its consumer happens in the lowering for elementwise chains.)
"""

from __future__ import annotations

from egglog import Ruleset, Set, String, eq, rule, ruleset, var
from egglog.egraph import FactLike

from eqsat.core.terms import Axis, LoopKind, Stmt
from eqsat.rewrites.analysis import EMPTY, asks, base_of, mixed, reads, writes
from eqsat.rewrites.rule import Identity

SERIAL = LoopKind.serial()
VARIABLES = {
    "a": Axis,
    "first": Stmt,
    "second": Stmt,
    "rest": Stmt,
    "c": Axis,
    "pair": Stmt,
    "pair_mixed": Set[String],
}


def fusable(
    a: Axis, first: Stmt, second: Stmt, c: Axis, pair: Stmt, pair_mixed: Set[String]
) -> list[FactLike]:
    """a walks c; each buffer one body writes and the other touches holds plain c in a shared dim.

    Every buffer that one body writes and the other touches is touched by both through index
    lists holding plain `c` in one common dimension, so iteration i of `second` depends only on
    iteration i of `first` (softmax's row t[c, j] then t[c, r] fuses; a neighbour's element
    t[c+1] or a column t[r, c] is refused). The facts start from `mixed` of the candidate pair
    `first; second` (`fusion_candidates`), the rules' fastest way in (`Identity.guard_first`)."""
    shared = (writes(first) & (writes(second) | reads(second))) | (writes(second) & reads(first))
    return [
        eq(pair_mixed).to(mixed(pair, c)),
        eq(pair).to(Stmt.seq(first, second)),
        base_of(a, c),
        eq(shared & pair_mixed).to(EMPTY),
    ]


IDENTITIES = (
    Identity(
        "fuse-siblings",
        "(for a: first); (for a: second) -> for a: (first; second)",
        VARIABLES,
        lhs=lambda a, first, second: Stmt.seq(
            Stmt.loop(a, SERIAL, first), Stmt.loop(a, SERIAL, second)
        ),
        rhs=lambda a, first, second: Stmt.loop(a, SERIAL, Stmt.seq(first, second)),
        guard=(fusable,),
        guard_first=True,
    ),
    Identity(
        "fuse-siblings-then",
        "(for a: first); ((for a: second); rest) -> (for a: (first; second)); rest",
        VARIABLES,
        lhs=lambda a, first, second, rest: Stmt.seq(
            Stmt.loop(a, SERIAL, first), Stmt.seq(Stmt.loop(a, SERIAL, second), rest)
        ),
        rhs=lambda a, first, second, rest: Stmt.seq(
            Stmt.loop(a, SERIAL, Stmt.seq(first, second)), rest
        ),
        guard=(fusable,),
        guard_first=True,
    ),
)


def fusion_candidates() -> Ruleset:
    """Analysis rules: build `first; second` for every pair of sibling loops over one axis, so
    the analyses can compute the footprint the fused body would have (adds no program)."""
    rules = ruleset(name="fusion-candidates")
    a, c = var("a", Axis), var("c", Axis)
    first, second, rest = var("first", Stmt), var("second", Stmt), var("rest", Stmt)
    for identity, pattern in (
        ("fuse-siblings", Stmt.seq(Stmt.loop(a, SERIAL, first), Stmt.loop(a, SERIAL, second))),
        (
            "fuse-siblings-then",
            Stmt.seq(Stmt.loop(a, SERIAL, first), Stmt.seq(Stmt.loop(a, SERIAL, second), rest)),
        ),
    ):
        # asks(first; second, c) where the left side of `identity` matches loops over a piece of c
        rules.register(
            rule(eq(var("s", Stmt)).to(pattern), base_of(a, c), name=f"candidate-{identity}").then(
                asks(Stmt.seq(first, second), c)
            )
        )
    return rules


def fusion_rules() -> Ruleset:
    rules = ruleset(name="fusion")
    rules.register(*(identity.egglog_rule() for identity in IDENTITIES))
    return rules
