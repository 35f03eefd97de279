"""Tests of eqsat.tools.bench: a quick in-process run writes every figure as JSON (no timing
asserted)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from eqsat.__main__ import numpy_environment
from eqsat.backend_c.build import build_library
from eqsat.core.measure import BLOCK_SECONDS, interleaved_medians
from eqsat.extract.machine import Machine, host
from eqsat.tools import bench, sweep, workloads
from tests.test_calibrate import FakeMeasure


def fake_machine() -> Machine:
    """This host with made-up peaks (so no test waits for a calibration)."""
    return replace(host(), calibration=FakeMeasure()(host()))


def test_quick_bench_writes_checked_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    machine = fake_machine()
    out = tmp_path / "bench.json"
    argv = ["--quick", "--repeats", "3", "--only", "elementwise,softmax", "--json", str(out)]
    assert bench.main(argv, machine) == 0
    report = json.loads(out.read_text())
    assert (
        report["machine"]["calibration"]["bandwidth"]["DRAM"]["1"]
        == (
            machine.calibration.bandwidth["DRAM"][1]  # type: ignore[union-attr]
        )
    )
    assert [w["name"] for w in report["workloads"]] == ["elementwise", "softmax"]
    for workload in report["workloads"]:
        assert workload["failure"] is None
        assert workload["correct"] is True
        assert 0 <= workload["max_error"] <= workload["tolerance"]
        assert set(workload["seconds"]) >= {"eqsat", "numpy"}
        assert workload["ratios"]["numpy"] > 0 and workload["peak_fraction"] > 0
        assert workload["peak_kind"] == "DRAM" and workload["work"] > 0
        assert workload["compile_seconds"] > 0
        assert 0 < workload["warm_compile_seconds"] < workload["compile_seconds"]
        assert 0 < workload["check_seconds"] < workload["compile_seconds"]
        assert [s["stage"] for s in workload["stages"]] == ["algebra", "loops"]
        dram_ok = workload["name"] != "elementwise" or workload["peak_fraction"] >= 0.8
        assert workload["met"] == (workload["ratios"]["numpy"] >= workload["target"] and dram_ok)
        assert workload["host_share"] > 0
    printed = capsys.readouterr().out
    rows = [line.split()[0] for line in printed.splitlines() if line.strip()]
    assert "elementwise" in rows and "softmax" in rows and "matmul" not in rows
    (host_line,) = [line for line in printed.splitlines() if line.startswith("host: ")]
    assert "of the calibrated peak" in host_line
    (warm,) = [line for line in printed.splitlines() if line.startswith("warm start:")]
    assert "answered from the compile cache in a new process" in warm, warm
    assert warm.endswith("egglog not imported"), warm


def test_the_host_line_names_the_rows_timed_on_a_busy_host() -> None:
    def row(name: str, share: float) -> workloads.Result:
        return workloads.Result(name, name, 1.0, host_share=share)

    quiet = workloads.format_host_shares([row("softmax", 0.97), row("matmul", 1.01)])
    assert quiet.endswith("each row ran at 97%-101% of the calibrated peak (quiet)")
    busy = workloads.format_host_shares(
        [row("softmax", 0.97), row("swiglu", 0.52), row("mlp2", 0.84)]
    )
    assert busy.startswith("host: the FMA probe before and after each row ran at 52%-97%")
    assert busy.endswith("their figures may be off: swiglu 52%, mlp2 84%")
    failed = workloads.Result("failed", "failed", 1.0)
    assert workloads.format_host_shares([failed]) == "host: no row was timed"


def test_a_wrong_kernel_is_reported_as_a_mismatch() -> None:
    workload = replace(
        bench.workloads(quick=True)[0], reference=lambda a, b, c: np.maximum(a * b + c, 0)
    )  # the kernel computes relu(a*b + c)*0.5
    result = workloads.run_workload(workload, fake_machine(), 1, np.random.default_rng(0))
    assert result.correct is False and result.max_error is not None
    assert "MISMATCH" in bench.format_result(result)


def test_a_failing_workload_is_reported_in_its_row() -> None:
    workload = replace(
        bench.workloads(quick=True)[0], program=lambda a, b, c: a @ b.reshape(64, 64)
    )
    result = workloads.run_workload(workload, fake_machine(), 1, np.random.default_rng(0))
    assert result.failure is not None and "ShapeError" in result.failure
    assert "FAILED: ShapeError" in bench.format_result(result)


def test_bench_at_a_lower_isa_runs_numpy_on_that_levels_openblas_kernels() -> None:
    """`bench --isa avx2` caps eqsat and XLA and picks OpenBLAS's Haswell kernels; without
    `--isa` the environment's OpenBLAS overrides are dropped (numpy's best kernel)."""
    environ = {"PATH": "/bin", "OPENBLAS_CORETYPE": "Zen", "OPENBLAS_L2_SIZE": "1"}
    assert numpy_environment(environ, None) == {"PATH": "/bin"}
    assert numpy_environment(environ, "avx2") == {
        "PATH": "/bin",
        "EQSAT_MAX_ISA": "avx2",
        "OPENBLAS_CORETYPE": "Haswell",
        "XLA_FLAGS": "--xla_cpu_max_isa=AVX2",
    }
    with_flags = numpy_environment({"XLA_FLAGS": "--xla_cpu_use_thunk_runtime=false"}, "scalar")
    assert with_flags["XLA_FLAGS"] == "--xla_cpu_use_thunk_runtime=false --xla_cpu_max_isa=SSE4_2"
    for isa in (None, "avx512", "avx2", "scalar"):  # a fixed point: the bench re-executes to it
        once = numpy_environment({**environ, "XLA_FLAGS": "--xla_cpu_max_isa=AVX512"}, isa)
        assert numpy_environment(once, isa) == once
    assert numpy_environment({}, "avx512") == {"EQSAT_MAX_ISA": "avx512"}


def test_the_header_says_where_jax_runs_above_the_isa_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a cap below the host's level, with jax installed, the header says that jax's
    products run the host's level; at the host's own level, or without jax, it says nothing."""
    monkeypatch.setattr(bench.importlib.util, "find_spec", lambda name: object())
    avx512_flags = frozenset({"avx512f", "avx512dq", "avx512bw", "avx512vl", "avx2", "fma"})
    monkeypatch.setattr(bench, "cpu_flags", lambda: avx512_flags)
    avx512 = replace(fake_machine(), isa="avx512")
    assert bench._jax_caveat(avx512) == []
    (line,) = bench._jax_caveat(replace(avx512, isa="avx2"))
    assert "capped at avx2" in line and "this host's avx512" in line
    monkeypatch.setattr(bench.importlib.util, "find_spec", lambda name: None)
    assert bench._jax_caveat(replace(avx512, isa="avx2")) == []


