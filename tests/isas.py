"""ISA levels in tests: every level is emitted and compiled on any host (gcc builds AVX-512 code
anywhere); only the levels this host executes are run (`eqsat.extract.machine.runs_on_host`,
capped by EQSAT_MAX_ISA)."""

from __future__ import annotations

import pytest

from eqsat.extract.machine import ISA_LEVELS, host, runs_on_host

ISAS = ISA_LEVELS  # ("avx512", "avx2", "scalar")
VECTOR_ISAS = ("avx512", "avx2")
# The levels this host executes: what a hypothesis test draws its level from. A level it only
# builds would skip the whole test at the first example that drew it (`skip_unless_runs`), so
# on an AVX2 host a property test drawing from ISAS checked one AVX-512 example and ran none.
RUN_ISAS = tuple(isa for isa in ISAS if runs_on_host(isa))
RUN_VECTOR_ISAS = tuple(isa for isa in VECTOR_ISAS if runs_on_host(isa))
NO_VECTOR_ISA = "this host runs no vector ISA level (EQSAT_MAX_ISA=scalar?)"


def not_run_reason(isa: str) -> str:
    """Why a test built code for `isa` and did not run it."""
    return f"{isa}: this host lacks it (it runs {host().isa}); built, not run"


def skip_unless_runs(isa: str) -> None:
    """Skip the rest of the calling test where this host cannot execute `isa` code: what the
    test built and checked before this call stands. (A Kernel refuses such a call by itself,
    `tests/conftest.py`; hypothesis tests call this first, so that hypothesis does not shrink
    the refusal as a failure.)"""
    if not runs_on_host(isa):
        pytest.skip(not_run_reason(isa))
