"""Tests of eqsat.autotune: the fastest candidate wins (fake timer), the choice is remembered in
the compile cache, broken entries and wrong candidates are discarded, progress is printed."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np
import pytest

import eqsat
from eqsat import autotune, optimizer
from eqsat.api import build
from eqsat.backend_c.build import cache_dir
from eqsat.backend_c.kernel import Kernel
from eqsat.core.terms import LoopProgram, Term
from eqsat.optimizer import Optimized
from tests.conftest import copy_calibrations

SHAPE = (64, 64)
PROGRESS_LINE = re.compile(
    r"^autotune \d/4: \d+\.\d{3} ms \(predicted \d+\.\d Mcycles\); best so far \d+\.\d{3} ms$"
)


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One compile cache for this module, with this machine's calibrations: builds are shared,
    remembered choices are not."""
    with pytest.MonkeyPatch.context() as patch:
        directory = tmp_path_factory.mktemp("cache")
        copy_calibrations(directory)
        patch.setenv("EQSAT_CACHE_DIR", str(directory))
        yield directory


def forget_choices(directory: Path) -> None:
    for entry in directory.glob("autotune-*.json"):
        entry.unlink()


@pytest.fixture(autouse=True)
def fresh_choices(private_cache: Path) -> None:
    forget_choices(private_cache)


@pytest.fixture(scope="module")
def optimized() -> Optimized:
    result = eqsat.optimize(eqsat.softmax(eqsat.tensor("x", SHAPE)), progress=False)
    assert len(result.candidates(4)) == 4
    return result


class Counted:
    """`build` for `optimized`, counting its calls."""

    def __init__(self, optimized: Optimized) -> None:
        self.optimized = optimized
        self.calls = 0

    def __call__(self, program: LoopProgram) -> Kernel:
        self.calls += 1
        return build(program, self.optimized)


def fake_timer(seconds: Mapping[int, float], calls: list[int] | None = None) -> autotune.Timer:
    """Reports `seconds[k]` for candidate k without running anything; counts its calls."""

    def timer(functions: Mapping[int, Callable[[], object]]) -> dict[int, float]:
        if calls is not None:
            calls.append(len(functions))
        return {k: seconds[k] for k in functions}

    return timer


def never_called(functions: Mapping[int, Callable[[], object]]) -> dict[int, float]:
    raise AssertionError("a remembered choice must not be timed")


def winner_source(optimized: Optimized, rank: int) -> str:
    return build(optimized.candidates(4)[rank].program, optimized).c_source


def test_the_fastest_candidate_wins(optimized: Optimized) -> None:
    timer = fake_timer({0: 3e-3, 1: 2e-3, 2: 1e-3, 3: 5e-3})
    kernel = autotune.fastest(optimized, 4, Counted(optimized), progress=False, timer=timer)
    assert "autotuned: candidate 3/4 is the fastest" in kernel.explain()
    assert "its loop nest:" in kernel.explain()
    assert kernel.c_source == winner_source(optimized, 2)


def test_a_remembered_choice_is_built_without_timing(optimized: Optimized) -> None:
    calls: list[int] = []
    first = autotune.fastest(
        optimized,
        4,
        Counted(optimized),
        progress=False,
        timer=fake_timer({0: 3, 1: 1, 2: 2, 3: 4}, calls),
    )
    assert len(calls) == 4  # one comparison per candidate
    counted = Counted(optimized)
    again = autotune.fastest(optimized, 4, counted, progress=False, timer=never_called)
    assert counted.calls == 1
    assert again.c_source == first.c_source == winner_source(optimized, 1)
    assert "candidate 2/4 is the fastest" in again.explain() and "remembered in" in again.explain()


def test_a_remembered_choice_is_found_by_a_new_process() -> None:
    """The cache key and the candidates' digests do not depend on the process (hash seeds,
    ids): the kernel e-graph is built in a fixed order (eqsat.rewrites.schedule). The clock's
    safety nets are set out of reach in both processes: on a loaded machine a stage stopped by
    the clock is another stage (ARCHITECTURE §5), which is not what this test is about."""
    unhurried = eqsat.Limits(seconds=120.0, extraction_seconds=120.0)
    optimized = eqsat.optimize(
        eqsat.softmax(eqsat.tensor("x", SHAPE)), limits=unhurried, progress=False
    )
    here = [autotune.tuning_key(optimized, 4)] + [
        autotune.program_digest(c.program) for c in optimized.candidates(4)
    ]
    script = (
        "import eqsat, json; from eqsat import autotune as a;"
        f"o = eqsat.optimize(eqsat.softmax(eqsat.tensor('x', {SHAPE})), limits=eqsat.{unhurried!r},"
        " progress=False);"
        "print(json.dumps([a.tuning_key(o, 4)]"
        " + [a.program_digest(c.program) for c in o.candidates(4)]))"
    )
    root = Path(__file__).resolve().parents[1]
    for seed in ("1", "2"):
        output = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            cwd=root,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        assert json.loads(output) == here