@pytest.mark.parametrize("isa", ["avx2", "scalar"])
def test_bench_at_a_lower_isa_starts(isa: str) -> None:
    """The bench re-executes itself into `numpy_environment` once, and then runs (an XLA_FLAGS
    that grew on every re-execution once ended in 'Argument list too long')."""
    command = [sys.executable, "-m", "eqsat", "bench", "--isa", isa, "--help"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr


def test_unknown_workload_is_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        bench.main(["--only", "nonsense"], fake_machine())


def test_calibration_table_is_selected_by_only_and_written_to_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    argv = ["--quick", "--repeats", "3", "--only", "calibration:elementwise", "--json", str(out)]
    assert bench.main(argv, fake_machine()) == 0
    report = json.loads(out.read_text())
    assert report["workloads"] == []
    (check,) = report["calibration"]
    assert check["name"] == "elementwise" and check["failure"] is None and check["wrong"] == 0
    assert len(check["candidates"]) >= 2 and -1 <= check["spearman"] <= 1
    assert check["regret"] == pytest.approx(check["pick_seconds"] / check["fastest_seconds"])
    assert check["met"] == (check["spearman"] >= 0.8 and check["regret"] <= 1.10)
    printed = capsys.readouterr().out
    assert "cost-model calibration" in printed
    assert [line.split()[0] for line in printed.splitlines() if line.strip()].count(
        "elementwise"
    ) == 1  # the calibration row; the workload table did not run


def test_unknown_calibration_workload_is_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        bench.main(["--only", "calibration:nonsense"], fake_machine())


def test_interleaved_rounds_rotate_so_no_function_always_follows_the_same_one() -> None:
    calls: list[str] = []
    functions = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    medians = interleaved_medians(functions, repeats=6, budget_seconds=60.0)
    assert set(medians) == {"a", "b", "c"} and all(t >= 0 for t in medians.values())
    timed = calls[6:]  # after two warm-up calls each
    blocks = [name for n, name in enumerate(timed) if n == 0 or timed[n - 1] != name]
    assert len(blocks) == 18
    followers = {(blocks[n], blocks[n + 1]) for n in range(len(blocks) - 1)}
    assert {("a", "b"), ("b", "a"), ("c", "a"), ("a", "c")} <= followers


def test_a_fast_function_is_timed_over_a_block_of_calls_and_a_slow_one_once() -> None:
    calls = {"fast": 0, "slow": 0}

    def fast() -> None:
        calls["fast"] += 1

    def slow() -> None:
        calls["slow"] += 1
        time.sleep(3 * BLOCK_SECONDS)

    medians = interleaved_medians({"fast": fast, "slow": slow}, repeats=4, budget_seconds=60.0)
    assert calls["slow"] == 2 + 4  # two warm-up calls, then one per round
    assert calls["fast"] > 2 + 4 * 10
    assert medians["slow"] >= 3 * BLOCK_SECONDS > medians["fast"]


def test_sweep_shapes_are_seeded_bounded_and_mostly_not_multiples_of_8() -> None:
    family = sweep.FAMILIES[0]
    shapes = sweep.random_shapes(family, 40, np.random.default_rng(3))
    assert shapes == sweep.random_shapes(family, 40, np.random.default_rng(3))
    ranges = family.extent_ranges
    assert all(low <= e <= high for s in shapes for e, (low, high) in zip(s, ranges, strict=True))
    assert all(np.prod(shape) <= family.max_elements for shape in shapes)
    extents = [e for shape in shapes for e in shape]
    assert sum(e % 8 != 0 for e in extents) > len(extents) / 2


def test_sweep_runs_checks_and_summarizes_a_family(capsys: pytest.CaptureFixture[str]) -> None:
    elementwise = next(family for family in sweep.FAMILIES if family.name == "elementwise")
    tiny = sweep.Family("elementwise", ((3, 40),) * 2, 2000, elementwise.workload, 2.5, 1.0)
    results, summaries = sweep.run_sweep([tiny], 2, 0, fake_machine(), 1)
    assert len(results) == 2 and all(r.correct and r.host_share for r in results)
    assert capsys.readouterr().out.splitlines()[-1].startswith("host: the FMA probe")
    (summary,) = summaries
    ratios = [r.ratios["numpy"] for r in results]
    assert summary.geometric_mean == pytest.approx(float(np.sqrt(ratios[0] * ratios[1])))
    assert summary.worst == min(ratios)
    assert summary.met == (summary.geometric_mean >= 2.5 and summary.worst >= 1.0)


def test_call_overhead_is_measured_for_a_kernel_a_jit_function_and_numpy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    argv = ["--repeats", "3", "--only", "overhead", "--json", str(out)]
    assert bench.main(argv, fake_machine()) == 0
    seconds = json.loads(out.read_text())["call_overhead_seconds"]
    assert set(seconds) == {"Kernel", "@jit", "numpy"} and all(s > 0 for s in seconds.values())
    assert "call overhead, x * 2 + 1 on 1000 elements: Kernel" in capsys.readouterr().out


def test_settling_idles_before_every_block() -> None:
    functions = {name: (lambda: None) for name in "ab"}
    start = time.perf_counter()
    interleaved_medians(functions, repeats=3, budget_seconds=60.0, settle_seconds=0.05)
    assert time.perf_counter() - start >= 2 * 3 * 0.05  # one idle per block: 2 names, 3 rounds


class WakesSlowly:
    """A call busy-waits `steady` seconds, or `slow` seconds while less than `waking` seconds
    have passed since the first call after 20 ms without a call (as a kernel whose cores went
    to sleep)."""

    def __init__(self, steady: float = 50e-6, slow: float = 400e-6, waking: float = 1e-3) -> None:
        self.steady, self.slow, self.waking = steady, slow, waking
        self.last_call = self.woken = -math.inf

    def __call__(self) -> None:
        now = time.perf_counter()
        if now - self.last_call > 0.02:
            self.woken = now
        until = now + (self.slow if now - self.woken < self.waking else self.steady)
        while time.perf_counter() < until:
            pass
        self.last_call = time.perf_counter()


def test_settled_blocks_time_the_steady_state_not_the_first_calls_after_idle() -> None:
    # One untimed call after idle left two slow calls in a block of ~5: a median of ~190 us.
    medians = interleaved_medians({"f": WakesSlowly()}, repeats=5, settle_seconds=0.05)
    assert medians["f"] < 120e-6


def test_settled_blocks_wait_out_a_wake_up_of_many_calls() -> None:
    # 0.3 ms calls 3x slower for 10 ms after idle (a VM's cores waking, as the 0.7 ms chain's
    # kernels and numpy's measured): ~2 ms of untimed calls left the block's median slow.
    slowly = WakesSlowly(steady=0.3e-3, slow=1e-3, waking=10e-3)
    medians = interleaved_medians({"f": slowly}, repeats=3, settle_seconds=0.05)
    assert medians["f"] < 0.5e-3


NEW_WORKLOADS = [
    *("attention-short", "attention-long", "layernorm-matmul", "gelu-matmul", "xtx"),
    *("mha", "mha-long", "sdpa", "causal", "block", "blocks2", "mlp2", "swiglu", "cosine"),
    *("logreg-grad", "kmeans"),
    *("distances", "cross-entropy", "correlation"),  # whole programs (eqsat.tools.whole_programs)
]


@pytest.mark.parametrize("name", NEW_WORKLOADS)
def test_a_quick_workload_compiles_to_its_numpy_reference(name: str) -> None:
    """The program and the numpy reference of a workload compute one thing (the check a bench
    run makes before timing)."""
    workload = next(w for w in bench.workloads(quick=True) if w.name == name)
    result = workloads.run_workload(workload, fake_machine(), 1, np.random.default_rng(0))
    assert result.failure is None and result.correct is True, result


@pytest.mark.parametrize("family", sweep.FAMILIES, ids=lambda family: family.name)
def test_every_sweep_family_builds_a_checked_workload(family: sweep.Family) -> None:
    shape = (9, 10, 11)[: len(family.extent_ranges)]
    result = workloads.run_workload(
        family.workload(shape), fake_machine(), 1, np.random.default_rng(0)
    )
    assert result.failure is None and result.correct is True, result


def test_a_cold_compile_cache_keeps_the_machines_files_and_nothing_compiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bench's cold compiles start from the calibration and the precompiled headers
    (`build.PRELUDE`), built once a machine; what a block builds besides is gone after it."""
    monkeypatch.setenv("EQSAT_CACHE_DIR", str(tmp_path))
    (tmp_path / "calibration-test.json").write_text("{}")
    with workloads.cold_compile_cache() as cold:
        assert (cold / "calibration-test.json").read_text() == "{}"
        build_library("void nothing(void) {}\n", "void nothing(void);", [])
        assert list(cold.glob("*.so"))
    assert list(tmp_path.glob("eqsat-prelude-*.h.gch/*.gch"))  # back in the current cache
    assert not list(tmp_path.glob("*.so"))
    with workloads.cold_compile_cache() as cold:
        assert list(cold.glob("eqsat-prelude-*.h.gch/*.gch")) and not list(cold.glob("*.so"))
