"""`eqsat.core.term.texpr` builds, without egglog, the Terms that `to_term` reads back from the
egglog sort `TExpr`: its table of argument kinds agrees with the sort's signatures, and each
constructor gives the same Term, literal types, float signs and sharing included."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from eqsat.core.term import TEXPR_ARGUMENTS, Term, texpr
from eqsat.core.terms import TExpr, to_term

# egglog's sort of each argument kind in TEXPR_ARGUMENTS
KIND_OF_SORT = {
    "String": "str",
    "i64": "int",
    "f64": "float",
    "Vec[i64]": "ints",
    "TExpr": "tensor",
}


def _sort_name(type_ref: Any) -> str:
    args = "".join(f"[{_sort_name(arg)}]" for arg in type_ref.args)
    return type_ref.ident.name + args


def _egglog_signatures() -> dict[str, tuple[str, ...]]:
    """Each TExpr constructor's argument sorts, read from egglog's declaration of the class."""
    decls = TExpr.const.__egg_decls__  # type: ignore[attr-defined]
    (texpr_class,) = [decl for ident, decl in decls._classes.items() if ident.name == "TExpr"]
    return {
        name: tuple(KIND_OF_SORT[_sort_name(t)] for t in constructor.signature.arg_types)
        for name, constructor in texpr_class.class_methods.items()
    }


def test_argument_table_matches_the_egglog_sort() -> None:
    assert _egglog_signatures() == TEXPR_ARGUMENTS


def _strict(arg: Any) -> Any:
    """`arg` with each literal's type and each float's bits: Term equality takes 1 == 1.0 ==
    True and -0.0 == 0.0."""
    if isinstance(arg, Term):
        return (arg.op, tuple(_strict(a) for a in arg.args))
    if isinstance(arg, tuple):
        return tuple(_strict(a) for a in arg)
    if isinstance(arg, float):
        return ("float", "nan" if math.isnan(arg) else arg.hex())
    return (type(arg).__name__, arg)


X = ("input", "x", (2, 3), "float32")
Y = ("input", "y", (3,), "float64")

# For each constructor, arguments as the frontend may pass them, and the same arguments of the
# Python types egglog accepts (numpy scalars and an int where a float goes are converted).
CASES: list[tuple[str, tuple[Any, ...], tuple[Any, ...]]] = [
    ("input", ("x", (2, 3), "float32"), ("x", (2, 3), "float32")),
    ("input", ("x", [np.int64(2), np.int32(3)], "int8"), ("x", (2, 3), "int8")),
    ("input", ("s", (), "weak"), ("s", (), "weak")),
    ("const", (1.5,), (1.5,)),
    ("const", (-0.0,), (-0.0,)),
    ("const", (0.0,), (0.0,)),
    ("const", (2,), (2.0,)),
    ("const", (np.float32(0.25),), (0.25,)),
    ("const", (np.float64(-3.5),), (-3.5,)),
    ("const", (np.int64(7),), (7.0,)),
    ("const", (float("inf"),), (float("inf"),)),
    ("const", (float("nan"),), (float("nan"),)),
    ("unary", ("exp", X), ("exp", X)),
    ("binary", ("add", X, Y), ("add", X, Y)),
    ("where", (X, Y, X), (X, Y, X)),
    ("reduce", ("sum", np.int64(1), X), ("sum", 1, X)),
    ("matmul", (X, Y), (X, Y)),
    ("transpose", (X, (1, 0)), (X, (1, 0))),
    ("broadcast", (X, [4, np.int64(2), 3]), (X, (4, 2, 3))),
    ("reshape", (X, (6,)), (X, (6,))),
    ("arange", (np.int32(5),), (5,)),
    ("arange", (5,), (5,)),
    ("concat", (X, X, 0), (X, X, 0)),
    ("slice", (X, (0, 2), (1, -1), (2, 3)), (X, (0, 2), (1, -1), (2, 3))),
]


def _built(build: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """`args` with each nested constructor tuple (like X) built by `build`."""
    return tuple(
        build(*_built(build, a[1:]), name=a[0])
        if isinstance(a, tuple) and a and a[0] in TEXPR_ARGUMENTS and isinstance(a[0], str)
        else a
        for a in args
    )


def _by_texpr(*args: Any, name: str) -> Term:
    return getattr(texpr, name)(*args)


def _by_egglog(*args: Any, name: str) -> Any:
    return getattr(TExpr, name)(*args)


def test_every_constructor_is_covered() -> None:
    assert {name for name, _, _ in CASES} == set(TEXPR_ARGUMENTS)


@pytest.mark.parametrize(("name", "given", "native"), CASES)
def test_builder_gives_what_to_term_reads_back(
    name: str, given: tuple[Any, ...], native: tuple[Any, ...]
) -> None:
    built = _by_texpr(*_built(_by_texpr, given), name=name)
    read_back = to_term(_by_egglog(*_built(_by_egglog, native), name=name))
    assert _strict(built) == _strict(read_back)
    assert str(built) == str(read_back)
    assert to_term(built) is built  # a Term passes through to_term unchanged


def test_equal_terms_are_shared_but_signed_zeros_are_not() -> None:
    x = texpr.input("x", (4,), "float32")
    assert texpr.unary("exp", x) is texpr.unary("exp", texpr.input("x", [4], "float32"))
    zero, negative_zero = texpr.const(0.0), texpr.const(-0.0)
    assert zero is not negative_zero
    assert math.copysign(1.0, negative_zero.args[0]) == -1.0  # type: ignore[arg-type]
    # ... nor inside a larger term (Term equality takes -0.0 for 0.0)
    times_zero = texpr.binary("mul", x, zero)
    times_negative_zero = texpr.binary("mul", x, negative_zero)
    assert times_negative_zero is not times_zero
    assert times_negative_zero.args[2] is negative_zero
    assert texpr.binary("mul", x, texpr.const(0.0)) is times_zero


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("const", (True,)),
        ("const", ("1.0",)),
        ("arange", (3.0,)),
        ("input", ("x", np.array([2, 3]), "float32")),
        ("input", (1, (2,), "float32")),
        ("unary", ("exp", 1.0)),
        ("binary", ("add", texpr.input("x", (2,), "float32"))),
    ],
)
def test_builder_rejects_what_egglog_cannot_convert(name: str, args: tuple[Any, ...]) -> None:
    with pytest.raises(TypeError):
        getattr(texpr, name)(*args)
