"""Tests of eqsat.backend_c.build: gcc + cffi loading and the on-disk compile cache."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from eqsat.backend_c import build
from eqsat.backend_c.abi import prototype
from eqsat.backend_c.build import (
    OPENMP_WAIT,
    THREADS_PREAMBLE,
    Library,
    build_library,
    cache_dir,
    write_atomically,
)
from eqsat.core.errors import CompileError

REPO_ROOT = Path(__file__).resolve().parents[1]
SIZE = 8


def axpy_source(symbol: str, dtype: str = "float32") -> tuple[str, str]:
    """C source and cdef of `out0[i] = in0[i] + 2 * in1[i]` over SIZE elements."""
    source = (
        "#include <stddef.h>\n"
        f"{prototype(symbol, 2, 1, dtype, for_cdef=False)} {{\n"
        f"    for (size_t i = 0; i < {SIZE}; ++i) out0[i] = in0[i] + 2 * in1[i];\n"
        "}\n"
    )
    return source, prototype(symbol, 2, 1, dtype, for_cdef=True) + ";"


def run_axpy(library: Library, symbol: str, dtype: str = "float32") -> np.ndarray:
    """Call the axpy function of `library` on fixed inputs and return its output."""
    x = np.arange(SIZE, dtype=dtype)
    y = np.full(SIZE, 0.5, dtype=dtype)
    out = np.empty(SIZE, dtype=dtype)
    c_type = "float[]" if dtype == "float32" else "double[]"
    ffi = library.ffi
    function = getattr(library.lib, symbol)
    function(ffi.from_buffer(c_type, x), ffi.from_buffer(c_type, y), ffi.from_buffer(c_type, out))
    return out


EXPECTED = np.arange(SIZE) + 1.0


def build_in_subprocess(symbol: str, cache: Path) -> subprocess.Popen[str]:
    """Start a fresh Python process that builds and runs the axpy of `symbol` in `cache`.

    It prints {"cache_hit", "path", "out"} as JSON.
    """
    source, cdef = axpy_source(symbol)
    script = (
        "import json, sys\n"
        "import numpy as np\n"
        "from eqsat.backend_c.build import build_library\n"
        f"library = build_library({source!r}, {cdef!r}, [])\n"
        f"x = np.arange({SIZE}, dtype=np.float32); y = np.full({SIZE}, 0.5, dtype=np.float32)\n"
        f"out = np.empty({SIZE}, dtype=np.float32); f = library.ffi.from_buffer\n"
        f"library.lib.{symbol}(f('float[]', x), f('float[]', y), f('float[]', out))\n"
        "print(json.dumps({'cache_hit': library.cache_hit, 'path': str(library.path),\n"
        "                  'out': out.tolist()}))\n"
    )
    env = {**os.environ, "EQSAT_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> dict[str, object]:
    """Wait for a `build_in_subprocess` process and return its JSON report."""
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    report: dict[str, object] = json.loads(stdout)
    return report


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv("EQSAT_CACHE_DIR", str(directory))
    return directory


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def copy_entry_to(library: Library, target: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Copy the cache entry of `library` into `target`, point the cache there, return the .so.

    The copy is a new file this process has never loaded, so the test may corrupt it freely.
    """
    target.mkdir()
    for suffix in (".c", ".so", ".sha256"):
        shutil.copy(library.path.with_suffix(suffix), target)
    monkeypatch.setenv("EQSAT_CACHE_DIR", str(target))
    return target / library.path.name


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_build_returns_working_function(cache: Path, dtype: str) -> None:
    source, cdef = axpy_source("axpy_works", dtype)
    library = build_library(source, cdef, [])
    assert not library.cache_hit
    assert library.path.parent == cache
    np.testing.assert_array_equal(run_axpy(library, "axpy_works", dtype), EXPECTED)
    assert library.path.with_suffix(".c").read_text() == source
    assert library.path.with_suffix(".sha256").read_text() == sha256_of(library.path)


def test_build_same_source_twice_in_process_returns_same_library(cache: Path) -> None:
    source, cdef = axpy_source("axpy_twice")
    assert build_library(source, cdef, []) is build_library(source, cdef, [])


