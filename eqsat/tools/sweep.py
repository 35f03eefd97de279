"""`python -m eqsat bench --sweep`: eqsat against numpy on random shapes, per program family.

A user's first try is on their own shapes, not the benchmark's. Each family draws shapes from a
seeded generator, every extent log-uniform over its range (most are not multiples of 8 or 16,
from a few elements to beyond the last-level cache), compiles, checks and times each shape like
a fixed workload (`eqsat.tools.workloads.run_workload`), and reports the geometric mean and the
worst numpy/eqsat ratio against the family's targets.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from eqsat.extract.machine import Machine
from eqsat.tools.whole_programs import (
    block_workload,
    cosine_workload,
    mha_workload,
    swiglu_workload,
)
from eqsat.tools.workloads import (
    Result,
    Workload,
    attention_workload,
    elementwise_workload,
    format_host_shares,
    gelu_matmul_workload,
    gram_workload,
    layernorm_matmul_workload,
    layernorm_workload,
    matmul_workload,
    mlp_workload,
    run_workload,
    softmax_workload,
    xtx_workload,
)


@dataclass(frozen=True)
class Family:
    """Programs of one kind over random shapes: `workload(shape)` builds one; dimension d of a
    shape is drawn log-uniform in `extent_ranges[d]`, and the shape redrawn while the product
    of its extents exceeds `max_elements` (which bounds the run time of one shape)."""

    name: str
    extent_ranges: tuple[tuple[int, int], ...]
    max_elements: float
    workload: Callable[[tuple[int, ...]], Workload]
    mean_target: float  # geometric mean of numpy time / eqsat time over the shapes
    worst_target: float  # every shape at least this


PRODUCT = ((8, 2048),) * 3  # (m, k, n) of a matmul
ROWS = ((8, 8192),) * 2  # (rows, columns) of a row-wise program
ATTENTION_HEADS = ((8, 1024), (1, 16), (8, 128))  # (sequence, heads, head size)
BLOCK_HEADS = ((8, 512), (1, 16), (8, 64))  # ... models to 1024 wide (its weights: 48 MiB)
# Each shape's own target is the family's worst-case target.
FAMILIES = (
    Family("matmul", PRODUCT, 2.0e9, lambda s: matmul_workload(*s, 0.6), 0.9, 0.6),
    Family("mlp", PRODUCT, 2.0e9, lambda s: mlp_workload(*s, 0.7), 1.0, 0.7),
    # (m, k, n) of x.T @ y, x of (k, m): the matmul's targets
    Family("gram", PRODUCT, 2.0e9, lambda s: gram_workload(*s, 0.6), 0.9, 0.6),
    # (k, n) of x.T @ x: the matmul's targets, against numpy's symmetric rank-k update
    Family("xtx", ((8, 8192), (8, 2048)), 4.0e6, lambda s: xtx_workload(*s, 0.6), 0.9, 0.6),
    Family("softmax", ROWS, 1.6e7, lambda s: softmax_workload(*s, 1.5), 2.5, 1.5),
    Family("layernorm", ROWS, 1.6e7, lambda s: layernorm_workload(*s, 2.0), 3.5, 2.0),
    Family(
        "elementwise", ((4, 8192),) * 2, 1.6e7, lambda s: elementwise_workload(s, 1.0), 2.5, 1.0
    ),
    # (sequence, head): heads of 8 to 256 as models have them
    Family(
        "attention",
        ((8, 4096), (8, 256)),
        2.5e5,
        lambda s: attention_workload("attention", *s, 1.0),
        2.0,
        1.0,
    ),
    Family(
        "layernorm-matmul",
        PRODUCT,
        2.0e9,
        lambda s: layernorm_matmul_workload(*s, 0.9),
        1.2,
        0.9,
    ),
    Family("gelu-matmul", PRODUCT, 2.0e9, lambda s: gelu_matmul_workload(*s, 1.0), 1.5, 1.0),
    # whole programs (issue 32's targets): (sequence, heads, head size) as models have them,
    # (rows, hidden) of a feed-forward layer, (rows, other rows, width) of a similarity matrix
    Family("mha", ATTENTION_HEADS, 1.0e6, lambda s: mha_workload(*s, 1.0), 1.5, 1.0),
    Family("block", BLOCK_HEADS, 1.0e6, lambda s: block_workload(*s, 1.0), 1.3, 1.0),
    Family(
        "swiglu",
        ((8, 1024), (32, 1024), (64, 4096)),
        2.0e9,
        lambda s: swiglu_workload(*s),
        1.0,
        1.0,
    ),
    Family("cosine", PRODUCT, 2.0e9, lambda s: cosine_workload(*s), 1.0, 1.0),
)


def random_shapes(family: Family, count: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """`count` shapes of `family`, each extent log-uniform in its range."""
    logs = [(math.log(low), math.log(high)) for low, high in family.extent_ranges]
    shapes: list[tuple[int, ...]] = []
    while len(shapes) < count:
        shape = tuple(round(math.exp(rng.uniform(low, high))) for low, high in logs)
        if math.prod(shape) <= family.max_elements:
            shapes.append(shape)
    return shapes


@dataclass(frozen=True)
class FamilySummary:
    name: str
    shapes: int
    failed: int  # shapes that did not compile, or did not match numpy
    geometric_mean: float | None  # of numpy time / eqsat time, over the shapes that ran
    worst: float | None
    worst_shape: str | None
    mean_target: float
    worst_target: float

    @property
    def met(self) -> bool:
        return (
            self.failed == 0
            and self.geometric_mean is not None
            and self.worst is not None
            and self.geometric_mean >= self.mean_target
            and self.worst >= self.worst_target
        )


def summarize(family: Family, results: Sequence[Result]) -> FamilySummary:
    """The geometric mean and the worst numpy/eqsat ratio of a family's `results`."""
    ran = [r for r in results if r.failure is None and r.correct]
    ratios = [r.ratios["numpy"] for r in ran]
    worst = min(ran, key=lambda r: r.ratios["numpy"]) if ran else None
    return FamilySummary(
        family.name,
        len(results),
        len(results) - len(ran),
        math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None,
        worst.ratios["numpy"] if worst else None,
        worst.description if worst else None,
        family.mean_target,
        family.worst_target,
    )


