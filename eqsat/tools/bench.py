"""`python -m eqsat bench`: eqsat against numpy (and numexpr) on the design card's workloads.

For each float32 workload: compile it with `eqsat.compile` (default limits and machine, as a user
would), check the kernel against the numpy reference evaluated in float64 (ARCHITECTURE §9
tolerance), time eqsat and every baseline in turns (interleaved, median), and print one table
row: times, numpy/eqsat ratio and its target, the fraction of the machine's measured peak
(`eqsat.backend_c.calibrate`), compile seconds and the e-graph size of every optimizer stage.
Compile seconds are cold (a new compile cache, with only the machine's calibration and
precompiled headers: optimizer and gcc run) / warm (the same compile
again in a new process, answered from the compile cache, `eqsat.compile_cache`); "check ms" is
the part of the cold compile that ran the kernel against the written program
(`eqsat.validation`), timed again apart.

Then the cost-model calibration table (`eqsat.tools.model_check`): for matmul, softmax, layernorm
and an elementwise chain, the rank correlation between predicted and measured times of ~36
candidate nests each, and the regret of the model's pick.

Then, with `--sweep`, the random-shape sweep (`eqsat.tools.sweep`): per program family, shapes
drawn log-uniform, each shape's ratio, and the geometric mean and the worst against targets.

    python -m eqsat bench [--only elementwise,softmax,calibration:matmul] [--quick]
                          [--repeats N] [--json PATH] [--sweep [N]] [--seed S]
                          [--isa avx512|avx2|scalar]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

import eqsat
from eqsat.backend_c.calibrate import calibrated_host
from eqsat.core.measure import interleaved_medians
from eqsat.extract.machine import (
    ISA_LEVELS,
    Calibration,
    Machine,
    best_isa,
    cpu_flags,
    cpu_model,
)
from eqsat.tools import model_check, sweep
from eqsat.tools.whole_programs import whole_programs
from eqsat.tools.workloads import (
    Result,
    Workload,
    attention_workload,
    cold_compile_cache,
    elementwise_workload,
    format_host_shares,
    gelu_matmul_workload,
    gram_workload,
    layernorm_matmul_workload,
    layernorm_workload,
    matmul_workload,
    mlp_workload,
    numexpr_baseline,
    numexpr_module,
    numpy_gelu,
    omp_threads,
    run_workload,
    softmax_workload,
    xtx_workload,
)


def workloads(quick: bool = False) -> list[Workload]:
    """The benchmark's workloads; `quick` shrinks every size so that the whole run is fast."""
    n = 4096 if quick else 16 << 20  # elements of the elementwise workloads
    rows = 64 if quick else 4096  # softmax and layernorm: rows x rows
    size = 64 if quick else 1024  # matmul size^3, MLP and attention sequence length
    chain = 64 if quick else 2048
    head = 16 if quick else 64
    return [
        elementwise_workload((n,), target=3.0, min_dram_fraction=0.8),
        Workload(
            "gelu",
            f"eqsat.gelu (tanh form), {n:,} elements",
            {"x": (n,)},
            eqsat.gelu,
            numpy_gelu,
            target=5.0,
            others=numexpr_baseline(
                "half * x * (1 + tanh(k * (x + g * x**3)))",
                half=0.5,
                k=math.sqrt(2 / math.pi),
                g=0.044715,
            ),
        ),
        softmax_workload(rows, rows, target=4.0),
        layernorm_workload(rows, rows, target=6.0),
        matmul_workload(size, size, size, target=0.8),
        mlp_workload(size // 2, size, size, target=0.9),
        gram_workload(size // 2, 2 * size, size // 2, target=0.8),
        xtx_workload(2 * size, size // 2, target=0.8),
        attention_workload("attention", size, head, target=2.5),
        attention_workload("attention-short", size // 4, head // 2, target=2.0),
        attention_workload("attention-long", 2 * size, head, target=2.0),
        attention_workload("attention-wide", 4 * size, 2 * head, target=2.0),
        layernorm_matmul_workload(rows, size // 2, size // 2, target=1.2),
        gelu_matmul_workload(rows, size // 2, 2 * size, target=1.2),
        Workload(
            "chain",
            f"A @ B @ v, n={chain}; numpy column = np.linalg.multi_dot",
            {"A": (chain, chain), "B": (chain, chain), "v": (chain, 1)},
            lambda A, B, v: A @ B @ v,
            lambda A, B, v: np.linalg.multi_dot([A, B, v]),
            target=0.9,
            others={"A@B@v": lambda A, B, v: A @ B @ v},
            assume_finite=True,  # the chain's order, like multi_dot's (finite-only)
        ),
        *whole_programs(quick),
    ]


# Compiles one workload of `workloads()` again, in a new process, and prints the seconds it took.
_WARM_COMPILE = """
import sys
from eqsat.tools.bench import workloads
workload = next(w for w in workloads({quick}) if w.name == {name!r})
kernel, seconds = workload.compiled()
if "answered from the compile cache" not in kernel.explain():
    sys.exit("the repeated compile did not answer from the compile cache")
print(seconds)
"""


# A user's script whose kernel is in the compile cache: numpy is imported first (not counted).
_WARM_START = """
import sys, time
import numpy
start = time.perf_counter()
import eqsat
x = eqsat.tensor("x", (6, 10))
kernel = eqsat.compile(eqsat.relu(x * 2.0 + 1.0).sum(axis=1), progress=False)
seconds = time.perf_counter() - start
print(seconds, "answered from the compile cache" in kernel.explain(), "egglog" in sys.modules)
"""


def warm_start() -> str:
    """The header line of a warm start: `import eqsat`, building a small program and compiling
    it in a new process, answered from the compile cache (a first process fills a new one),
    median of 3, and whether egglog was imported."""
    package_root = Path(eqsat.__file__).resolve().parent.parent
    with cold_compile_cache() as directory:
        env = {
            **os.environ,
            "EQSAT_CACHE_DIR": str(directory),
            "PYTHONPATH": os.pathsep.join([str(package_root), os.environ.get("PYTHONPATH", "")]),
        }
        runs = [
            subprocess.run(
                [sys.executable, "-c", _WARM_START], env=env, capture_output=True, text=True
            ).stdout.split()
            for _ in range(4)
        ][1:]
    if any(len(run) != 3 or run[1] != "True" for run in runs):
        return "warm start: FAILED (a repeated compile did not answer from the compile cache)"
    seconds = sorted(float(run[0]) for run in runs)[1]
    egglog = "egglog imported" if "True" in (run[2] for run in runs) else "egglog not imported"
    return (
        f"warm start: import eqsat + build + compile answered from the compile cache in a new "
        f"process {seconds * 1e3:.0f} ms (median of 3; numpy's import not counted), {egglog}"
    )


def warm_compile_seconds(name: str, quick: bool, directory: Path) -> float:
    """Seconds of `eqsat.compile` of workload `name` in a new process, compile cache `directory`
    (where this process compiled it). Raises RuntimeError if that compile missed the cache."""
    package_root = Path(eqsat.__file__).resolve().parent.parent
    env = {
        **os.environ,
        "EQSAT_CACHE_DIR": str(directory),
        "PYTHONPATH": os.pathsep.join([str(package_root), os.environ.get("PYTHONPATH", "")]),
    }
    script = _WARM_COMPILE.format(quick=quick, name=name)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"warm compile of {name} failed: {done.stderr.strip()[-300:]}")
    return float(done.stdout)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}" if seconds < 0.01 else f"{seconds * 1e3:.1f}"


def _warm(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.3f}"


def _nodes(count: int) -> str:
    return f"{count / 1000:.0f}k" if count >= 10_000 else str(count)


_STOP = {"saturated": "sat", "node limit": "nodes", "time limit": "time", "iteration limit": "iter"}
_COLUMNS = (  # title, width, alignment
    ("workload", 11, "<"), ("check", 14, "<"), ("eqsat ms", 9, ">"), ("numpy ms", 9, ">"),
    ("np/eq", 7, ">"), ("target", 7, ">"), ("met", 4, ">"), ("thr", 3, ">"), ("peak", 10, ">"),
    ("others (ms, x)", 22, "<"), ("compile s cold/warm", 19, ">"), ("check ms", 8, ">"),
    ("e-graph nodes (stop)", 0, "<"),
)  # fmt: skip


def _row(cells: Sequence[str]) -> str:
    return "  ".join(
        f"{cell:{align}{width}}" for cell, (_, width, align) in zip(cells, _COLUMNS, strict=True)
    ).rstrip()


def format_result(result: Result) -> str:
    """One table row of `result` (see _COLUMNS)."""
    if result.failure is not None:
        return f"{result.name.ljust(11)}  FAILED: {result.failure[:160]}"
    assert result.max_error is not None and result.peak_fraction is not None
    check = f"{'ok' if result.correct else 'MISMATCH'} {result.max_error:.0e}"
    others = " ".join(
        f"{name} {_ms(result.seconds[name])} {result.ratios[name]:.2f}x"
        for name in result.seconds
        if name not in ("eqsat", "numpy")
    )
    stages = " ".join(
        f"{s['stage']} {_nodes(s['nodes'])} ({_STOP.get(s['stop_reason'], s['stop_reason'])})"
        for s in result.stages
    )
    target = f">={result.target:g}x"
    return _row(
        [
            result.name,
            check,
            _ms(result.seconds["eqsat"]),
            _ms(result.seconds["numpy"]),
            f"{result.ratios['numpy']:.2f}x",
            target,
            "yes" if result.met else "NO",
            str(result.threads),
            f"{result.peak_fraction:.0%} {result.peak_kind}",
            others,
            f"{result.compile_seconds:.2f}/{_warm(result.warm_compile_seconds)}",
            "-" if result.check_seconds is None else f"{result.check_seconds * 1e3:.0f}",
            stages,
        ]
    )


def _header(machine: Machine, repeats: int) -> list[str]:
    calibration = machine.calibration
    assert calibration is not None
    blas_threads = (
        os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS") or "default"
    )
    numexpr = numexpr_module()
    numexpr_threads = f"{numexpr.nthreads} threads" if numexpr else "not installed"
    return [
        f"eqsat bench: {cpu_model() or 'unknown CPU'}, {machine.isa}, {machine.cores} cores; "
        f"float32; median of up to {repeats} interleaved runs",
        f"threads: eqsat = OpenMP on the loops it marks parallel ({omp_threads(machine)} "
        "threads; column thr: 1 when no loop is parallel)",
        f"         numpy = ufuncs on 1 thread, matmul in OpenBLAS with {blas_threads} threads "
        f"(all cores unless set), OpenBLAS kernel {_openblas_kernel()}; "
        f"numexpr = {numexpr_threads}",
        "measured peaks " + _calibration_summary(calibration),
        "peak = eqsat's achieved flop/s over peak flops, or bytes of inputs + outputs per "
        "second over DRAM bandwidth, at eqsat's thread count",
        *_jax_caveat(machine),
    ]


def _jax_caveat(machine: Machine) -> list[str]:
    """A header line where `--isa` caps this host below its level and jax is installed: XLA
    emits no instruction above the cap (`--xla_cpu_max_isa`), but jax.jit's products run
    YNNPACK or Eigen kernels chosen from the CPU's flags, which the cap does not reach (a
    1024-cubed product ran at 262-304 GFLOP/s under the AVX2 cap on 2 cores of AVX-512, above
    their AVX2 peak of 231)."""
    level = best_isa(cpu_flags())
    if machine.isa == level or importlib.util.find_spec("jax") is None:
        return []
    return [
        f"jax.jit = XLA capped at {machine.isa} for the code it emits; its matrix products run "
        f"library kernels of this host's {level}, not of a {machine.isa} host"
    ]


def _openblas_kernel() -> str:
    """The core type of the kernels numpy's OpenBLAS runs (threadpoolctl's report where it is
    installed, else what OPENBLAS_CORETYPE asks for)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return os.environ.get("OPENBLAS_CORETYPE", "of OpenBLAS's choice")
    kernels = {
        str(i.get("architecture")) for i in threadpool_info() if i.get("internal_api") == "openblas"
    }
    return ", ".join(sorted(kernels)) or "unknown (numpy is not on OpenBLAS)"


def _calibration_summary(calibration: Calibration) -> str:
    def per_thread(row: Mapping[int, float], unit: float) -> str:
        return "/".join(f"{row[t] / unit:.0f}" for t in sorted(row))

    threads = "/".join(str(t) for t in sorted(calibration.peak_flops["float32"]))
    flops = ", ".join(
        f"{dtype} {per_thread(row, 1e9)}" for dtype, row in calibration.peak_flops.items()
    )
    bandwidth = ", ".join(
        f"{level} {per_thread(row, 1e9)}" for level, row in calibration.bandwidth.items()
    )
    starts = (
        f"parallel region start {calibration.parallel_restart_seconds * 1e6:.1f} us in a loop, "
        f"{calibration.parallel_start_seconds * 1e6:.0f} us after idle"
    )
    return f"({threads} threads): GFLOP/s {flops}; GB/s {bandwidth}; {starts}"


OVERHEAD_ELEMENTS = 1000
OVERHEAD_TARGETS = {"Kernel": 2e-6, "@jit": 4e-6}  # seconds per call, at most


def call_overhead(repeats: int) -> dict[str, float]:
    """Seconds per call, in steady state, of `x * 2 + 1` on OVERHEAD_ELEMENTS float32 elements:
    as a Kernel, as an `eqsat.jit` function and as numpy ufuncs (the work itself is ~0.1 us)."""
    x = np.arange(OVERHEAD_ELEMENTS, dtype=np.float32)
    kernel = eqsat.compile(eqsat.tensor("x", x.shape) * 2 + 1, progress=False)

    @eqsat.jit
    def traced(x: np.ndarray) -> Any:
        return x * 2 + 1

    traced(x)
    return interleaved_medians(
        {"Kernel": lambda: kernel(x), "@jit": lambda: traced(x), "numpy": lambda: x * 2 + 1},
        repeats,
    )


def format_overhead(seconds: Mapping[str, float]) -> str:
    parts = [
        f"{name} {seconds[name] * 1e6:.2f} us"
        + (f" (target <= {OVERHEAD_TARGETS[name] * 1e6:g} us)" if name in OVERHEAD_TARGETS else "")
        for name in seconds
    ]
    return f"call overhead, x * 2 + 1 on {OVERHEAD_ELEMENTS} elements: " + ", ".join(parts)


def _parse(argv: Sequence[str], names: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m eqsat bench",
        description=__doc__.split("\n")[0],
        epilog="`calibration` selects every workload of the cost-model calibration table, "
        "`calibration:NAME` one of them; by default both tables run.",
    )
    parser.add_argument("--only", help=f"comma-separated workloads among: {', '.join(names)}")
    parser.add_argument("--quick", action="store_true", help="small sizes (a fast smoke run)")
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds (default 15)")
    parser.add_argument("--json", metavar="PATH", help="also write every figure as JSON here")
    parser.add_argument(
        "--sweep",
        type=int,
        nargs="?",
        const=8,
        default=0,
        metavar="N",
        help="also run N random shapes per family (default 8): "
        f"{', '.join(f.name for f in sweep.FAMILIES)} (--only selects families too)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the sweep's shapes")
    parser.add_argument(
        "--isa",
        choices=ISA_LEVELS,
        help="measure as on a host of this ISA level: eqsat capped at it (EQSAT_MAX_ISA), numpy "
        "on the OpenBLAS kernel such a host runs (python -m eqsat bench sets both)",
    )
    options = parser.parse_args(argv)
    unknown = set((options.only or "").split(",")) - set(names) - {""}
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(sorted(unknown))}; choose from {names}")
    if options.repeats < 1:
        parser.error("--repeats must be at least 1")
    if options.sweep < 0:
        parser.error("--sweep takes a positive number of shapes")
    if options.isa and ISA_LEVELS.index(options.isa) < ISA_LEVELS.index(best_isa(cpu_flags())):
        parser.error(f"--isa {options.isa}: this CPU does not run it")
    return options


def _run_calibration(
    selected: Sequence[model_check.Workload], quick: bool, machine: Machine, repeats: int
) -> list[model_check.Check]:
    """The cost-model calibration table (eqsat.tools.model_check), printed row by row."""
    print("\n" + model_check.TABLE_TITLE, flush=True)
    print(model_check.table_header(), flush=True)
    mix = model_check.QUICK_MIX if quick else model_check.FULL_MIX
    checks = []
    for workload in selected:
        checks.append(model_check.check_workload(workload, machine, mix, repeats))
        print(model_check.format_check(checks[-1]), flush=True)
    return checks


def main(argv: Sequence[str], machine: Machine | None = None) -> int:
    """Run the benchmark and the cost-model calibration; returns 0, or 1 if a workload failed or
    did not match numpy, or a calibration candidate was wrong.

    It requires: `machine`, when given, has a calibration (tests pass a fake one); by default the
    host is calibrated (a few seconds the first time on a machine, then cached).
    """
    names = [workload.name for workload in workloads(quick=True)]
    check_names = [f"calibration:{w.name}" for w in model_check.workloads(quick=True)]
    options = _parse(argv, [*names, "overhead", "calibration", *check_names])
    chosen = set(options.only.split(",") if options.only else [*names, "overhead", "calibration"])
    selected = [workload for workload in workloads(options.quick) if workload.name in chosen]
    checks_selected = [
        workload
        for workload in model_check.workloads(options.quick)
        if {"calibration", f"calibration:{workload.name}"} & chosen
    ]
    if options.isa:  # `python -m eqsat bench --isa` set it already, with numpy's kernel
        os.environ["EQSAT_MAX_ISA"] = options.isa
    machine = machine or calibrated_host()
    header = [*_header(machine, options.repeats), warm_start()]
    print("\n".join(header), flush=True)
    rng = np.random.default_rng(0)
    results = []
    if selected:
        print(_row([title for title, _, _ in _COLUMNS]), flush=True)
    for workload in selected:
        with cold_compile_cache() as directory:
            results.append(run_workload(workload, machine, options.repeats, rng))
            if results[-1].failure is None:
                try:
                    results[-1].warm_compile_seconds = warm_compile_seconds(
                        workload.name, options.quick, directory
                    )
                except RuntimeError as error:
                    results[-1].failure = str(error)
        print(format_result(results[-1]), flush=True)
    if results:
        print(format_host_shares(results), flush=True)
    overhead = call_overhead(options.repeats) if "overhead" in chosen else {}
    if overhead:
        print(format_overhead(overhead), flush=True)
    checks = (
        _run_calibration(checks_selected, options.quick, machine, options.repeats)
        if checks_selected
        else []
    )
    families = [f for f in sweep.FAMILIES if not options.only or f.name in chosen]
    swept, summaries = (
        sweep.run_sweep(families, options.sweep, options.seed, machine, options.repeats)
        if options.sweep
        else ([], [])
    )
    described = [f"  {w.name}: {w.description}" for w in selected] + [
        f"  calibration:{w.name}: {w.description}" for w in checks_selected
    ]
    print("\n".join(["workloads:", *described]))
    if options.json:
        report = {
            "cpu": cpu_model(),
            "machine": asdict(machine),
            "quick": options.quick,
            "repeats": options.repeats,
            "header": header,
            "workloads": [asdict(result) for result in results],
            "calibration": [asdict(check) for check in checks],
            "call_overhead_seconds": overhead,
            "sweep": [asdict(result) for result in swept],
            "sweep_summary": [asdict(summary) for summary in summaries],
        }
        with open(options.json, "w") as handle:
            json.dump(report, handle, indent=2)
    bad = [r.name for r in results if r.failure is not None or not r.correct]
    bad += [r.description for r in swept if r.failure is not None or not r.correct]
    bad += [f"calibration:{c.name}" for c in checks if c.failure is not None or c.wrong]
    if bad:
        print(f"!! FAILED OR MISMATCHED: {', '.join(bad)}")
    return 1 if bad else 0
