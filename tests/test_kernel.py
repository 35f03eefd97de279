"""Tests of eqsat.backend_c.kernel: argument checking, copies, outputs and threads of `Kernel`."""

from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from eqsat.backend_c.abi import prototype
from eqsat.backend_c.build import build_library
from eqsat.backend_c.kernel import Kernel, TensorSpec, kernel_entry
from eqsat.core.errors import ArgumentError, DTypeError, EqsatError, IsaError, ShapeError

REPO_ROOT = Path(__file__).resolve().parent.parent
SHAPE = (3, 4)


def run_in_threads(worker: Callable[[int], None], count: int) -> None:
    """Run `worker(seed)` for seeds 0..count-1, each in a thread of its own, and wait for all."""
    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def make_kernel(
    body: str,
    inputs: list[TensorSpec],
    outputs: list[TensorSpec],
    dtype: str = "float32",
    returns_tuple: bool = False,
    *,
    with_entry: bool = False,
    isa: str = "scalar",
) -> Kernel:
    """Build a kernel whose C body is `body` (it may use `in0..`, `out0..`), with its C call
    entry (`kernel_entry`) if `with_entry`, labelled as compiled for `isa` (the C is built
    without ISA flags); several outputs return a tuple."""
    symbol = "test_kernel"
    signature: dict[str, Any] = {
        "symbol": symbol,
        "inputs": inputs,
        "outputs": outputs,
        "dtype": dtype,
        "returns_tuple": returns_tuple or len(outputs) > 1,
    }
    declaration = prototype(symbol, len(inputs), len(outputs), dtype, for_cdef=False)
    source = f"#include <stddef.h>\n{declaration} {{\n{body}\n}}\n"
    cdef = prototype(symbol, len(inputs), len(outputs), dtype, for_cdef=True) + ";"
    extension = kernel_entry(**signature) if with_entry else None
    library = build_library(source, cdef, [], extension=extension)
    return Kernel(
        library=library, **signature, isa=isa, c_source=source, explanation="explanation text"
    )


def axpy_kernel(dtype: str = "float32", shape: tuple[int, ...] = SHAPE) -> Kernel:
    """Kernel computing `x + 2 * y` elementwise over `shape`."""
    size = int(np.prod(shape))
    body = f"for (size_t i = 0; i < {size}; ++i) out0[i] = in0[i] + 2 * in1[i];"
    inputs = [TensorSpec("x", shape), TensorSpec("y", shape)]
    return make_kernel(body, inputs, [TensorSpec("out0", shape)], dtype)


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EQSAT_CACHE_DIR", str(tmp_path))
    return tmp_path


