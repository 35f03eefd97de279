"""The README's first command runs `python -m eqsat demo`: it must compile, check and time."""

from __future__ import annotations

import pytest

from eqsat.tools.demo import run_demo


def test_the_demo_compiles_checks_and_times_both_programs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_demo(repeats=3)
    printed = capsys.readouterr().out
    assert printed.count("OK") == 2 and "MISMATCH" not in printed
    assert printed.count("median time: eqsat") == 2
