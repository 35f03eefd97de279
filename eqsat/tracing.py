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

import functools
import inspect
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Unpack, overload

import numpy as np

from eqsat import api
from eqsat.api import CompileOptions
from eqsat.backend_c.kernel import Kernel
from eqsat.core.errors import ArgumentError, DTypeError, UnsupportedError
from eqsat.frontend import Tensor, tensor


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


# One entry per parameter of the function, in order: (name, what was passed).
CacheKey = tuple[tuple[str, ArraySpec | Static], ...]


class JitFunction:
    """A function of numpy arrays compiled to one Kernel per `CacheKey`; made by `eqsat.jit`."""

    def __init__(self, function: Callable[..., Any], **options: Unpack[CompileOptions]) -> None:
        """It requires: `function` has no *args or **kwargs parameter (each array parameter
        names a kernel input); `options` are keyword options of `eqsat.compile` (else
        ArgumentError), passed to it for every kernel."""
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
        functools.update_wrapper(self, function)
        self._function = function
        self._name = function.__qualname__
        self._signature = signature
        self._options = options
        self._kernels: dict[CacheKey, Kernel] = {}
        # positional calls already seen -> their kernel and where its inputs are among the args
        self._positional: dict[tuple[Any, ...], tuple[Kernel, tuple[int, ...]]] = {}

    @property
    def kernels(self) -> Mapping[CacheKey, Kernel]:
        """Every kernel built so far (read-only), by the argument types it was built for."""
        return MappingProxyType(self._kernels)

    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        """Run the kernel for these arguments, tracing and compiling it on first use.

        It requires: the arguments bind to the function's signature; numpy-array arguments all
        float32 or all float64; every other argument hashable (a static value).
        """
        if not kwargs:  # the common call: every argument by position, a kernel already built
            try:
                known = self._positional.get(_positional_key(args))
            except TypeError:  # an unhashable argument: the full path below names it
                known = None
            if known is not None:
                kernel, positions = known
                return kernel(*[args[position] for position in positions])
        arguments = self._bind(args, kwargs)
        kernel = self._kernel(arguments)
        if not kwargs and len(args) == len(arguments):
            names = list(arguments)
            positions = tuple(names.index(name) for name in kernel.input_names)
            self._positional[_positional_key(args)] = (kernel, positions)
        return kernel(**{name: arguments[name] for name in kernel.input_names})

    def kernel_for(self, *args: Any, **kwargs: Any) -> Kernel:
        """The kernel a call with these arguments runs (traced and compiled if new)."""
        return self._kernel(self._bind(args, kwargs))

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

    def _kernel(self, arguments: dict[str, Any]) -> Kernel:
        key = self._key(arguments)
        if key not in self._kernels:
            self._kernels[key] = self._compile(key)
        return self._kernels[key]

    def _key(self, arguments: dict[str, Any]) -> CacheKey:
        """What the kernel depends on: each array's shape and dtype, each other value."""
        key: list[tuple[str, ArraySpec | Static]] = []
        for name, value in arguments.items():
            if isinstance(value, np.ndarray):
                key.append((name, ArraySpec(value.shape, value.dtype.name)))
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
        """Trace the function on symbolic tensors named after its array parameters; compile."""
        dtypes = {name: spec.dtype for name, spec in key if isinstance(spec, ArraySpec)}
        if len(set(dtypes.values())) > 1:
            raise DTypeError(
                f"eqsat.jit: {self._name} got arrays of different dtypes {dtypes}; a kernel has "
                "one dtype: cast them (eqsat does not)"
            )
        call = self._signature.bind_partial()
        for name, spec in key:
            if isinstance(spec, ArraySpec):
                call.arguments[name] = self._input(name, spec)
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
        return api.compile(result, **self._options)

    def _input(self, name: str, spec: ArraySpec) -> Tensor:
        """The symbolic tensor traced for array parameter `name`; DTypeError names it."""
        try:
            return tensor(name, spec.shape, spec.dtype)
        except DTypeError as error:
            raise DTypeError(f"eqsat.jit: argument {name!r} of {self._name}: {error}") from None


@overload
def jit(function: Callable[..., Any], /) -> JitFunction: ...


@overload
def jit(**options: Unpack[CompileOptions]) -> Callable[[Callable[..., Any]], JitFunction]: ...


def jit(
    function: Callable[..., Any] | None = None, /, **options: Unpack[CompileOptions]
) -> JitFunction | Callable[[Callable[..., Any]], JitFunction]:
    """Decorate a function of numpy arrays: `@eqsat.jit` or `@eqsat.jit(limits=..., isa=...)`.

    On the first call per (array shapes and dtypes, values of the other arguments) the function
    runs once on symbolic tensors named after its parameters (numpy calls on them build the
    expression), `eqsat.compile(result, **options)` builds a Kernel, and the kernel runs; later
    calls with the same key run the kept kernel without calling the function. `options` are
    any keyword options of `eqsat.compile` (`limits`, `isa`, `autotune`, `extra_rules`,
    `assume_finite`, ...; `cache=False` skips the on-disk compile cache, not the kernels this
    function keeps).

    It requires: the function returns an expression of its array arguments, or a tuple/list of
    them (then calls return a tuple); arrays are float32 or float64, one dtype per call; other
    arguments (ints, floats, bools, ...) are hashable and are passed to it unchanged.
    """
    if function is None:
        return functools.partial(JitFunction, **options)
    return JitFunction(function, **options)


def _positional_key(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What a positional call's kernel depends on, cheap to build: each array's type, shape and
    dtype, each other value with its type (`1`, `1.0` and `True` differ). An unhashable value
    makes an unhashable key."""
    return tuple(
        (type(a), a.shape, a.dtype) if isinstance(a, np.ndarray) else (type(a), a) for a in args
    )
