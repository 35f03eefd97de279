"""The compile cache (eqsat/compile_cache.py): a repeated compile answers from disk without running
the optimizer, and anything that could change the kernel makes another entry."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import eqsat
import eqsat.api
import eqsat.optimizer
from eqsat import compile_cache
from eqsat.core.saturate import Limits
from eqsat.core.terms import TExpr
from eqsat.extract.machine import host
from eqsat.rewrites.rule import Identity

X = (6, 10)


def doubling(name: str, plain: bool) -> Identity:
    """x * 2 -> x + x, or -> x + x * 1 (not plain): one name, two right sides."""
    return Identity(
        name,
        "x * 2 -> x + x",
        {"x": TExpr},
        lambda x: TExpr.binary("mul", x, TExpr.const(2.0)),
        lambda x: TExpr.binary("add", x, x if plain else TExpr.binary("mul", x, TExpr.const(1.0))),
    )


@pytest.fixture(autouse=True)
def cache(fresh_cache: Path) -> Path:
    return fresh_cache


@pytest.fixture
def optimizer_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts calls of the optimizer behind `eqsat.compile`."""
    runs: list[int] = []
    optimize = eqsat.optimizer.optimize

    def counted(*args: Any, **kwargs: Any) -> eqsat.Optimized:
        runs.append(1)
        return optimize(*args, **kwargs)

    monkeypatch.setattr(eqsat.optimizer, "optimize", counted)
    return runs


def program() -> eqsat.Tensor:
    x = eqsat.tensor("x", X)
    return eqsat.relu(x * 2.0 + 1.0).sum(axis=1)


def entries(directory: Path) -> list[Path]:
    return sorted(directory.glob("compile-*.json"))


def test_a_second_compile_answers_from_the_cache(optimizer_runs: list[int], cache: Path) -> None:
    first = eqsat.compile(program(), progress=False)
    second = eqsat.compile(program(), progress=False)
    assert len(optimizer_runs) == 1
    assert second.c_source == first.c_source
    assert "answered from the compile cache" in second.explain()
    assert second.explain().startswith(first.explain())
    assert [s.summary() for s in second.stages] == [s.summary() for s in first.stages]
    x = np.random.default_rng(0).standard_normal(X).astype(np.float32)
    np.testing.assert_allclose(second(x), np.maximum(x * 2 + 1, 0).sum(axis=1), rtol=1e-5)
    assert len(entries(cache)) == 1


def test_a_new_process_answers_from_the_cache_without_egglog_or_the_optimizer(
    cache: Path,
) -> None:
    """The entry outlives the process that wrote it (no optimizer state in memory), and a new
    process that builds a program and compiles it from the cache loads no e-graph machinery
    (ARCHITECTURE §1: the frontend builds Terms without egglog)."""
    script = (
        "import eqsat, sys\n"
        "x = eqsat.tensor('x', (6, 10))\n"
        "kernel = eqsat.compile(eqsat.relu(x * 2.0 + 1.0).sum(axis=1), progress=False)\n"
        "loaded = sorted(m for m in ('egglog', 'eqsat.optimizer', 'eqsat.core.terms', "
        "'eqsat.core.saturate') if m in sys.modules)\n"
        "sys.stdout.write(repr(loaded) + '\\n' + kernel.explain().splitlines()[-1])\n"
    )
    eqsat.compile(program(), progress=False)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    loaded, note = result.stdout.split("\n")
    assert note.startswith("(answered from the compile cache: ")
    assert loaded == "[]"


@pytest.mark.parametrize(
    "limits",
    [Limits(seconds=0.0), Limits(extraction_seconds=0.0)],
    ids=["stage time limit", "extraction deadline"],
)
def test_a_stop_on_the_clock_is_not_cached(
    limits: Limits, optimizer_runs: list[int], cache: Path
) -> None:
    """A kernel a safety net shaped depends on the machine's speed: it is returned, said so,
    and the next compile searches again."""
    for _ in range(2):
        kernel = eqsat.compile(program(), progress=False, limits=limits)
        assert any(stage.on_clock for stage in kernel.stages)
        assert "not kept in the compile cache: a stage stopped on its clock" in kernel.explain()
    assert len(optimizer_runs) == 2 and not entries(cache)


@pytest.mark.parametrize(
    "option",
    [
        {"limits": Limits(iterations=3)},
        {"isa": "scalar" if host().isa != "scalar" else "avx2"},  # not the host's own level
        {"extra_rules": [doubling("mine-double", plain=True)]},
        {"autotune": 2},
    ],
    ids=["limits", "isa", "extra_rules", "autotune"],
)
def test_each_option_that_decides_the_kernel_is_in_the_key(
    option: dict[str, Any], optimizer_runs: list[int], cache: Path
) -> None:
    eqsat.compile(program(), progress=False)
    eqsat.compile(program(), progress=False, **option)
    eqsat.compile(program(), progress=False, **option)
    assert len(optimizer_runs) == 2
    assert len(entries(cache)) == 2