def random_inputs(dtype: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(SHAPE).astype(dtype), rng.standard_normal(SHAPE).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_kernel_positional_keyword_and_mixed_calls(dtype: str) -> None:
    kernel = axpy_kernel(dtype)
    x, y = random_inputs(dtype)
    expected = x + 2 * y
    for result in (kernel(x, y), kernel(y=y, x=x), kernel(x, y=y)):
        assert isinstance(result, np.ndarray)
        assert result.dtype == np.dtype(dtype) and result.shape == SHAPE
        np.testing.assert_array_equal(result, expected)


def test_kernel_properties_and_repr() -> None:
    kernel = axpy_kernel()
    assert kernel.input_names == ("x", "y")
    assert kernel.input_names is kernel.input_names  # built once, not on every call
    assert kernel.dtype == "float32"
    assert "out0[i] = in0[i] + 2 * in1[i]" in kernel.c_source
    assert kernel.explain() == "explanation text"
    text = repr(kernel)
    assert "x: (3, 4)" in text and "y: (3, 4)" in text and "float32" in text


def test_kernel_outputs_are_fresh_each_call() -> None:
    kernel = axpy_kernel()
    x, y = random_inputs("float32")
    first = kernel(x, y)
    second = kernel(x, y)
    assert isinstance(first, np.ndarray) and isinstance(second, np.ndarray)
    assert not np.shares_memory(first, second)
    assert not np.shares_memory(first, x) and not np.shares_memory(first, y)


X, Y = random_inputs("float32")

BAD_CALLS: list[tuple[str, Callable[[Kernel], Any], type[Exception], list[str]]] = [
    ("missing", lambda k: k(X), ArgumentError, ["'y'"]),
    ("missing_keyword", lambda k: k(y=Y), ArgumentError, ["'x'"]),
    ("unknown_keyword", lambda k: k(X, Y, z=Y), ArgumentError, ["'z'"]),
    ("too_many_positional", lambda k: k(X, Y, Y), ArgumentError, ["3 positional"]),
    ("given_twice", lambda k: k(X, Y, x=X), ArgumentError, ["'x'"]),
    ("list", lambda k: k(X.tolist(), Y), ArgumentError, ["'x'", "list"]),
    ("python_scalar", lambda k: k(X, 1.0), ArgumentError, ["'y'", "float"]),
    ("numpy_scalar", lambda k: k(X, np.float32(1.0)), ArgumentError, ["'y'", "float32"]),
    ("float64", lambda k: k(X.astype(np.float64), Y), DTypeError, ["'x'", "float32", "float64"]),
    ("int32", lambda k: k(X, Y.astype(np.int32)), DTypeError, ["'y'", "float32", "int32"]),
    ("float16", lambda k: k(X, Y.astype(np.float16)), DTypeError, ["'y'", "float16"]),
    ("shape", lambda k: k(X, Y[:2]), ShapeError, ["'y'", "(2, 4)", "(3, 4)"]),
    ("transposed_shape", lambda k: k(X.T, Y), ShapeError, ["'x'", "(4, 3)", "(3, 4)"]),
    ("flat", lambda k: k(X.ravel(), Y), ShapeError, ["'x'", "(12,)", "(3, 4)"]),
]


@pytest.mark.parametrize(
    ("call", "error", "fragments"),
    [case[1:] for case in BAD_CALLS],
    ids=[case[0] for case in BAD_CALLS],
)
def test_kernel_fail_bad_arguments(
    call: Callable[[Kernel], Any], error: type[Exception], fragments: list[str]
) -> None:
    kernel = axpy_kernel()
    with pytest.raises(error) as caught:
        call(kernel)
    assert type(caught.value) is error
    assert isinstance(caught.value, EqsatError)  # and a TypeError or ValueError, as Python's
    assert isinstance(caught.value, TypeError if error is not ShapeError else ValueError)
    for fragment in fragments:
        assert fragment in str(caught.value)


@pytest.mark.parametrize("with_entry", [False, True])
def test_kernel_fail_isa_the_host_cannot_run(
    with_entry: bool, capped_isa: Callable[[str], None]
) -> None:
    """A kernel built for a level above the host's (here capped at scalar) checks its arguments,
    then refuses to run with IsaError instead of dying on an illegal instruction."""
    capped_isa("scalar")
    size = int(np.prod(SHAPE))
    body = f"for (size_t i = 0; i < {size}; ++i) out0[i] = in0[i] + 2 * in1[i];"
    spec = [TensorSpec("x", SHAPE), TensorSpec("y", SHAPE)]
    kernel = make_kernel(body, spec, [TensorSpec("out0", SHAPE)], with_entry=with_entry, isa="avx2")
    assert kernel.isa == "avx2" and kernel.fast_entry is None
    with pytest.raises(ShapeError):
        kernel(X, Y[:2])
    with pytest.raises(IsaError, match="compiled for avx2.*runs scalar") as refused:
        kernel(X, Y)
    assert (refused.value.isa, refused.value.host_isa) == ("avx2", "scalar")


def test_kernel_fail_float64_kernel_rejects_float32() -> None:
    kernel = axpy_kernel("float64")
    with pytest.raises(TypeError, match="'y'.*float32.*expected float64"):
        kernel(X.astype(np.float64), Y)


def test_kernel_non_contiguous_inputs_are_copied_not_misread() -> None:
    kernel = axpy_kernel()
    rng = np.random.default_rng(1)
    transposed = rng.standard_normal((4, 3)).astype(np.float32).T
    wide = rng.standard_normal((3, 8)).astype(np.float32)
    sliced = wide[:, ::2]
    big_endian = rng.standard_normal(SHAPE).astype(">f4")
    snapshots = [array.copy() for array in (transposed, wide, big_endian)]
    assert not transposed.flags.c_contiguous and not sliced.flags.c_contiguous
    np.testing.assert_array_equal(kernel(transposed, sliced), transposed + 2 * sliced)
    np.testing.assert_array_equal(
        kernel(big_endian, transposed), big_endian.astype(np.float32) + 2 * transposed
    )
    for array, snapshot in zip((transposed, wide, big_endian), snapshots, strict=True):
        np.testing.assert_array_equal(array, snapshot)
    assert big_endian.dtype == np.dtype(">f4")


def test_kernel_read_only_and_unaligned_inputs() -> None:
    kernel = axpy_kernel()
    x, y = random_inputs("float32", seed=2)
    x.flags.writeable = False
    raw = np.zeros(x.nbytes + 1, dtype=np.uint8)
    unaligned = raw[1:].view(np.float32).reshape(SHAPE)
    unaligned[...] = y
    assert not unaligned.flags.aligned
    np.testing.assert_array_equal(kernel(x, unaligned), x + 2 * y)


def test_kernel_returns_tuple_of_outputs() -> None:
    body = (
        "for (size_t i = 0; i < 4; ++i) {\n"
        "    out0[i] = in0[i] + in1[i];\n"
        "    out1[i] = in0[i] * in1[i];\n"
        "}"
    )
    spec = (4,)
    kernel = make_kernel(
        body,
        [TensorSpec("a", spec), TensorSpec("b", spec)],
        [TensorSpec("out0", spec), TensorSpec("out1", spec)],
        returns_tuple=True,
    )
    a = np.array([1, 2, 3, 4], dtype=np.float32)
    b = np.array([5, 6, 7, 8], dtype=np.float32)
    result = kernel(a, b)
    assert isinstance(result, tuple) and len(result) == 2
    np.testing.assert_array_equal(result[0], a + b)
    np.testing.assert_array_equal(result[1], a * b)


def test_kernel_single_output_as_tuple() -> None:
    kernel = make_kernel(
        "out0[0] = in0[0];",
        [TensorSpec("a", (1,))],
        [TensorSpec("out0", (1,))],
        returns_tuple=True,
    )
    result = kernel(np.ones(1, dtype=np.float32))
    assert isinstance(result, tuple) and len(result) == 1


def test_kernel_zero_dimensional_input_and_output() -> None:
    kernel = make_kernel(
        "out0[0] = 3 * in0[0];", [TensorSpec("s", ())], [TensorSpec("out0", ())], "float64"
    )
    result = kernel(np.array(2.5))
    assert isinstance(result, np.ndarray) and result.shape == () and result == 7.5
    with pytest.raises(TypeError, match="'s'"):
        kernel(np.float64(2.5))
    with pytest.raises(ValueError, match="'s'"):
        kernel(np.array([2.5]))


def test_kernel_fail_constructor_preconditions() -> None:
    kernel = axpy_kernel()
    library = kernel._library
    spec = TensorSpec("x", SHAPE)

    def kernel_of(
        symbol: str, inputs: list[TensorSpec], outputs: list[TensorSpec], dtype: str
    ) -> Kernel:
        return Kernel(
            library=library,
            symbol=symbol,
            inputs=inputs,
            outputs=outputs,
            dtype=dtype,
            returns_tuple=False,
            isa="scalar",
            c_source="",
            explanation="",
        )

    with pytest.raises(TypeError, match="int32"):
        kernel_of("test_kernel", [spec], [spec], "int32")
    with pytest.raises(ValueError, match="distinct"):
        kernel_of("test_kernel", [spec, spec], [spec], "float32")
    with pytest.raises(ValueError, match="returns_tuple"):
        kernel_of("test_kernel", [spec], [spec, spec], "float32")
    with pytest.raises(AttributeError):
        kernel_of("no_such_symbol", [spec], [spec], "float32")
    with pytest.raises(TypeError, match="positional"):  # every argument by keyword
        Kernel(library, "test_kernel", [spec], [spec], "float32", False, "", "")  # type: ignore[misc]


def test_kernel_concurrent_threads_get_correct_results() -> None:
    shape = (64, 1024)
    kernel = axpy_kernel(shape=shape)
    failures: list[str] = []
    barrier = threading.Barrier(8)

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        x = rng.standard_normal(shape).astype(np.float32)
        y = rng.standard_normal(shape).astype(np.float32)
        expected = x + 2 * y
        barrier.wait()
        for _ in range(50):
            if not np.array_equal(kernel(x=x, y=y), expected):
                failures.append(f"thread {seed}")
                return

    run_in_threads(worker, 8)
    assert failures == []


def test_kernel_loaded_library_keeps_subnormals() -> None:
    kernel = axpy_kernel(shape=(1,))
    assert np.float32(1e-40) * np.float32(1) != 0
    tiny = np.array([1e-40], dtype=np.float32)
    result = kernel(tiny, np.zeros(1, dtype=np.float32))
    assert isinstance(result, np.ndarray) and result[0] == tiny[0] and result[0] != 0


@pytest.mark.parametrize(
    "hold",
    [lambda a: a, lambda a: a[1:], lambda a: [a], memoryview],
    ids=["array", "view", "list", "buffer-export"],
)
def test_large_output_is_reused_only_once_nothing_references_it(
    hold: Callable[[np.ndarray], Any],
) -> None:
    from eqsat.backend_c.kernel import POOL_MIN_BYTES

    shape = (POOL_MIN_BYTES // 4,)  # float32: exactly the pooling threshold
    kernel = axpy_kernel(shape=shape)
    x, y = np.ones(shape, np.float32), np.full(shape, 2.0, np.float32)
    result = kernel(x, y)  # 5.0 everywhere
    address = result.ctypes.data
    assert address % 64 == 0  # a vector store never straddles two cache lines
    held = hold(result)
    del result
    other = kernel(x, 3 * y)  # 7.0 everywhere
    assert other.ctypes.data != address
    seen = np.asarray(held[0] if isinstance(held, list) else held)
    np.testing.assert_array_equal(seen, 5.0)  # what is held was not overwritten
    address = other.ctypes.data
    del other
    assert kernel(x, y).ctypes.data == address  # nothing refers to it any more: written again


def test_with_note_extends_the_explanation_and_keeps_the_kernel_callable() -> None:
    kernel = axpy_kernel()
    noted = kernel.with_note("autotuned: candidate 3")
    assert noted.explain() == "explanation text\nautotuned: candidate 3"
    assert kernel.explain() == "explanation text"
    x = np.ones(SHAPE, np.float32)
    np.testing.assert_array_equal(noted(x, x), kernel(x, x))


def test_a_pickled_kernel_runs_in_another_process(cache: Path) -> None:
    """multiprocessing and joblib pickle kernels: a new process loads the library again (from
    the build cache, or by compiling its C when the cache is elsewhere)."""
    kernel = axpy_kernel()
    x, y = random_inputs("float32")
    pickled = cache / "kernel.pickle"
    pickled.write_bytes(pickle.dumps(kernel))
    script = (
        "import pickle, sys, numpy as np\n"
        f"kernel = pickle.loads(open({str(pickled)!r}, 'rb').read())\n"
        f"x, y = np.load({str(cache / 'x.npy')!r}), np.load({str(cache / 'y.npy')!r})\n"
        "np.save(sys.argv[1], kernel(x, y))\n"
        "print(kernel.input_names, kernel.explain())\n"
    )
    np.save(cache / "x.npy", x)
    np.save(cache / "y.npy", y)
    other_cache = cache / "other"  # the child compiles the C again
    env = {**os.environ, "EQSAT_CACHE_DIR": str(other_cache), "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", script, str(cache / "out.npy")],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "('x', 'y') explanation text"
    np.testing.assert_array_equal(np.load(cache / "out.npy"), kernel(x, y))
    assert list(other_cache.glob("*.so"))  # built there, not read from this process's cache


def test_a_copy_shares_the_library_and_outputs_pool() -> None:
    kernel = axpy_kernel()
    clone = copy.copy(kernel)
    assert clone._library is kernel._library and clone._output_pool is kernel._output_pool
