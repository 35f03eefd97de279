"""Flattening (eqsat/rewrites/flatten.py): an elementwise program over whole arrays of one shape
is compiled as one flat loop, and its kernel keeps the user's shapes.

The flattened kernels are checked against numpy on random shapes (a dimension of 1, rank 3,
special values, every ISA level); programs that must keep their shape are refused, by the
predicate and in explain(); the kernel's signature (calls, errors, copies of non-contiguous
inputs, the compile cache, another process, pickling, autotuning) is the user's.
"""

from __future__ import annotations

import math
import pickle
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import eqsat
from eqsat import autotune
from eqsat.api import build
from eqsat.backend_c.emit import emit
from eqsat.backend_c.kernel import TensorSpec
from eqsat.core import shapes
from eqsat.core.errors import ShapeError
from eqsat.core.pretty import format_loops
from eqsat.core.saturate import Limits
from eqsat.core.terms import Term, to_term
from eqsat.rewrites.flatten import flatten, is_flattenable
from tests.isas import ISAS
from tests.machines import PINNED
from tests.programs import assert_close
from tests.test_numerics import assert_specials_agree, with_specials

LIMITS = Limits(nodes=20_000, seconds=0.5, iterations=8, extraction_seconds=0.5)
# no clock limit within reach, for tests of the compile cache: a stage the clock stopped (the
# suite's workers loading the cores) is not kept there, and a second compile is not answered
UNHURRIED = replace(LIMITS, seconds=60.0, extraction_seconds=60.0)
FLATTENED = "flattened: elementwise over whole"


def terms(*outputs: eqsat.Tensor) -> list[Term]:
    result = [to_term(t.expr) for t in outputs]
    assert all(isinstance(t, Term) for t in result)
    return result  # type: ignore[return-value]


def program(a: Any, b: Any, c: Any) -> Any:
    """Arithmetic, relu, maximum, minimum, a comparison, where and a division by an input,
    written once for numpy arrays and eqsat tensors alike."""
    mixed = np.where(a > b, np.maximum(a * b + c, 0) * 0.5, np.minimum(c, a) - b / c)
    return np.where(c, mixed, np.abs(a)) - 1.5


def compiled(
    shape: tuple[int, ...], dtype: str = "float32", limits: Limits = LIMITS, **options: Any
) -> eqsat.Kernel:
    a, b, c = (eqsat.tensor(name, shape, dtype) for name in "abc")
    return eqsat.compile(program(a, b, c), progress=False, limits=limits, **options)


