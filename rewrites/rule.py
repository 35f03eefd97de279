"""A rewrite defined once, as data: the egglog rule and its soundness test both come from it.

    Identity(
        name="mul-one",
        identity="x * 1 -> x",
        variables={"x": TExpr},
        lhs=lambda x: TExpr.binary("mul", x, TExpr.const(1.0)),
        rhs=lambda x: x,
    )

`lhs`, `rhs` and each guard predicate are called with keyword arguments taken from `variables` by
parameter name (parameters with a default value are constants of the definition, not variables);
a guard may use variables the left side does not bind only if the guard binds them first (egglog
facts such as `base_of(a, c)` or `eq(s).to(shape_of(x))`), and the right side may not (checked
when built).

The guard is a tuple of named predicates, each a function whose docstring's first line states its
condition (`fusable`, `reorderable`, `has_shape`): the rule's facts are theirs, in order, and
`describe()` (and so `python -m eqsat rules`) prints each predicate's name, parameters and first
docstring line. The text is the code's own docstring, so it cannot drift from the guard; a lambda
or a predicate without a one-line summary is refused.

`finite_only` marks an identity that holds only for finite inputs (x - x is not 0 for inf);
any other identity holds for inf and nan inputs as well, and its soundness test feeds it inf and
nan. The optimizer uses a `finite_only` identity only when the user opts in with
`assume_finite=True` (`eqsat.compile`, `eqsat.optimize`, `@eqsat.jit`; ARCHITECTURE §4's
numerics contract). Every identity is exact in real arithmetic: where an intermediate
overflows, the two sides may differ in float arithmetic, as reassociation allows.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from egglog import RewriteOrRule, eq, rule, union, var
from egglog.egraph import FactLike

from eqsat.core.terms import sort_of

KEBAB_CASE = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")

Predicate = Callable[..., Sequence[FactLike]]  # a named guard: its docstring states the condition


def _parameters(fn: Callable[..., Any]) -> list[str]:
    """The variables `fn` reads: its parameters without a default value."""
    return [p.name for p in inspect.signature(fn).parameters.values() if p.default is p.empty]


def summary(predicate: Predicate) -> str:
    """`name(variables): first line of the docstring`, or "" if `predicate` has no name or its
    docstring does not start with a one-line summary."""
    name = getattr(predicate, "__name__", "<lambda>")
    doc = inspect.getdoc(predicate) or ""
    first, _, _ = doc.partition("\n\n")
    if name == "<lambda>" or not first.strip() or "\n" in first:
        return ""
    return f"{name}({', '.join(_parameters(predicate))}): {first.strip()}"


@dataclass(frozen=True)
class Identity:
    name: str  # kebab-case, unique
    identity: str  # one line: "lhs -> rhs"
    variables: Mapping[str, type]
    lhs: Callable[..., Any]
    rhs: Callable[..., Any]
    guard: tuple[Predicate, ...] = ()  # named predicates, all must hold (module docstring)
    finite_only: bool = False  # holds only for finite inputs (see the module docstring)
    # Match the guard's facts before the left side. egglog joins a rule's facts in the order
    # written; a guard that starts from an analysis table can find its few candidates far faster
    # than the left side's pattern can be filtered by it (fusion: a round 2x faster).
    guard_first: bool = False
    tags: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not KEBAB_CASE.fullmatch(self.name):
            raise ValueError(f"rule {self.name!r}: the name must be kebab-case")
        if "\n" in self.identity:
            raise ValueError(f"rule {self.name}: the identity is one line")
        if not isinstance(self.guard, tuple):
            raise TypeError(f"rule {self.name}: the guard is a tuple of named predicates")
        for predicate in self.guard:
            if not summary(predicate):
                raise ValueError(
                    f"rule {self.name}: guard {predicate!r} is not a named function whose "
                    "docstring starts with a one-line summary of its condition"
                )
        bound = set(_parameters(self.lhs)).union(*(_parameters(p) for p in self.guard))
        unbound = set(_parameters(self.rhs)) - bound
        if unbound:
            raise ValueError(f"rule {self.name}: right side uses unbound {sorted(unbound)}")
        unknown = bound - set(self.variables)
        if unknown:
            raise ValueError(f"rule {self.name}: no sort given for {sorted(unknown)}")

    def call(self, fn: Callable[..., Any], values: Mapping[str, Any]) -> Any:
        """Apply lhs, rhs or a guard predicate to the values of the variables it names."""
        return fn(**{p: values[p] for p in _parameters(fn)})

    def guard_facts(self, values: Mapping[str, Any]) -> list[FactLike]:
        """The facts of every guard predicate, in order, on the values of the variables."""
        return [fact for predicate in self.guard for fact in self.call(predicate, values)]

    def egglog_rule(self, probe: Callable[[Any], Any] | None = None) -> RewriteOrRule:
        """`lhs -> rhs` under the guard, named so run reports can count its matches.

        With `probe` (a test hook: an unextractable constructor of the lhs sort), the rule
        leaves the left side's e-class alone and records the right side as `probe(lhs)`
        instead, so a test can read back the right side the rule builds, guard-bound
        variables included.
        """
        pattern: dict[str, Any] = {name: var(name, sort) for name, sort in self.variables.items()}
        guard = self.guard_facts(pattern)
        lhs = self.call(self.lhs, pattern)
        rhs = self.call(self.rhs, pattern)
        root = var("matched_root", sort_of(lhs))
        facts = [*guard, eq(root).to(lhs)] if self.guard_first else [eq(root).to(lhs), *guard]
        if probe is None:
            return rule(*facts, name=self.name).then(union(root).with_(rhs))
        return rule(*facts, name=f"{self.name}-probe").then(union(probe(root)).with_(rhs))

    def describe(self) -> str:
        """`name: identity`, then a line per guard predicate (`summary`), all from the code."""
        return "\n".join(
            [f"{self.name}: {self.identity}", *(f"    if {summary(p)}" for p in self.guard)]
        )
