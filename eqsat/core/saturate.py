"""The saturation driver: runs a schedule in small steps and enforces every limit.

egglog 13 has no node limit and no timeout, so the driver checks the e-graph's size and the
elapsed time between runs. One step = the analyses (`facts`) run to saturation, then one round
of the rewrite rules (ARCHITECTURE §4: analyses are saturated before the rules that read them).
The analyses are run a few iterations at a time (one, then twice as many while a run is fast)
with the limits checked in between, because on a large e-graph their saturation alone can take
minutes; if a limit stops them half-way, no rule runs on the half-computed facts (a guard could
pass wrongly) and the e-graph is used as it is. It stops on saturation, node limit, time limit
or iteration limit and says which; a limit is never an error.

The node and iteration limits are the stage's budget of work: they decide where it stops, and a
step is not started when it is predicted to pass the node limit (`predicted_step`: the stage's
largest growth so far again, the first step's not counted once there are others: from the few
e-nodes of a lowered program the first round grows the e-graph faster than later ones, and
counting it stopped multi-head attention's one-part loop stage a round before its register
tiles, 1.96x slower; docs/MEASUREMENTS.md). egglog is deterministic up to the order in which one
round's rules add nodes, and extraction does not depend on that order
(`eqsat.extract.extractor`), so one program on one machine always gives the same kernel. The
time limit is a safety net for a slow or loaded machine, set above what the default budget takes
here: a step predicted to end past it is not started either (its time grows faster than the
e-graph), and only a stop on time depends on how fast the machine happened to be. What a
prediction misses can overshoot a limit by at most one rule round or one run of the analyses
(egglog cannot stop a run).

Tripwires run after every step: a merge of two different literals (`TExpr.const(1.0)` with
`TExpr.const(2.0)`, two inputs, two loop constants) or of two tensors of different shapes (egglog
refuses to merge the shape analysis' values) means a rule is unsound, and stops the run with
`UnsoundMergeError` instead of returning a program with a changed meaning. Two float constants
within FOLDING_ROUNDING of each other are not a changed meaning: constant folding in two orders
(`(a*b)*c`, `a*(b*c)`) rounds differently, as reassociation may (ARCHITECTURE §4).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import cast

from egglog import (
    EggSmolError,
    EGraph,
    RunReport,
    Schedule,
    String,
    Vec,
    bindings,
    eq,
    f64,
    get_callable_args,
    get_literal_value,
    i64,
    ne,
    relation,
    rule,
    ruleset,
)
from egglog.egraph import RewriteOrRule, span

from eqsat.core.errors import UnsoundMergeError
from eqsat.core.limits import Limits, SaturationReport
from eqsat.core.terms import CONSTRUCTORS, Index, Scalar, TExpr, release

merged_literals = relation("merged_literals", String, String, String)  # constructor, a, b
# Relative distance of two float constants that is a rounding of constant folding, not another
# value: the f64 roundings of a product of up to AC_MAX_OPERANDS constants are ~1e-15.
FOLDING_ROUNDING = 1e-12
tripwires = ruleset(name="tripwires")


@tripwires.register
def _merged_literals(
    t: TExpr,
    v: Scalar,
    k: Index,
    a: f64,
    b: f64,
    m: i64,
    n: i64,
    p: String,
    q: String,
    dp: String,
    dq: String,
    sp: Vec[i64],
    sq: Vec[i64],
) -> Iterable[RewriteOrRule]:
    yield rule(eq(t).to(TExpr.const(a)), eq(t).to(TExpr.const(b)), ne(a).to(b)).then(
        merged_literals(String("TExpr.const"), a.to_string(), b.to_string())
    )
    yield rule(
        eq(t).to(TExpr.input(p, sp, dp)), eq(t).to(TExpr.input(q, sq, dq)), ne(p).to(q)
    ).then(merged_literals(String("TExpr.input"), p, q))
    yield rule(eq(v).to(Scalar.const(a)), eq(v).to(Scalar.const(b)), ne(a).to(b)).then(
        merged_literals(String("Scalar.const"), a.to_string(), b.to_string())
    )
    yield rule(eq(k).to(Index.const(m)), eq(k).to(Index.const(n)), ne(m).to(n)).then(
        merged_literals(String("Index.const"), m.to_string(), n.to_string())
    )


# The analyses run one iteration at a time, then twice as many per run of egglog while a run
# takes less than this: a run costs ~1 ms of Python besides egglog's work, and the analyses of
# a loop-stage round take ~10 iterations of a few ms each (ARCHITECTURE §5).
FAST_FACTS_SECONDS = 0.05
# A step's time grows as the e-graph's growth to this power: the steps of attention's kernel
# e-graph took 4.2x and 3.7x the previous one's time as the e-graph grew 2.6x and 2.3x
# (docs/MEASUREMENTS.md); steps of a few ms are dominated by fixed costs and grow slower.
STEP_TIME_GROWTH = 1.5


# Whether each egglog function name is a term constructor's (CONSTRUCTORS): naming the function
# (`str` of egglog-python's callable) took 0.8 ms per count of a small kernel's e-graph, egglog's
# own count 0.05 ms.
_IS_CONSTRUCTOR: dict[str, bool] = {}


def term_nodes(egraph: EGraph) -> int:
    """Number of term e-nodes (constructor rows) in the e-graph."""
    (output,) = egraph._run_program(bindings.PrintSize(span(1), None))
    assert isinstance(output, bindings.PrintAllFunctionsSize)
    nodes = 0
    for name, size in output.sizes:
        constructor = _IS_CONSTRUCTOR.get(name)
        if constructor is None:
            callables = egraph._egg_fn_to_callables(name)
            constructor = bool(callables) and str(callables[0]) in CONSTRUCTORS
            _IS_CONSTRUCTOR[name] = constructor
        nodes += size if constructor else 0
    return nodes


def saturate(
    egraph: EGraph,
    rules: Schedule,
    limits: Limits,
    stage: str,
    facts: Schedule | None = None,
    progress: Callable[[SaturationReport], None] | None = None,
) -> SaturationReport:
    """Run `facts` to saturation then one round of `rules`, until saturation or a limit; returns
    the report (never raises on a limit). `progress` sees the report after every round.

    Raises UnsoundMergeError when a tripwire fires (a rule in `rules` is unsound); whatever it
    raises, `egraph` is released first (`eqsat.core.terms.release`): the caller never sees it
    again, and it must not reach the cycle collector of another thread."""
    try:
        return _saturate(egraph, rules, limits, stage, facts, progress)
    except BaseException:
        release(egraph)
        raise


def _saturate(
    egraph: EGraph,
    rules: Schedule,
    limits: Limits,
    stage: str,
    facts: Schedule | None,
    progress: Callable[[SaturationReport], None] | None,
) -> SaturationReport:
    report = SaturationReport(stage)
    start = time.perf_counter()
    facts_pending = facts is not None
    last_step: Step | None = None
    growth = 1.0  # the largest factor a step grew the e-graph by (the first's only while alone)
    this_step: Step | None = None  # nodes and start time of the step under way
    facts_iterations = 1  # analysis iterations in the next run of `facts`
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
        if this_step is None:
            if last_step is not None:
                step_growth = report.nodes / max(1, last_step.nodes_before)
                growth = step_growth if report.iterations == 2 else max(growth, step_growth)
                nodes, seconds = predicted_step(last_step, report.nodes, growth)
                if nodes >= limits.nodes or report.seconds + seconds >= limits.seconds:
                    report.stop_reason = "node limit" if nodes >= limits.nodes else "time limit"
                    report.stop_predicted = True
                    break
            this_step = Step(report.nodes, report.seconds)
        if facts_pending:
            assert facts is not None
            began = time.perf_counter()
            batch = facts * facts_iterations if facts_iterations > 1 else facts
            facts_pending = _run_facts(egraph, batch, report)
            fast = time.perf_counter() - began < FAST_FACTS_SECONDS
            facts_iterations = facts_iterations * 2 if fast else 1
            continue
        facts_iterations = 1
        run = _run_step(egraph, rules, report)
        last_step, this_step = this_step.ended(time.perf_counter() - start), None
        report.iterations += 1
        fired = _rule_matches(run)
        report.matches.update(fired)
        _check_tripwires(egraph, report, fired)
        if progress is not None or not run.updated:
            report.nodes, report.seconds = term_nodes(egraph), time.perf_counter() - start
        if progress is not None:
            progress(report)
        if not run.updated:
            report.stop_reason = "saturated"
            break
        facts_pending = facts is not None
    return report


@dataclass(frozen=True)
class Step:
    """One step (the analyses, then a rule round): the term e-nodes it started from, when it
    started (seconds into the stage) and, once ended, its seconds."""

    nodes_before: int
    started: float
    seconds: float = 0.0

    def ended(self, now: float) -> Step:
        return replace(self, seconds=now - self.started)


def predicted_step(last: Step, nodes: int, growth: float) -> tuple[float, float]:
    """Term e-nodes after, and seconds of, a step started at `nodes` e-nodes: it grows the
    e-graph by `growth`, the largest factor a step of the stage did but the first (a step can
    grow it faster than the last one did), and its time is `last`'s times the factor `last` grew
    it by, to the power STEP_TIME_GROWTH."""
    last_growth = max(1.0, nodes / max(1, last.nodes_before))
    return nodes * growth, last.seconds * last_growth**STEP_TIME_GROWTH


def _rule_matches(run: RunReport) -> Counter[str]:
    """Matches per named rule in one run."""
    matches: Counter[str] = Counter()
    for rule_decl, count in run.num_matches_per_rule.items():
        name = getattr(rule_decl, "name", None)
        if name:
            matches[name] += count
    return matches


def _run_step(egraph: EGraph, step: Schedule, report: SaturationReport) -> RunReport:
    """One round of the rules, then the tripwires; a refused merge of analysis values is an
    unsound rule."""
    with _unsound_merges_named(report):
        run = egraph.run(step)
        _updated(egraph, tripwires)
    return run


def _run_facts(egraph: EGraph, facts: Schedule, report: SaturationReport) -> bool:
    """A run of the analyses, then the tripwires, as `_run_step`; whether the analyses changed
    the e-graph."""
    with _unsound_merges_named(report):
        updated = _updated(egraph, facts)
        _updated(egraph, tripwires)
    return updated


def _updated(egraph: EGraph, schedule: Schedule) -> bool:
    """Run `schedule`; whether it changed the e-graph. `EGraph.run` would also translate egglog's
    report, per rule, into declarations, which takes longer than a small run itself and is
    wasted where only `updated` is read (the analyses and the tripwires, ~10 runs a round)."""
    egraph._add_decls(schedule)
    (output,) = egraph._run_program(egraph._state.run_schedule_to_egg(schedule.schedule))
    assert isinstance(output, bindings.RunScheduleOutput)
    return output.report.updated


@contextmanager
def _unsound_merges_named(report: SaturationReport) -> Iterator[None]:
    """Raise UnsoundMergeError for egglog's refusal to merge two analysis values in the block."""
    try:
        yield
    except EggSmolError as error:
        if "Illegal merge" not in str(error):
            raise
        raise UnsoundMergeError(
            f"{report.stage}: step {report.iterations + 1} merged terms whose analysis values "
            f"differ (e.g. two shapes), so a rule is unsound: {error}; rules fired so far: "
            f"{_names(report.matches)}"
        ) from None


def _check_tripwires(egraph: EGraph, report: SaturationReport, fired: Counter[str]) -> None:
    """Raise UnsoundMergeError if the last step merged two different literals (float constants
    further apart than FOLDING_ROUNDING)."""
    if not egraph.function_size(merged_literals):
        return
    merges = (
        tuple(str(get_literal_value(cast(String, arg))) for arg in get_callable_args(row))
        for row in egraph.function_values(merged_literals)
    )
    conflicts = sorted(merge for merge in merges if not _rounding(*merge))
    if not conflicts:
        return
    constructor, first, second = conflicts[0]
    raise UnsoundMergeError(
        f"{report.stage}: step {report.iterations} merged {constructor}({first}) with "
        f"{constructor}({second}), so a rule is unsound; rules that fired in that step: "
        f"{_names(fired)}"
    )


def _rounding(constructor: str, first: str, second: str) -> bool:
    """Two float constants within FOLDING_ROUNDING of each other (NaN is close to nothing)."""
    floats = constructor in ("TExpr.const", "Scalar.const")
    return floats and math.isclose(float(first), float(second), rel_tol=FOLDING_ROUNDING)


def _names(matches: Counter[str]) -> str:
    return ", ".join(sorted(name for name, count in matches.items() if count)) or "none"
