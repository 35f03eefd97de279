"""`python -m eqsat rules`: every rewrite rule eqsat runs on this machine, by family.

Each rule is its name and identity, then a line per guard predicate: its name, variables and
the first line of its docstring (`Identity.describe`). All of it comes from the `Identity`
definition that builds the egglog rule and its soundness test, and the guard text from the very
functions that build the guard's facts, so the list cannot go stale.
"""

from __future__ import annotations

from eqsat.extract.machine import Machine, host
from eqsat.rewrites.algebra import IDENTITIES as ALGEBRA
from eqsat.rewrites.annotate import annotate_identities
from eqsat.rewrites.fusion import IDENTITIES as FUSION
from eqsat.rewrites.interchange import IDENTITIES as INTERCHANGE
from eqsat.rewrites.rule import Identity
from eqsat.rewrites.tiling import split_identities, tile_sizes


def rule_catalog(machine: Machine, dtype: str) -> list[tuple[str, tuple[Identity, ...]]]:
    """(family, identities) for every rule family, with this machine's tiles and vector width."""
    return [
        ("algebra (stage 1)", ALGEBRA),
        ("interchange", INTERCHANGE),
        ("tiling", split_identities(tile_sizes(machine, dtype))),
        ("fusion", FUSION),
        ("annotate", annotate_identities(machine.lanes(dtype), machine.cores)),
    ]


def print_rules(machine: Machine | None = None, dtype: str = "float32") -> None:
    machine = machine or host()
    print(
        f"rules for {dtype} on {machine.isa}, {machine.cores} cores "
        "(* = finite inputs only: used under assume_finite=True)"
    )
    for family, identities in rule_catalog(machine, dtype):
        print(f"\n== {family}: {len(identities)} rules")
        for identity in identities:
            mark = "*" if identity.finite_only else " "
            print(f" {mark}" + identity.describe().replace("\n", "\n  "))
