"""The exceptions eqsat raises. Every message names what is wrong (op, input, shape, dtype)."""

from __future__ import annotations


class EqsatError(Exception):
    """Base class of every error eqsat raises on purpose."""


class ShapeError(EqsatError, ValueError):
    """An expression was built from incompatible or invalid shapes."""


class DTypeError(EqsatError, TypeError):
    """An unsupported dtype, or two dtypes mixed in one program."""


class UnsupportedError(EqsatError, TypeError):
    """A numpy function, ufunc method or argument that eqsat cannot express on symbolic tensors,
    or a numpy array captured as a constant (eqsat takes arrays only as inputs)."""


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


class UnsoundMergeError(EqsatError):
    """Saturation merged terms that cannot be equal — two different literals (`TExpr.const(1.0)`
    and `TExpr.const(2.0)`, two inputs) or two tensors of different shapes — so a rewrite rule
    is unsound. The message names the values and the rules that fired in the last step."""
