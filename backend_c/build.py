"""Compile C source with gcc, load it with cffi, and keep the result in an on-disk cache.

A cache entry is three files named by a content key in `cache_dir()`:
`<key>.c` (the source, kept for reading), `<key>.so` and `<key>.sha256` (sha256 of the .so);
a library built with a Python extension part (a kernel's call entry, `backend_c/entry.py`) also
keeps that part's source at `<key>.entry.c`.
Entries are written with tmp-file + `os.replace` under an `fcntl.flock` on `<key>.lock`, so
processes building the same kernel at once compile it once. An entry whose .so does not match its
sidecar, or that fails to load, is rebuilt, never loaded.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import cffi
import numpy as np

from eqsat.backend_c.entry import MODULE_NAME
from eqsat.core.errors import CompileError
from eqsat.core.workers import usable_cpus
from eqsat.extract.machine import cpu_flags

# Bump when the emitted code or the build changes in a way the other key parts do not capture.
CODEGEN_VERSION = 6

# -fno-tree-vectorize: the schedule is what runs. The e-graph chooses which loops are Vector
# loops; gcc vectorizing others behind the cost model's back made nests of one predicted cost
# run far apart (docs/MEASUREMENTS.md), and the model cannot rank what it does not see.
# -fno-tree-loop-distribute-patterns for the same reason: gcc turned a panel's copy of 24-float
# rows into `rep movsq`, whose start-up cost made small AVX2 products 1.7-2.1x slower.
BASE_FLAGS = (
    "-O3",
    "-std=c11",
    "-fPIC",
    "-shared",
    "-fno-math-errno",
    "-fno-tree-vectorize",
    "-fno-tree-loop-distribute-patterns",
    "-fopenmp",
)

# A kernel of at least this many OpenMP parallel regions compiles through gcc's link-time
# optimizer, one partition per function (each region is a function of its own, outlined by
# OpenMP), the partitions optimized by as many processes at once as this process may use CPUs
# (gcc runs them through `make`; without it, one after the other, as fast as a plain build).
# On 2 cores, multi-head attention's 3 regions built in 0.9 s instead of 1.2, the transformer
# block's 5 in 1.35 s instead of 1.85; a kernel of one region took 0.05 s longer, so it does not
# (docs/MEASUREMENTS.md).
LTO_FROM_REGIONS = 2
PARALLEL_REGION = "#pragma omp parallel"

# Loading a library built with these turns on flush-to-zero for the whole Python process.
FORBIDDEN_FLAGS = frozenset({"-ffast-math", "-Ofast", "-funsafe-math-optimizations"})

# The headers a kernel includes: every kernel, one with a parallel region (THREADS_PREAMBLE),
# one with vectors. The precompiled prelude holds them all (PRELUDE).
KERNEL_HEADERS = ("math.h", "stdint.h", "stdlib.h")
THREADS_HEADERS = ("omp.h", "sched.h", "unistd.h")
VECTOR_HEADER = "immintrin.h"


def include_lines(headers: Sequence[str]) -> str:
    """`#include <h>` lines of `headers`, each ending in a newline."""
    return "".join(f"#include <{header}>\n" for header in headers)


# A parallel region's worker threads keep off the CPU of the thread that starts it. Woken from
# sleep (OPENMP_WAIT below), Linux may place a worker on its waker's CPU, and both then share
# one core until the load balancer moves one, milliseconds later: a 1024^3 product after idle
# took twice as long (docs/MEASUREMENTS.md). A worker found on that CPU moves to the process's
# other CPUs (its main thread's affinity); no state is kept, so the kernels of many libraries,
# sharing libgomp's workers, agree. The calling thread's own affinity is never touched.
# It requires: the C file starts with `#define _GNU_SOURCE`.
THREADS_PREAMBLE = include_lines(THREADS_HEADERS) + """
static int eq_keep_off(int cpu) {
    const int here = sched_getcpu();
    if (omp_get_thread_num() == 0 || cpu < 0 || here != cpu) return here;
    cpu_set_t allowed;
    if (sched_getaffinity(getpid(), sizeof allowed, &allowed) != 0) return here;
    CPU_CLR(cpu, &allowed);
    if (CPU_COUNT(&allowed) == 0 || sched_setaffinity(0, sizeof allowed, &allowed) != 0)
        return here;
    return sched_getcpu();
}

