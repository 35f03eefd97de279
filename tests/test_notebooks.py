"""Every notebook in notebooks/ (jupytext percent-format .py files) runs top to bottom in a real
Jupyter kernel within NOTEBOOK_SECONDS; the asserts in its cells check what its prose claims."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import jupytext
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

from eqsat.extract.machine import host
from tests.conftest import copy_calibrations

REPO_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
NOTEBOOK_SECONDS = 120.0
# Notebooks whose claims are about vector code (a register tile's vector loop, a tenfold
# predicted gain): they hold on AVX2 and AVX-512 hosts, not on a host without vectors.
VECTOR_NOTEBOOKS = {"01_tour", "03_loops"}
ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # IPython colours its tracebacks


def test_every_notebook_is_found() -> None:
    assert [path.stem[:2] for path in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06"]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One compile cache for all notebooks, fresh for the run (like .ci/run's), with this
    machine's calibrations."""
    directory = tmp_path_factory.mktemp("eqsat-cache")
    copy_calibrations(directory)
    return directory


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_runs(
    path: Path, cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel inherits this environment (the working tree first on its path, the test's
    compile cache) and runs in a temporary directory (hypothesis writes files there)."""
    if path.stem in VECTOR_NOTEBOOKS and host().isa == "scalar":
        pytest.skip(f"{path.stem}: its claims are about vector code; this host runs scalar")
    monkeypatch.setenv("EQSAT_CACHE_DIR", str(cache_dir))
    paths = [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    deadline = time.monotonic() + NOTEBOOK_SECONDS
    client = NotebookClient(
        jupytext.read(path),
        kernel_name="python3",
        timeout_func=lambda cell: max(1, round(deadline - time.monotonic())),
        resources={"metadata": {"path": str(tmp_path)}},
    )
    try:
        client.execute()
    except CellTimeoutError:
        failure = f"{path.name} did not finish within {NOTEBOOK_SECONDS:.0f} s"
    except CellExecutionError as error:
        failure = f"{path.name} failed:\n{ANSI_COLOUR.sub('', str(error))}"
    else:
        return
    pytest.fail(failure, pytrace=False)  # outside the except: no chained nbclient traceback
