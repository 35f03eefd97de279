"""Does the cost model rank loop nests the way this machine runs them? (ARCHITECTURE §6,
calibration)

For each workload: optimize it, take candidate programs from its kernel e-graph, build each,
check its output once against the reference interpreter (`eqsat.core.interp`, float64), time all of
them with interleaved medians, and compare predicted cycles with measured seconds:
- Spearman's rank correlation over all candidates, and over the model's 10 cheapest;
- regret: the measured time of the model's pick (cheapest predicted) / the fastest measured,
  the two timed again head to head.
A candidate with a wrong output is a soundness bug: it is reported, counted and left out.

The candidates mix three sources: the model's best (`Optimized.candidates`; they decide the
regret), random extractions (slow corners: untiled, strided, scalar nests) and extractions under
randomly perturbed costs, which fill the range between (random extraction alone mostly finds
small, untiled nests).

    python -m eqsat bench --only calibration            # or calibration:matmul,calibration:softmax
    pairs = predicted_vs_measured()                     # {workload: [(cycles, seconds), ...]}
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

import eqsat
from eqsat.api import build
from eqsat.backend_c.calibrate import calibrated_host
from eqsat.core.interp import evaluate
from eqsat.core.measure import agreement, interleaved_medians, random_inputs
from eqsat.core.pretty import format_loops
from eqsat.extract.machine import Machine

SPEARMAN_GOAL = 0.8
REGRET_GOAL = 1.10
TOP = 10  # the model's cheapest candidates, for the second Spearman figure
# Spread (standard deviation of the log) of the random factor on each e-node's cost; one is
# drawn per perturbed extraction, so they land near the model's choice and far from it.
ROUNDS = 15  # timed rounds at most
WORKLOAD_SECONDS = 20.0  # of timing per workload; past it, MIN_ROUNDS suffice
CANDIDATE_SECONDS = 0.3  # of timing per candidate once it has MIN_ROUNDS samples
DUEL_SECONDS = 2.0  # of timing the model's pick against the fastest candidate


@dataclass(frozen=True)
class Mix:
    """How many candidates to take from each source (fewer where the e-graph holds fewer)."""

    best: int  # the model's cheapest (Optimized.candidates)
    sampled: int  # random extractions
    perturbed: int  # extractions under perturbed costs; more where random draws repeat

    @property
    def total(self) -> int:
        return self.best + self.sampled + self.perturbed


# The model's best few differ mostly in how they zero the output (same predicted cost); the
# perturbed extractions vary the main nest, near the best and far from it.
FULL_MIX = Mix(best=4, sampled=12, perturbed=20)
QUICK_MIX = Mix(best=2, sampled=2, perturbed=2)


@dataclass(frozen=True)
class Workload:
    """A program to calibrate on: `program` takes symbolic tensors of `shapes` by name."""

    name: str
    description: str
    shapes: Mapping[str, tuple[int, ...]]
    program: Callable[..., eqsat.Tensor]


def workloads(quick: bool = False) -> list[Workload]:
    """Matmul, softmax, layernorm and an elementwise chain; `quick` shrinks them to 64 wide.

    Full sizes keep the whole check near 2-3 minutes on 2 cores: the slowest candidates (scalar,
    strided) run ~100x longer than the best."""
    size = 64 if quick else 512  # matmul size^3
    rows = 64 if quick else 1024  # softmax, layernorm: rows x rows
    side = 64 if quick else 2048  # elementwise: side x side (4M elements)
    return [
        Workload(
            "matmul", f"A @ B, {size}^3", {"A": (size, size), "B": (size, size)}, lambda A, B: A @ B
        ),
        Workload("softmax", f"row softmax, {rows}x{rows}", {"x": (rows, rows)}, eqsat.softmax),
        Workload(
            "layernorm",
            f"layernorm over rows with weight and bias, {rows}x{rows}",
            {"x": (rows, rows), "weight": (rows,), "bias": (rows,)},
            eqsat.layernorm,
        ),
        Workload(
            "elementwise",
            f"relu(a*b + c)*0.5 - a, {side}x{side}",
            {"a": (side, side), "b": (side, side), "c": (side, side)},
            lambda a, b, c: eqsat.relu(a * b + c) * 0.5 - a,
        ),
    ]


@dataclass(frozen=True)
class Measured:
    """One candidate: its source, predicted cycles, and measured median seconds (None when it
    was excluded; `problem` says why)."""

    source: str  # "best", "sampled" or "perturbed"
    predicted: float
    seconds: float | None
    problem: str | None  # "WRONG: ..." (a soundness bug) or "FAILED: ..." (build or run)
    nest: str  # the loop nest, as eqsat.core.pretty.format_loops prints it


@dataclass
class Check:
    """The calibration figures of one workload; None where they could not be computed."""

    name: str
    description: str
    candidates: list[Measured] = field(default_factory=list)  # the model's pick first
    spearman: float | None = None
    top_spearman: float | None = None
    regret: float | None = None
    pick_seconds: float | None = None  # the model's pick and the fastest, timed head to head
    fastest_seconds: float | None = None
    wrong: int = 0  # candidates whose output disagrees with the reference
    failed: int = 0  # candidates that did not build or run
    seconds: float = 0.0  # wall time of the whole check
    failure: str | None = None  # the exception that stopped the workload, if any
    met: bool | None = None  # Spearman and regret both reach their goals

    def pairs(self) -> list[tuple[float, float]]:
        """(predicted cycles, measured seconds) of every candidate that was measured."""
        return [(c.predicted, c.seconds) for c in self.candidates if c.seconds is not None]


# ---------------------------------------------------------------- statistics


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n of `values`; tied values share the mean of the ranks they span.

    [10, 30, 20, 20] -> [1, 4, 2.5, 2.5]"""
    array = np.asarray(values, dtype=float)
    order = np.argsort(array, kind="stable")
    _, first, counts = np.unique(array[order], return_index=True, return_counts=True)
    ranks = np.empty(len(array))
    ranks[order] = np.repeat(first + (counts + 1) / 2, counts)
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation: the Pearson correlation of the average ranks.

    It requires: len(x) == len(y). Returns nan with fewer than 2 points or when one side is
    constant (no order to compare)."""
    if len(x) != len(y):
        raise ValueError(f"{len(x)} x values but {len(y)} y values")
    if len(x) < 2:
        return math.nan
    rx, ry = average_ranks(x), average_ranks(y)
    dx, dy = rx - rx.mean(), ry - ry.mean()
    scale = math.sqrt(float(dx @ dx) * float(dy @ dy))
    return float(dx @ dy) / scale if scale > 0 else math.nan


def regret(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Measured time of the model's pick (lowest predicted; the first of ties) over the fastest
    measured time. It requires: equal, non-zero lengths; positive times."""
    if len(predicted) != len(measured) or not predicted:
        raise ValueError("regret needs one measured time per prediction, and at least one")
    pick = int(np.argmin(predicted))
    return float(measured[pick]) / float(min(measured))


