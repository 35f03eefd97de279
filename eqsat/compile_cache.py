"""The compile cache: a repeated `eqsat.compile` answers from disk without running egglog.

An entry is `compile-<key>.json` in the compile-cache directory (`backend_c.build.cache_dir`,
beside the built libraries). The key is a sha256 over everything that decides the kernel, given
by the caller (the program's terms, limits, machine with its calibration, extra rules, ...) plus
what this module adds: ENTRY_VERSION, the digest of eqsat's own source (rules, cost model and
emitter included, so any change of eqsat's code makes new keys) and egglog's version. An entry
holds what a `Kernel` is rebuilt from: the C source, the ISA, the signature, `explain()`'s text and
the stages' reports; loading it compiles nothing unless the library itself left the cache.

A part entry, `part-<key>.json`, holds the nest the loop stage found for one part of a program
(`eqsat.rewrites.partition`), keyed by the part's term, the machine, the limits and the same
digests: a program edited in one layer searches only the parts it changed, and a model whose layers
were compiled before in another program reuses them (`eqsat.optimizer`, `cache=True`).

Entries are written like the libraries: under an `flock` on the entry's `.lock` file (processes
compiling one program at once run the optimizer once), by tmp file + rename, with a sha256 of the
payload inside; an entry that is unreadable, corrupt or of another ENTRY_VERSION is recomputed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from importlib import import_module, util
from pathlib import Path
from typing import Any, TypeVar

from eqsat.backend_c.build import cache_dir, file_lock, write_atomically
from eqsat.core.limits import SaturationReport
from eqsat.core.term import Term, terms_from_json, terms_to_json

Record = TypeVar("Record")

# Bump when an entry's layout changes.
ENTRY_VERSION = 2
# The packages whose code decides a kernel (each one's own folder, not its subpackages).
DECIDING_PACKAGES = (
    "eqsat",
    "eqsat.core",
    "eqsat.frontend",
    "eqsat.extract",
    "eqsat.rewrites",
    "eqsat.backend_c",
)


@dataclass(frozen=True)
class KernelRecord:
    """What a Kernel is rebuilt from (`eqsat.api.load_kernel`)."""

    c_source: str
    isa: str
    inputs: tuple[tuple[str, tuple[int, ...]], ...]  # name, shape
    outputs: tuple[tuple[int, ...], ...]  # shapes
    dtype: str  # what the kernel computes in
    returns_tuple: bool
    explanation: str
    stages: tuple[SaturationReport, ...]
    input_dtypes: tuple[str, ...]  # what callers pass and get (`eqsat.core.dtypes`)
    output_dtypes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "stages": [stage.as_dict() for stage in self.stages]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KernelRecord:
        """The record `to_json` wrote; KeyError, TypeError or ValueError if `data` is not one."""
        stages = tuple(SaturationReport.from_dict(stage) for stage in data["stages"])
        record = cls(
            c_source=data["c_source"],
            isa=data["isa"],
            inputs=tuple((name, tuple(shape)) for name, shape in data["inputs"]),
            outputs=tuple(tuple(shape) for shape in data["outputs"]),
            dtype=data["dtype"],
            returns_tuple=data["returns_tuple"],
            explanation=data["explanation"],
            stages=stages,
            input_dtypes=tuple(data["input_dtypes"]),
            output_dtypes=tuple(data["output_dtypes"]),
        )
        if not all(isinstance(getattr(record, name), str) for name in ("c_source", "isa", "dtype")):
            raise TypeError("a compile-cache entry's source, ISA and dtype are strings")
        return record


def entry_key(parts: Sequence[Any]) -> str:
    """Hex sha256 of `parts` (JSON-serializable, or by `repr`) with this module's own parts."""
    every = [ENTRY_VERSION, source_digest(), *parts]
    return hashlib.sha256(json.dumps(every, default=repr).encode()).hexdigest()


