"""One benchmark workload: an eqsat program beside its numpy reference, compiled, checked
against float64 and timed against numpy (and numexpr) in interleaved rounds.

Shared by the fixed benchmark (`eqsat.tools.bench`), the random-shape sweep
(`eqsat.tools.sweep`) and the demo.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

import eqsat
from eqsat.backend_c.build import PRELUDE_FILES, cache_dir
from eqsat.backend_c.calibrate import fma_share_now
from eqsat.core.measure import agreement, interleaved_medians, random_inputs
from eqsat.core.terms import Term, to_term
from eqsat.extract.machine import Machine
from eqsat.validation import Check, check_kernel

# Idle time before each side's block of calls: OpenBLAS's threads yield for ~0.15 s after a
# call and would slow whatever is timed next on the same cores.
SETTLE_SECONDS = 0.2


@dataclass(frozen=True)
class Workload:
    """One benchmark: an eqsat program, its plain-numpy reference and the ratio to reach.

    `program` and `reference` take the inputs by name (symbolic tensors, resp. arrays). The
    reference is timed in float32 and is also the correctness oracle, evaluated in float64.
    `flops` is None for a memory-bound workload (measured against DRAM bandwidth, counting the
    bytes of inputs and outputs once); otherwise it is measured against peak flops.
    `assume_finite` is passed to `eqsat.compile`: True where the numpy side reorders too (a
    matrix chain against `np.linalg.multi_dot`).
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
    assume_finite: bool = False
    # inputs are standard normal times these (1 where not given): a model's weights are scaled
    # by 1/sqrt(fan-in), else its softmax is one-hot and a float32 run is no test of the result
    scales: Mapping[str, float] = field(default_factory=dict)

    def compiled(self) -> tuple[eqsat.Kernel, float]:
        """The workload's kernel, compiled as the benchmark does, and the seconds that
        `eqsat.compile` took."""
        symbols = {name: eqsat.tensor(name, shape) for name, shape in self.shapes.items()}
        program = self.program(**symbols)
        start = time.perf_counter()
        kernel = eqsat.compile(program, assume_finite=self.assume_finite)
        return kernel, time.perf_counter() - start

    def checked(self, kernel: eqsat.Kernel) -> Check:
        """`eqsat.compile`'s check of `kernel` against this workload's program, run again (to
        time it apart from the compile it is part of)."""
        symbols = {name: eqsat.tensor(name, shape) for name, shape in self.shapes.items()}
        written = to_term(self.program(**symbols).expr)
        assert isinstance(written, Term)
        return check_kernel(kernel, [written], self.assume_finite)


@dataclass
class Result:
    """The figures of one workload (all times in seconds); None where a step did not run."""

    name: str
    description: str
    target: float
    failure: str | None = None  # the exception that stopped the workload, if any
    compile_seconds: float | None = None
    warm_compile_seconds: float | None = None  # a repeated compile in a new process (the bench)
    # the translation validation's part of compile_seconds, run again (`eqsat.validation`)
    check_seconds: float | None = None
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
    # `calibrate.fma_share_now` before and after the timing, the lower
    host_share: float | None = None


def numexpr_module() -> Any:
    """The numexpr module, or None where it is not installed (it is an optional baseline)."""
    try:
        import numexpr
    except ImportError:
        return None
    return numexpr


def numexpr_baseline(expression: str, **constants: float) -> dict[str, Callable[..., np.ndarray]]:
    """{"numexpr": a function of the inputs evaluating `expression`}, or {} without numexpr.

    Constants are passed as float32 variables: a literal like 0.5 makes numexpr compute in float64.
    """
    numexpr = numexpr_module()
    if numexpr is None:
        return {}
    scalars = {name: np.float32(value) for name, value in constants.items()}
    return {"numexpr": lambda **inputs: numexpr.evaluate(expression, {**inputs, **scalars})}


def numpy_gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def numpy_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def numpy_layernorm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    centered = x - x.mean(1, keepdims=True)
    variance = (centered**2).mean(1, keepdims=True)
    return centered / np.sqrt(variance + 1e-5) * weight + bias


def matmul_workload(m: int, k: int, n: int, target: float) -> Workload:
    """`A @ B` of (m, k) by (k, n)."""
    return Workload(
        "matmul",
        f"A @ B, {m}x{k} @ {k}x{n}",
        {"A": (m, k), "B": (k, n)},
        lambda A, B: A @ B,
        lambda A, B: A @ B,
        target=target,
        flops=2.0 * m * k * n,
    )


