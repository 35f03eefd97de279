"""`Kernel`: the callable a user gets, wrapping one loaded C function that follows `abi.prototype`.

Every argument is checked before any memory is touched; non-contiguous, unaligned or
non-native-byte-order inputs are copied, never misread. A library built with the kernel's call
entry (`backend_c/entry.py`) runs the common call in C; any other call takes the Python path.
Outputs are new arrays on every call, except that a large output array nothing references any
more (`OutputPool`) is written again: a fresh large array costs as much in page faults as
streaming it from DRAM (docs/MEASUREMENTS.md).
"""

from __future__ import annotations

import copy
import math
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from eqsat.backend_c.abi import C_TYPES
from eqsat.backend_c.build import Library, build_library
from eqsat.backend_c.entry import extension_source
from eqsat.core import dtypes
from eqsat.core.errors import ArgumentError, DTypeError, InexactInputError, IsaError, ShapeError
from eqsat.core.limits import SaturationReport
from eqsat.extract.machine import host, runs_on_host

POOL_MIN_BYTES = 1 << 20  # smaller arrays come from malloc's free lists without page faults
ALIGNMENT = 64  # bytes: a vector store never straddles two cache lines


class OutputPool:
    """Output arrays of one kernel, handed out again once nothing but the pool refers to them.

    Pooled arrays (POOL_MIN_BYTES and up) are views of a byte buffer, ALIGNMENT-aligned (numpy's
    own large arrays start 16 bytes into a page). An array the caller (or any view, buffer export
    or container) still references has more references, to it or to its buffer, than the pool's
    own, so it is never reused while visible. Thread-safe."""

    def __init__(self, shapes: Sequence[tuple[int, ...]], dtype: np.dtype) -> None:
        self._shapes = list(shapes)
        self._dtype = dtype
        self._pooled: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(self._shapes)
        self._lock = threading.Lock()
        self.all_small = all(
            math.prod(shape) * dtype.itemsize < POOL_MIN_BYTES for shape in self._shapes
        )

    def take(self) -> tuple[np.ndarray, ...]:
        if self.all_small:  # nothing to pool: no lock on the path of small kernels
            if len(self._shapes) == 1:  # the common kernel, a few hundred ns faster
                return (np.empty(self._shapes[0], self._dtype),)
            return tuple([np.empty(shape, self._dtype) for shape in self._shapes])
        with self._lock:
            return tuple([self._take(slot) for slot in range(len(self._shapes))])

    def _take(self, slot: int) -> np.ndarray:
        pooled = self._pooled[slot]
        if pooled is not None:
            buffer, array = pooled
            # array: the pool's tuple, `array`, getrefcount's argument; buffer: the same and
            # array's base (a user's view of `array` has `buffer` as its base)
            if sys.getrefcount(array) == 3 and sys.getrefcount(buffer) == 4:
                return array
        shape = self._shapes[slot]
        nbytes = math.prod(shape) * self._dtype.itemsize
        if nbytes < POOL_MIN_BYTES:
            return np.empty(shape, dtype=self._dtype)
        buffer = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
        start = -buffer.ctypes.data % ALIGNMENT
        array = buffer[start : start + nbytes].view(self._dtype).reshape(shape)
        self._pooled[slot] = (buffer, array)
        return array


@dataclass(frozen=True)
class TensorSpec:
    """One kernel argument: its user-facing name ("x"; outputs use "out0", ...), its shape and
    the dtype callers pass or get (None: the kernel's own, `Kernel.dtype`)."""

    name: str
    shape: tuple[int, ...]
    dtype: str | None = None


