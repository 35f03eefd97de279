"""Terms outside the e-graph, without egglog: `Term`, the operator vocabulary, the `texpr`
builder of tensor terms, and `LoopProgram`.

`eqsat.core.terms` declares the egglog sorts and reads their expressions back as these Terms
(`to_term`); everything before saturation (the frontend) and after extraction (interpreter, cost
model, C emitter) works on Terms alone, so that a compile answered from the compile cache never
imports egglog (ARCHITECTURE §1). `eqsat.core.terms` re-exports every name here.
"""

from __future__ import annotations

import numbers
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

# ---------------------------------------------------------------- operator vocabulary

UNARY_OPS = (
    "neg",
    "abs",
    "exp",
    "log",
    "sqrt",
    "tanh",
    "sigmoid",
    "relu",
    "log1p",
    "expm1",
    "sin",
    "cos",
    "sign",
    "floor",
    "ceil",
    "rint",
    "trunc",
    "erf",
)
ARITH_OPS = ("add", "sub", "mul", "div", "max", "min")
COMPARE_OPS = ("lt", "le", "gt", "ge", "eq", "ne")  # 1.0 where true, 0.0 where false
BINARY_OPS = ARITH_OPS + COMPARE_OPS
REDUCE_OPS = ("sum", "max", "prod")
REDUCE_IDENTITY = {"sum": 0.0, "max": float("-inf"), "prod": 1.0}  # a reduction's start value

# ---------------------------------------------------------------- terms

Arg = Union["Term", int, float, str, tuple["Arg", ...]]


# The pairs of subterms found equal in each thread's comparison under way (`Term.__eq__`).
_PROVEN = threading.local()


@dataclass(frozen=True, eq=False)
class Term:
    """A term outside the e-graph: `op` is the constructor's qualified name, e.g. "Stmt.loop"."""

    op: str
    args: tuple[Arg, ...]

    def __post_init__(self) -> None:
        # Terms are hashed constantly (memo tables, DAG sharing); hash each node once.
        object.__setattr__(self, "_hash", hash((self.op, self.args)))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined,no-any-return]

    def __eq__(self, other: object) -> bool:
        """Structural equality that compares each pair of subterms once: two equal programs built
        apart (a memo table's key and a term built again) share no objects, and comparing them
        path by path took exponentially long in a model's depth (each layer reads its input
        several times). The pairs found equal during one comparison are remembered
        (`_PROVEN`) until it returns."""
        if self is other:
            return True
        if not isinstance(other, Term):
            return NotImplemented
        if self._hash != other._hash or self.op != other.op:  # type: ignore[attr-defined]
            return False
        proven: set[tuple[int, int]] | None = getattr(_PROVEN, "pairs", None)
        if proven is None:  # the outermost comparison: its pairs' objects live until it returns
            _PROVEN.pairs = set()
            try:
                return self.args == other.args
            finally:
                _PROVEN.pairs = None
        pair = (id(self), id(other))
        if pair in proven:
            return True
        equal = self.args == other.args
        if equal:
            proven.add(pair)
        return equal

    def __reduce__(self) -> tuple[type[Term], tuple[str, tuple[Arg, ...]]]:
        # rebuilt by the constructor, so the hash is the unpickling process's: a string's hash
        # differs from process to process (PYTHONHASHSEED)
        return Term, (self.op, self.args)

    def __str__(self) -> str:
        return f"{self.op}({', '.join(_format_arg(a) for a in self.args)})"


def _format_arg(arg: Arg) -> str:
    if isinstance(arg, tuple):
        return "(" + ", ".join(_format_arg(a) for a in arg) + ")"
    return repr(arg) if isinstance(arg, str) else str(arg)


def child_terms(args: Iterable[Arg]) -> Iterator[Term]:
    """The Terms among `args`, those inside tuples included, in order."""
    for arg in args:
        if isinstance(arg, Term):
            yield arg
        elif isinstance(arg, tuple):
            yield from child_terms(arg)


def post_order(terms: Iterable[Term]) -> list[Term]:
    """Each distinct Term of `terms` and below once, every one after the Terms in its arguments.
    Its length is the number of distinct subterms: a term that reuses a subterm (a model's layer
    reads its input several times) unfolds to a tree exponentially larger in its depth."""
    done: set[Term] = set()
    order: list[Term] = []
    for root in terms:
        pending: list[tuple[Term, bool]] = [(root, False)]
        while pending:
            term, children_done = pending.pop()
            if term in done:
                continue
            if children_done:
                done.add(term)
                order.append(term)
            else:
                pending.append((term, True))
                pending.extend((c, False) for c in child_terms(term.args) if c not in done)
    return order


