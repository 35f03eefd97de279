"""Calls of one function spread over worker processes: `parallel_map` (ARCHITECTURE §10).

The loop stage searches the parts of a program (`eqsat.rewrites.partition`) each on its own; on
a machine of several cores they run at once, the calling thread taking one part at a time and
each worker process another. Workers are plain Python processes that read calls from a pipe
(`serve`), not `multiprocessing`'s: a forked child inherits egglog's thread-pool state without
its threads, and an e-graph dropped there hung; a spawned one runs the user's main script again.

A worker starts on first use, or earlier by `prestart` (importing the module of the function it
will run while the caller does other work: a compile that misses the cache starts them before it
imports the optimizer), serves every later call of the process, and exits when its parent's end
of the pipe closes (at exit, or if the parent dies). `$EQSAT_WORKERS` sets how many there are
(0: everything runs in the calling thread); by default one less than the CPUs this process may
run on.
"""

from __future__ import annotations

import atexit
import importlib
import os
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

WORKERS_VARIABLE = "EQSAT_WORKERS"
# A worker's process runs this, with the parent's sys.path (its current directory for "") and the
# module to import first; it may import what the calls' functions need. The path is set, not
# passed as PYTHONPATH: `python -c` puts its own current directory first, where another copy of
# eqsat (a source checkout) would have been imported instead.
_SERVE = (
    "import sys; sys.path[:] = {path!r}; from eqsat.core.workers import serve; serve({preload!r})"
)

_pool: list[_Worker] = []
_pool_lock = threading.Lock()  # one parallel_map uses the workers at a time


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0))


def worker_count() -> int:
    """Worker processes `parallel_map` may use: `$EQSAT_WORKERS` if set (a count >= 0), else
    one less than the CPUs this process may run on. ValueError names a bad setting."""
    setting = os.environ.get(WORKERS_VARIABLE)
    if setting is None:
        return usable_cpus() - 1
    if not setting.strip().isdigit():
        raise ValueError(f"${WORKERS_VARIABLE} must be a count of processes >= 0, got {setting!r}")
    return int(setting)


def prestart(module: str) -> None:
    """Start the workers `parallel_map` may use, each importing `module` (that of the function
    it will be called with) at once, without waiting for them: their start then overlaps the
    caller's work until its first `parallel_map`. Does nothing where workers are off, already
    started, or in use by another thread."""
    if worker_count() < 1 or not _pool_lock.acquire(blocking=False):
        return
    try:
        _started(worker_count(), module)
    finally:
        _pool_lock.release()


def parallel_map(
    function: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], timeout: float
) -> list[Any]:
    """`[function(*task) for task in tasks]`, the tasks shared between the calling thread and up
    to `worker_count()` worker processes; results in the order of `tasks`.

    It requires: `function` and every task pickle (a module-level function, found by name in the
    worker), and `function(*task)` depends only on its arguments. If several tasks raise, the
    first one's error (in task order) is raised. A worker that dies, or has not answered
    `timeout` seconds after the calling thread ran out of tasks, is stopped, and its task runs
    in the calling thread."""
    wanted = min(worker_count(), len(tasks) - 1)
    if wanted < 1 or not _pool_lock.acquire(blocking=False):
        return [function(*task) for task in tasks]
    try:
        return _shared(function, tasks, _started(wanted, function.__module__), timeout)
    finally:
        _pool_lock.release()