/* A parallel region's team: each thread joins it (moving off the starting thread's CPU, see
   eq_keep_off) and the starting thread, its own share done, yields until every thread has
   joined. A worker woken on the starting thread's CPU then runs at once and moves away; had the
   starting thread spun in the closing barrier instead, the worker would wait out the spin, the
   starting thread would sleep, and the worker's wake-up would pull it onto the worker's new
   CPU: the same clash at the next region, ~0.4 ms a call instead of ~0.02 ms. */
typedef struct { int cpu; int joined; } eq_team;

static void eq_join(eq_team *team) {
    eq_keep_off(team->cpu);
    __atomic_fetch_add(&team->joined, 1, __ATOMIC_RELEASE);
}

static void eq_wait_for_team(eq_team *team) {
    if (omp_get_thread_num() != 0) return;
    while (__atomic_load_n(&team->joined, __ATOMIC_ACQUIRE) < omp_get_num_threads())
        sched_yield();
}
"""


@dataclass(frozen=True)
class Library:
    """A loaded shared library: `lib` exposes the functions declared in `ffi`'s cdef; `cdef`,
    `flags` and `extension_source` are the `build_library` arguments it was built with.
    `extension` is the loaded extension module when one was asked for and built, else None;
    `extension_note` then says why it is missing ("" when none was asked for)."""

    ffi: cffi.FFI
    lib: Any
    path: Path
    cache_hit: bool
    cdef: str
    flags: tuple[str, ...]
    extension_source: str | None = None
    extension: ModuleType | None = None
    extension_note: str = ""


# Loaded libraries of this process by cache directory and request (`_cache_key` of
# build_library's arguments): the same request gives the same Library, dlopen-ed once.
_loaded: dict[tuple[Path, str], Library] = {}
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


def build_library(
    c_source: str, cdef: str, flags: Sequence[str], *, extension: str | None = None
) -> Library:
    """Compile `c_source` (or reuse the cached build) and load it with the declarations `cdef`.

    It requires:
    1. `cdef` declares, in cffi syntax (no `restrict`), the functions of `c_source` to call;
    2. `flags` holds none of `FORBIDDEN_FLAGS` (else ValueError);
    3. `extension`, if given, is C source defining the CPython extension module
       `entry.MODULE_NAME` (multi-phase init), which may call `c_source`'s functions.

    The extension is a second translation unit of the same .so, loaded with importlib as
    `Library.extension`. Without Python's or numpy's headers, or if it fails to compile, the
    library is built without it and `Library.extension_note` says why.

    Calling it twice with the same arguments in one process returns the same `Library` object.
    Raises `CompileError` when gcc is missing or fails; the source is kept at `<key>.c`.
    """
    forbidden = sorted(FORBIDDEN_FLAGS.intersection(flags))
    if forbidden:
        raise ValueError(
            f"refusing compiler flags {forbidden}: they enable flush-to-zero in this process"
        )
    request = (cache_dir(), _cache_key(c_source, cdef, flags, extension))
    with _loaded_lock:
        library = _loaded.get(request)
    if library is None:
        library = _built(c_source, cdef, tuple(flags), extension)
        with _loaded_lock:
            library = _loaded.setdefault(request, library)
    return library


def _built(c_source: str, cdef: str, flags: tuple[str, ...], extension: str | None) -> Library:
    """`build_library`'s result, without its cache of loaded libraries."""
    if extension is not None:
        includes, missing = _extension_includes()
        if missing:
            library = _built(c_source, cdef, flags, None)
            return replace(library, extension_source=extension, extension_note=missing)
        try:
            return _cached_build(c_source, cdef, flags, extension, includes)
        except CompileError as error:
            library = _built(c_source, cdef, flags, None)  # raises if the kernel is the cause
            note = f"calls go through cffi: the C call entry did not compile ({error.c_path})"
            return replace(library, extension_source=extension, extension_note=note)
    return _cached_build(c_source, cdef, flags, None, ())


