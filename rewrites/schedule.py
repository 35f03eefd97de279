"""The kernel e-graph of stage 2: one loop program, every loop rule, saturated within limits.

    egraph, report = schedule(program.body, machine, "float32", Limits())

The facts (analyses, fusion candidates) are saturated before every round of rewrites
(ARCHITECTURE §4). Growth is bounded by construction: tile sizes come from the machine
(`tiling.tile_sizes`), splits are at most two deep, interchange never swaps two pieces of one
axis, Parallel is only placed outside every other loop, and each kernel gets an e-graph of its
own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from egglog import EGraph, Schedule, unstable_combine_rulesets

from eqsat.core.saturate import Limits, SaturationReport, saturate
from eqsat.core.terms import Term, to_egglog
from eqsat.extract.machine import Machine
from eqsat.rewrites.analysis import analysis, mark_program
from eqsat.rewrites.annotate import annotate_rules
from eqsat.rewrites.fusion import fusion_candidates, fusion_rules
from eqsat.rewrites.interchange import interchange_rules
from eqsat.rewrites.tiling import TileSizes, tile_sizes, tiling_rules

ROOT = "kernel"  # the let-name of the program's e-class


def loop_rules(machine: Machine, dtype: str, tiles: TileSizes | None = None) -> Schedule:
    """Every loop rewrite for `machine`; `tiles` overrides the machine's tile sizes (tests)."""
    return _loop_rules(tiles or tile_sizes(machine, dtype), machine.lanes(dtype), machine.cores)


@functools.cache
def _loop_rules(tiles: TileSizes, lanes: int, cores: int) -> Schedule:
    """The loop rewrites, made once per process for each tiling, vector width and core count
    (making egglog's rules takes ~20 ms)."""
    return unstable_combine_rulesets(
        interchange_rules(),
        tiling_rules(tiles),
        fusion_rules(),
        annotate_rules(lanes, cores),
        name="loop-rules",
    )


def schedule(
    body: Term,
    machine: Machine,
    dtype: str,
    limits: Limits,
    tiles: TileSizes | None = None,
    progress: Callable[[SaturationReport], None] | None = None,
) -> tuple[EGraph, SaturationReport]:
    """The saturated kernel e-graph of loop term `body` (its root is let-bound as ROOT);
    `progress` sees the report after every round (`eqsat.core.saturate.saturate`)."""
    egraph = EGraph()
    # Statements first, innermost first, one expression each: egglog-python binds the shared
    # parts of one big expression in an order that follows Python's string hashing, and the
    # order e-nodes are made in changes what the fact-guarded rules find: one program saturated
    # at different sizes under different PYTHONHASHSEEDs, and at one size with this order
    # (docs/MEASUREMENTS.md).
    built: dict[Term, Any] = {}
    egraph.register(*[to_egglog(s, built) for s in _statements_innermost_first(body)])
    mark_program(egraph, egraph.let(ROOT, to_egglog(body, built)))
    facts = unstable_combine_rulesets(analysis, fusion_candidates(), name="loop-facts")
    report = saturate(
        egraph, loop_rules(machine, dtype, tiles), limits, "loops", facts=facts, progress=progress
    )
    return egraph, report


def _statements_innermost_first(body: Term) -> list[Term]:
    """The distinct Stmt subterms of `body`, each after the statements inside it."""
    found: dict[Term, None] = {}

    def visit(term: Term) -> None:
        if term in found or not term.op.startswith("Stmt."):
            return
        for a in term.args:
            if isinstance(a, Term):
                visit(a)
        found[term] = None

    visit(body)
    return list(found)
