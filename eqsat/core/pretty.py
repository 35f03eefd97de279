"""Readable forms of terms: tensor terms as expressions, loop terms as pseudo-code."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from eqsat.core.loops import axis_extent
from eqsat.core.term import Term, child_terms, index_items, post_order

_INFIX = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "eq": "==",
    "ne": "!=",
}


# A subterm used more than once whose text is longer than this is written once and named.
SHARED_TEXT_MIN_CHARS = 40


def format_tensor(t: Term) -> str:
    """`relu(x @ W + b)`-style text of a tensor term (`format_tensors`)."""
    return format_tensors([t])


def format_tensors(terms: Sequence[Term]) -> str:
    """`relu(x @ W + b)`-style text of tensor terms, separated by "; ". A subterm used more than
    once whose text is longer than SHARED_TEXT_MIN_CHARS comes first, as `%1 = ...; `, and is
    `%1` where it is used: the text grows with the number of distinct subterms, where written
    out at every use it would grow exponentially with a model's stacked layers."""
    order = post_order(terms)
    uses = Counter(child for term in order for child in child_terms(term.args))
    uses.update(terms)
    shown: dict[Term, str] = {}  # a subterm's text, or its name
    definitions: list[str] = []
    for term in order:
        text = _format_node(term, [shown[a] if isinstance(a, Term) else str(a) for a in term.args])
        if uses[term] > 1 and len(text) > SHARED_TEXT_MIN_CHARS:
            name = f"%{len(definitions) + 1}"
            definitions.append(f"{name} = {text}")
            text = name
        shown[term] = text
    return "; ".join([*definitions, *(shown[t] for t in terms)])


def _format_node(t: Term, sub: Sequence[str]) -> str:
    """The text of tensor term `t` whose arguments read `sub`."""
    a = t.args
    match t.op:
        case "TExpr.input":
            return str(a[0])
        case "TExpr.const":
            return f"{a[0]:g}"  # type: ignore[str-format]
        case "TExpr.unary":
            return f"-{sub[1]}" if a[0] == "neg" else f"{a[0]}({sub[1]})"
        case "TExpr.binary":
            if a[0] in _INFIX:
                return f"({sub[1]} {_INFIX[str(a[0])]} {sub[2]})"
            return f"{a[0]}imum({sub[1]}, {sub[2]})"
        case "TExpr.where":
            return f"where({sub[0]}, {sub[1]}, {sub[2]})"
        case "TExpr.reduce":
            return f"{a[0]}({sub[2]}, axis={a[1]})"
        case "TExpr.matmul":
            return f"({sub[0]} @ {sub[1]})"
        case "TExpr.transpose":
            return f"transpose({sub[0]}, {a[1]})"
        case "TExpr.broadcast":
            return f"broadcast_to({sub[0]}, {a[1]})"
        case "TExpr.reshape":
            return f"reshape({sub[0]}, {a[1]})"
        case "TExpr.arange":
            return f"arange({a[0]})"
        case "TExpr.concat":
            return f"concatenate(({sub[0]}, {sub[1]}), axis={a[2]})"
        case "TExpr.slice":
            return f"{sub[0]}[{_slices(a[1], a[2], a[3])}]"  # type: ignore[arg-type]
    return f"{t.op}({', '.join(sub)})"


def _slices(starts: Sequence[int], steps: Sequence[int], extents: Sequence[int]) -> str:
    """numpy's slice syntax for `TExpr.slice`'s arguments: `2:8:3, ::-1`."""

    def one(start: int, step: int, extent: int) -> str:
        stop = start + step * extent
        shown = f"{start}:{stop if stop >= 0 else ''}"
        return shown if step == 1 else f"{shown}:{step}"

    return ", ".join(map(one, starts, steps, extents))


def _axis_name(axis: Term) -> str:
    if axis.op == "Axis.named":
        return str(axis.args[0])
    parent = axis.args[0]
    assert isinstance(parent, Term)
    half = "outer" if axis.op == "Axis.outer" else "inner"
    return f"{_axis_name(parent)}.{half}({axis.args[1]})"


def _index(t: Term) -> str:
    a = t.args
    match t.op:
        case "Index.axis":
            return _axis_name(a[0])  # type: ignore[arg-type]
        case "Index.const":
            return str(a[0])
        case "Index.add":
            return f"{_index(a[0])} + {_index(a[1])}"  # type: ignore[arg-type]
        case "Index.scale":
            return f"{_index(a[0])}*{a[1]}"  # type: ignore[arg-type]
        case "Index.div":
            return f"({_index(a[0])}) // {a[1]}"  # type: ignore[arg-type]
        case "Index.mod":
            return f"({_index(a[0])}) % {a[1]}"  # type: ignore[arg-type]
    return str(t)


def _element(buffer: object, index_list: object) -> str:
    assert isinstance(index_list, Term)
    return f"{buffer}[{', '.join(_index(i) for i in index_items(index_list))}]"


def format_scalar(t: Term) -> str:
    a = t.args
    match t.op:
        case "Scalar.load":
            return _element(a[0], a[1])
        case "Scalar.const":
            return f"{a[0]:g}"  # type: ignore[str-format]
        case "Scalar.index":
            return f"float({_index(a[0])})"  # type: ignore[arg-type]
        case "Scalar.unary":
            return f"{a[0]}({format_scalar(a[1])})"  # type: ignore[arg-type]
        case "Scalar.binary":
            x, y = format_scalar(a[1]), format_scalar(a[2])  # type: ignore[arg-type]
            op = str(a[0])
            return f"({x} {_INFIX[op]} {y})" if op in _INFIX else f"{op}({x}, {y})"
        case "Scalar.where":
            c, x, y = (format_scalar(v) for v in a)  # type: ignore[arg-type]
            return f"({x} if {c} else {y})"
    return str(t)


def format_loops(t: Term, depth: int = 0) -> str:
    """Pseudo-code of a statement, one line per loop or assignment."""
    pad = "  " * depth
    a = t.args
    match t.op:
        case "Stmt.loop":
            axis, kind, body = a
            assert isinstance(axis, Term) and isinstance(kind, Term) and isinstance(body, Term)
            mark = {
                "LoopKind.serial": "",
                "LoopKind.parallel": " parallel",
                "LoopKind.parallel_sum": " parallel sum",
                "LoopKind.vector": f" vector({kind.args[0] if kind.args else ''})",
                "LoopKind.unroll": f" unroll({kind.args[0] if kind.args else ''})",
            }[kind.op]
            head = f"{pad}for {_axis_name(axis)} in 0..{axis_extent(axis)}{mark}:"
            return head + "\n" + format_loops(body, depth + 1)
        case "Stmt.seq":
            return format_loops(a[0], depth) + "\n" + format_loops(a[1], depth)  # type: ignore
        case "Stmt.store":
            return f"{pad}{_element(a[0], a[1])} = {format_scalar(a[2])}"  # type: ignore
        case "Stmt.accumulate":
            op = {"sum": "+=", "max": "max=", "prod": "*="}[str(a[2])]
            return f"{pad}{_element(a[0], a[1])} {op} {format_scalar(a[3])}"  # type: ignore
        case "Stmt.guard":
            head = f"{pad}if {_index(a[0])} <= {a[1]}:"  # type: ignore[arg-type]
            return head + "\n" + format_loops(a[2], depth + 1)  # type: ignore[arg-type]
        case "Stmt.alloc":
            head = f"{pad}alloc {a[0]}{list(a[1])}:"  # type: ignore[arg-type]
            return head + "\n" + format_loops(a[2], depth + 1)  # type: ignore[arg-type]
    return pad + str(t)