def _cached_build(
    c_source: str,
    cdef: str,
    flags: tuple[str, ...],
    extension: str | None,
    includes: Sequence[str],
) -> Library:
    """Load the cache entry of these arguments, compiling it first if it is missing or bad."""
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    key = _cache_key(c_source, cdef, flags, extension)
    directory = cache_dir()
    so_path = directory / f"{key}.so"
    with file_lock(directory / f"{key}.lock"):
        library = _load_entry(ffi, so_path, cdef, flags, extension)
        if library is None:
            _compile(c_source, flags, directory, key, extension, includes)
            library = _library(ffi, so_path, False, cdef, flags, extension)
    return library


def _library(
    ffi: cffi.FFI,
    so_path: Path,
    cache_hit: bool,
    cdef: str,
    flags: tuple[str, ...],
    extension: str | None,
) -> Library:
    """The built library at `so_path`, loaded (OSError or ImportError if it fails to load)."""
    lib = _dlopen(ffi, so_path)
    module = None
    if extension is not None:
        spec = importlib.util.spec_from_file_location(MODULE_NAME, so_path)
        assert spec is not None and spec.loader is not None  # a .so path always has a loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return Library(ffi, lib, so_path, cache_hit, cdef, flags, extension, module)


def _cache_key(c_source: str, cdef: str, flags: Sequence[str], extension: str | None) -> str:
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
    if extension is not None:  # its ABI: this Python's and numpy's
        parts += [extension, sys.version, sysconfig.get_config_var("SOABI"), np.__version__]
    return _digest(parts)


def _digest(parts: Sequence[Any]) -> str:
    """Hex sha256 of `parts` as JSON."""
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


@functools.cache
def _extension_includes() -> tuple[tuple[str, ...], str]:
    """gcc's include flags for a CPython extension using numpy, and "" ; or no flags and a note
    naming the header that is missing."""
    python, numpy = sysconfig.get_paths()["include"], np.get_include()
    for header in (Path(python) / "Python.h", Path(numpy) / "numpy" / "arrayobject.h"):
        if not header.is_file():
            return (), f"calls go through cffi: no {header} to build the C call entry with"
    return ("-I", python, "-I", numpy), ""


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
    ffi: cffi.FFI, so_path: Path, cdef: str, flags: tuple[str, ...], extension: str | None
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
        return _library(ffi, so_path, True, cdef, flags, extension)
    except (OSError, ImportError):
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


def _compile(
    c_source: str,
    flags: Sequence[str],
    directory: Path,
    key: str,
    extension: str | None,
    includes: Sequence[str],
) -> None:
    """Write `<key>.c` (and `<key>.entry.c`, the extension), compile them at once, each on its
    own (the extension with the `includes` flags; the kernel after the precompiled prelude, if
    it builds, and through the link-time optimizer if it has LTO_FROM_REGIONS parallel regions),
    link them into one library, and move `<key>.so` then `<key>.sha256` into place.

    It requires: the caller holds the entry's lock.
    """
    c_path = directory / f"{key}.c"
    write_atomically(c_path, c_source.encode())
    compile_flags = [flag for flag in (*BASE_FLAGS, *flags) if flag != "-shared"]
    link_flags = ["-fopenmp"]
    kernel_flags = compile_flags
    if c_source.count(PARALLEL_REGION) >= LTO_FROM_REGIONS:
        kernel_flags = [*compile_flags, "-flto"]
        link_flags = [*compile_flags, f"-flto={usable_cpus()}", "-flto-partition=max"]
    objects = {c_path: [*kernel_flags, *_prelude(directory, kernel_flags)]}
    if extension is not None:
        entry_path = directory / f"{key}.entry.c"
        write_atomically(entry_path, extension.encode())
        objects[entry_path] = [*compile_flags, *includes]
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f"{key}.", suffix=".so.tmp")
    os.close(fd)
    object_paths = {source: f"{tmp_name}.{n}.o" for n, source in enumerate(objects)}
    try:
        compiles = [
            ["gcc", *source_flags, "-c", "-o", object_paths[source], str(source)]
            for source, source_flags in objects.items()
        ]
        _run_gcc(compiles, c_path)
        link = ["gcc", "-shared", *link_flags, "-o", tmp_name, *object_paths.values(), "-lm"]
        _run_gcc([link], c_path)
        so_bytes = Path(tmp_name).read_bytes()
        os.replace(tmp_name, directory / f"{key}.so")
    finally:
        for path in (tmp_name, *object_paths.values()):
            with suppress(FileNotFoundError):
                os.unlink(path)
    write_atomically(directory / f"{key}.sha256", hashlib.sha256(so_bytes).hexdigest().encode())