def top_spearman(predicted: Sequence[float], measured: Sequence[float], top: int = TOP) -> float:
    """Spearman over the `top` candidates the model predicts fastest (does it order good ones?)."""
    cheapest = np.argsort(np.asarray(predicted, dtype=float), kind="stable")[:top]
    return spearman([predicted[k] for k in cheapest], [measured[k] for k in cheapest])


# ---------------------------------------------------------------- candidates


# ---------------------------------------------------------------- the check


def check_workload(
    workload: Workload,
    machine: Machine,
    mix: Mix,
    repeats: int = ROUNDS,
    report: Callable[[str], None] = print,
) -> Check:
    """Sample, build, check and time the candidates of one workload; an exception on the way
    (other than one candidate's build or run) is kept in `failure`. Wrong candidates are
    reported through `report` as they are found."""
    start = time.perf_counter()
    check = Check(workload.name, workload.description)
    try:
        kernels = _build_and_check(workload, machine, mix, check, report)
        medians = interleaved_medians(
            kernels, repeats, WORKLOAD_SECONDS, each_seconds=CANDIDATE_SECONDS
        )
        check.candidates = [
            replace(m, seconds=medians.get(k)) for k, m in enumerate(check.candidates)
        ]
        _figures(check, kernels, repeats)
    except Exception as error:  # a failing workload is reported in its row; the run goes on
        lines = str(error).splitlines()
        check.failure = f"{type(error).__name__}: {lines[0] if lines else ''}"
    check.seconds = time.perf_counter() - start
    return check


