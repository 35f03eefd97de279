"""Tests of eqsat.extract.machine's host: the ISA level it reports, and EQSAT_MAX_ISA's cap."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import eqsat
from eqsat.extract.machine import ISA_LEVELS, best_isa, cpu_flags, host, isa_cap, runs_on_host
from tests.machines import PINNED


def test_the_cpus_level_needs_every_flag_of_it() -> None:
    assert best_isa(frozenset()) == "scalar"
    assert best_isa(frozenset({"avx2"})) == "scalar"  # AVX2 without FMA is not eqsat's avx2
    assert best_isa(frozenset({"avx2", "fma", "avx512f"})) == "avx2"  # AVX-512F alone is not
    every = frozenset({"avx512f", "avx512dq", "avx512bw", "avx512vl", "fma", "avx2"})
    assert best_isa(every) == "avx512"


@pytest.mark.parametrize("cap", ISA_LEVELS)
def test_eqsat_max_isa_caps_the_host_at_the_lower_level(
    cap: str, capped_isa: Callable[[str], None]
) -> None:
    cpu = best_isa(cpu_flags())
    capped_isa(cap)
    lower = max(cpu, cap, key=ISA_LEVELS.index)  # a cap above the CPU raises nothing
    assert host().isa == lower
    assert [runs_on_host(level) for level in ISA_LEVELS] == [
        ISA_LEVELS.index(level) >= ISA_LEVELS.index(lower) for level in ISA_LEVELS
    ]
    assert runs_on_host("scalar")


def test_fail_eqsat_max_isa_names_the_variable_and_the_levels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("EQSAT_MAX_ISA", "sse4")
    with pytest.raises(ValueError, match=r"EQSAT_MAX_ISA='sse4'.*avx512.*avx2.*scalar"):
        isa_cap()
    monkeypatch.setenv("EQSAT_MAX_ISA", " AVX2 ")
    assert isa_cap() == "avx2"  # case and blanks are forgiven
    monkeypatch.setenv("EQSAT_MAX_ISA", "")
    assert isa_cap() is None


def test_a_kernel_for_a_level_above_the_cap_is_built_and_refuses_to_run(
    capped_isa: Callable[[str], None],
) -> None:
    """Compiled for AVX2 on a host capped at scalar: the C is there to read, the call raises."""
    capped_isa("scalar")
    x = eqsat.tensor("x", (100,))
    scalar = PINNED.with_isa("scalar")  # fixed figures: no calibration of the capped host
    program = eqsat.exp(x) * 2.0
    kernel = eqsat.compile(program, machine=scalar, isa="avx2", progress=False, cache=False)
    assert kernel.isa == "avx2" and "_mm256_" in kernel.c_source
    assert "not checked against the written program: this host does not run avx2" in (
        kernel.explain()
    )
    with pytest.raises(eqsat.IsaError, match="compiled for avx2.*runs scalar"):
        kernel(np.ones(100, np.float32))
    plain = eqsat.compile(program, machine=scalar, progress=False, cache=False)
    assert plain.isa == "scalar" and "_mm" not in plain.c_source
    np.testing.assert_allclose(plain(np.ones(100, np.float32)), 2 * np.e, rtol=1e-6)
