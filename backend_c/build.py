"""Compile C source with gcc, load it with cffi, and keep the result in an on-disk cache.

A cache entry is three files named by a content key in `cache_dir()`:
`<key>.c` (the source, kept for reading), `<key>.so` and `<key>.sha256` (sha256 of the .so).
Entries are written with tmp-file + `os.replace` under an `fcntl.flock` on `<key>.lock`, so
processes building the same kernel at once compile it once. An entry whose .so does not match its
sidecar, or that fails to load, is rebuilt, never loaded.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cffi

from eqsat.core.errors import CompileError
from eqsat.extract.machine import cpu_flags

# Bump when the emitted code or the build changes in a way the other key parts do not capture.
CODEGEN_VERSION = 4

# -fno-tree-vectorize: the schedule is what runs. The e-graph chooses which loops are Vector
# loops; gcc vectorizing others behind the cost model's back made nests of one predicted cost
# run far apart (docs/MEASUREMENTS.md), and the model cannot rank what it does not see.
BASE_FLAGS = (
    "-O3", "-std=c11", "-fPIC", "-shared", "-fno-math-errno", "-fno-tree-vectorize", "-fopenmp"
)

# Loading a library built with these turns on flush-to-zero for the whole Python process.
FORBIDDEN_FLAGS = frozenset({"-ffast-math", "-Ofast", "-funsafe-math-optimizations"})

# A parallel region's worker threads keep off the CPU of the thread that starts it. Woken from
# sleep (OPENMP_WAIT below), Linux may place a worker on its waker's CPU, and both then
# share one core until the load balancer moves one, milliseconds later: a 1024^3 product after
# idle took twice as long (docs/MEASUREMENTS.md). The affinity changes only when the starting
# CPU does; the calling thread's own affinity is never touched.
THREADS_PREAMBLE = """static _Thread_local int eq_avoided_cpu = -1;

static void eq_keep_off(int cpu) {
    if (omp_get_thread_num() == 0 || cpu < 0 || cpu == eq_avoided_cpu) return;
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
    if (eq_avoided_cpu >= 0) CPU_SET(eq_avoided_cpu, &allowed);
    CPU_CLR(cpu, &allowed);
    if (CPU_COUNT(&allowed) > 0 && sched_setaffinity(0, sizeof allowed, &allowed) == 0)
        eq_avoided_cpu = cpu;
}
"""


@dataclass(frozen=True)
class Library:
    """A loaded shared library: `lib` exposes the functions declared in `ffi`'s cdef; `cdef`
    and `flags` are the `build_library` arguments it was built with."""

    ffi: cffi.FFI
    lib: Any
    path: Path
    cache_hit: bool
    cdef: str
    flags: tuple[str, ...]


# Loaded libraries of this process by .so path: a path is never dlopen-ed twice by us.
_loaded: dict[Path, Library] = {}
_loaded_lock = threading.Lock()


def cache_dir() -> Path:
    """Return the compile-cache directory, creating it if needed.

    `$EQSAT_CACHE_DIR` if set, else `$XDG_CACHE_HOME/eqsat`, else `~/.cache/eqsat`; the
    environment is read on every call.
    """
    if explicit := os.environ.get("EQSAT_CACHE_DIR"):
        directory = Path(explicit)
    elif xdg := os.environ.get("XDG_CACHE_HOME"):
        directory = Path(xdg) / "eqsat"
    else:
        directory = Path.home() / ".cache" / "eqsat"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def build_library(c_source: str, cdef: str, flags: Sequence[str]) -> Library:
    """Compile `c_source` (or reuse the cached build) and load it with the declarations `cdef`.

    It requires:
    1. `cdef` declares, in cffi syntax (no `restrict`), the functions of `c_source` to call;
    2. `flags` holds none of `FORBIDDEN_FLAGS` (else ValueError).

    Calling it twice with the same arguments in one process returns the same `Library` object.
    Raises `CompileError` when gcc is missing or fails; the source is kept at `<key>.c`.
    """
    forbidden = sorted(FORBIDDEN_FLAGS.intersection(flags))
    if forbidden:
        raise ValueError(
            f"refusing compiler flags {forbidden}: they enable flush-to-zero in this process"
        )
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    key = _cache_key(c_source, cdef, flags)
    directory = cache_dir()
    so_path = directory / f"{key}.so"
    with _loaded_lock:
        library = _loaded.get(so_path)
    if library is not None:
        return library
    with file_lock(directory / f"{key}.lock"):
        library = _load_entry(ffi, so_path, cdef, flags)
        if library is None:
            _compile(c_source, flags, directory, key)
            library = Library(
                ffi, _dlopen(ffi, so_path), so_path, cache_hit=False, cdef=cdef, flags=tuple(flags)
            )
    with _loaded_lock:
        return _loaded.setdefault(so_path, library)


def _cache_key(c_source: str, cdef: str, flags: Sequence[str]) -> str:
    """Hex sha256 over everything that can change the built library."""
    parts = [
        CODEGEN_VERSION,
        c_source,
        cdef,
        list(flags),
        _gcc_version(),
        cffi.__version__,
        _cpu_flags(),
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


@functools.cache
def _gcc_version() -> str:
    """First line of `gcc --version`; empty if gcc is missing (compiling then reports it)."""
    try:
        result = subprocess.run(["gcc", "--version"], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        return ""
    lines = result.stdout.splitlines()
    return lines[0] if lines else ""


@functools.cache
def _cpu_flags() -> str:
    """The CPU's flags (`extract.machine.cpu_flags`), sorted and space-separated; read once."""
    return " ".join(sorted(cpu_flags()))


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive `flock` on `path` (created if needed) for the duration of the block."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _load_entry(
    ffi: cffi.FFI, so_path: Path, cdef: str, flags: Sequence[str]
) -> Library | None:
    """Load the cached entry at `so_path`, or None if it is missing, corrupt or fails to load.

    It requires: the caller holds the entry's lock.
    """
    try:
        so_bytes = so_path.read_bytes()
        recorded = so_path.with_suffix(".sha256").read_text().strip()
    except FileNotFoundError:
        return None
    if hashlib.sha256(so_bytes).hexdigest() != recorded:
        return None
    try:
        return Library(
            ffi, _dlopen(ffi, so_path), so_path, cache_hit=True, cdef=cdef, flags=tuple(flags)
        )
    except OSError:
        return None


