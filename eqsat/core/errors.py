"""The exceptions eqsat raises. Every message names what is wrong (op, input, shape, dtype)."""

from __future__ import annotations


class EqsatError(Exception):
    """Base class of every error eqsat raises on purpose."""


class ShapeError(EqsatError, ValueError):
    """An expression was built from incompatible or invalid shapes, or a kernel was called with
    an array of another shape than its input's."""


class IndexingError(ShapeError, IndexError):
    """An index out of its dimension's range, or more indices than dimensions (an IndexError
    too, as numpy raises for these)."""


class DTypeError(EqsatError, TypeError):
    """An unsupported dtype, or a kernel called with an array of another dtype than its
    input's (nothing is cast)."""


class InexactInputError(EqsatError, ValueError):
    """A kernel was called with an int64 or uint64 array holding a value beyond 2**53, which
    its float64 computation cannot hold exactly (`eqsat.core.dtypes`)."""


class ArgumentError(EqsatError, TypeError):
    """A kernel or an `@eqsat.jit` function was called (or `eqsat.jit` applied) with a missing,
    unknown, repeated or extra argument, or a value of a kind it cannot take (not an array;
    unhashable where a static value goes)."""


class UnsupportedError(EqsatError, TypeError):
    """A numpy function, ufunc method or argument that eqsat cannot express on symbolic tensors,
    or a numpy array captured as a constant (eqsat takes arrays only as inputs)."""


class UnsupportedAttributeError(UnsupportedError, AttributeError):
    """A numpy ndarray method or attribute that tensors lack: an AttributeError too, so that
    `hasattr(tensor, name)` stays False for code that probes for it."""


class CompileError(EqsatError):
    """The C compiler failed. Carries the command, its stderr and the path of the kept C file."""

    def __init__(self, command: list[str], stderr: str, c_path: str) -> None:
        self.command = command
        self.stderr = stderr
        self.c_path = c_path
        super().__init__(
            f"C compiler failed (source kept at {c_path})\n"
            f"command: {' '.join(command)}\n{stderr.strip()}"
        )


class IsaError(EqsatError, RuntimeError):
    """A kernel built for an ISA level (`isa`) this host cannot execute was called: it was
    compiled with `isa=` above the CPU's level, or above the level EQSAT_MAX_ISA caps it at.
    Executing it would kill the process with an illegal instruction."""

    def __init__(self, isa: str, host_isa: str) -> None:
        self.isa = isa
        self.host_isa = host_isa
        super().__init__(
            f"this kernel was compiled for {isa}, which this host does not run (it runs "
            f"{host_isa}; EQSAT_MAX_ISA may cap it): compile it with isa={host_isa!r} or "
            "without isa="
        )


class UnsoundMergeError(EqsatError):
    """Saturation merged terms that cannot be equal — two different literals (`TExpr.const(1.0)`
    and `TExpr.const(2.0)`, two inputs) or two tensors of different shapes — so a rewrite rule
    is unsound. The message names the values and the rules that fired in the last step."""
