"""Progress of long optimizer work, one line at a time on stderr (a terminal and Jupyter both
show it). Short work stays silent: a stage reports only once it has run for `quiet_seconds`, and
extraction only from e-graphs of EXTRACTION_NODES e-nodes or more, whose extraction takes long
enough to notice (docs/MEASUREMENTS.md)."""

from __future__ import annotations

import sys
from typing import TextIO

from eqsat.core.limits import SaturationReport

QUIET_SECONDS = 2.0
EXTRACTION_NODES = 20_000


class Progress:
    """Receives a stage's report after every saturation round (`saturate(progress=...)`)."""

    def __init__(self, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.stream = stream  # None: sys.stderr at the time of writing (pytest swaps it)

    def iteration(self, report: SaturationReport) -> None:
        if report.seconds >= QUIET_SECONDS:
            self.say(
                f"{report.stage}: round {report.iterations}, {report.nodes:,} e-nodes, "
                f"{report.seconds:.1f} s"
            )

    def extracting(self, stage: str, nodes: int) -> None:
        if nodes >= EXTRACTION_NODES:
            self.say(f"{stage}: extracting the best program from {nodes:,} e-nodes")

    def say(self, message: str) -> None:
        """One line `eqsat <message>`, if enabled."""
        if self.enabled:
            print(f"eqsat {message}", file=self.stream or sys.stderr, flush=True)
