"""The saturation driver: runs a schedule in small steps and enforces every limit.

egglog 13 has no node limit and no timeout, so the driver checks the e-graph's size and the
elapsed time between steps. One step = the analyses run to saturation, then one round of the
rewrite rules (DESIGN §4: analyses are saturated before the rules that read them). It stops on
saturation, node limit, time limit or iteration limit and says which; a limit is never an error.
A limit can be overshot by at most one step.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from egglog import EGraph, Schedule

from eqsat.terms import CONSTRUCTORS


@dataclass(frozen=True)
class Limits:
    nodes: int = 200_000  # term e-nodes (analysis facts not counted)
    seconds: float = 2.0
    iterations: int = 30


@dataclass
class SaturationReport:
    stage: str
    stop_reason: str = "not run"  # saturated | node limit | time limit | iteration limit
    iterations: int = 0
    nodes: int = 0
    seconds: float = 0.0
    matches: Counter[str] = field(default_factory=Counter)

    def summary(self) -> str:
        fired = ", ".join(f"{name} x{n}" for name, n in sorted(self.matches.items()) if n)
        return (
            f"{self.stage}: {self.stop_reason} after {self.iterations} iterations, "
            f"{self.nodes} e-nodes, {self.seconds:.2f} s; rules fired: {fired or 'none'}"
        )


def term_nodes(egraph: EGraph) -> int:
    """Number of term e-nodes (constructor rows) in the e-graph."""
    return sum(size for fn, size in egraph.all_function_sizes() if str(fn) in CONSTRUCTORS)


def saturate(egraph: EGraph, step: Schedule, limits: Limits, stage: str) -> SaturationReport:
    """Run `step` until saturation or a limit; returns the report (never raises on a limit)."""
    report = SaturationReport(stage)
    start = time.perf_counter()
    while True:
        report.nodes = term_nodes(egraph)
        report.seconds = time.perf_counter() - start
        if report.nodes >= limits.nodes:
            report.stop_reason = "node limit"
            break
        if report.seconds >= limits.seconds:
            report.stop_reason = "time limit"
            break
        if report.iterations >= limits.iterations:
            report.stop_reason = "iteration limit"
            break
        run = egraph.run(step)
        report.iterations += 1
        for rule_decl, count in run.num_matches_per_rule.items():
            name = getattr(rule_decl, "name", None)
            if name:
                report.matches[name] += count
        if not run.updated:
            report.stop_reason = "saturated"
            report.nodes = term_nodes(egraph)
            report.seconds = time.perf_counter() - start
            break
    return report