def format_shape(result: Result) -> str:
    """One line of the sweep: the shape, the times and the ratio, or why it failed."""
    if result.failure is not None:
        return f"  {result.description:<48}  FAILED: {result.failure[:120]}"
    mark = "" if result.correct else "  MISMATCH"
    return (
        f"  {result.description:<48}  eqsat {result.seconds['eqsat'] * 1e3:9.3f} ms"
        f"  numpy {result.seconds['numpy'] * 1e3:9.3f} ms  {result.ratios['numpy']:6.2f}x"
        f"  (compile {result.compile_seconds:.1f} s){mark}"
    )


def format_summary(summary: FamilySummary) -> str:
    if summary.geometric_mean is None or summary.worst is None:
        return f"{summary.name}: no shape ran ({summary.failed} failed)"
    failed = f", {summary.failed} FAILED" if summary.failed else ""
    return (
        f"{summary.name}: geometric mean {summary.geometric_mean:.2f}x "
        f"(target >= {summary.mean_target:g}x), worst {summary.worst:.2f}x "
        f"(target >= {summary.worst_target:g}x: {summary.worst_shape}){failed}; "
        f"met: {'yes' if summary.met else 'NO'}"
    )


def run_sweep(
    families: Sequence[Family], count: int, seed: int, machine: Machine, repeats: int
) -> tuple[list[Result], list[FamilySummary]]:
    """Draw `count` shapes per family (seeded), run each, print a line per shape and a summary
    per family. It requires: `machine.calibration` is set."""
    rng = np.random.default_rng(seed)
    results: list[Result] = []
    summaries = []
    for family in families:
        print(f"\nsweep {family.name} ({count} shapes, seed {seed}):", flush=True)
        family_results = []
        for shape in random_shapes(family, count, rng):
            family_results.append(run_workload(family.workload(shape), machine, repeats, rng))
            print(format_shape(family_results[-1]), flush=True)
        summaries.append(summarize(family, family_results))
        print(format_summary(summaries[-1]), flush=True)
        print(format_host_shares(family_results), flush=True)
        results += family_results
    return results, summaries