def gram_workload(m: int, k: int, n: int, target: float) -> Workload:
    """`x.T @ y` of x (k, m) and y (k, n): a gram matrix, or a weight gradient `x.T @ delta`,
    whose left operand is a transpose."""
    return Workload(
        "gram",
        f"x.T @ y, x {k}x{m}, y {k}x{n}",
        {"x": (k, m), "y": (k, n)},
        lambda x, y: x.T @ y,
        lambda x, y: x.T @ y,
        target=target,
        flops=2.0 * m * k * n,
    )


def xtx_workload(k: int, n: int, target: float) -> Workload:
    """`x.T @ x` of x (k, n): a gram or covariance matrix, symmetric (numpy runs a symmetric
    rank-k update, half the flops of a product)."""
    return Workload(
        "xtx",
        f"x.T @ x, x {k}x{n}",
        {"x": (k, n)},
        lambda x: x.T @ x,
        lambda x: x.T @ x,
        target=target,
        flops=1.0 * k * n * (n + 1),  # a symmetric rank-k update's: one triangle and diagonal
    )


def mlp_workload(m: int, k: int, n: int, target: float) -> Workload:
    """A dense layer `relu(x @ W + b)`, x of (m, k), W of (k, n)."""
    relu = partial(np.maximum, 0)
    return _dense_layer("mlp", "relu", eqsat.relu, relu, (m, k, n), target)


def gelu_matmul_workload(m: int, k: int, n: int, target: float) -> Workload:
    """`gelu(x @ W + b)` (tanh form; a feed-forward layer's first half), x of (m, k), W of
    (k, n)."""
    return _dense_layer("gelu-matmul", "gelu", eqsat.gelu, numpy_gelu, (m, k, n), target)


def _dense_layer(
    name: str,
    activation: str,
    program: Callable[[eqsat.Tensor], eqsat.Tensor],
    reference: Callable[[np.ndarray], np.ndarray],
    shape: tuple[int, int, int],
    target: float,
) -> Workload:
    """`activation(x @ W + b)`, x of (m, k), W of (k, n) for `shape` (m, k, n)."""
    m, k, n = shape
    return Workload(
        name,
        f"{activation}(x @ W + b), x {m}x{k}, W {k}x{n}",
        {"x": (m, k), "W": (k, n), "b": (n,)},
        lambda x, W, b: program(x @ W + b),
        lambda x, W, b: reference(x @ W + b),
        target=target,
        flops=2.0 * m * k * n,
    )


def attention_workload(name: str, seq: int, head: int, target: float) -> Workload:
    """One attention head `softmax(Q @ K.T / 8) @ V`, Q K V of (seq, head)."""
    return Workload(
        name,
        f"softmax(Q @ K.T / 8) @ V, Q K V {seq}x{head}",
        {"Q": (seq, head), "K": (seq, head), "V": (seq, head)},
        lambda Q, K, V: eqsat.softmax(Q @ K.T / 8) @ V,
        lambda Q, K, V: numpy_softmax(Q @ K.T / 8) @ V,
        target=target,
        flops=4.0 * seq * seq * head,
    )


def layernorm_matmul_workload(m: int, k: int, n: int, target: float) -> Workload:
    """`layernorm(x) @ W` (a pre-norm projection), x of (m, k), W of (k, n)."""
    return Workload(
        "layernorm-matmul",
        f"layernorm(x) @ W, x {m}x{k}, W {k}x{n}",
        {"x": (m, k), "weight": (k,), "bias": (k,), "W": (k, n)},
        lambda x, weight, bias, W: eqsat.layernorm(x, weight, bias) @ W,
        lambda x, weight, bias, W: numpy_layernorm(x, weight, bias) @ W,
        target=target,
        flops=2.0 * m * k * n,
    )


def softmax_workload(rows: int, columns: int, target: float) -> Workload:
    """`eqsat.softmax` over the rows of a (rows, columns) matrix."""
    return Workload(
        "softmax",
        f"row softmax, {rows}x{columns}",
        {"x": (rows, columns)},
        eqsat.softmax,
        numpy_softmax,
        target=target,
    )


def layernorm_workload(rows: int, columns: int, target: float) -> Workload:
    """`eqsat.layernorm` over the rows of a (rows, columns) matrix, with weight and bias."""
    return Workload(
        "layernorm",
        f"layernorm with weight and bias, {rows}x{columns}",
        {"x": (rows, columns), "weight": (columns,), "bias": (columns,)},
        eqsat.layernorm,
        numpy_layernorm,
        target=target,
    )


