"""A stage's limits and its report, without egglog: the compile cache and the Kernel keep the
reports, and a compile answered from the cache never imports egglog (ARCHITECTURE §1). The
saturation driver, `eqsat.core.saturate`, enforces the limits and fills in the report.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Limits:
    """A stage's limits (`eqsat.core.saturate`'s module doc): `nodes` and `iterations` are its
    budget of work, `seconds` and `extraction_seconds` safety nets."""

    # Term e-nodes (analysis facts not counted). Attention's loop stage grows 7.5k -> 19.8k
    # e-nodes in 1.3 s here, for a kernel 5% faster (docs/MEASUREMENTS.md).
    nodes: int = 20_000
    # The safety nets, far above what the budget of work takes (every bench workload's stage
    # stops on it within 1 s, docs/MEASUREMENTS.md): at 2 s, the first compile in a process,
    # whose first step is slow, stopped attention's loop stage after one round.
    seconds: float = 30.0
    iterations: int = 30
    extraction_seconds: float = 30.0  # to extract a stage's best program (best found so far)
    # The loop stage of a small kernel (roofline time under `optimizer.SMALL_KERNEL_SECONDS`,
    # 0.1 ms) stops at this many e-nodes instead of `nodes` (None: `nodes` for every kernel):
    # attention 256x32 reaches the same prediction at 4.8k e-nodes as at 14k, 0.9 s sooner.
    small_kernel_nodes: int | None = 10_000


@dataclass
class SaturationReport:
    """How a stage's saturation and extraction ended (`eqsat.core.saturate.saturate`)."""

    stage: str
    stop_reason: str = "not run"  # saturated | node limit | time limit | iteration limit
    stop_predicted: bool = False  # stopped before a step predicted to pass the limit
    iterations: int = 0
    nodes: int = 0
    seconds: float = 0.0
    matches: Counter[str] = field(default_factory=Counter)
    extraction: str = "not run"  # complete | deadline (the best program found by then)
    extraction_seconds: float = 0.0

    def summary(self) -> str:
        fired = ", ".join(f"{name} x{n}" for name, n in sorted(self.matches.items()) if n)
        extraction = {
            "complete": "extraction complete",
            "deadline": "extraction stopped at its deadline (best found so far)",
        }.get(self.extraction, "extraction not run")
        predicted = " (the next step was predicted to pass it)" if self.stop_predicted else ""
        return (
            f"{self.stage}: {self.stop_reason}{predicted} after {self.iterations} iterations, "
            f"{self.nodes} e-nodes, {self.seconds:.2f} s; {extraction} in "
            f"{self.extraction_seconds:.2f} s; rules fired: {fired or 'none'}"
        )

    def as_dict(self) -> dict[str, Any]:
        """The fields as plain JSON values (`asdict` would rebuild `matches` as Counter(pairs),
        counting the pairs)."""
        return {**vars(self), "matches": dict(self.matches)}

    @classmethod
    def from_dict(cls, fields: dict[str, Any]) -> SaturationReport:
        """The report `as_dict` gave; TypeError or KeyError if `fields` is not one."""
        return cls(**{**fields, "matches": Counter(fields["matches"])})

    @property
    def on_clock(self) -> bool:
        """Whether a safety net stopped the stage (its time limit or extraction deadline): then,
        and only then, its result depends on how fast the machine ran."""
        return self.stop_reason == "time limit" or self.extraction == "deadline"

    def extracted(self, complete: bool, seconds: float) -> None:
        """Record how the stage's extraction ended."""
        self.extraction = "complete" if complete else "deadline"
        self.extraction_seconds = seconds
