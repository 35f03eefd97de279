"""Snapshot tests of the C emitter (a pure function): fixed loop programs -> stored C files.

A change to the emitted C shows up as a diff of `tests/snapshots/*.c`; review it, then run
`EQSAT_UPDATE_SNAPSHOTS=1 python -m pytest tests/test_snapshots.py` to store the new C. Every
snapshot is also compiled and run against the interpreter, so a stored file is known to work.

The programs are hand-built (not chosen by the optimizer), so a change to the rules or the cost
model never changes a snapshot: only a change to emission does.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import eqsat
from eqsat.backend_c.emit import emit
from eqsat.core.loops import vectorizable
from eqsat.core.terms import LoopProgram, Term, to_term
from eqsat.rewrites.lowering import lower
from eqsat.rewrites.packing import pack_panels
from tests.isas import ISAS
from tests.programs import agrees_with_interpreter, assert_close
from tests.test_loops import at, inner, named, nest, outer
from tests.test_packing import tiled_matmul

SNAPSHOTS = Path(__file__).parent / "snapshots"


def vectorized(expr: eqsat.Tensor) -> LoopProgram:
    """The canonical lowering with every innermost loop that can be a SIMD loop marked Vector
    (a fixed schedule, so the rules and the cost model never change a snapshot)."""
    program = lower([to_term(expr.expr)])  # type: ignore[list-item]

    def mark(statement: Term) -> Term:
        args = tuple(mark(a) if isinstance(a, Term) else a for a in statement.args)
        if statement.op == "Stmt.loop" and vectorizable(args[0], args[2]):  # type: ignore[arg-type]
            args = (args[0], Term("LoopKind.vector", (16,)), args[2])
        return Term(statement.op, args)

    return program.with_body(mark(program.body))


def register_tiled_matmul() -> LoopProgram:
    """out0 = in0 @ in1 (16 x 24 @ 24 x 32) as 4 rows x 2 vectors register tiles over k."""
    i, j, k = named("i0", 16), named("i1", 32), named("k", 24)
    product = Term(
        "Scalar.binary",
        ("mul", Term("Scalar.load", ("in0", at(i, k))), Term("Scalar.load", ("in1", at(k, j)))),
    )
    init = nest(
        [(i, "parallel", ()), (j, "vector", (8,))],
        Term("Stmt.store", ("out0", at(i, j), Term("Scalar.const", (0.0,)))),
    )
    tiles = nest(
        [
            (outer(i, 4), "serial", ()),
            (outer(j, 16), "serial", ()),
            (k, "serial", ()),
            (inner(i, 4), "unroll", (4,)),
            (inner(j, 16), "vector", (8,)),
        ],
        Term("Stmt.accumulate", ("out0", at(i, j), "sum", product)),
    )
    return LoopProgram(
        Term("Stmt.seq", (init, tiles)), (("x", (16, 24)), ("w", (24, 32))), ((16, 32),), "float32"
    )


def programs() -> dict[str, LoopProgram]:
    x = eqsat.tensor("x", (8, 20))
    y = eqsat.tensor("y", (20,))
    return {
        "elementwise": vectorized(eqsat.relu(x * y + 1.5) - eqsat.exp(x)),
        "softmax": vectorized(eqsat.softmax(x)),
        "row-max": vectorized(x.max(axis=1)),
        "matmul-tiled": register_tiled_matmul(),
        "matmul-packed": pack_panels(tiled_matmul(8, 6, 32, ti=4, tk=3, tj=16)),
    }


CASES = [(name, isa) for name in programs() for isa in ISAS]


@pytest.mark.parametrize(("name", "isa"), CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_emitted_c_matches_its_snapshot_and_runs(name: str, isa: str) -> None:
    program = programs()[name]
    source = emit(program, isa, "eqsat_kernel")
    path = SNAPSHOTS / f"{name}.{isa}.c"
    if os.environ.get("EQSAT_UPDATE_SNAPSHOTS"):
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(source)
    assert path.exists(), f"no snapshot {path.name}; run with EQSAT_UPDATE_SNAPSHOTS=1"
    assert source == path.read_text(), f"emitted C differs from {path.name}"

    agrees_with_interpreter(program, isa, seed=7, source=path.read_text())


@pytest.mark.parametrize(
    ("shape", "isa", "streamed"),
    [
        ((1024, 2048), "avx512", True),  # 8 MB, rows of whole vectors
        ((1024, 2048), "avx2", True),
        ((1024, 2048), "scalar", False),  # no vector stores at all
        ((512, 4100), "avx512", False),  # rows do not start on vector boundaries
        ((256, 2048), "avx512", False),  # 2 MB: may still be in cache for the reader
    ],
)
def test_large_outputs_are_stored_around_the_caches(
    shape: tuple[int, int], isa: str, streamed: bool
) -> None:
    """Non-temporal stores only where every stored vector is aligned and the output is large
    (eqsat.core.loops.large_output); the result is the same either way. The row `c` keeps the
    2-D nest (a program over whole arrays only would be flattened, eqsat.rewrites.flatten)."""
    a, b, c = eqsat.tensor("a", shape), eqsat.tensor("b", shape), eqsat.tensor("c", shape[1:])
    kernel = eqsat.compile(eqsat.relu(a * b) + c, isa=isa, progress=False)
    assert ("_stream_p" in kernel.c_source) == streamed
    fences, regions = kernel.c_source.count("_mm_sfence();"), kernel.c_source.count("omp parallel")
    assert fences == (max(1, regions) if streamed else 0)  # once per thread, not per vector loop
    rng = np.random.default_rng(2)
    x, y = (rng.standard_normal(shape, np.float32) for _ in range(2))
    row = rng.standard_normal(shape[1:], np.float32)
    assert_close(kernel(x, y, row), np.maximum(x * y, 0) + row, "float32")  # type: ignore[arg-type]


def test_an_output_the_kernel_reads_back_is_not_streamed() -> None:
    """A matmul zeroes its output and then accumulates into it: streamed zeros would be read
    back from memory."""
    a, b = eqsat.tensor("a", (2048, 64)), eqsat.tensor("b", (64, 2048))  # a 16 MB output
    kernel = eqsat.compile(a @ b, progress=False)
    assert "_stream_p" not in kernel.c_source