def elementwise_workload(
    shape: tuple[int, ...], target: float, min_dram_fraction: float | None = None
) -> Workload:
    """The chain `relu(a*b + c)*0.5` on three arrays of `shape` (numexpr too when installed)."""
    return Workload(
        "elementwise",
        f"relu(a*b + c)*0.5, {'x'.join(map(str, shape))}",
        dict.fromkeys("abc", shape),
        lambda a, b, c: eqsat.relu(a * b + c) * 0.5,
        lambda a, b, c: np.maximum(a * b + c, 0) * 0.5,
        target=target,
        min_dram_fraction=min_dram_fraction,
        others=numexpr_baseline("where(a*b + c > 0, (a*b + c) * half, 0)", half=0.5),
    )


def omp_threads(machine: Machine) -> int:
    """Threads of an OpenMP parallel loop: OMP_NUM_THREADS (first value) or all cores."""
    value = os.environ.get("OMP_NUM_THREADS", "").split(",")[0]
    return int(value) if value.isdigit() and int(value) > 0 else machine.cores


@contextmanager
def cold_compile_cache() -> Iterator[Path]:
    """For the block, EQSAT_CACHE_DIR is a new temporary directory holding only what the current
    one has of the machine (its calibration files and the precompiled headers kernels compile
    after, `build.PRELUDE`), so compiles in it are cold (optimizer and gcc both run) and nothing
    they cache outlives the block but the precompiled headers, which go back to the current
    directory. Yields the directory."""
    current = cache_dir()
    previous = os.environ.get("EQSAT_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="eqsat-cold-") as directory:
        _copy_new([*current.glob("calibration-*.json"), *current.glob(PRELUDE_FILES)], directory)
        os.environ["EQSAT_CACHE_DIR"] = directory
        try:
            yield Path(directory)
        finally:
            if previous is None:
                del os.environ["EQSAT_CACHE_DIR"]
            else:
                os.environ["EQSAT_CACHE_DIR"] = previous
            _copy_new(list(Path(directory).glob(PRELUDE_FILES)), current)


def _copy_new(paths: list[Path], directory: Path | str) -> None:
    """Copy the files and directories of `paths` into `directory`, except the files it has."""
    for path in paths:
        target = Path(directory) / path.name
        if path.is_dir():
            target.mkdir(exist_ok=True)
            _copy_new(list(path.iterdir()), target)
        elif not target.exists():
            shutil.copy(path, target)


# A row whose FMA probe ran below this share of the calibrated peak was timed on a busy host
QUIET_SHARE = 0.85


def format_host_shares(results: Sequence[Result]) -> str:
    """One line: the range of the rows' `host_share`, and the rows timed while the host was busy
    (below QUIET_SHARE): other processes or guests held its cores, so their figures may be off.
    A row that failed before its timing has no share."""
    shares = {r.name: r.host_share for r in results if r.host_share is not None}
    if not shares:
        return "host: no row was timed"
    line = (
        "host: the FMA probe before and after each row ran at "
        f"{min(shares.values()):.0%}-{max(shares.values()):.0%} of the calibrated peak"
    )
    busy = [f"{name} {share:.0%}" for name, share in shares.items() if share < QUIET_SHARE]
    if not busy:
        return line + " (quiet)"
    return (
        f"{line}; timed while other processes or guests held the cores (below "
        f"{QUIET_SHARE:.0%}), their figures may be off: {', '.join(busy)}"
    )


def run_workload(
    workload: Workload, machine: Machine, repeats: int, rng: np.random.Generator
) -> Result:
    """Compile, check and time one workload; an exception on the way is kept in `failure`.

    It requires: `machine.calibration` is set.
    """
    result = Result(workload.name, workload.description, workload.target)
    try:
        kernel, result.compile_seconds = workload.compiled()
        result.check_seconds = workload.checked(kernel).seconds
        result.stages = [report.as_dict() for report in kernel.stages]
        inputs = random_inputs(workload.shapes, "float32", rng)
        for name, scale in workload.scales.items():
            inputs[name] *= np.float32(scale)
        got = np.asarray(kernel(**inputs))
        _check(result, got, workload, inputs)
        functions: dict[str, Callable[[], object]] = {
            "eqsat": partial(kernel, **inputs),
            "numpy": partial(workload.reference, **inputs),
            **{name: partial(other, **inputs) for name, other in workload.others.items()},
        }
        share_before = fma_share_now(machine)
        result.seconds = interleaved_medians(functions, repeats, settle_seconds=SETTLE_SECONDS)
        result.host_share = min(share_before, fma_share_now(machine))
    except Exception as error:  # a failing workload is reported in its row; the run goes on
        lines = str(error).splitlines()
        result.failure = f"{type(error).__name__}: {lines[0] if lines else ''}"
        return result
    parallel = "#pragma omp parallel" in kernel.c_source  # the emitter's mark of a Parallel loop
    result.threads = omp_threads(machine) if parallel else 1
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
