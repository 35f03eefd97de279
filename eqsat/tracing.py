"""`@eqsat.jit`: compile a Python function of numpy arrays on its first call per argument types.

    @eqsat.jit
    def mlp(x, W, b):
        return np.maximum(x @ W + b, 0)

    mlp(xa, Wa, ba)   # traces mlp(tensor("x", ...), tensor("W", ...), tensor("b", ...)), compiles
    mlp(xa, Wa, ba)   # same shapes and dtypes: runs the cached Kernel, mlp's body is not run

The module is not named `jit`: importing a submodule `eqsat.jit` would set the package attribute
`eqsat.jit` to the module, shadowing the lazily loaded function of the same name.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple, Unpack, overload

import numpy as np

from eqsat import api, dask_arrays
from eqsat.api import CompileOptions
from eqsat.backend_c.kernel import Kernel
from eqsat.core.errors import ArgumentError, DTypeError, UnsupportedError
from eqsat.frontend import Tensor, tensor, traced_scalar


@dataclass(frozen=True)
class ArraySpec:
    """A traced argument: a numpy array of this shape and dtype, an input of the kernel."""

    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Static:
    """A static argument: passed to the function as it is. `kind` is its type, so that 1, 1.0
    and True (equal in Python) give different kernels."""

    value: Hashable
    kind: type


@dataclass(frozen=True)
class TracedScalar:
    """A traced argument: a Python or numpy float, passed to the kernel as a 0-d input of its
    dtype, so its value is not part of the key (`static_argnames` makes a float static)."""


# One entry per parameter of the function, in order: (name, what was passed).
CacheKey = tuple[tuple[str, ArraySpec | TracedScalar | Static], ...]


class _KnownCall(NamedTuple):
    """A positional call seen before: its kernel and key, where each kernel input is among the
    arguments, which kernel inputs are traced floats (passed as 0-d arrays), and the kernel's
    C call entry (`Kernel.fast_entry`)."""

    kernel: Kernel
    key: CacheKey
    positions: tuple[int, ...]
    scalars: tuple[int, ...]
    entry: Callable[..., Any] | None


# Kernels one jit function keeps; the least recently used one is dropped beyond this.
MAX_KERNELS = 64


class JitFunction:
    """A function of numpy arrays compiled to one Kernel per `CacheKey`; made by `eqsat.jit`."""

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        static_argnames: Iterable[str] = (),
        **options: Unpack[CompileOptions],
    ) -> None:
        """It requires: `function` has no *args or **kwargs parameter (each array or float
        parameter names a kernel input); `static_argnames` are parameters of it; `options` are
        keyword options of `eqsat.compile`, passed to it for every kernel (else ArgumentError)."""
        unknown = sorted(set(options) - set(CompileOptions.__annotations__))
        if unknown:
            raise ArgumentError(
                f"eqsat.jit: unknown option(s) {', '.join(map(repr, unknown))}; it takes the "
                f"keyword options of eqsat.compile: {', '.join(CompileOptions.__annotations__)}"
            )
        signature = inspect.signature(function)
        variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        if any(p.kind in variadic for p in signature.parameters.values()):
            raise ArgumentError(
                f"eqsat.jit: {function.__qualname__} has *args or **kwargs; name each parameter "
                "(array parameters become the kernel's inputs)"
            )
        parameters = list(signature.parameters)
        names = [static_argnames] if isinstance(static_argnames, str) else static_argnames
        static = frozenset(names)
        if not static <= set(parameters):
            raise ArgumentError(
                f"eqsat.jit: static_argnames {sorted(static - set(parameters))} are not "
                f"parameters of {function.__qualname__} {tuple(parameters)}"
            )
        functools.update_wrapper(self, function)
        self._function = function
        self._name = function.__qualname__
        self._signature = signature
        self._options = options
        self._static = static
        self._static_positions = frozenset(parameters.index(name) for name in static)
        self._kernels: OrderedDict[CacheKey, Kernel] = OrderedDict()
        self._table_lock = threading.Lock()
        # positional calls already seen -> what `_call_known` needs to run them
        self._positional: dict[tuple[Any, ...], _KnownCall] = {}

    @property
    def kernels(self) -> Mapping[CacheKey, Kernel]:
        """Every kernel built so far (read-only), by the argument types it was built for."""
        return MappingProxyType(self._kernels)

    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        """Run the kernel for these arguments, tracing and compiling it on first use.

        It requires: the arguments bind to the function's signature; numpy-array arguments of
        `eqsat.core.dtypes.INPUT_DTYPES`; every other argument hashable (a static value). With a
        dask array among them, it returns a dask array (`eqsat.dask_arrays.apply`).
        """
        if not kwargs:  # the common call: every argument by position, a kernel already built
            try:
                known = self._positional.get(self._positional_key(args))
            except TypeError:  # an unhashable argument: the full path below names it
                known = None
            if known is not None:
                with contextlib.suppress(KeyError):  # dropped by another thread: run it anyway
                    self._kernels.move_to_end(known.key)
                values = [args[position] for position in known.positions]
                for slot in known.scalars:
                    values[slot] = np.asarray(values[slot], known.kernel.dtype)
                if known.entry is not None:
                    results = known.entry(*values)
                    if results is not NotImplemented:
                        return results
                return known.kernel(*values)
        if dask_arrays.has_dask_array(args, kwargs):  # dask arrays in, a dask array out
            return dask_arrays.apply(self, self._bind(args, kwargs))
        arguments = self._bind(args, kwargs)
        key = self._key(arguments)
        kernel = self._kernel(key)
        traced = {name for name, spec in key if isinstance(spec, TracedScalar)}
        if not kwargs and len(args) == len(arguments):
            names = list(arguments)
            self._positional[self._positional_key(args)] = _KnownCall(
                kernel,
                key,
                tuple(names.index(name) for name in kernel.input_names),
                tuple(k for k, name in enumerate(kernel.input_names) if name in traced),
                kernel.fast_entry,
            )
        return kernel(
            **{
                name: np.asarray(arguments[name], kernel.dtype)
                if name in traced
                else arguments[name]
                for name in kernel.input_names
            }
        )

    def kernel_for(self, *args: Any, **kwargs: Any) -> Kernel:
        """The kernel a call with these arguments runs (traced and compiled if new)."""
        return self._kernel(self._key(self._bind(args, kwargs)))

    @property
    def options(self) -> Mapping[str, Any]:
        """The keyword options of `eqsat.compile` this function passes on (read-only)."""
        return MappingProxyType(self._options)

    def trace(self, arguments: Mapping[str, Any]) -> Any:
        """What the function returns on symbolic tensors of these arguments' shapes and dtypes:
        the expression a call with them compiles. It requires: `arguments` by parameter name,
        every one given, arrays as numpy arrays."""
        return self._traced(self._key(dict(arguments)))

    def __repr__(self) -> str:
        return f"<eqsat.jit {self._name}: {len(self._kernels)} kernel(s)>"

    def __reduce__(self) -> str:
        """Pickle by reference, like a function: the unpickling process imports the module
        that defines this decorated function (its kernels come back from the compile cache).
        It requires: the function is defined at module level (else pickle raises, as for a
        lambda)."""
        return self.__qualname__  # type: ignore[attr-defined, no-any-return]

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Every parameter's value by name, defaults filled in; ArgumentError if they do not
        bind to the function's signature."""
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as error:
            raise ArgumentError(f"eqsat.jit: {self._name}: {error}") from None
        bound.apply_defaults()
        return dict(bound.arguments)

    def _kernel(self, key: CacheKey) -> Kernel:
        """The kernel of `key`, compiled if new; beyond MAX_KERNELS the least recently used
        one is dropped (and the positional calls that ran it). Threads may call it at once: the
        table changes under `_table_lock`, compiles run outside it (`eqsat.compile` makes one
        compile per cache key)."""
        with self._table_lock:
            kernel = self._kernels.get(key)
            if kernel is not None:
                self._kernels.move_to_end(key)
                return kernel
        kernel = self._compile(key)
        with self._table_lock:
            self._kernels[key] = kernel
            self._kernels.move_to_end(key)
            if len(self._kernels) > MAX_KERNELS:
                _, dropped = self._kernels.popitem(last=False)
                self._positional = {
                    call: known
                    for call, known in self._positional.items()
                    if known.kernel is not dropped
                }
        return kernel

    def _positional_key(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """What a positional call's kernel depends on, cheap to build: each array's type, shape
        and dtype, a traced float's type, each other value with its type (`1`, `1.0` and `True`
        differ). An unhashable value makes an unhashable key."""
        static = self._static_positions
        return tuple(
            (type(a), a.shape, a.dtype)
            if isinstance(a, np.ndarray)
            else (type(a),)
            if isinstance(a, float | np.floating) and k not in static
            else (type(a), a)
            for k, a in enumerate(args)
        )

    def _key(self, arguments: dict[str, Any]) -> CacheKey:
        """What the kernel depends on: each array's shape and dtype, that a float is traced,
        each other value."""
        key: list[tuple[str, ArraySpec | TracedScalar | Static]] = []
        for name, value in arguments.items():
            if isinstance(value, np.ndarray):
                key.append((name, ArraySpec(value.shape, value.dtype.name)))
                continue
            if isinstance(value, float | np.floating) and name not in self._static:
                key.append((name, TracedScalar()))
                continue
            try:
                hash(value)
            except TypeError:
                raise ArgumentError(
                    f"eqsat.jit: argument {name!r} of {self._name} is a "
                    f"{type(value).__name__}; pass a numpy array (a kernel input) or a hashable "
                    "value (static: part of the cache key)"
                ) from None
            key.append((name, Static(value, type(value))))
        return tuple(key)

    def _compile(self, key: CacheKey) -> Kernel:
        return api.compile(self._traced(key), **self._options)

    def _traced(self, key: CacheKey) -> Any:
        """The function's result on symbolic tensors named after its array and traced float
        parameters (floats 0-d and weak, as numpy's Python scalars)."""
        call = self._signature.bind_partial()
        for name, spec in key:
            if isinstance(spec, ArraySpec):
                call.arguments[name] = self._input(name, spec)
            elif isinstance(spec, TracedScalar):
                call.arguments[name] = traced_scalar(name)
            else:
                call.arguments[name] = spec.value
        result = self._function(*call.args, **call.kwargs)
        outputs = list(result) if isinstance(result, tuple | list) else [result]
        for k, output in enumerate(outputs):
            if not isinstance(output, Tensor):
                what = f"output {k}" if isinstance(result, tuple | list) else "a result"
                raise UnsupportedError(
                    f"eqsat.jit: {self._name} returned {what} of type {type(output).__name__}, "
                    "not an expression of its array arguments (an eqsat.Tensor while tracing); "
                    "return one, or a tuple/list of them"
                )
        return result

    def _input(self, name: str, spec: ArraySpec) -> Tensor:
        """The symbolic tensor traced for array parameter `name`; DTypeError names it."""
        try:
            return tensor(name, spec.shape, spec.dtype)
        except DTypeError as error:
            raise DTypeError(f"eqsat.jit: argument {name!r} of {self._name}: {error}") from None


@overload
def jit(function: Callable[..., Any], /) -> JitFunction: ...


@overload
def jit(
    *, static_argnames: Iterable[str] = (), **options: Unpack[CompileOptions]
) -> Callable[[Callable[..., Any]], JitFunction]: ...


def jit(
    function: Callable[..., Any] | None = None,
    /,
    *,
    static_argnames: Iterable[str] = (),
    **options: Unpack[CompileOptions],
) -> JitFunction | Callable[[Callable[..., Any]], JitFunction]:
    """Decorate a function of numpy arrays: `@eqsat.jit` or `@eqsat.jit(limits=..., isa=...)`.

    On the first call per key the function runs once on symbolic tensors named after its
    parameters (numpy calls on them build the expression), `eqsat.compile(result, **options)`
    builds a Kernel, and the kernel runs; later calls with the same key run the kept kernel
    without calling the function. The key: each array's shape and dtype; that a float (Python
    or numpy) was passed, not its value (it is a 0-d kernel input: `f(x, 0.1)` and `f(x, 0.2)`
    share a kernel), unless its parameter is in `static_argnames`; every other value (ints,
    bools, strings, ...: static, passed to the function as it is). The MAX_KERNELS most
    recently used kernels are kept. `options` are
    any keyword options of `eqsat.compile` (`limits`, `isa`, `autotune`, `extra_rules`,
    `assume_finite`, ...; `cache=False` skips the on-disk compile cache, not the kernels this
    function keeps).

    It requires: the function returns an expression of its array arguments, or a tuple/list of
    them (then calls return a tuple); arrays are of `eqsat.core.dtypes.INPUT_DTYPES`; static
    arguments are hashable; a traced float is not used in Python control flow (`if alpha > 0`:
    make it static).
    """
    if function is None:
        return functools.partial(JitFunction, static_argnames=static_argnames, **options)
    return JitFunction(function, static_argnames=static_argnames, **options)