def test_build_fresh_process_is_cache_hit(cache: Path) -> None:
    first = finish(build_in_subprocess("axpy_fresh", cache))
    so_path = Path(str(first["path"]))
    before = so_path.stat()
    second = finish(build_in_subprocess("axpy_fresh", cache))
    after = so_path.stat()
    assert first["cache_hit"] is False
    assert second["cache_hit"] is True
    assert second["path"] == first["path"]
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert second["out"] == EXPECTED.tolist()


def test_build_key_depends_on_flags_and_cdef(cache: Path) -> None:
    source, cdef = axpy_source("axpy_flags")
    plain = build_library(source, cdef, [])
    with_define = build_library(source, cdef, ["-DUNUSED_MACRO=1"])
    other_cdef = build_library(source, cdef + "\n", [])
    assert len({plain.path, with_define.path, other_cdef.path}) == 3
    np.testing.assert_array_equal(run_axpy(with_define, "axpy_flags"), EXPECTED)


def test_build_corrupt_so_is_rebuilt(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, cdef = axpy_source("axpy_corrupt")
    so_path = copy_entry_to(build_library(source, cdef, []), tmp_path / "copy", monkeypatch)
    data = bytearray(so_path.read_bytes())
    data[-16:] = b"\xff" * 16  # section headers: dlopen still succeeds, only the sha256 differs
    so_path.write_bytes(bytes(data))
    rebuilt = build_library(source, cdef, [])
    assert not rebuilt.cache_hit
    assert rebuilt.path == so_path
    assert so_path.with_suffix(".sha256").read_text() == sha256_of(so_path)
    np.testing.assert_array_equal(run_axpy(rebuilt, "axpy_corrupt"), EXPECTED)


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_build_bad_sidecar_is_rebuilt(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    source, cdef = axpy_source("axpy_sidecar")
    so_path = copy_entry_to(build_library(source, cdef, []), tmp_path / "copy", monkeypatch)
    sidecar = so_path.with_suffix(".sha256")
    if damage == "missing":
        sidecar.unlink()
    else:
        sidecar.write_text(sidecar.read_text()[:10])
    rebuilt = build_library(source, cdef, [])
    assert not rebuilt.cache_hit
    assert sidecar.read_text() == sha256_of(so_path)
    np.testing.assert_array_equal(run_axpy(rebuilt, "axpy_sidecar"), EXPECTED)


def test_build_entry_that_fails_to_load_is_rebuilt(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, cdef = axpy_source("axpy_unloadable")
    so_path = copy_entry_to(build_library(source, cdef, []), tmp_path / "copy", monkeypatch)
    so_path.write_bytes(b"not an ELF file")
    so_path.with_suffix(".sha256").write_text(sha256_of(so_path))
    rebuilt = build_library(source, cdef, [])
    assert not rebuilt.cache_hit
    np.testing.assert_array_equal(run_axpy(rebuilt, "axpy_unloadable"), EXPECTED)


def test_build_concurrent_processes_compile_once(cache: Path) -> None:
    processes = [build_in_subprocess("axpy_concurrent", cache) for _ in range(4)]
    reports = [finish(process) for process in processes]
    assert all(report["out"] == EXPECTED.tolist() for report in reports)
    assert len({report["path"] for report in reports}) == 1
    assert [report["cache_hit"] for report in reports].count(False) == 1
    so_path = Path(str(reports[0]["path"]))
    assert sorted(cache.glob("*.so")) == [so_path]
    assert not list(cache.glob("*.tmp"))
    assert so_path.with_suffix(".sha256").read_text() == sha256_of(so_path)


def test_build_fail_syntax_error_raises_compile_error(cache: Path) -> None:
    source = "void broken(void) { this is not C }\n"
    with pytest.raises(CompileError) as caught:
        build_library(source, "void broken(void);", [])
    error = caught.value
    assert error.command[0] == "gcc"
    assert "error" in error.stderr
    assert Path(error.c_path).read_text() == source
    assert not list(cache.glob("*.so")) and not list(cache.glob("*.tmp"))


def test_build_fail_gcc_missing_raises_compile_error(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_library(*axpy_source("axpy_before_gcc_vanishes"), [])
    empty = tmp_path / "empty_bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    source, cdef = axpy_source("axpy_no_gcc")
    with pytest.raises(CompileError, match="gcc is missing"):
        build_library(source, cdef, [])


@pytest.mark.parametrize("flag", ["-ffast-math", "-Ofast", "-funsafe-math-optimizations"])
def test_build_fail_flush_to_zero_flags_refused(cache: Path, flag: str) -> None:
    source, cdef = axpy_source("axpy_fast_math")
    with pytest.raises(ValueError, match=flag):
        build_library(source, cdef, ["-march=native", flag])
    assert not list(cache.glob("*.so"))


def test_cache_dir_reads_environment_each_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EQSAT_CACHE_DIR", str(tmp_path / "explicit"))
    assert cache_dir() == tmp_path / "explicit" and cache_dir().is_dir()
    monkeypatch.delenv("EQSAT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "eqsat"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "eqsat"


@pytest.mark.parametrize(
    ("user_setting", "spin_count"),
    [(None, OPENMP_WAIT["GOMP_SPINCOUNT"]), ("OMP_WAIT_POLICY=PASSIVE", "0")],
)
def test_openmp_reads_eqsats_wait_setting_at_load_and_the_environment_is_left_as_it_was(
    cache: Path, user_setting: str | None, spin_count: str
) -> None:
    """libgomp, loaded with the first kernel, spins OPENMP_WAIT's rounds (its settings as
    OMP_DISPLAY_ENV prints them), unless the user chose a wait setting; os.environ is unchanged."""
    source = (
        "int parallel_ones(void) {\n    int ones = 0;\n"
        "    #pragma omp parallel reduction(+ : ones)\n    ones += 1;\n    return ones;\n}\n"
    )
    script = (
        "import os\n"
        "import eqsat.backend_c.build as build\n"
        "before = dict(os.environ)\n"
        f"library = build.build_library({source!r}, 'int parallel_ones(void);', [])\n"
        "assert library.lib.parallel_ones() >= 1\n"
        "print(dict(os.environ) == before)\n"
    )
    env = {**os.environ, "EQSAT_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO_ROOT)}
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        env.pop(name, None)
    if user_setting is not None:
        name, value = user_setting.split("=")
        env[name] = value
    env["OMP_DISPLAY_ENV"] = "verbose"  # libgomp prints the settings it read when it loads
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True"]
    assert f"GOMP_SPINCOUNT = '{spin_count}'" in result.stderr


def test_write_atomically_replaces_the_file_and_leaves_no_tmp_on_failure(tmp_path: Path) -> None:
    path = tmp_path / "entry.json"
    write_atomically(path, b"old")
    write_atomically(path, b"new")
    assert path.read_bytes() == b"new"
    directory = tmp_path / "a_directory"
    (directory / "inside").mkdir(parents=True)  # os.replace cannot put a file over it
    with pytest.raises(OSError):
        write_atomically(directory, b"data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_directory", "entry.json"]


def test_region_workers_keep_off_the_starting_cpu_and_the_caller_keeps_its_affinity(
    cache: Path,
) -> None:
    """THREADS_PREAMBLE: a worker of a parallel region put on the CPU the region started on
    (where a woken worker may land) moves off it, also when regions of two libraries (each with
    its own copy of the preamble) alternate; the starting thread, its share done, waits until
    the worker has joined (so the worker need not wait for it to sleep); the calling thread is
    never bound."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs to keep off one")
    libraries = []
    for name in ("where_threads_ran", "where_threads_ran_too"):
        source = (
            f"#define _GNU_SOURCE\n#include <stdint.h>\n{THREADS_PREAMBLE}\n"
            f"void {name}(int64_t *seen) {{\n"
            "    eq_team team = {sched_getcpu(), 0};\n"
            "    seen[0] = team.cpu;\n"
            "    #pragma omp parallel num_threads(2)\n"
            "    {\n"
            "        if (omp_get_thread_num() == 1) {  /* as a wake-up next to its waker does */\n"
            "            cpu_set_t only;\n"
            "            CPU_ZERO(&only);\n"
            "            CPU_SET(team.cpu, &only);\n"
            "            sched_setaffinity(0, sizeof only, &only);\n"
            "        }\n"
            "        eq_join(&team);\n"
            "        if (omp_get_thread_num() == 1) seen[1] = sched_getcpu();\n"
            "        eq_wait_for_team(&team);\n"
            "        if (omp_get_thread_num() == 0) seen[2] = __atomic_load_n(&team.joined, 2);\n"
            "    }\n"
            "}\n"
        )
        library = build_library(source, f"void {name}(int64_t *seen);", [])
        libraries.append((library.ffi, getattr(library.lib, name)))
    before = os.sched_getaffinity(0)
    for round_ in range(40):
        seen = np.full(3, -1, dtype=np.int64)  # starting CPU, worker's CPU, joined seen by 0
        ffi, where_threads_ran = libraries[round_ % 2]
        where_threads_ran(ffi.from_buffer("int64_t[]", seen))
        assert seen[1] >= 0 and seen[1] != seen[0] and seen[2] == 2, (round_, seen)
    assert os.sched_getaffinity(0) == before


def test_the_prelude_is_precompiled_once_per_flags_and_a_broken_copy_is_passed_over(
    cache: Path,
) -> None:
    """A kernel compiles after the headers precompiled for its flags (`build.PRELUDE`); gcc
    skips a copy that is not a precompiled header and parses the header instead."""
    build_library(*axpy_source("axpy_prelude_first"), [])
    build_library(*axpy_source("axpy_prelude_again"), [])
    (copy,) = cache.glob("eqsat-prelude-*.h.gch/*.gch")
    build_library(*axpy_source("axpy_prelude_avx2"), ["-mavx2", "-mfma"])
    assert len(list(cache.glob("eqsat-prelude-*.h.gch/*.gch"))) == 2
    copy.write_bytes(b"not a precompiled header")
    library = build_library(*axpy_source("axpy_prelude_broken"), [])
    np.testing.assert_array_equal(run_axpy(library, "axpy_prelude_broken"), EXPECTED)


def test_a_prelude_that_does_not_precompile_leaves_the_build_as_it_was(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build, "PRELUDE", "#error not a header\n")
    library = build_library(*axpy_source("axpy_without_prelude"), [])
    np.testing.assert_array_equal(run_axpy(library, "axpy_without_prelude"), EXPECTED)
    assert not list(cache.glob("eqsat-prelude-*.h.gch/*.gch"))


def regions_source(symbol: str, regions: int) -> tuple[str, str]:
    """C source and cdef of `out0[i] = in0[i] + 2 * in1[i]` over SIZE elements, in `regions`
    OpenMP parallel regions (a slice of the elements each)."""
    lines = ["#include <stddef.h>", f"{prototype(symbol, 2, 1, 'float32', for_cdef=False)} {{"]
    for region in range(regions):
        start, stop = region * SIZE // regions, (region + 1) * SIZE // regions
        lines += [
            f"    {build.PARALLEL_REGION} num_threads(2)",
            "    {",
            "        #pragma omp for",
            f"        for (size_t i = {start}; i < {stop}; ++i) out0[i] = in0[i] + 2 * in1[i];",
            "    }",
        ]
    return "\n".join([*lines, "}", ""]), prototype(symbol, 2, 1, "float32", for_cdef=True) + ";"


def test_a_kernel_of_several_parallel_regions_builds_through_the_link_time_optimizer(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its regions' functions are optimized at the link, in parallel (`LTO_FROM_REGIONS`); a
    kernel of fewer regions compiles as before. Both compute the same."""
    commands: list[list[str]] = []
    run_gcc = build._run_gcc

    def recorded(batch: list[list[str]], c_path: Path) -> None:
        commands.extend(batch)
        run_gcc(batch, c_path)

    monkeypatch.setattr(build, "_run_gcc", recorded)
    for regions in (build.LTO_FROM_REGIONS - 1, build.LTO_FROM_REGIONS + 1):
        commands.clear()
        symbol = f"axpy_regions_{regions}"
        library = build_library(*regions_source(symbol, regions), [])
        np.testing.assert_array_equal(run_axpy(library, symbol), EXPECTED)
        kernel_compile, link = commands
        through_lto = regions >= build.LTO_FROM_REGIONS
        assert ("-flto" in kernel_compile) == through_lto
        assert ("-flto-partition=max" in link) == through_lto
