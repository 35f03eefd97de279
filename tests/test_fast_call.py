"""Tests of a Kernel's C call entry (backend_c/entry.py): the common call runs in C, every other
call takes the Python path with today's results and errors."""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
import threading
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import eqsat
from eqsat.backend_c import build
from eqsat.backend_c.abi import prototype
from eqsat.backend_c.build import build_library
from eqsat.backend_c.kernel import POOL_MIN_BYTES, Kernel, TensorSpec
from eqsat.core.errors import ArgumentError, DTypeError, ShapeError
from tests.test_kernel import REPO_ROOT, SHAPE, run_in_threads
from tests.test_kernel import make_kernel as kernel_from_body

# `tests.test_kernel.make_kernel`, with the call entry unless `with_entry=False` is passed
make_kernel = partial(kernel_from_body, with_entry=True)


def axpy(dtype: str = "float32", shape: tuple[int, ...] = SHAPE, with_entry: bool = True) -> Kernel:
    """`x + 2 * y` elementwise over `shape`."""
    body = f"for (size_t i = 0; i < {int(np.prod(shape))}; ++i) out0[i] = in0[i] + 2 * in1[i];"
    specs = [TensorSpec("x", shape), TensorSpec("y", shape)]
    return make_kernel(body, specs, [TensorSpec("out0", shape)], dtype, with_entry=with_entry)


def sum_and_difference(dtype: str = "float32") -> Kernel:
    """Two outputs: `x + y` and `x - y` over SHAPE."""
    body = (
        f"for (size_t i = 0; i < {int(np.prod(SHAPE))}; ++i) "
        "{ out0[i] = in0[i] + in1[i]; out1[i] = in0[i] - in1[i]; }"
    )
    specs = [TensorSpec("x", SHAPE), TensorSpec("y", SHAPE)]
    outputs = [TensorSpec("out0", SHAPE), TensorSpec("out1", SHAPE)]
    return make_kernel(body, specs, outputs, dtype)


def arrays(dtype: str, shape: tuple[int, ...] = SHAPE, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(dtype) for _ in range(2))


@pytest.fixture(autouse=True)
def cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EQSAT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "fast-cache"))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fast_call_agrees_with_numpy(dtype: str) -> None:
    kernel = axpy(dtype)
    x, y = arrays(dtype)
    assert kernel.fast_entry is not None
    direct = kernel.fast_entry(x, y)
    assert type(direct) is np.ndarray and direct.dtype == dtype and direct.shape == SHAPE
    np.testing.assert_array_equal(direct, x + 2 * y)
    np.testing.assert_array_equal(kernel(x, y), x + 2 * y)
    assert kernel(x, y) is not kernel(x, y)  # new outputs on every call


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fast_call_multiple_outputs_return_a_tuple(dtype: str) -> None:
    kernel = sum_and_difference(dtype)
    x, y = arrays(dtype)
    assert kernel.fast_entry is not None
    for results in (kernel.fast_entry(x, y), kernel(x, y)):
        assert isinstance(results, tuple) and len(results) == 2
        np.testing.assert_array_equal(results[0], x + y)
        np.testing.assert_array_equal(results[1], x - y)


def unusual_inputs(dtype: str) -> dict[str, np.ndarray]:
    """Arrays of the right values that the C entry must refuse (the Python path copies them)."""

    class Subclass(np.ndarray):
        pass

    x, _ = arrays(dtype)
    wide = np.empty((SHAPE[0], 2 * SHAPE[1]), dtype)
    wide[:, ::2] = x
    raw = np.zeros(x.nbytes + 1, np.uint8)
    unaligned = raw[1:].view(dtype).reshape(SHAPE)
    unaligned[...] = x
    return {
        "strided": wide[:, ::2],
        "fortran": np.asfortranarray(x),
        "byteswapped": x.astype(x.dtype.newbyteorder()),
        "subclass": x.view(Subclass),
        "matrix": np.asmatrix(x),
        "unaligned": unaligned,
    }


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "case", ["strided", "fortran", "byteswapped", "subclass", "matrix", "unaligned"]
)
def test_fast_call_unusual_inputs_take_the_python_path(dtype: str, case: str) -> None:
    kernel = axpy(dtype)
    x, y = arrays(dtype)
    unusual = unusual_inputs(dtype)[case]
    np.testing.assert_array_equal(np.asarray(unusual), x)
    assert kernel.fast_entry is not None
    assert kernel.fast_entry(unusual, y) is NotImplemented
    assert kernel.fast_entry(y, unusual) is NotImplemented
    np.testing.assert_array_equal(kernel(unusual, y), x + 2 * y)
    np.testing.assert_array_equal(kernel(y, unusual), y + 2 * x)


def test_fast_call_accepts_read_only_inputs_as_the_python_path_does() -> None:
    kernel = axpy()
    x, y = arrays("float32")
    x.flags.writeable = False
    assert kernel.fast_entry is not None
    np.testing.assert_array_equal(kernel.fast_entry(x, y), x + 2 * y)


def bad_calls() -> dict[str, tuple[tuple[Any, ...], dict[str, Any]]]:
    """Calls each Kernel refuses, by name: (positional arguments, keyword arguments)."""
    x, y = arrays("float32")
    return {
        "too few": ((x,), {}),
        "too many": ((x, y, y), {}),
        "unknown keyword": ((x, y), {"z": y}),
        "repeated": ((x,), {"x": y}),
        "list": ((x.tolist(), y), {}),
        "scalar": ((x, 1.0), {}),
        "float64": ((x.astype(np.float64), y), {}),
        "int32": ((x, y.astype(np.int32)), {}),
        "shape": ((x, y.T), {}),
        "rank": ((x, y.reshape(-1)), {}),
        "keyword shape": ((), {"x": x, "y": y[:2]}),
    }