def _build_and_check(
    workload: Workload, machine: Machine, mix: Mix, check: Check, report: Callable[[str], None]
) -> dict[int, Callable[[], object]]:
    """Fill `check.candidates` (not yet timed) and its counts; returns a call of each correct
    candidate's kernel on the inputs, by index."""
    symbols = {name: eqsat.tensor(name, shape) for name, shape in workload.shapes.items()}
    optimized = eqsat.optimize(workload.program(**symbols), machine=machine)
    inputs = random_inputs(workload.shapes, "float32", np.random.default_rng(0))
    (original,) = optimized.original
    want = evaluate(original, {name: a.astype(np.float64) for name, a in inputs.items()})
    kernels: dict[int, Callable[[], object]] = {}
    listed = optimized.candidates(mix.best, sampled=mix.sampled, perturbed=mix.perturbed, seed=0)
    for k, candidate in enumerate(listed):
        nest = format_loops(candidate.program.body)
        problem = None
        try:
            kernel = build(candidate.program, optimized)
            found = agreement(np.asarray(kernel(**inputs)), want, "float32")
            if found.ok:
                kernels[k] = partial(kernel, **inputs)
            else:
                problem = f"WRONG: max error {found.max_error:.2e} > {found.tolerance:.0e}"
                check.wrong += 1
        except Exception as error:  # one broken candidate must not hide the others
            problem = f"FAILED: {type(error).__name__}: {str(error)[:200]}"
            check.failed += 1
        if problem is not None:
            report(f"!! {workload.name} candidate {k} ({candidate.source}): {problem}\n{nest}")
        check.candidates.append(
            Measured(candidate.source, candidate.predicted, None, problem, nest)
        )
    return kernels


def _figures(check: Check, kernels: Mapping[int, Callable[[], object]], repeats: int) -> None:
    """Spearman figures and regret of the timed candidates of `check`. The model's pick and the
    fastest are timed again head to head for the regret: the least of many noisy medians is
    biased low, most of all among candidates that run the same code."""
    timed = {k: m.seconds for k, m in enumerate(check.candidates) if m.seconds is not None}
    if not timed:
        return
    predicted = [check.candidates[k].predicted for k in timed]
    seconds = list(timed.values())
    check.spearman = _finite(spearman(predicted, seconds))
    check.top_spearman = _finite(top_spearman(predicted, seconds))
    indices = list(timed)
    pick, fastest = indices[int(np.argmin(predicted))], indices[int(np.argmin(seconds))]
    duel = interleaved_medians({k: kernels[k] for k in (pick, fastest)}, repeats, DUEL_SECONDS)
    check.regret = regret(
        [check.candidates[k].predicted for k in (pick, fastest)], [duel[pick], duel[fastest]]
    )
    check.pick_seconds, check.fastest_seconds = duel[pick], min(duel.values())
    check.met = (
        check.spearman is not None
        and check.spearman >= SPEARMAN_GOAL
        and check.regret <= REGRET_GOAL
    )


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def predicted_vs_measured(
    quick: bool = False, only: Sequence[str] | None = None, machine: Machine | None = None
) -> dict[str, list[tuple[float, float]]]:
    """Run the check (every workload, or those named in `only`) and return, per workload, the
    (predicted cycles, measured seconds) of every correct candidate, for plotting."""
    mix = QUICK_MIX if quick else FULL_MIX
    machine = machine or calibrated_host()
    return {
        workload.name: check_workload(workload, machine, mix).pairs()
        for workload in workloads(quick)
        if only is None or workload.name in only
    }


# ---------------------------------------------------------------- the table

_COLUMNS = (  # title, width, alignment
    ("calibration", 11, "<"), ("cands", 5, ">"), ("wrong", 5, ">"), ("spearman", 8, ">"),
    ("top-10", 6, ">"), ("regret", 6, ">"), ("met", 4, ">"), ("pick ms", 9, ">"),
    ("best ms", 9, ">"), ("time s", 6, ">"),
)  # fmt: skip
TABLE_TITLE = (
    f"cost-model calibration: candidates of each kernel e-graph (the model's best, random and "
    f"perturbed-cost extractions) checked against the interpreter and timed interleaved; "
    f"goal: Spearman >= {SPEARMAN_GOAL}, regret (pick / fastest) <= {REGRET_GOAL:.2f}"
)


def _row(cells: Sequence[str]) -> str:
    return "  ".join(
        f"{cell:{align}{width}}" for cell, (_, width, align) in zip(cells, _COLUMNS, strict=True)
    ).rstrip()


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def table_header() -> str:
    return _row([title for title, _, _ in _COLUMNS])


def format_check(check: Check) -> str:
    """One table row of `check` (see _COLUMNS)."""
    if check.failure is not None:
        return f"{check.name.ljust(11)}  FAILED: {check.failure[:160]}"

    def figure(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    measured, total = len(check.pairs()), len(check.candidates)
    return _row(
        [
            check.name,
            str(total) if measured == total else f"{measured}/{total}",
            str(check.wrong) if check.wrong == 0 else f"{check.wrong}!!",
            figure(check.spearman),
            figure(check.top_spearman),
            figure(check.regret),
            {True: "yes", False: "NO", None: "-"}[check.met],
            "-" if check.pick_seconds is None else _ms(check.pick_seconds),
            "-" if check.fastest_seconds is None else _ms(check.fastest_seconds),
            f"{check.seconds:.1f}",
        ]
    )