# How OpenMP's worker threads wait for the next parallel region, unless the user chose
# (OMP_WAIT_POLICY or GOMP_SPINCOUNT): spin 10,000 rounds (0.1-0.3 ms), then sleep. A region
# whose workers still spin starts in ~1 us; one whose workers sleep in 30-50 us, which made a
# parallel kernel of 0.1-1 ms called in a loop no faster than on one thread. Spinning forever
# (libgomp's ACTIVE) fights other processes for the cores (docs/MEASUREMENTS.md).
OPENMP_WAIT = {"GOMP_SPINCOUNT": "10000"}
_USER_WAIT_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
_environment_lock = threading.Lock()


def openmp_wait() -> dict[str, str]:
    """The wait settings kernels run with: the user's own, else OPENMP_WAIT."""
    users = {name: os.environ[name] for name in _USER_WAIT_SETTINGS if name in os.environ}
    return users or dict(OPENMP_WAIT)


def _dlopen(ffi: cffi.FFI, so_path: Path) -> Any:
    """`ffi.dlopen(so_path)`. libgomp reads its settings when it loads (with the first kernel):
    OPENMP_WAIT is in the environment for that moment only, so the user's environment is left
    as it was; a wait setting of the user's own is kept instead."""
    with _environment_lock:
        if openmp_wait() != OPENMP_WAIT:
            return ffi.dlopen(str(so_path))
        os.environ.update(OPENMP_WAIT)
        try:
            return ffi.dlopen(str(so_path))
        finally:
            for name in OPENMP_WAIT:
                del os.environ[name]


def _compile(c_source: str, flags: Sequence[str], directory: Path, key: str) -> None:
    """Write `<key>.c`, compile it, and move `<key>.so` then `<key>.sha256` into place.

    It requires: the caller holds the entry's lock.
    """
    c_path = directory / f"{key}.c"
    write_atomically(c_path, c_source.encode())
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f"{key}.", suffix=".so.tmp")
    os.close(fd)
    command = ["gcc", *BASE_FLAGS, *flags, "-o", tmp_name, str(c_path), "-lm"]
    try:
        try:
            result = subprocess.run(command, capture_output=True, text=True, check=False)
        except FileNotFoundError:
            raise CompileError(command, "gcc is missing: no `gcc` on PATH", str(c_path)) from None
        if result.returncode != 0:
            raise CompileError(command, result.stderr, str(c_path))
        so_bytes = Path(tmp_name).read_bytes()
        os.replace(tmp_name, directory / f"{key}.so")
    finally:
        with suppress(FileNotFoundError):
            os.unlink(tmp_name)
    write_atomically(directory / f"{key}.sha256", hashlib.sha256(so_bytes).hexdigest().encode())


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` by a file holding `data`; readers see the old or the new file, never half."""
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp_name, path)
    finally:
        with suppress(FileNotFoundError):
            os.unlink(tmp_name)