class Kernel:
    """A compiled kernel, called with numpy arrays by position (in `input_names` order) or name.

    Holds no state that changes between calls, so one Kernel may be called from many threads.
    """

    def __init__(
        self,
        *,
        library: Library,
        symbol: str,
        inputs: Sequence[TensorSpec],
        outputs: Sequence[TensorSpec],
        dtype: str,
        returns_tuple: bool,
        isa: str,
        c_source: str,
        explanation: str,
        stages: Sequence[SaturationReport] = (),
    ) -> None:
        """Wrap `library.lib.<symbol>` (every argument by keyword).

        It requires:
        1. `library` was built with the cdef `prototype(symbol, len(inputs), len(outputs), dtype,
           for_cdef=True) + ";"`, and, if with an extension, with `kernel_entry(...)` of the
           same arguments (then calls of the common case run in C, `entry.py`);
        2. `dtype` is a key of `abi.C_TYPES`; input names are distinct;
        3. `returns_tuple` is True when there is more than one output;
        3a. `library` was compiled for ISA level `isa`. Where this host cannot run it
           (`runs_on_host`), every call raises IsaError once its arguments are checked: the
           kernel is built and inspectable, never executed;
        4. the specs' dtypes are `dtypes.INPUT_DTYPES` whose values `dtype` holds exactly, or
           up to 2**53 for int64 and uint64 (checked at each call). Inputs and outputs of
           another dtype than `dtype` are converted on each call (a copy), without the C entry.
        """
        if dtype not in C_TYPES:
            raise DTypeError(
                f"unsupported kernel dtype {dtype!r}; expected one of {sorted(C_TYPES)}"
            )
        names = tuple(spec.name for spec in inputs)
        if len(set(names)) != len(names):
            raise ValueError(f"input names must be distinct, got {names}")
        if not outputs or (len(outputs) > 1 and not returns_tuple):
            raise ValueError(f"{len(outputs)} outputs need returns_tuple=True and at least one")
        self._library = library  # keeps the shared library loaded while the kernel lives
        self._symbol = symbol
        self._isa = isa
        self._function = getattr(library.lib, symbol) if runs_on_host(isa) else self._refuse
        self._from_buffer = library.ffi.from_buffer
        self._inputs = tuple(replace(spec, dtype=spec.dtype or dtype) for spec in inputs)
        self._input_names = names
        self._outputs = tuple(replace(spec, dtype=spec.dtype or dtype) for spec in outputs)
        self._dtype = dtype
        self._numpy_dtype = np.dtype(dtype)
        self._converts = any(spec.dtype != dtype for spec in (*self._inputs, *self._outputs))
        self._returns_tuple = returns_tuple
        self._output_pool = OutputPool([spec.shape for spec in self._outputs], self._numpy_dtype)
        # the C entry allocates its outputs itself: only where the pool would not reuse any
        module = library.extension
        self._entry = (
            getattr(module, symbol)
            if module is not None
            and self._output_pool.all_small
            and not self._converts
            and runs_on_host(isa)
            else None
        )
        self._c_source = c_source
        self._explanation = explanation
        self._stages = tuple(stages)

    @property
    def input_names(self) -> tuple[str, ...]:
        """Names of the inputs, in positional order."""
        return self._input_names

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        """The inputs' names and shapes, in positional order."""
        return self._inputs

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        """The outputs' shapes (named "out0", "out1", ...)."""
        return self._outputs

    @property
    def returns_tuple(self) -> bool:
        """Whether a call returns a tuple of arrays (several outputs, or asked for)."""
        return self._returns_tuple

    @property
    def fast_entry(self) -> Callable[..., Any] | None:
        """The C call entry, or None if the library has none (or outputs may be pooled).
        Called with the inputs positionally, it returns what the Kernel would, or
        NotImplemented for any other call than the common case: then call the Kernel."""
        return self._entry

    @property
    def isa(self) -> str:
        """The ISA level the kernel was compiled for ("avx512", "avx2" or "scalar")."""
        return self._isa

    @property
    def c_source(self) -> str:
        """The C source this kernel was compiled from."""
        return self._c_source

    @property
    def dtype(self) -> str:
        """What the kernel computes in, "float32" or "float64": the dtype of every input and
        output but those whose spec names another (converted on each call)."""
        return self._dtype

    @property
    def stages(self) -> tuple[SaturationReport, ...]:
        """The saturation report of each optimizer stage (e-graph size, time, stop reason)."""
        return self._stages

    @property
    def explanation(self) -> str:
        """The optimizer's account of how this kernel was chosen (what a compile-cache entry
        keeps): `explain()` without its note on how calls run."""
        return self._explanation

    def explain(self) -> str:
        """Return the optimizer's account of how this kernel was chosen, and why calls go
        through cffi if the library has no C call entry although one was asked for."""
        note = self._library.extension_note
        return f"{self._explanation}\n{note}" if note else self._explanation

    def with_note(self, note: str) -> Kernel:
        """This kernel (same library, same outputs pool) whose `explain()` ends with `note`."""
        noted = copy.copy(self)
        noted._explanation = f"{self._explanation}\n{note}"
        return noted

    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        """Run the kernel on new output arrays (or unreferenced ones of an earlier call,
        `OutputPool`) and return them (a tuple if `returns_tuple`).

        It requires: each input is a numpy ndarray of its spec's dtype (any byte order) and
        exactly its declared shape. Otherwise, before any C runs, ArgumentError (missing,
        unknown, repeated or extra argument; not an ndarray), DTypeError, ShapeError or
        InexactInputError (an int64 beyond 2**53): each an EqsatError and a TypeError or
        ValueError. Then IsaError where this host cannot run the kernel's ISA level.
        """
        if kwargs or len(args) != len(self._inputs):
            args = self._bind(args, kwargs)
        if self._converts:
            args = tuple(
                [
                    self._converted(spec, value)
                    for spec, value in zip(self._inputs, args, strict=True)
                ]
            )
        if self._entry is not None:  # the C entry takes the common case
            results = self._entry(*args)
            if results is not NotImplemented:
                return results
        from_buffer = self._from_buffer
        expected = self._numpy_dtype
        pointers = []
        for spec, value in zip(self._inputs, args, strict=True):
            # the common case inline (a call costs about a microsecond): an array as the kernel
            # wants it, whose native-order dtype is numpy's singleton for `expected`
            if not (
                type(value) is np.ndarray
                and value.dtype is expected
                and value.shape == spec.shape
                and value.flags.c_contiguous
                and value.flags.aligned
            ):
                value = self._checked(spec, value)
            pointers.append(from_buffer(value))  # the cdata keeps `value` alive for the call
        results = self._output_pool.take()
        for result in results:
            pointers.append(from_buffer(result))  # our own arrays, always writable
        self._function(*pointers)
        if self._converts:  # float16 overflows to ±inf as in numpy, without its warning
            with np.errstate(over="ignore", invalid="ignore"):
                results = tuple(
                    [
                        result.astype(spec.dtype)
                        for spec, result in zip(self._outputs, results, strict=True)
                    ]
                )
        return results if self._returns_tuple else results[0]

    def _refuse(self, *pointers: Any) -> None:
        """The C function's stand-in where this host cannot run the kernel's ISA."""
        raise IsaError(self._isa, host().isa)

    def __copy__(self) -> Kernel:
        """A shallow copy: the same library and outputs pool (`__reduce__` is for pickling)."""
        clone = Kernel.__new__(Kernel)
        clone.__dict__.update(self.__dict__)
        return clone

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle by what builds the kernel again (its C source, declarations and flags): an
        unpickling process loads the library from the build cache, or compiles it."""
        arguments = {
            "symbol": self._symbol,
            "inputs": self._inputs,
            "outputs": self._outputs,
            "dtype": self._dtype,
            "returns_tuple": self._returns_tuple,
            "isa": self._isa,
            "c_source": self._c_source,
            "explanation": self._explanation,
            "stages": self._stages,
        }
        library = self._library
        return (_unpickled, (library.cdef, library.flags, library.extension_source, arguments))

    def __repr__(self) -> str:
        def shown(spec: TensorSpec) -> str:
            return str(spec.shape) if spec.dtype == self._dtype else f"{spec.shape} {spec.dtype}"

        inputs = ", ".join(f"{spec.name}: {shown(spec)}" for spec in self._inputs)
        outputs = ", ".join(shown(spec) for spec in self._outputs)
        return f"Kernel({inputs} -> {outputs}, dtype={self._dtype})"

    def _bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
        """The arguments in input order, or ArgumentError naming the missing, unknown,
        repeated or extra one."""
        names = self._input_names
        if not args and len(kwargs) == len(names) and all(name in kwargs for name in names):
            return tuple([kwargs[name] for name in names])  # every input by keyword
        if len(args) > len(names):
            raise ArgumentError(
                f"kernel takes {len(names)} inputs {names} but {len(args)} positional "
                "arguments were given"
            )
        bound = dict(zip(names, args, strict=False))
        for name, value in kwargs.items():
            if name not in names:
                raise ArgumentError(f"unknown input {name!r}; the inputs are {names}")
            if name in bound:
                raise ArgumentError(f"input {name!r} given both by position and by keyword")
            bound[name] = value
        missing = [name for name in names if name not in bound]
        if missing:
            raise ArgumentError(f"missing input(s) {', '.join(map(repr, missing))}")
        return tuple([bound[name] for name in names])

    def _converted(self, spec: TensorSpec, value: Any) -> Any:
        """`value` for an input of `spec`, converted to the kernel's dtype if the spec's is
        another (its dtype, shape and range checked first); `_checked` does the rest."""
        if spec.dtype == self._dtype:
            return value
        expected = np.dtype(spec.dtype)
        _require_array(spec, value, expected)
        if expected.kind in "iu" and dtypes.exceeds_exact(value, self._dtype):
            raise InexactInputError(
                f"input {spec.name!r} ({value.dtype}) holds a value beyond "
                f"{dtypes.EXACT_INTEGERS[self._dtype]}, which the kernel's {self._dtype} "
                "cannot hold exactly"
            )
        return np.asarray(value, dtype=self._numpy_dtype, order="C")

    def _checked(self, spec: TensorSpec, value: Any) -> np.ndarray:
        """Return `value` as a dense, aligned, native-order array, copying only when needed
        (`__call__` passes the common case without calling this)."""
        expected = self._numpy_dtype
        _require_array(spec, value, expected)
        flags = value.flags
        if flags.c_contiguous and flags.aligned and value.dtype.isnative:
            return value
        return np.array(value, dtype=expected, order="C")


def _require_array(spec: TensorSpec, value: Any, expected: np.dtype) -> None:
    """ArgumentError unless `value` is an ndarray, DTypeError unless of dtype `expected` (any
    byte order), ShapeError unless of `spec`'s shape: each names the input."""
    if not isinstance(value, np.ndarray):
        raise ArgumentError(
            f"input {spec.name!r} must be a numpy ndarray, got {type(value).__name__}"
        )
    if value.dtype.kind != expected.kind or value.dtype.itemsize != expected.itemsize:
        raise DTypeError(
            f"input {spec.name!r} has dtype {value.dtype}, expected {expected} "
            "(inputs are not cast)"
        )
    if value.shape != spec.shape:
        raise ShapeError(f"input {spec.name!r} has shape {value.shape}, expected {spec.shape}")


def kernel_entry(
    symbol: str,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    dtype: str,
    returns_tuple: bool,
) -> str:
    """The C call entry (`build_library`'s `extension`) of the Kernel these arguments describe;
    it requires what `Kernel.__init__` does."""
    input_shapes = [spec.shape for spec in inputs]
    output_shapes = [spec.shape for spec in outputs]
    return extension_source(symbol, input_shapes, output_shapes, dtype, returns_tuple)


def _unpickled(
    cdef: str, flags: tuple[str, ...], extension: str | None, arguments: dict[str, Any]
) -> Kernel:
    """The kernel `Kernel.__reduce__` describes, its library built (or found) again."""
    library = build_library(arguments["c_source"], cdef, flags, extension=extension)
    return Kernel(library=library, **arguments)