def dag_text(terms: Sequence[Term]) -> str:
    """A text of `terms` with each distinct subterm written once, as a line `op(args)` whose Term
    arguments are the numbers of their lines (`post_order`'s), then the numbers of `terms`.
    Equal texts mean equal terms; its length grows with the distinct subterms, where `str`
    repeats a subterm at each of its uses."""
    numbers: dict[Term, int] = {}

    def text(arg: Arg) -> str:
        if isinstance(arg, Term):
            return f"#{numbers[arg]}"
        if isinstance(arg, tuple):
            return "(" + ", ".join(map(text, arg)) + ")"
        return _format_arg(arg)

    lines: list[str] = []
    for term in post_order(terms):
        numbers[term] = len(lines)
        lines.append(f"{term.op}({', '.join(map(text, term.args))})")
    return "\n".join([*lines, ", ".join(map(text, terms))])


def terms_to_json(terms: Sequence[Term]) -> dict[str, Any]:
    """`terms` as JSON-serializable data, each distinct subterm once (`post_order`): a node is
    [op, args], a Term argument {"#": its node's number}, a tuple argument a list; ints, floats
    (NaN, ±inf and -0.0 as Python's json writes them) and strings as they are. `terms_from_json`
    reads it back."""
    numbers: dict[Term, int] = {}

    def data(arg: Arg) -> Any:
        if isinstance(arg, Term):
            return {"#": numbers[arg]}
        if isinstance(arg, tuple):
            return [data(a) for a in arg]
        return arg

    nodes: list[list[Any]] = []
    for term in post_order(terms):
        numbers[term] = len(nodes)
        nodes.append([term.op, [data(a) for a in term.args]])
    return {"nodes": nodes, "roots": [numbers[t] for t in terms]}


def terms_from_json(data: Mapping[str, Any]) -> list[Term]:
    """The terms `terms_to_json` wrote; each NaN is a float object of its own (NaN is not equal
    to itself, so no two nodes become one). KeyError, IndexError, TypeError or ValueError if `data`
    is not such a value (a node may only name nodes before it)."""
    built: list[Term] = []

    def arg(value: Any) -> Arg:
        if isinstance(value, dict):
            number = value["#"]
            if not isinstance(number, int) or not 0 <= number < len(built):
                raise ValueError(f"a term refers to node {number!r} before it is built")
            return built[number]
        if isinstance(value, list):
            return tuple(arg(v) for v in value)
        if isinstance(value, float) and value != value:
            # json reads every NaN as one shared object, which tuples compare equal by identity:
            # two nodes that differed only in their NaNs would become one Term. A NaN of its own
            # keeps them apart, as they were written.
            return float("nan")
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            return value
        raise TypeError(f"not a term argument: {value!r}")

    for op, args in data["nodes"]:
        if not isinstance(op, str) or not isinstance(args, list):
            raise TypeError(f"not a term node: {[op, args]!r}")
        built.append(Term(op, tuple(arg(a) for a in args)))
    return [built[number] for number in data["roots"]]


def index_list(items: Sequence[Term]) -> Term:
    """The IndexList term holding `items` in order."""
    result = Term("IndexList.nil", ())
    for item in reversed(items):
        result = Term("IndexList.cons", (item, result))
    return result


def subterms(terms: Iterable[Arg]) -> set[Arg]:
    """`terms` and every Term and tuple of arguments inside them, each once."""
    found: set[Arg] = set()
    stack = list(terms)
    while stack:
        term = stack.pop()
        if isinstance(term, Term | tuple) and term not in found:
            found.add(term)
            stack.extend(term.args if isinstance(term, Term) else term)
    return found


def index_items(index_list_term: Term) -> list[Term]:
    """The Index terms of an IndexList term, in order."""
    items = []
    node = index_list_term
    while node.op == "IndexList.cons":
        head, tail = node.args
        assert isinstance(head, Term) and isinstance(tail, Term)
        items.append(head)
        node = tail
    return items


# ---------------------------------------------------------------- building tensor terms

