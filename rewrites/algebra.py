"""Stage 1: the algebraic identities over tensor terms, one module per operator family.

    algebra_elementwise  + - * /, neg, exp/log, relu/max/min, constant folding
    algebra_matmul       chain order, factoring/distributing over matmul, scalars, transposes
    algebra_layout       transpose, broadcast, reshape
    algebra_reduce       sums of sums, of scaled terms, of broadcasts, over a matmul axis
    algebra_facts        the shape and operand-count analyses the guards read

Every identity holds with numpy broadcasting and keeps the result shape (the shape analysis
panics if a merge ever changes one). The driver repeats a step of `algebra_facts` to saturation,
then one round of `algebra_rules()`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from egglog import Ruleset, ruleset

from eqsat.rewrites import algebra_elementwise, algebra_layout, algebra_matmul, algebra_reduce
from eqsat.rewrites.rule import Identity

IDENTITIES: tuple[Identity, ...] = (
    *algebra_elementwise.IDENTITIES,
    *algebra_matmul.IDENTITIES,
    *algebra_layout.IDENTITIES,
    *algebra_reduce.IDENTITIES,
)


def algebra_rules(extra: Sequence[Identity] = (), *, assume_finite: bool = False) -> Ruleset:
    """The rewrites of stage 1, plus `extra` identities (a user's own, with names distinct from
    the built-in ones); the driver runs `algebra_facts` to saturation before each round
    (`saturate(egraph, algebra_rules(), limits, "algebra", facts=algebra_facts)`).

    Identities marked `finite_only`, built-in or extra, are left out unless `assume_finite`
    (the user's promise that no input or intermediate is NaN or ±inf, like -ffinite-math-only)."""
    if not extra:
        return _built_in_rules(assume_finite)
    taken = {identity.name for identity in IDENTITIES}
    clashes = sorted(identity.name for identity in extra if identity.name in taken)
    if clashes:
        raise ValueError(f"rule names already used by built-in rules: {clashes}")
    return _ruleset((*IDENTITIES, *extra), assume_finite)


@functools.cache
def _built_in_rules(assume_finite: bool) -> Ruleset:
    """The built-in rules, made once per process (making egglog's rules takes ~60 ms)."""
    return _ruleset(IDENTITIES, assume_finite)


def _ruleset(identities: Sequence[Identity], assume_finite: bool) -> Ruleset:
    rules = ruleset(name="algebra")
    rules.register(*(i.egglog_rule() for i in identities if assume_finite or not i.finite_only))
    return rules