def test_a_perturbed_cost_does_not_depend_on_the_pricing_order() -> None:
    """`candidates`' perturbed extractions price each node by its content: nodes met in another
    order (the e-graph's numbering, which differs from run to run) get the same costs, so the
    perturbed candidates are the same on every compile."""
    leaves = [Term("Scalar.const", (float(v),)) for v in range(6)]
    nodes = [("Scalar.binary", ("add", a, b)) for a in leaves for b in leaves]

    def flat(op: str, children: object, child_costs: list[float]) -> float:
        return 1.0 + sum(child_costs)

    def costs(order: list[int]) -> dict[int, float]:
        noisy = optimizer._perturbed(flat, random.Random(7))
        return {i: noisy(*nodes[i], [0.0, 0.0]) for i in order}

    forward = costs(list(range(len(nodes))))
    assert forward == costs(list(reversed(range(len(nodes)))))
    assert len(set(forward.values())) == len(nodes)  # perturbed: no two nodes alike


@pytest.mark.parametrize(
    "entry",
    ["{not json", '{"note": "x"}', '{"program": "%s", "note": "x"}' % ("0" * 64), "[1, 2]"],
    ids=["corrupt", "incomplete", "stale", "not-an-object"],
)
def test_a_broken_or_stale_entry_is_tuned_again(optimized: Optimized, entry: str) -> None:
    path = cache_dir() / f"autotune-{autotune.tuning_key(optimized, 4)}.json"
    path.write_text(entry)
    calls: list[int] = []
    timer = fake_timer({0: 3, 1: 1, 2: 2, 3: 4}, calls)
    kernel = autotune.fastest(optimized, 4, Counted(optimized), progress=False, timer=timer)
    assert len(calls) == 4 and "remembered" not in kernel.explain()
    assert json.loads(path.read_text())["program"] == autotune.program_digest(
        optimized.candidates(4)[1].program
    )


def test_a_wrong_candidate_is_discarded(optimized: Optimized) -> None:
    wrong = eqsat.optimize(eqsat.exp(eqsat.tensor("x", SHAPE)), progress=False)
    second = optimized.candidates(4)[1].program

    def build_one_wrong(program: LoopProgram) -> Kernel:
        return build(wrong.program, wrong) if program == second else build(program, optimized)

    timer = fake_timer({0: 3, 1: 1, 2: 2, 3: 4})  # the wrong one would be the fastest
    kernel = autotune.fastest(optimized, 4, build_one_wrong, progress=False, timer=timer)
    assert "2/4: discarded, output differs from the model's pick" in kernel.explain()
    assert "candidate 3/4 is the fastest" in kernel.explain()


def test_progress_is_one_line_per_candidate(
    optimized: Optimized, capsys: pytest.CaptureFixture[str]
) -> None:
    timer = fake_timer({0: 3e-3, 1: 4e-3, 2: 1e-3, 3: 5e-3})
    autotune.fastest(optimized, 4, Counted(optimized), timer=timer)
    lines = capsys.readouterr().err.splitlines()
    assert [PROGRESS_LINE.match(line) is not None for line in lines] == [True] * 4
    assert lines[1].startswith("autotune 2/4: 4.000 ms") and lines[1].endswith("3.000 ms")
    assert lines[3].startswith("autotune 4/4: 5.000 ms") and lines[3].endswith("1.000 ms")
    autotune.fastest(optimized, 4, Counted(optimized), progress=False, timer=never_called)
    forget_choices(cache_dir())
    autotune.fastest(optimized, 4, Counted(optimized), progress=False, timer=timer)
    assert capsys.readouterr().err == ""


def test_autotuned_compile_matches_numpy() -> None:
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    kernel = eqsat.compile(eqsat.softmax(eqsat.tensor("x", SHAPE)), autotune=3, progress=False)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(kernel(x), e / e.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-4)
    assert "autotuned: candidate" in kernel.explain()


def test_autotune_needs_a_candidate(optimized: Optimized) -> None:
    with pytest.raises(ValueError, match="at least one candidate"):
        autotune.fastest(optimized, 0, Counted(optimized))