@functools.cache
def source_digest() -> str:
    """Hex sha256 of the Python files of DECIDING_PACKAGES and of egglog's version, read once
    per process."""
    digest = hashlib.sha256(egglog_version().encode())
    for package in DECIDING_PACKAGES:
        folder = Path(import_module(package).__file__ or "").parent
        for path in sorted(folder.glob("*.py")):
            digest.update(f"{package}/{path.name}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def egglog_version() -> str:
    """egglog's installed version, found without importing egglog (a compile answered from the
    cache never does) nor importlib.metadata (whose import costs a cached compile a third of
    its time): from the name of the `egglog-<version>.dist-info` folder beside the package, else
    from importlib.metadata."""
    spec = util.find_spec("egglog")
    if spec is not None and spec.origin is not None:
        folders = sorted(Path(spec.origin).parent.parent.glob("egglog-*.dist-info"))
        if len(folders) == 1:
            return folders[0].name.removeprefix("egglog-").removesuffix(".dist-info")
    from importlib import metadata

    return metadata.version("egglog")


def entry_path(key: str, kind: str = "compile") -> Path:
    """The entry of `key` of `kind` ("compile", or "part": `PartRecord`)."""
    return cache_dir() / f"{kind}-{key}.json"


@contextmanager
def locked(key: str, kind: str = "compile") -> Iterator[Path]:
    """Hold the entry's lock; yields the entry's path (`entry_path`)."""
    path = entry_path(key, kind)
    with file_lock(path.with_suffix(".lock")):
        yield path


def lookup(path: Path) -> KernelRecord | None:
    """The record at `path`, or None if it is missing, unreadable, corrupt or stale.

    It requires: the caller holds the entry's lock (`locked`)."""
    return _read(path, KernelRecord.from_json)


def store(path: Path, record: KernelRecord) -> None:
    """Write `record` at `path` atomically.

    It requires: the caller holds the entry's lock (`locked`)."""
    _write(path, record.to_json())


@dataclass(frozen=True)
class PartRecord:
    """What the loop stage found for one part of a program (`eqsat.rewrites.partition`): the
    nest it extracted, its report, and the size of its e-graph."""

    extracted: Term
    report: SaturationReport
    graph_size: int

    def to_json(self) -> dict[str, Any]:
        return {
            "extracted": terms_to_json([self.extracted]),
            "report": self.report.as_dict(),
            "graph_size": self.graph_size,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PartRecord:
        """The record `to_json` wrote; KeyError, IndexError, TypeError or ValueError if `data`
        is not one."""
        (extracted,) = terms_from_json(data["extracted"])
        if not extracted.op.startswith("Stmt.") or not isinstance(data["graph_size"], int):
            raise TypeError("a part entry holds a statement and its e-graph's size")
        return cls(extracted, SaturationReport.from_dict(data["report"]), data["graph_size"])


def lookup_part(key: str) -> PartRecord | None:
    """The part entry of `key`, or None if it is missing, unreadable, corrupt or stale."""
    with locked(key, "part") as path:
        return _read(path, PartRecord.from_json)


def store_part(key: str, record: PartRecord) -> None:
    """Write the part entry of `key` atomically."""
    with locked(key, "part") as path:
        _write(path, record.to_json())


def _read(path: Path, from_json: Callable[[dict[str, Any]], Record]) -> Record | None:
    """The record `from_json` reads from the entry at `path`, or None if the entry is missing,
    unreadable, of another ENTRY_VERSION, or its payload does not match its sha256."""
    try:
        entry = json.loads(path.read_text())
        payload = entry["payload"]
        if entry["version"] != ENTRY_VERSION or entry["sha256"] != _digest(payload):
            return None
        return from_json(payload)
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None


def _write(path: Path, payload: dict[str, Any]) -> None:
    entry = {"version": ENTRY_VERSION, "sha256": _digest(payload), "payload": payload}
    write_atomically(path, json.dumps(entry).encode())


def clear() -> int:
    """Remove every compile-cache entry, built library, autotuning choice and precompiled
    header from the cache directory; returns the number of files removed. The calibration is
    kept."""
    removed = 0
    for path in cache_dir().iterdir():
        if path.name.startswith("calibration"):
            continue
        if path.is_dir():  # a precompiled header's copies (`backend_c.build.PRELUDE`)
            removed += sum(1 for _ in path.iterdir())
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def _digest(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