def _run_gcc(commands: Sequence[list[str]], c_path: Path) -> None:
    """Run the gcc `commands` at once; CompileError names the first that fails (or a missing
    gcc), with `c_path` as the kept source."""
    try:
        running = [
            subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for command in commands
        ]
    except FileNotFoundError:
        raise CompileError(commands[0], "gcc is missing: no `gcc` on PATH", str(c_path)) from None
    errors = [process.communicate()[1] for process in running]
    for command, process, stderr in zip(commands, running, errors, strict=True):
        if process.returncode != 0:
            raise CompileError(command, stderr, str(c_path))


# The headers of every kernel, precompiled once per set of flags and included before the
# kernel's source: parsing them (immintrin.h above all) took 0.16 s of a 0.78 s compile of
# multi-head attention (docs/MEASUREMENTS.md). A kernel's source keeps its own #includes, so
# it compiles on its own; after the prelude they change nothing.
PRELUDE = (
    "#define _GNU_SOURCE\n"
    + include_lines(KERNEL_HEADERS + THREADS_HEADERS)
    + f"#ifdef __AVX2__\n#include <{VECTOR_HEADER}>\n#endif\n"
)
_prelude_failures: set[tuple[str, ...]] = set()  # flags whose precompiled prelude did not build
PRELUDE_FILES = "eqsat-prelude-*"  # the header, its lock and its precompiled copies, by glob


def _prelude(directory: Path, compile_flags: Sequence[str]) -> list[str]:
    """gcc's flags to include the prelude precompiled for `compile_flags`, built first if need
    be; none if it does not build (then the kernel's own #includes are parsed as before).

    The header is named by its text and each precompiled copy by the flags and gcc: gcc takes,
    from the `.gch` directory beside a header, the first copy built with options matching its
    own, and checks nothing of the header's text."""
    failed_before = tuple(compile_flags)
    if failed_before in _prelude_failures:
        return []
    name = f"eqsat-prelude-{hashlib.sha256(PRELUDE.encode()).hexdigest()[:16]}.h"
    header = directory / name
    copies = directory / f"{name}.gch"
    copy = copies / f"{_digest([list(compile_flags), _gcc_version()])[:16]}.gch"
    with file_lock(directory / f"{name}.lock"):
        if not header.exists():
            write_atomically(header, PRELUDE.encode())
        if not copy.exists():
            copies.mkdir(exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(dir=copies, suffix=".tmp")
            os.close(fd)
            command = ["gcc", *compile_flags, "-x", "c-header", "-o", tmp_name, str(header)]
            try:
                built = subprocess.run(command, capture_output=True, check=False).returncode == 0
                if built:
                    os.replace(tmp_name, copy)
            except FileNotFoundError:  # no gcc: the kernel's compile says so
                return []
            finally:
                with suppress(FileNotFoundError):
                    os.unlink(tmp_name)
            if not built:
                _prelude_failures.add(failed_before)
                return []
    return ["-include", str(header)]


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