def _shared(
    function: Callable[..., Any],
    tasks: Sequence[tuple[Any, ...]],
    workers: Sequence[_Worker],
    timeout: float,
) -> list[Any]:
    outcomes: list[tuple[bool, Any] | None] = [None] * len(tasks)
    queue = list(range(len(tasks) - 1, -1, -1))  # popped from the end: the first task first
    queue_lock = threading.Lock()

    def take() -> int | None:
        with queue_lock:
            return queue.pop() if queue else None

    def feed(worker: _Worker) -> None:
        while (index := take()) is not None:
            outcome = worker.call(function, tasks[index])
            if outcome is None:
                return  # the task runs in the calling thread
            outcomes[index] = outcome

    feeders = [threading.Thread(target=feed, args=(worker,), daemon=True) for worker in workers]
    for feeder in feeders:
        feeder.start()
    while (index := take()) is not None:
        outcomes[index] = _outcome(function, tasks[index])
    deadline = time.monotonic() + timeout
    for worker, feeder in zip(workers, feeders, strict=True):
        feeder.join(max(0.0, deadline - time.monotonic()))
        if feeder.is_alive():
            worker.stop()
            feeder.join()
    results = []
    for index, outcome in enumerate(outcomes):
        succeeded, value = outcome or _outcome(function, tasks[index])
        if not succeeded:
            raise value
        results.append(value)
    return results


def _outcome(function: Callable[..., Any], task: tuple[Any, ...]) -> tuple[bool, Any]:
    """(True, the result) or (False, the exception) of `function(*task)`."""
    try:
        return True, function(*task)
    except Exception as error:
        return False, error


def _started(count: int, preload: str) -> list[_Worker]:
    """Up to `count` live workers, started if need be, importing module `preload` (the pool
    keeps them for later calls); fewer if a process cannot be started. In a forked child, the
    parent's workers are not its children, so they poll as ended and the child starts its own
    (their pipes are the parent's)."""
    _pool[:] = [worker for worker in _pool if worker.alive()]
    while len(_pool) < count:
        try:
            _pool.append(_Worker(preload))
        except OSError:
            break
    return _pool[:count]


class _Worker:
    """One worker process and its pipes; `call` runs one task there."""

    def __init__(self, preload: str) -> None:
        path = [entry or os.getcwd() for entry in sys.path]
        environment = {**os.environ, WORKERS_VARIABLE: "0"}
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVE.format(path=path, preload=preload)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=environment,
            start_new_session=True,  # a Ctrl-C at the terminal is the parent's to handle
        )

    def call(self, function: Callable[..., Any], task: tuple[Any, ...]) -> tuple[bool, Any] | None:
        """The outcome of `function(*task)` in the worker (as `_outcome`), or None if the call or
        its outcome did not pickle, its reply did not load, or the worker died or was stopped
        before it answered (in those last cases the worker is stopped)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            request = pickle.dumps((function, task))
        except Exception:  # what does not pickle runs in the calling thread
            return None
        try:
            self.process.stdin.write(request)
            self.process.stdin.flush()
            outcome: tuple[bool, Any] = pickle.load(self.process.stdout)
        except Exception:  # a dead pipe, or a reply that does not load here: a lost worker
            self.stop()
            return None
        return outcome

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """End the worker now (a call waiting on it returns None)."""
        self.process.kill()
        self.process.wait()

    def close(self) -> None:
        """Let the worker finish and exit (its input ends), or stop it after a second."""
        assert self.process.stdin is not None
        try:
            self.process.stdin.close()
            self.process.wait(timeout=1.0)
        except (OSError, subprocess.TimeoutExpired):
            self.stop()


@atexit.register
def _close_pool() -> None:
    for worker in _pool:
        worker.close()


def serve(preload: str) -> None:
    """A worker's loop, after importing module `preload`: read (function, task) pairs on stdin
    and write each `_outcome` back,
    until stdin ends; None for an outcome that does not pickle (the caller runs that task
    itself). The replies go to the stdout the process started with, which is then pointed at
    stderr so that nothing printed reaches them."""
    requests, replies = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    importlib.import_module(preload)
    while True:
        try:
            function, task = pickle.load(requests)
        except EOFError:
            return
        try:
            reply = pickle.dumps(_outcome(function, task))
        except Exception:  # an unpicklable result or exception
            reply = pickle.dumps(None)
        replies.write(reply)
        replies.flush()
