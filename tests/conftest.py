"""What every test shares: kernels of an ISA level the host cannot execute are skipped, not run.

A test parametrized over ISA levels builds its kernel at every level on any host (emission and
gcc work everywhere); calling a kernel whose level the host lacks (or EQSAT_MAX_ISA caps away)
raises `eqsat.IsaError` instead of an illegal instruction, and that test is then reported as
skipped with the level named, after everything before the call has been checked.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from eqsat.backend_c.build import cache_dir
from eqsat.core.errors import IsaError
from eqsat.extract.machine import host
from tests.isas import not_run_reason


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    try:
        return (yield)
    except IsaError as refused:
        pytest.skip(not_run_reason(refused.isa))


@pytest.fixture
def capped_isa(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """A function that caps this process's host ISA at a level (EQSAT_MAX_ISA) for the test."""

    def cap(level: str) -> None:
        monkeypatch.setenv("EQSAT_MAX_ISA", level)
        host.cache_clear()

    yield cap
    monkeypatch.undo()
    host.cache_clear()


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty compile cache for the test, but for this machine's calibration (copied from the
    cache in use, so that the machine is not measured again)."""
    for calibration in cache_dir().glob("calibration-*.json"):
        shutil.copy(calibration, tmp_path)
    monkeypatch.setenv("EQSAT_CACHE_DIR", str(tmp_path))
    return tmp_path
