"""A rewrite defined once, as data: the egglog rule and its soundness test both come from it.

    Identity(
        name="mul-one",
        identity="x * 1 -> x",
        variables={"x": TExpr},
        lhs=lambda x: TExpr.binary("mul", x, TExpr.const(1.0)),
        rhs=lambda x: x,
    )

`lhs`, `rhs` and `guard` are called with keyword arguments taken from `variables` by parameter
name; a guard may use variables the left side does not bind only if the guard binds them first
(egglog facts such as `base_of(a, c)`), and the right side may not (checked when built).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from egglog import RewriteOrRule, eq, rule, union, var
from egglog.egraph import FactLike

from eqsat.terms import sort_of


def _parameters(fn: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(fn).parameters)


@dataclass(frozen=True)
class Identity:
    name: str  # kebab-case, unique
    identity: str  # one line: "lhs -> rhs"
    variables: Mapping[str, type]
    lhs: Callable[..., Any]
    rhs: Callable[..., Any]
    guard: Callable[..., Sequence[FactLike]] | None = None
    guard_text: str = "none"
    finite_only: bool = False  # holds only for finite inputs
    tags: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        bound = set(_parameters(self.lhs)) | set(_parameters(self.guard) if self.guard else [])
        unbound = set(_parameters(self.rhs)) - bound
        if unbound:
            raise ValueError(f"rule {self.name}: right side uses unbound {sorted(unbound)}")
        unknown = bound - set(self.variables)
        if unknown:
            raise ValueError(f"rule {self.name}: no sort given for {sorted(unknown)}")

    def call(self, fn: Callable[..., Any], values: Mapping[str, Any]) -> Any:
        """Apply lhs, rhs or guard to the values of the variables it names."""
        return fn(**{p: values[p] for p in _parameters(fn)})

    def egglog_rule(self) -> RewriteOrRule:
        """`lhs -> rhs` under the guard, named so run reports can count its matches."""
        pattern: dict[str, Any] = {name: var(name, sort) for name, sort in self.variables.items()}
        guard = self.call(self.guard, pattern) if self.guard else []
        lhs = self.call(self.lhs, pattern)
        root = var("matched_root", sort_of(lhs))
        return rule(eq(root).to(lhs), *guard, name=self.name).then(
            union(root).with_(self.call(self.rhs, pattern))
        )

    def describe(self) -> str:
        return f"{self.name}: {self.identity}  [guard: {self.guard_text}]"