# The arguments of each `TExpr` constructor (`eqsat.core.terms.TExpr`), as egglog converts them:
# "tensor" a TExpr, "str" a String, "int" an i64, "float" an f64, "ints" a Vec[i64].
# tests/test_term_builder.py checks this table against the sort's signatures.
TEXPR_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "input": ("str", "ints", "str"),
    "const": ("float",),
    "unary": ("str", "tensor"),
    "binary": ("str", "tensor", "tensor"),
    "where": ("tensor", "tensor", "tensor"),
    "reduce": ("str", "int", "tensor"),
    "matmul": ("tensor", "tensor"),
    "transpose": ("tensor", "ints"),
    "broadcast": ("tensor", "ints"),
    "reshape": ("tensor", "ints"),
    "arange": ("int",),
    "concat": ("tensor", "tensor", "int"),
    "slice": ("tensor", "ints", "ints", "ints"),
}


def _as_int(value: Any) -> int:
    if not isinstance(value, numbers.Integral):
        raise TypeError(f"expected an int, got {value!r} of type {type(value).__name__}")
    return int(value)


def _as_float(value: Any) -> float:
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"expected a float, got {value!r} of type {type(value).__name__}")
    return float(value)


def _as_str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a str, got {value!r} of type {type(value).__name__}")
    return str(value)


def _as_ints(value: Any) -> tuple[int, ...]:
    if not isinstance(value, tuple | list):
        raise TypeError(f"expected a tuple of ints, got {value!r} of type {type(value).__name__}")
    return tuple(_as_int(item) for item in value)


def _as_tensor(value: Any) -> Term:
    if not (isinstance(value, Term) and value.op.startswith("TExpr.")):
        raise TypeError(f"expected a tensor term, got {value!r}")
    return value


_CONVERT: dict[str, Callable[[Any], Arg]] = {
    "tensor": _as_tensor,
    "str": _as_str,
    "int": _as_int,
    "float": _as_float,
    "ints": _as_ints,
}

# Every tensor term built here, by its op and arguments: equal tensor terms are one object, as
# `to_term` reads back equal subexpressions. A float is keyed by its hex and a tensor argument by
# its identity, because Term equality takes 0.0 for -0.0 (`x * -0.0` would become `x * 0.0`).
# The identity of an argument is unambiguous while its entry lives: the Term stored holds it.
_BUILT: weakref.WeakValueDictionary[tuple[Any, ...], Term] = weakref.WeakValueDictionary()


def _key(value: Arg) -> Any:
    if isinstance(value, float):
        return value.hex()
    return id(value) if isinstance(value, Term) else value


class _TensorTerms:
    """`texpr.<constructor>(...)`: the Term that `to_term(TExpr.<constructor>(...))` reads back,
    built without egglog. Arguments are converted as egglog converts them (TEXPR_ARGUMENTS),
    numpy scalars and an int where a float is expected included; TypeError if one cannot be."""

    def __getattr__(self, name: str) -> Callable[..., Term]:
        kinds = TEXPR_ARGUMENTS.get(name)
        if kinds is None:
            raise AttributeError(f"TExpr has no constructor {name!r}")
        op = f"TExpr.{name}"

        def build(*args: Any) -> Term:
            if len(args) != len(kinds):
                raise TypeError(f"{op} takes {len(kinds)} arguments, got {len(args)}")
            converted = tuple(_CONVERT[kind](arg) for kind, arg in zip(kinds, args, strict=True))
            key = (op, *map(_key, converted))
            term = _BUILT.get(key)
            if term is None:
                term = _BUILT[key] = Term(op, converted)
            return term

        build.__name__ = name
        setattr(self, name, build)  # found without __getattr__ from now on
        return build


texpr = _TensorTerms()

# ---------------------------------------------------------------- a lowered kernel


@dataclass(frozen=True)
class LoopProgram:
    """A kernel as a loop term plus its signature.

    Buffer `in{i}` is argument i (user name `inputs[i][0]`), buffer `out{k}` is result k;
    temporaries are declared by `Stmt.alloc` inside `body`. Every buffer is of `dtype`; inputs
    and outputs are dense and row-major, a temporary is row-major in whatever strides the
    backend gives it (`eqsat.backend_c.emit.temporary_strides`). User names never appear inside
    `body`.
    """

    body: Term
    inputs: tuple[tuple[str, tuple[int, ...]], ...]
    outputs: tuple[tuple[int, ...], ...]
    dtype: str

    def with_body(self, body: Term) -> LoopProgram:
        return LoopProgram(body, self.inputs, self.outputs, self.dtype)
