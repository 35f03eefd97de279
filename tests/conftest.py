"""What every test shares: kernels of an ISA level the host cannot execute are skipped, not run;
the host is calibrated once, before any test runs.

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
from eqsat.backend_c.calibrate import calibrated_host
from eqsat.core.errors import IsaError
from eqsat.extract.machine import host
from tests.isas import not_run_reason


def pytest_configure(config: pytest.Config) -> None:
    """Calibrate the host (if its cache has no calibration yet) in the process that starts the
    test workers, before they start: measured while a worker's tests run, the peaks come out
    low, and the tests of what the cost model chooses then see another machine."""
    if not hasattr(config, "workerinput"):  # (a worker's config has it)
        calibrated_host()


def copy_calibrations(directory: Path) -> None:
    """Copy this machine's calibrations from the cache in use into `directory` (a cache of its
    own, so that the machine is not measured again, perhaps while other tests run)."""
    for calibration in cache_dir().glob("calibration-*.json"):
        shutil.copy(calibration, directory)


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
    """An empty compile cache for the test, but for this machine's calibrations
    (`copy_calibrations`)."""
    copy_calibrations(tmp_path)
    monkeypatch.setenv("EQSAT_CACHE_DIR", str(tmp_path))
    return tmp_path