def run_numpy(inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(program(inputs["a"], inputs["b"], inputs["c"]))


@pytest.fixture
def cache(fresh_cache: Path) -> Path:
    return fresh_cache


# ---------------------------------------------------------------- which programs flatten

x, y, z = (eqsat.tensor(name, (5, 5)) for name in "xyz")
s = eqsat.tensor("s", ())  # a 0-d input, as @eqsat.jit traces a float argument
FLATTENABLE = {
    "arithmetic": [eqsat.relu(x * y + z) * 0.5],
    "where and comparisons": [eqsat.where(x > y, x, y * 0.5) + (x != z)],
    "unary functions": [eqsat.exp(eqsat.tanh(x)) + eqsat.sqrt(abs(y)) - eqsat.sigmoid(z)],
    "0-d input": [eqsat.maximum(x * s, y) - s],
    "constant broadcast": [x**0 + y],  # x ** 0 is broadcast_to(1, x.shape)
    "two outputs": [x * y, eqsat.minimum(y, z)],
    "rank 3": [eqsat.tensor("u", (2, 3, 4)) * 2.0],
}
NOT_FLATTENABLE = {
    "rank 1": [eqsat.tensor("v", (25,)) * 2.0],
    "rank 0": [s * 2.0],
    "broadcast row": [x + eqsat.tensor("b", (5,))],
    "broadcast column": [x + eqsat.tensor("b", (5, 1))],
    "reduction": [x.sum(axis=1)],
    "reduction broadcast back": [x - x.max(axis=1, keepdims=True)],
    "transpose": [x + x.T],
    "matmul": [x @ y],
    "reshape": [x.reshape(25).reshape(5, 5) + y],
    "outputs of two shapes": [x * 2.0, s * 2.0],
}


@pytest.mark.parametrize("name", FLATTENABLE)
def test_elementwise_programs_over_whole_arrays_are_flattenable(name: str) -> None:
    roots = terms(*FLATTENABLE[name])
    assert is_flattenable(roots)
    shape = FLATTENABLE[name][0].shape
    flat = flatten(roots)
    for root, flat_root in zip(roots, flat, strict=True):
        assert shapes.infer(flat_root) == (math.prod(shape),)
        assert shapes.infer(root) == shape


@pytest.mark.parametrize("name", NOT_FLATTENABLE)
def test_programs_that_depend_on_the_shape_are_not_flattenable(name: str) -> None:
    assert not is_flattenable(terms(*NOT_FLATTENABLE[name]))


def test_flatten_keeps_0d_inputs_and_flattens_broadcasts_of_scalars() -> None:
    """The flattening of a program is the same program written over 1-D arrays."""
    flat_x, flat_y = eqsat.tensor("x", (25,)), eqsat.tensor("y", (25,))
    assert flatten(terms(x * s + x**0, y - x)) == terms(flat_x * s + flat_x**0, flat_y - flat_x)


@pytest.mark.parametrize("name", ["broadcast row", "reduction", "transpose", "matmul"])
def test_explain_says_nothing_of_flattening_for_a_shaped_program(name: str) -> None:
    optimized = eqsat.optimize(NOT_FLATTENABLE[name], limits=LIMITS, progress=False)
    assert optimized.flattened is None
    assert optimized.program.inputs == optimized.inputs
    assert FLATTENED not in optimized.report()


# ---------------------------------------------------------------- optimize and the loop nest


def test_optimize_shows_the_flat_program_and_the_users_signature() -> None:
    """`program` is the one flat loop the C runs; `inputs`, `outputs` and the report's
    inputs line keep the user's shapes; compile's explain() says so too."""
    a, b = eqsat.tensor("a", (2012, 4)), eqsat.tensor("b", (2012, 4))
    expr = eqsat.relu(a * b + s) * 0.5
    optimized = eqsat.optimize(expr, machine=PINNED, limits=LIMITS, progress=False)
    assert optimized.flattened == (2012, 4)
    assert optimized.inputs == (("a", (2012, 4)), ("b", (2012, 4)), ("s", ()))
    assert optimized.outputs == ((2012, 4),)
    assert optimized.program.inputs == (("a", (8048,)), ("b", (8048,)), ("s", ()))
    assert optimized.program.outputs == ((8048,),)
    assert format_loops(optimized.program.body).startswith("for i0 in 0..8048 vector(16)")
    flattened = "flattened: elementwise over whole (2012, 4) arrays, compiled as one loop of 8048"
    kernel = eqsat.compile(expr, limits=LIMITS, progress=False)
    for report in (optimized.report(), kernel.explain()):
        lines = report.splitlines()
        assert lines[0].startswith("inputs: a (2012, 4), b (2012, 4), s ()  (float32")
        assert lines[1] == flattened


def test_a_large_flattened_program_gets_the_nest_of_a_1d_program() -> None:
    """4096 x 4096 is scheduled exactly as 16777216 elements written 1-D: a parallel loop of
    tiles around a vector loop, with non-temporal stores for the 64 MB output."""
    shape, flat = (4096, 4096), (4096 * 4096,)

    def optimized(shape: tuple[int, ...]) -> eqsat.Optimized:
        a, b = eqsat.tensor("a", shape), eqsat.tensor("b", shape)
        return eqsat.optimize(eqsat.relu(a * b) + 1.0, machine=PINNED, progress=False)

    two_d, one_d = optimized(shape), optimized(flat)
    assert two_d.program == one_d.program
    nest = format_loops(two_d.program.body).splitlines()
    assert "parallel" in nest[0] and "vector(16)" in nest[1]
    assert "_mm512_stream_ps" in emit(two_d.program, "avx512", "k")


def test_an_odd_sized_flattened_output_is_streamed() -> None:
    """512 x 4100 elements (8.4 MB) are not a whole number of vectors, and rows of 4100 would
    not start on vector boundaries: the one row of the flattened output does, so its whole
    vectors are stored around the caches (tests/test_snapshots.py has the 2-D case)."""
    a, b = eqsat.tensor("a", (512, 4100)), eqsat.tensor("b", (512, 4100))
    kernel = eqsat.compile(eqsat.relu(a * b) + 1.0, isa="avx512", progress=False)
    assert FLATTENED in kernel.explain()
    assert "_mm512_stream_ps" in kernel.c_source
    fences, regions = kernel.c_source.count("_mm_sfence();"), kernel.c_source.count("omp parallel")
    assert fences == max(1, regions)
    rng = np.random.default_rng(2)
    va, vb = (rng.standard_normal((512, 4100), np.float32) for _ in range(2))
    assert_close(kernel(va, vb), np.maximum(va * vb, 0) + 1, "float32")  # type: ignore[arg-type]


# ---------------------------------------------------------------- values


SHAPES = [(5, 5), (2012, 4), (2762, 5), (1, 1), (1, 33), (33, 1), (3, 1, 17), (2, 3, 4)]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_flattened_kernels_agree_with_numpy_on_special_values(
    shape: tuple[int, ...], isa: str
) -> None:
    """NaN, ±inf, -0.0 and subnormal inputs: NaN and ±inf where numpy puts them (ARCHITECTURE
    §4), in the vectors, tails and remainders of the one flat loop."""
    kernel = compiled(shape, isa=isa)
    assert FLATTENED in kernel.explain()
    rng = np.random.default_rng(math.prod(shape))
    inputs = {name: with_specials(rng, shape, rate=0.2) for name in "abc"}
    wide = {name: value.astype(np.float64) for name, value in inputs.items()}
    assert_specials_agree(kernel(**inputs), run_numpy(inputs), run_numpy(wide))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.lists(st.sampled_from([1, 2, 3, 4, 5, 16, 17, 33, 130]), min_size=2, max_size=3),
    dtype=st.sampled_from(["float32", "float64"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_flattened_kernels_agree_with_numpy_on_random_shapes(
    shape: list[int], dtype: str, seed: int
) -> None:
    kernel = compiled(tuple(shape), dtype)
    assert FLATTENED in kernel.explain()
    rng = np.random.default_rng(seed)
    inputs = {name: rng.uniform(-3, 3, shape).astype(dtype) for name in "abc"}
    inputs["c"][rng.random(shape) < 0.3] = 0.0  # where(c, ...) takes both branches
    wide = {name: value.astype(np.float64) for name, value in inputs.items()}
    assert_specials_agree(kernel(**inputs), run_numpy(inputs), run_numpy(wide))


def test_a_multi_output_program_is_flattened_and_returns_the_users_shapes() -> None:
    a, b, c = (eqsat.tensor(name, (7, 9)) for name in "abc")
    kernel = eqsat.compile([a * b + c, eqsat.relu(a) - s], progress=False, limits=LIMITS)
    assert FLATTENED in kernel.explain()
    assert [spec.shape for spec in kernel.outputs] == [(7, 9), (7, 9)]
    rng = np.random.default_rng(3)
    va, vb, vc = (rng.standard_normal((7, 9)).astype(np.float32) for _ in range(3))
    vs = np.array(0.25, np.float32)
    first, second = kernel(a=va, b=vb, c=vc, s=vs)
    assert first.shape == second.shape == (7, 9)
    assert_close(first, va * vb + vc, "float32")
    assert_close(second, np.maximum(va, 0) - vs, "float32")


def test_a_jit_function_with_a_float_argument_is_flattened() -> None:
    @eqsat.jit(progress=False, limits=LIMITS)
    def scaled(x: Any, y: Any, alpha: float) -> Any:
        return np.maximum(x * alpha, y)

    rng = np.random.default_rng(4)
    vx, vy = (rng.standard_normal((2012, 4)).astype(np.float32) for _ in range(2))
    assert_close(scaled(vx, vy, 0.3), np.maximum(vx * np.float32(0.3), vy), "float32")
    assert FLATTENED in scaled.kernel_for(vx, vy, 0.3).explain()


# ---------------------------------------------------------------- the user's signature


def test_non_contiguous_inputs_are_copied_and_wrong_shapes_name_the_users_shape() -> None:
    kernel = compiled((6, 10))
    assert [spec.shape for spec in kernel.inputs] == [(6, 10)] * 3
    rng = np.random.default_rng(5)
    transposed = rng.uniform(1, 2, (10, 6)).astype(np.float32).T
    sliced = rng.uniform(1, 2, (12, 30)).astype(np.float32)[::2, ::3]
    fortran = np.asfortranarray(rng.uniform(1, 2, (6, 10)).astype(np.float32))
    assert not any(v.flags.c_contiguous for v in (transposed, sliced, fortran))
    inputs = {"a": transposed, "b": sliced, "c": fortran}
    np.testing.assert_array_equal(kernel(**inputs), run_numpy(inputs))
    contiguous = np.ones((6, 10), np.float32)
    for wrong in (contiguous.reshape(60), contiguous.reshape(10, 6), contiguous[None]):
        message = f"input 'b' has shape {wrong.shape}, expected (6, 10)"
        with pytest.raises(ShapeError, match=re.escape(message)):
            kernel(a=contiguous, b=wrong, c=contiguous)


def test_a_cached_flattened_kernel_keeps_the_users_shapes(cache: Path) -> None:
    first = compiled((6, 10), limits=UNHURRIED)
    assert "not kept in the compile cache" not in first.explain(), first.explain()
    again = compiled((6, 10), limits=UNHURRIED)
    assert "answered from the compile cache" in again.explain()
    assert FLATTENED in again.explain()
    for kernel in (first, again, pickle.loads(pickle.dumps(again))):
        assert {spec.name: spec.shape for spec in kernel.inputs} == dict.fromkeys("abc", (6, 10))
        assert kernel.outputs == (TensorSpec("out0", (6, 10), "float32"),)
        with pytest.raises(ShapeError):
            kernel(*(np.ones(60, np.float32) for _ in "abc"))
    script = (
        "import eqsat\n"
        "from tests.test_flatten import UNHURRIED, compiled\n"
        "kernel = compiled((6, 10), limits=UNHURRIED)\n"
        "print(repr(kernel)); print(kernel.explain().splitlines()[-1])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    shown, note = result.stdout.splitlines()
    assert shown == repr(first)
    assert note.startswith("(answered from the compile cache: ")


def test_autotuning_a_flattened_program_runs_the_candidates_on_the_users_shapes(
    cache: Path,
) -> None:
    a, b = eqsat.tensor("a", (33, 5)), eqsat.tensor("b", (33, 5))
    optimized = eqsat.optimize(eqsat.relu(a - b) * 3.0, limits=LIMITS, progress=False)
    assert optimized.flattened == (33, 5)

    def timer(functions: Mapping[int, Callable[[], object]]) -> dict[int, float]:
        for function in functions.values():
            function()  # each candidate runs on the inputs autotuning drew
        return {k: float(k) for k in functions}

    kernel = autotune.fastest(
        optimized, 2, lambda p: build(p, optimized), progress=False, timer=timer
    )
    assert kernel.inputs == (
        TensorSpec("a", (33, 5), "float32"),
        TensorSpec("b", (33, 5), "float32"),
    )
    assert "autotuned: candidate 1/" in kernel.explain()