@pytest.mark.parametrize("case", sorted(bad_calls()))
def test_fast_call_errors_are_the_python_paths(case: str) -> None:
    args, kwargs = bad_calls()[case]
    fast, plain = axpy(), axpy(with_entry=False)
    assert fast.fast_entry is not None and plain.fast_entry is None
    if not kwargs:
        assert fast.fast_entry(*args) is NotImplemented
    with pytest.raises((ArgumentError, DTypeError, ShapeError)) as plain_error:
        plain(*args, **kwargs)
    with pytest.raises(plain_error.type, match=f"^{re.escape(str(plain_error.value))}$"):
        fast(*args, **kwargs)


def test_fast_call_keyword_call_runs_in_c_and_gives_same_result() -> None:
    kernel = axpy()
    x, y = arrays("float32")

    def python_path(*pointers: object) -> None:
        raise AssertionError("a keyword call took the Python path")

    kernel._function = python_path  # the cffi function only the Python path calls
    np.testing.assert_array_equal(kernel(y=y, x=x), x + 2 * y)
    np.testing.assert_array_equal(kernel(x, y=y), x + 2 * y)


def test_fast_call_concurrent_threads_get_correct_results() -> None:
    kernel = axpy(shape=(16, 64))
    failures: list[str] = []
    barrier = threading.Barrier(8)

    def worker(seed: int) -> None:
        x, y = arrays("float32", (16, 64), seed)
        barrier.wait()
        for _ in range(2000):
            if not np.array_equal(kernel(x, y), x + 2 * y):
                failures.append(f"thread {seed}")
                return

    run_in_threads(worker, 8)
    assert kernel.fast_entry is not None
    assert failures == []


def test_fast_call_large_outputs_keep_the_output_pool() -> None:
    shape = (POOL_MIN_BYTES // 4 // 256, 256)  # exactly POOL_MIN_BYTES of float32
    kernel = axpy(shape=shape)
    x, y = arrays("float32", shape)
    assert kernel.fast_entry is None
    first = kernel(x, y)
    address = first.ctypes.data
    del first
    second = kernel(x, y)
    assert second.ctypes.data == address  # the unreferenced output was written again
    np.testing.assert_array_equal(second, x + 2 * y)


def test_fast_call_unpickled_in_a_new_process_runs_in_c(tmp_path: Path) -> None:
    kernel = axpy()
    x, y = arrays("float32")
    payload = tmp_path / "kernel.pickle"
    payload.write_bytes(pickle.dumps((kernel, x, y)))
    script = (
        "import pickle, sys, numpy as np\n"
        f"kernel, x, y = pickle.loads(open({str(payload)!r}, 'rb').read())\n"
        "assert kernel.fast_entry is not None\n"
        "result = kernel.fast_entry(x, y)\n"
        "assert result is not NotImplemented and np.array_equal(result, x + 2 * y)\n"
        "assert np.array_equal(kernel(x, y.astype(y.dtype.newbyteorder())), x + 2 * y)\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_fast_call_kernel_without_entry_uses_the_python_path() -> None:
    kernel = axpy(with_entry=False)
    x, y = arrays("float32")
    assert kernel.fast_entry is None
    assert kernel.explain() == "explanation text"
    np.testing.assert_array_equal(kernel(x, y), x + 2 * y)


def test_fast_call_without_python_headers_builds_through_cffi(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    note = "calls go through cffi: no /nowhere/Python.h to build the C call entry with"
    monkeypatch.setattr(build, "_extension_includes", lambda: ((), note))
    kernel = axpy(shape=(5, 7))
    x, y = arrays("float32", (5, 7))
    assert kernel.fast_entry is None
    assert kernel.explain() == f"explanation text\n{note}"
    assert kernel.explanation == "explanation text"
    np.testing.assert_array_equal(kernel(x, y), x + 2 * y)


def test_fast_call_entry_that_fails_to_compile_leaves_a_working_kernel() -> None:
    symbol = "broken_entry_kernel"
    source = f"{prototype(symbol, 0, 1, 'float32', for_cdef=False)} {{ out0[0] = 1; }}\n"
    cdef = prototype(symbol, 0, 1, "float32", for_cdef=True) + ";"
    library = build_library(source, cdef, [], extension="this is not C;")
    assert library.extension is None
    assert library.extension_source == "this is not C;"
    assert library.extension_note.startswith("calls go through cffi: the C call entry did not")
    output = np.zeros(1, np.float32)
    library.lib.broken_entry_kernel(library.ffi.from_buffer(output))
    assert output[0] == 1


def test_fast_call_jit_goes_to_the_entry_and_falls_back() -> None:
    @eqsat.jit(progress=False)
    def scaled(x: np.ndarray, s: float) -> Any:
        return x * s + 1

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(scaled(x, 0.5), x * 0.5 + 1)
    (known,) = scaled._positional.values()
    assert known.entry is not None
    assert known.entry(x, np.asarray(0.25, np.float32)) is not NotImplemented
    np.testing.assert_allclose(scaled(x, 0.25), x * 0.25 + 1)
    np.testing.assert_allclose(scaled(np.asfortranarray(x), 0.25), x * 0.25 + 1)