def test_an_extra_rule_is_keyed_by_what_it_does_not_its_name(
    optimizer_runs: list[int], cache: Path
) -> None:
    for plain in (True, False, True):
        eqsat.compile(program(), progress=False, extra_rules=[doubling("mine-double", plain)])
    assert len(optimizer_runs) == 2


def test_the_program_and_its_outputs_are_in_the_key(optimizer_runs: list[int], cache: Path) -> None:
    eqsat.compile(program(), progress=False)
    eqsat.compile([program()], progress=False)  # a tuple-returning kernel
    eqsat.compile(eqsat.relu(eqsat.tensor("x", X) * 3.0 + 1.0).sum(axis=1), progress=False)
    eqsat.compile(eqsat.relu(eqsat.tensor("y", X) * 2.0 + 1.0).sum(axis=1), progress=False)
    assert len(optimizer_runs) == 4


def test_eqsats_own_code_is_in_the_key(
    optimizer_runs: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    eqsat.compile(program(), progress=False)
    monkeypatch.setattr(compile_cache, "source_digest", lambda: "another eqsat")
    eqsat.compile(program(), progress=False)
    assert len(optimizer_runs) == 2


def test_cache_false_neither_reads_nor_writes(optimizer_runs: list[int], cache: Path) -> None:
    eqsat.compile(program(), progress=False, cache=False)
    assert entries(cache) == []
    eqsat.compile(program(), progress=False)
    kernel = eqsat.compile(program(), progress=False, cache=False)
    assert len(optimizer_runs) == 3
    assert "compile cache" not in kernel.explain()


def test_jit_writes_the_cache_and_cache_false_skips_it(
    optimizer_runs: list[int], cache: Path
) -> None:
    def layer(x: Any) -> Any:
        return eqsat.relu(x * 2.0 + 1.0).sum(axis=1)

    x = np.ones(X, dtype=np.float32)
    eqsat.jit(cache=False, progress=False)(layer)(x)
    assert entries(cache) == []
    eqsat.jit(progress=False)(layer)(x)
    assert len(entries(cache)) == 1
    kernel = eqsat.jit(progress=False)(layer).kernel_for(x)  # a new function: its own kernels
    assert "answered from the compile cache" in kernel.explain()
    assert len(optimizer_runs) == 2


@pytest.mark.parametrize("damage", ["truncated", "payload edited", "other version", "not json"])
def test_a_damaged_entry_is_recomputed_and_rewritten(
    damage: str, optimizer_runs: list[int], cache: Path
) -> None:
    eqsat.compile(program(), progress=False)
    (path,) = entries(cache)
    text = path.read_text()
    entry = json.loads(text)
    if damage == "truncated":
        path.write_text(text[: len(text) // 2])
    elif damage == "payload edited":
        entry["payload"]["c_source"] += "\n/* edited */"
        path.write_text(json.dumps(entry))
    elif damage == "other version":
        entry["version"] = compile_cache.ENTRY_VERSION + 1
        path.write_text(json.dumps(entry))
    else:
        path.write_text("\0\1 not json")
    kernel = eqsat.compile(program(), progress=False)
    assert len(optimizer_runs) == 2
    assert "/* edited */" not in kernel.c_source
    rewritten = compile_cache.lookup(path)
    assert rewritten is not None and rewritten.c_source == kernel.c_source
    eqsat.compile(program(), progress=False)
    assert len(optimizer_runs) == 2


def test_a_missing_library_is_rebuilt_from_the_entry(
    optimizer_runs: list[int], cache: Path
) -> None:
    """An entry whose library left the cache compiles its C again, without optimizing."""
    eqsat.compile(program(), progress=False)
    for library in cache.glob("*.so"):
        library.unlink()
    kernel = eqsat.compile(eqsat.relu(eqsat.tensor("x", X) * 2.0 + 1.0).sum(axis=1), progress=False)
    assert len(optimizer_runs) == 1
    x = np.ones(X, np.float32)
    np.testing.assert_allclose(kernel(x), np.full(6, 30.0))


def test_clear_removes_entries_and_libraries_but_keeps_the_calibration(cache: Path) -> None:
    eqsat.compile(program(), progress=False)
    (cache / "calibration-test.json").write_text("{}")
    removed = compile_cache.clear()
    assert removed >= 3  # the entry, its lock, the library and its files
    left = sorted(path.name for path in cache.iterdir())
    assert "calibration-test.json" in left
    assert all(name.startswith("calibration-") for name in left)


def test_a_record_round_trips_through_json() -> None:
    kernel = eqsat.compile(program(), progress=False, cache=False)
    record = eqsat.api._record(kernel, "avx2")
    assert compile_cache.KernelRecord.from_json(json.loads(json.dumps(record.to_json()))) == record
