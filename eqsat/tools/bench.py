"""`python -m eqsat bench`: eqsat against numpy (and numexpr) on the design card's workloads.

For each float32 workload: compile it with `eqsat.compile` (default limits and machine, as a user
would), check the kernel against the numpy reference evaluated in float64 (ARCHITECTURE §9
tolerance), time eqsat and every baseline in turns (interleaved, median), and print one table
row: times, numpy/eqsat ratio and its target, the fraction of the machine's measured peak
(`eqsat.backend_c.calibrate`), compile seconds and the e-graph size of every optimizer stage.

Then the cost-model calibration table (`eqsat.tools.model_check`): for matmul, softmax, layernorm
and an elementwise chain, the rank correlation between predicted and measured times of ~36
candidate nests each, and the regret of the model's pick.

    python -m eqsat bench [--only elementwise,softmax,calibration:matmul] [--quick]
                          [--repeats N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

import numpy as np

import eqsat
from eqsat.backend_c.calibrate import calibrated_host
from eqsat.core.measure import agreement, interleaved_medians, random_inputs
from eqsat.extract.machine import Calibration, Machine, cpu_model
from eqsat.tools import model_check


@dataclass(frozen=True)
class Workload:
    """One benchmark: an eqsat program, its plain-numpy reference and the ratio to reach.

    `program` and `reference` take the inputs by name (symbolic tensors, resp. arrays). The
    reference is timed in float32 and is also the correctness oracle, evaluated in float64.
    `flops` is None for a memory-bound workload (measured against DRAM bandwidth, counting the
    bytes of inputs and outputs once); otherwise it is measured against peak flops.
    """

    name: str
    description: str
    shapes: Mapping[str, tuple[int, ...]]
    program: Callable[..., eqsat.Tensor]
    reference: Callable[..., np.ndarray]
    target: float  # numpy time / eqsat time at least this
    flops: float | None = None
    min_dram_fraction: float | None = None  # a second target, on the fraction of DRAM bandwidth
    others: Mapping[str, Callable[..., np.ndarray]] = field(default_factory=dict)


@dataclass
class Result:
    """The figures of one workload (all times in seconds); None where a step did not run."""

    name: str
    description: str
    target: float
    failure: str | None = None  # the exception that stopped the workload, if any
    compile_seconds: float | None = None
    stages: list[dict[str, Any]] = field(default_factory=list)  # SaturationReport fields
    max_error: float | None = None
    tolerance: float | None = None
    correct: bool | None = None
    threads: int | None = None  # eqsat's threads: all OpenMP threads if a loop is parallel, else 1
    seconds: dict[str, float] = field(default_factory=dict)  # "eqsat", "numpy", other baselines
    ratios: dict[str, float] = field(default_factory=dict)  # baseline time / eqsat time
    work: float | None = None  # flops, or bytes of inputs + outputs (see `peak_kind`)
    peak_kind: str = ""  # "flops" or "DRAM"
    peak_fraction: float | None = None
    met: bool | None = None


def _numexpr_module() -> Any:
    """The numexpr module, or None where it is not installed (it is an optional baseline)."""
    try:
        import numexpr
    except ImportError:
        return None
    return numexpr


def _numexpr(expression: str, **constants: float) -> dict[str, Callable[..., np.ndarray]]:
    """{"numexpr": a function of the inputs evaluating `expression`}, or {} without numexpr.

    Constants are passed as float32 variables: a literal like 0.5 makes numexpr compute in float64.
    """
    numexpr = _numexpr_module()
    if numexpr is None:
        return {}
    scalars = {name: np.float32(value) for name, value in constants.items()}
    return {"numexpr": lambda **inputs: numexpr.evaluate(expression, {**inputs, **scalars})}


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _layernorm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    centered = x - x.mean(1, keepdims=True)
    variance = (centered**2).mean(1, keepdims=True)
    return centered / np.sqrt(variance + 1e-5) * weight + bias


def workloads(quick: bool = False) -> list[Workload]:
    """The benchmark's workloads; `quick` shrinks every size so that the whole run is fast."""
    n = 4096 if quick else 16 << 20  # elements of the elementwise workloads
    rows = 64 if quick else 4096  # softmax and layernorm: rows x rows
    size = 64 if quick else 1024  # matmul size^3, MLP and attention sequence length
    chain = 64 if quick else 2048
    head = 16 if quick else 64
    vectors = {"a": (n,), "b": (n,), "c": (n,)}
    return [
        Workload(
            "elementwise",
            f"relu(a*b + c)*0.5, {n:,} elements",
            vectors,
            lambda a, b, c: eqsat.relu(a * b + c) * 0.5,
            lambda a, b, c: np.maximum(a * b + c, 0) * 0.5,
            target=3.0,
            min_dram_fraction=0.8,
            others=_numexpr("where(a*b + c > 0, (a*b + c) * half, 0)", half=0.5),
        ),
        Workload(
            "gelu",
            f"eqsat.gelu (tanh form), {n:,} elements",
            {"x": (n,)},
            eqsat.gelu,
            _gelu,
            target=5.0,
            others=_numexpr(
                "half * x * (1 + tanh(k * (x + g * x**3)))",
                half=0.5,
                k=math.sqrt(2 / math.pi),
                g=0.044715,
            ),
        ),
        Workload(
            "softmax",
            f"row softmax, {rows}x{rows}",
            {"x": (rows, rows)},
            eqsat.softmax,
            _softmax,
            target=4.0,
        ),
        Workload(
            "layernorm",
            f"eqsat.layernorm over rows with weight and bias, {rows}x{rows}",
            {"x": (rows, rows), "weight": (rows,), "bias": (rows,)},
            eqsat.layernorm,
            _layernorm,
            target=6.0,
        ),
        Workload(
            "matmul",
            f"A @ B, {size}^3",
            {"A": (size, size), "B": (size, size)},
            lambda A, B: A @ B,
            lambda A, B: A @ B,
            target=0.8,
            flops=2.0 * size**3,
        ),
        Workload(
            "mlp",
            f"relu(x @ W + b), x {size // 2}x{size}, W {size}x{size}",
            {"x": (size // 2, size), "W": (size, size), "b": (size,)},
            lambda x, W, b: eqsat.relu(x @ W + b),
            lambda x, W, b: np.maximum(x @ W + b, 0),
            target=0.9,
            flops=2.0 * (size // 2) * size * size,
        ),
        Workload(
            "attention",
            f"softmax(Q @ K.T / 8) @ V, Q K V {size}x{head}",
            {"Q": (size, head), "K": (size, head), "V": (size, head)},
            lambda Q, K, V: eqsat.softmax(Q @ K.T / 8) @ V,
            lambda Q, K, V: _softmax(Q @ K.T / 8) @ V,
            target=1.5,
            flops=4.0 * size * size * head,
        ),
        Workload(
            "chain",
            f"A @ B @ v, n={chain}; numpy column = np.linalg.multi_dot",
            {"A": (chain, chain), "B": (chain, chain), "v": (chain, 1)},
            lambda A, B, v: A @ B @ v,
            lambda A, B, v: np.linalg.multi_dot([A, B, v]),
            target=0.9,
            others={"A@B@v": lambda A, B, v: A @ B @ v},
        ),
    ]


def _omp_threads(machine: Machine) -> int:
    """Threads of an OpenMP parallel loop: OMP_NUM_THREADS (first value) or all cores."""
    value = os.environ.get("OMP_NUM_THREADS", "").split(",")[0]
    return int(value) if value.isdigit() and int(value) > 0 else machine.cores


def run_workload(
    workload: Workload, machine: Machine, repeats: int, rng: np.random.Generator
) -> Result:
    """Compile, check and time one workload; an exception on the way is kept in `failure`.

    It requires: `machine.calibration` is set.
    """
    result = Result(workload.name, workload.description, workload.target)
    try:
        symbols = {name: eqsat.tensor(name, shape) for name, shape in workload.shapes.items()}
        start = time.perf_counter()
        kernel = eqsat.compile(workload.program(**symbols))
        result.compile_seconds = time.perf_counter() - start
        result.stages = [  # plain dicts: asdict() turns a Counter's items into tuple keys
            {**vars(report), "matches": dict(report.matches)} for report in kernel.stages
        ]
        inputs = random_inputs(workload.shapes, "float32", rng)
        got = np.asarray(kernel(**inputs))
        _check(result, got, workload, inputs)
        functions = {
            "eqsat": partial(kernel, **inputs),
            "numpy": partial(workload.reference, **inputs),
            **{name: partial(other, **inputs) for name, other in workload.others.items()},
        }
        result.seconds = interleaved_medians(functions, repeats)
    except Exception as error:  # a failing workload is reported in its row; the run goes on
        lines = str(error).splitlines()
        result.failure = f"{type(error).__name__}: {lines[0] if lines else ''}"
        return result
    parallel = "#pragma omp parallel" in kernel.c_source  # the emitter's mark of a Parallel loop
    result.threads = _omp_threads(machine) if parallel else 1
    seconds = result.seconds["eqsat"]
    result.ratios = {name: t / seconds for name, t in result.seconds.items() if name != "eqsat"}
    calibration = machine.calibration
    assert calibration is not None
    if workload.flops is not None:
        result.work, result.peak_kind = workload.flops, "flops"
        peak = _at(calibration.peak_flops["float32"], result.threads)
    else:
        result.work = sum(array.nbytes for array in inputs.values()) + got.nbytes
        result.peak_kind = "DRAM"
        peak = _at(calibration.bandwidth["DRAM"], result.threads)
    result.peak_fraction = result.work / seconds / peak
    result.met = result.ratios["numpy"] >= workload.target and (
        workload.min_dram_fraction is None or result.peak_fraction >= workload.min_dram_fraction
    )
    return result


def _check(
    result: Result, got: np.ndarray, workload: Workload, inputs: Mapping[str, np.ndarray]
) -> None:
    """Compare `got` with the float64 reference within ARCHITECTURE §9's float32 tolerance."""
    want = workload.reference(**{name: a.astype(np.float64) for name, a in inputs.items()})
    check = agreement(got, want, "float32")
    result.max_error, result.tolerance, result.correct = check.max_error, check.tolerance, check.ok


def _at(row: Mapping[int, float], threads: int) -> float:
    """The figure of `row` at the largest measured thread count <= `threads`."""
    return row[max(t for t in row if t <= threads)]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}" if seconds < 0.01 else f"{seconds * 1e3:.1f}"


def _nodes(count: int) -> str:
    return f"{count / 1000:.0f}k" if count >= 10_000 else str(count)


_STOP = {"saturated": "sat", "node limit": "nodes", "time limit": "time", "iteration limit": "iter"}
_COLUMNS = (  # title, width, alignment
    ("workload", 11, "<"), ("check", 14, "<"), ("eqsat ms", 9, ">"), ("numpy ms", 9, ">"),
    ("np/eq", 7, ">"), ("target", 7, ">"), ("met", 4, ">"), ("thr", 3, ">"), ("peak", 10, ">"),
    ("others (ms, x)", 22, "<"), ("compile s", 9, ">"), ("e-graph nodes (stop)", 0, "<"),
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
            f"{result.compile_seconds:.1f}",
            stages,
        ]
    )


def _header(machine: Machine, repeats: int) -> list[str]:
    calibration = machine.calibration
    assert calibration is not None
    blas_threads = (
        os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS") or "default"
    )
    numexpr = _numexpr_module()
    numexpr_threads = f"{numexpr.nthreads} threads" if numexpr else "not installed"
    return [
        f"eqsat bench: {cpu_model() or 'unknown CPU'}, {machine.isa}, {machine.cores} cores; "
        f"float32; median of up to {repeats} interleaved runs",
        f"threads: eqsat = OpenMP on the loops it marks parallel ({_omp_threads(machine)} "
        "threads; column thr: 1 when no loop is parallel)",
        f"         numpy = ufuncs on 1 thread, matmul in OpenBLAS with {blas_threads} threads "
        f"(all cores unless set); numexpr = {numexpr_threads}",
        "measured peaks " + _calibration_summary(calibration),
        "peak = eqsat's achieved flop/s over peak flops, or bytes of inputs + outputs per "
        "second over DRAM bandwidth, at eqsat's thread count",
    ]


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
    return f"({threads} threads): GFLOP/s {flops}; GB/s {bandwidth}"


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
    options = parser.parse_args(argv)
    unknown = set((options.only or "").split(",")) - set(names) - {""}
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(sorted(unknown))}; choose from {names}")
    if options.repeats < 1:
        parser.error("--repeats must be at least 1")
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
    options = _parse(argv, [*names, "calibration", *check_names])
    chosen = set(options.only.split(",") if options.only else [*names, "calibration"])
    selected = [workload for workload in workloads(options.quick) if workload.name in chosen]
    checks_selected = [
        workload
        for workload in model_check.workloads(options.quick)
        if {"calibration", f"calibration:{workload.name}"} & chosen
    ]
    machine = machine or calibrated_host()
    header = _header(machine, options.repeats)
    print("\n".join(header), flush=True)
    rng = np.random.default_rng(0)
    results = []
    if selected:
        print(_row([title for title, _, _ in _COLUMNS]), flush=True)
    for workload in selected:
        results.append(run_workload(workload, machine, options.repeats, rng))
        print(format_result(results[-1]), flush=True)
    checks = (
        _run_calibration(checks_selected, options.quick, machine, options.repeats)
        if checks_selected
        else []
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
        }
        with open(options.json, "w") as handle:
            json.dump(report, handle, indent=2)
    bad = [r.name for r in results if r.failure is not None or not r.correct] + [
        f"calibration:{c.name}" for c in checks if c.failure is not None or c.wrong
    ]
    if bad:
        print(f"!! FAILED OR MISMATCHED: {', '.join(bad)}")
    return 1 if bad else 0
