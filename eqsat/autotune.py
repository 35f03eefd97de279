"""Autotuning: build and time the cost model's best candidates, keep the fastest, remember it.

`eqsat.compile(y, autotune=True)` (or `autotune=N`) calls `fastest`. It builds the model's top-N
candidate programs one by one, checks each against the model's pick on random inputs (a candidate
whose output differs beyond ARCHITECTURE §9's tolerance is discarded and reported), and times each
against the fastest so far (interleaved medians), printing one progress line per candidate on
stderr:

    autotune 3/8: 1.23 ms (predicted 4.1 Mcycles); best so far 1.10 ms

The choice is remembered in the compile cache (`autotune-<key>.json`, key: the canonical program,
the machine, N and the codegen and tuning versions), so compiling the same program again, in any
process, builds the remembered candidate without timing. An entry that is unreadable, or whose
program is no longer among the candidates, is ignored and the program is tuned again.

This module sits below the public API (`eqsat.api` imports it, never the reverse): it reads an
`Optimized` through the `Tunable` protocol and builds through the callable it is given.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path
from typing import Protocol

import numpy as np

from eqsat.backend_c.build import CODEGEN_VERSION, cache_dir
from eqsat.backend_c.kernel import Kernel
from eqsat.core.measure import agreement, interleaved_medians, random_inputs
from eqsat.core.pretty import format_loops
from eqsat.core.term import LoopProgram
from eqsat.extract.machine import Machine, cpu_model

DEFAULT_CANDIDATES = 8
# Bump when the candidates a program gets, or how they are timed, change in a way the cache key
# (canonical program, machine, N, CODEGEN_VERSION) does not capture: remembered choices go stale.
TUNING_VERSION = 1
ROUNDS = 15  # timed rounds per comparison at most
COMPARISON_SECONDS = 0.5  # of timing per comparison; past it, MIN_ROUNDS suffice

# Median seconds of each function, by candidate index (the tests inject a fake one).
Timer = Callable[[Mapping[int, Callable[[], object]]], Mapping[int, float]]


class TunedCandidate(Protocol):
    """What autotuning reads of an `eqsat.optimizer.Candidate`."""

    @property
    def program(self) -> LoopProgram: ...

    @property
    def predicted(self) -> float: ...


class Tunable(Protocol):
    """What autotuning reads of an `eqsat.optimizer.Optimized`."""

    @property
    def canonical(self) -> LoopProgram: ...

    @property
    def machine(self) -> Machine: ...

    def candidates(self, best: int) -> Sequence[TunedCandidate]: ...


def fastest(
    optimized: Tunable,
    count: int,
    build: Callable[[LoopProgram], Kernel],
    *,
    progress: bool = True,
    timer: Timer | None = None,
) -> Kernel:
    """The fastest kernel among `optimized`'s `count` best candidates (the remembered one when
    the compile cache has it), its `explain()` extended with the measured times.

    It requires:
    1. `count` >= 1 (else ValueError);
    2. `optimized.candidates(count)` lists the model's pick first;
    3. `build(program)` compiles a candidate of `optimized` into a Kernel.
    `progress` prints a line per candidate on stderr; `timer` replaces the interleaved timing
    (default: `interleaved_medians`, ROUNDS rounds, COMPARISON_SECONDS)."""
    if count < 1:
        raise ValueError(f"autotune needs at least one candidate, got {count}")
    say = _progress if progress else _silent
    candidates = optimized.candidates(count)
    path = cache_dir() / f"autotune-{tuning_key(optimized, count)}.json"
    remembered = _remembered(path, candidates)
    if remembered is not None:
        winner, note = remembered
        say(f"autotune: remembered candidate {winner + 1}/{len(candidates)} ({path.name})")
        return build(candidates[winner].program).with_note(f"{note}\n(remembered in {path})")
    winner, kernel, note = _tune(candidates, build, timer or _interleaved, say)
    _remember(path, program_digest(candidates[winner].program), note)
    return kernel.with_note(note)


def tuning_key(optimized: Tunable, count: int) -> str:
    """Hex sha256 of what decides the tuning outcome: program, machine, N, versions."""
    parts = [
        TUNING_VERSION,
        CODEGEN_VERSION,
        program_digest(optimized.canonical),
        asdict(replace(optimized.machine, calibration=None)),
        cpu_model(),
        count,
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def program_digest(program: LoopProgram) -> str:
    """Hex sha256 of a loop program (its term and signature)."""
    parts = [str(program.body), program.inputs, program.outputs, program.dtype]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _interleaved(functions: Mapping[int, Callable[[], object]]) -> Mapping[int, float]:
    return interleaved_medians(functions, ROUNDS, COMPARISON_SECONDS)


def _tune(
    candidates: Sequence[TunedCandidate],
    build: Callable[[LoopProgram], Kernel],
    timer: Timer,
    say: Callable[[str], None],
) -> tuple[int, Kernel, str]:
    """Build, check and time every candidate against the fastest so far; returns the winner's
    index, its kernel and the note for its `explain()`."""
    first = candidates[0].program
    total = len(candidates)
    lines: list[str] = []
    best, best_kernel = 0, build(first)
    # the kernel's shapes: a flattened program's buffers have other ones (eqsat.rewrites.flatten)
    shapes = {spec.name: spec.shape for spec in best_kernel.inputs}
    drawn = random_inputs(shapes, first.dtype, np.random.default_rng(0))
    # inputs of another dtype (bool, integers, float16) get the draws cast: small integers
    inputs = {spec.name: drawn[spec.name].astype(spec.dtype) for spec in best_kernel.inputs}
    want = _outputs(best_kernel, inputs)
    seconds: dict[int, float] = {}
    for k, candidate in enumerate(candidates):
        label = f"{k + 1}/{total}"
        kernel = best_kernel if k == 0 else build(candidate.program)
        checks = [  # against the model's pick: candidate 0 is the reference itself
            agreement(got, expected, first.dtype)
            for got, expected in zip(_outputs(kernel, inputs), want, strict=True)
            if k > 0
        ]
        if not all(check.ok for check in checks):
            worst = max(checks, key=lambda check: check.max_error)
            line = (
                f"{label}: discarded, output differs from the model's pick by "
                f"{worst.max_error:.2e} (tolerance {worst.tolerance:.0e})"
            )
            say(f"autotune {line}")
            lines.append(line)
            continue
        timed = {best: partial(best_kernel, **inputs), k: partial(kernel, **inputs)}
        seconds.update(timer(timed))
        if seconds[k] < seconds[best]:
            best, best_kernel = k, kernel
        line = (
            f"{label}: {_ms(seconds[k])} (predicted {candidate.predicted / 1e6:.1f} Mcycles); "
            f"best so far {_ms(seconds[best])}"
        )
        say(f"autotune {line}")
        lines.append(line)
    header = (
        f"autotuned: candidate {best + 1}/{total} is the fastest (each candidate was timed "
        "against the fastest before it, interleaved on random inputs)"
    )
    nest = [] if best == 0 else ["its loop nest:", format_loops(candidates[best].program.body, 1)]
    return best, best_kernel, "\n".join([header, *(f"  {line}" for line in lines), *nest])


def _outputs(kernel: Kernel, inputs: Mapping[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """`kernel`'s outputs on `inputs`, in float64 (bool and integer outputs compare as
    numbers)."""
    result = kernel(**inputs)
    return tuple(
        np.asarray(r, np.float64) for r in (result if isinstance(result, tuple) else (result,))
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def _progress(line: str) -> None:
    """One progress line on stderr (a terminal, or the cell output in Jupyter)."""
    print(line, file=sys.stderr, flush=True)


def _silent(line: str) -> None:
    pass


def _remembered(path: Path, candidates: Sequence[TunedCandidate]) -> tuple[int, str] | None:
    """The remembered winner's index among `candidates` and its note, or None if the entry at
    `path` is missing, unreadable, corrupt, or names a program that is not a candidate."""
    try:
        entry = json.loads(path.read_text())
        digest, note = entry["program"], entry["note"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(note, str):
        return None
    digests = [program_digest(candidate.program) for candidate in candidates]
    return (digests.index(digest), note) if digest in digests else None


def _remember(path: Path, digest: str, note: str) -> None:
    """Write the entry at `path` atomically (a temporary file, then a rename)."""
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump({"program": digest, "note": note}, handle)
        os.replace(tmp_name, path)
    except BaseException:
        os.unlink(tmp_name)
        raise
