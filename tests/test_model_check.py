"""Tests of eqsat.tools.model_check: the statistics against hand-computed values, and the
calibration pipeline on one tiny workload (candidate outputs checked; no timing asserted)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import eqsat
from eqsat.api import build
from eqsat.backend_c.kernel import Kernel
from eqsat.core.terms import LoopProgram
from eqsat.extract.machine import host
from eqsat.optimizer import Optimized
from eqsat.tools import model_check

TINY = model_check.Mix(best=2, sampled=2, perturbed=2)


def test_tied_values_share_their_average_rank() -> None:
    assert model_check.average_ranks([10, 30, 20, 20]).tolist() == [1, 4, 2.5, 2.5]
    assert model_check.average_ranks([5, 5, 5]).tolist() == [2, 2, 2]


def test_spearman_of_orders_that_agree_or_are_reversed() -> None:
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert model_check.spearman(x, [math.exp(v) for v in x]) == pytest.approx(1.0)
    assert model_check.spearman(x, x[::-1]) == pytest.approx(-1.0)
    # no ties: 1 - 6 * sum(d^2) / (n (n^2 - 1)) = 1 - 6 * 4 / 120
    assert model_check.spearman(x, [1, 3, 2, 5, 4]) == pytest.approx(0.8)


def test_spearman_with_ties() -> None:
    # ranks (1, 2.5, 2.5, 4) and (1, 2, 3, 4): covariance 4.5 / sqrt(4.5 * 5) = 3 / sqrt(10)
    assert model_check.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(3 / math.sqrt(10))


def test_spearman_without_an_order_is_nan() -> None:
    assert math.isnan(model_check.spearman([1, 1, 1], [1, 2, 3]))
    assert math.isnan(model_check.spearman([1], [2]))
    with pytest.raises(ValueError):
        model_check.spearman([1, 2], [1, 2, 3])


def test_regret_is_the_picks_time_over_the_fastest() -> None:
    assert model_check.regret([3, 1, 2], [1.0, 1.5, 1.2]) == pytest.approx(1.5)
    assert model_check.regret([1, 2, 3], [1.0, 1.5, 1.2]) == 1.0
    assert model_check.regret([1, 1, 2], [2.0, 1.0, 3.0]) == 2.0  # ties: the first is the pick
    with pytest.raises(ValueError):
        model_check.regret([], [])


def test_top_spearman_looks_at_the_cheapest_predictions_only() -> None:
    predicted = list(range(12))
    measured = [10.0 - k for k in range(10)] + [100.0, 0.5]  # the top 10 reversed
    assert model_check.top_spearman(predicted, measured) == pytest.approx(-1.0)
    assert model_check.spearman(predicted, measured) < 0


def tiny_matmul() -> model_check.Workload:
    return next(w for w in model_check.workloads(quick=True) if w.name == "matmul")


def test_calibration_of_a_tiny_workload_gives_finite_figures() -> None:
    reported: list[str] = []
    check = model_check.check_workload(tiny_matmul(), host(), TINY, 3, reported.append)
    assert check.failure is None and reported == []
    assert check.wrong == check.failed == 0
    assert 4 <= len(check.candidates) <= TINY.total
    assert {c.source for c in check.candidates} <= {"best", "sampled", "perturbed"}
    assert check.candidates[0].source == "best"
    for candidate in check.candidates:
        assert candidate.predicted > 0 and candidate.problem is None and candidate.nest
        assert candidate.seconds is not None and 0 < candidate.seconds < math.inf
    assert check.spearman is not None and -1 <= check.spearman <= 1
    assert check.regret is not None and check.regret >= 1
    assert check.regret == pytest.approx(check.pick_seconds / check.fastest_seconds)
    assert check.met == (
        check.spearman >= model_check.SPEARMAN_GOAL and check.regret <= model_check.REGRET_GOAL
    )
    assert isinstance(check.met, bool)
    row = model_check.format_check(check)
    assert row.split()[:2] == ["matmul", str(len(check.candidates))]


def test_a_wrong_candidate_is_reported_counted_and_excluded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    A, B = eqsat.tensor("A", (64, 64)), eqsat.tensor("B", (64, 64))
    doubled = eqsat.optimize(A @ B * 2, progress=False)  # same signature, other values
    built: list[LoopProgram] = []

    def second_one_wrong(program: LoopProgram, optimized: Optimized) -> Kernel:
        built.append(program)
        if len(built) == 2:
            return build(doubled.program, doubled)
        return build(program, optimized)

    monkeypatch.setattr(model_check, "build", second_one_wrong)
    reported: list[str] = []
    check = model_check.check_workload(tiny_matmul(), host(), TINY, 3, reported.append)
    assert check.wrong == 1 and len(reported) == 1 and "WRONG" in reported[0]
    wrong = check.candidates[1]
    assert wrong.seconds is None and (wrong.problem or "").startswith("WRONG")
    assert len(check.pairs()) == len(check.candidates) - 1
    assert "1!!" in model_check.format_check(check)


def test_pairs_for_plotting() -> None:
    pairs = model_check.predicted_vs_measured(quick=True, only=["elementwise"])
    assert list(pairs) == ["elementwise"] and len(pairs["elementwise"]) >= 2
    assert np.all(np.isfinite(np.array(pairs["elementwise"])))
