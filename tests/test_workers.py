"""Calls spread over worker processes (eqsat.core.workers): the same results in the same order as
in one thread, errors raised as there, and a worker that dies or hangs replaced by the calling
thread; terms keep their hash across processes."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest

import eqsat
import eqsat.core.workers as worker_processes
from eqsat.core.term import Term
from eqsat.core.workers import WORKERS_VARIABLE, parallel_map, prestart, worker_count
from eqsat.tools.whole_programs import attention_heads


def _pid_after(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def _square_or_fail(value: int) -> int:
    if value % 2:
        raise ValueError(f"odd: {value}")
    return value * value


def _dies_outside(caller: int, value: int) -> int:
    """`value` in process `caller`; anywhere else the process dies."""
    if os.getpid() != caller:
        os._exit(3)
    return value


def _hangs_outside(caller: int, value: int) -> int:
    """`value` in process `caller`; anywhere else, after a minute."""
    if os.getpid() != caller:
        time.sleep(60)
    return value


@pytest.fixture
def one_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WORKERS_VARIABLE, "1")


@pytest.mark.usefixtures("one_worker")
def test_tasks_run_in_a_worker_too_and_come_back_in_order() -> None:
    pids = parallel_map(_pid_after, [(0.3,)] * 6, timeout=30)
    assert len(pids) == 6
    assert os.getpid() in pids and len(set(pids)) == 2  # the calling thread and one worker
    assert parallel_map(abs, [(-n,) for n in range(20)], timeout=30) == list(range(20))


def _imported_where(module: str) -> tuple[int, bool]:
    return os.getpid(), module in sys.modules


@pytest.mark.usefixtures("one_worker")
def test_a_prestarted_worker_has_imported_its_module_before_its_first_call() -> None:
    """`tabnanny` (imported by nothing here) is in the worker's modules before any call needs
    it; the later calls run in that worker, not in a new one."""
    for worker in worker_processes._pool:  # a worker of an earlier test did not preload it
        worker.stop()
    prestart("tabnanny")
    outcomes = parallel_map(_imported_where, [("tabnanny",)] * 8, timeout=30)
    elsewhere = [found for pid, found in outcomes if pid != os.getpid()]
    assert elsewhere and all(elsewhere), outcomes
    assert len({pid for pid, _ in outcomes} - {os.getpid()}) == 1


@pytest.mark.usefixtures("one_worker")
def test_the_first_failing_task_in_order_raises() -> None:
    assert parallel_map(_square_or_fail, [(0,), (2,), (4,)], timeout=30) == [0, 4, 16]
    with pytest.raises(ValueError, match="odd: 3"):
        parallel_map(_square_or_fail, [(0,), (3,), (4,), (5,), (7,)], timeout=30)


@pytest.mark.usefixtures("one_worker")
def test_a_task_whose_worker_dies_runs_in_the_calling_thread() -> None:
    tasks = [(os.getpid(), n) for n in range(6)]
    assert parallel_map(_dies_outside, tasks, timeout=30) == list(range(6))
    pids = parallel_map(_pid_after, [(0.3,)] * 6, timeout=30)  # a new worker took its place
    assert len(set(pids)) == 2


@pytest.mark.usefixtures("one_worker")
def test_a_worker_that_does_not_answer_in_time_is_stopped() -> None:
    start = time.monotonic()
    tasks = [(os.getpid(), n) for n in range(4)]
    assert parallel_map(_hangs_outside, tasks, timeout=1.0) == list(range(4))
    assert time.monotonic() - start < 30  # not the minute the worker would have slept


def test_no_workers_runs_everything_in_the_calling_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WORKERS_VARIABLE, "0")
    assert set(parallel_map(_pid_after, [(0.0,)] * 4, timeout=30)) == {os.getpid()}
    monkeypatch.setenv(WORKERS_VARIABLE, "two")
    with pytest.raises(ValueError, match="EQSAT_WORKERS must be a count"):
        worker_count()


def test_a_term_pickled_in_another_process_hashes_as_one_built_here() -> None:
    """A Term caches its hash, which depends on PYTHONHASHSEED for strings: unpickled, it must
    be hashed again, or dictionaries keyed by terms miss it (a part searched in a worker emitted
    C naming a loop variable that was never declared)."""
    source = "import pickle, sys; from eqsat.core.term import Term; "
    source += "sys.stdout.buffer.write(pickle.dumps(Term('Axis.named', ('i1', 32))))"
    environment = {**os.environ, "PYTHONHASHSEED": "123", "PYTHONPATH": os.pathsep.join(sys.path)}
    pickled = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, check=True, env=environment
    ).stdout
    here = Term("Axis.named", ("i1", 32))
    loaded = pickle.loads(pickled)
    assert loaded == here and hash(loaded) == hash(here)
    assert {here: "found"}[loaded] == "found"


def test_a_program_of_several_parts_compiles_alike_with_and_without_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x = eqsat.tensor("x", (48, 32))
    weights = {name: eqsat.tensor(name, (32, 32)) for name in ("Wq", "Wk", "Wv", "Wo")}
    program = attention_heads(x, **weights, heads=4, xp=np)
    sources = []
    for workers in ("0", "1"):
        monkeypatch.setenv(WORKERS_VARIABLE, workers)
        kernel = eqsat.compile(program, cache=False, progress=False)
        sources.append(kernel.c_source)
    assert "parts (rewrites/partition.py)" in kernel.explain()
    assert sources[0] == sources[1]


@pytest.mark.usefixtures("one_worker")
def test_a_forked_child_starts_workers_of_its_own() -> None:
    """The parent's worker answers on pipes the child shares: were the child to use it, the
    replies of one would reach the other."""
    parent_pids = set(parallel_map(_pid_after, [(0.3,)] * 6, timeout=30))
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # the child: its tasks' pids, then exit without running pytest's teardown
        try:
            pids = parallel_map(_pid_after, [(0.3,)] * 6, timeout=30)
            os.write(writing, pickle.dumps(pids))
        finally:
            os._exit(0)
    os.close(writing)
    with os.fdopen(reading, "rb") as replies:
        child_pids = set(pickle.loads(replies.read()))
    os.waitpid(child, 0)
    assert child in child_pids and len(child_pids) == 2
    assert not (child_pids - {child}) & parent_pids  # the child's worker is not the parent's
    assert set(parallel_map(_pid_after, [(0.3,)] * 6, timeout=30)) == parent_pids


class _Unloadable(Exception):
    """An exception whose pickle does not load (its constructor takes two arguments)."""

    def __init__(self, first: str, second: str) -> None:
        super().__init__(f"{first} {second}")


def _raise_unloadable(value: int) -> int:
    raise _Unloadable("value", str(value))


@pytest.mark.usefixtures("one_worker")
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_reply_that_does_not_load_reruns_its_task_here() -> None:
    """(and no thread of the pool dies of it)"""
    with pytest.raises(_Unloadable, match="value 0"):
        parallel_map(_raise_unloadable, [(n,) for n in range(4)], timeout=30)


def _lock_after(seconds: float) -> Any:
    """An object that does not pickle, after `seconds` (so that the worker takes some tasks)."""
    time.sleep(seconds)
    return threading.Lock()


@pytest.mark.usefixtures("one_worker")
def test_a_result_that_does_not_pickle_is_computed_in_the_calling_thread() -> None:
    results = parallel_map(_lock_after, [(0.3,)] * 4, timeout=30)
    assert all(isinstance(result, type(threading.Lock())) for result in results)


_ANOTHER_CHECKOUT = """
import os, sys, time
sys.path.insert(0, {root!r})
os.environ[{variable!r}] = "1"
from eqsat.core import workers
workers.parallel_map(time.sleep, [(0.2,)] * 4, timeout=30)  # the worker takes one while we sleep
print(sum(worker.alive() for worker in workers._pool))
"""


def test_a_worker_imports_eqsat_from_its_parents_path_not_its_current_directory(
    tmp_path: Any,
) -> None:
    """Run from a directory holding another `eqsat` (a broken one here), the worker still
    imports the parent's, and takes tasks."""
    here = tmp_path / "elsewhere"
    (here / "eqsat").mkdir(parents=True)
    (here / "eqsat" / "__init__.py").write_text("raise ImportError('not this eqsat')\n")
    script = tmp_path / "run.py"
    root = os.path.dirname(os.path.dirname(os.path.abspath(eqsat.__file__)))
    script.write_text(_ANOTHER_CHECKOUT.format(root=root, variable=WORKERS_VARIABLE))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=here, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1", done.stderr  # the worker lives: it imported the right eqsat
