"""Temporary contraction: a temporary used by one row loop only shrinks to one row, inside it.

    alloc t0[M, N]:                      for i0 in 0..M parallel:
      for i0 in 0..M parallel:     ->      alloc t0[1, N]:
        t0[i0, j] = ...; ... t0[i0, r]       t0[0, j] = ...; ... t0[0, r]

After fusion, softmax's exp(x - max) lives in a temporary that each row writes and reads back in
the same iteration; keeping the whole M x N array sends it through DRAM for nothing. Contracted,
the row stays in L1 (and each thread has its own).

This is a pass over the extracted program, not an e-graph rule: it rewrites indices inside a
loop body, the substitution DESIGN §3 keeps out of the e-graph. It applies when
1. the temporary is allocated at the top of the program and touched by exactly one top-level
   statement, a loop over a named axis `a` whose extent is the temporary's first dimension;
2. every access to it holds plain `a` as its first index.
Then iteration `a` touches only row `a`, which the program writes before it reads (iterations
are independent of each other's rows), so a fresh row per iteration computes the same result.
"""

from __future__ import annotations

from eqsat.terms import Term, index_items, index_list


def contract_temporaries(body: Term) -> Term:
    """`body` with every contractible top-level temporary moved into its row loop."""
    allocs: list[tuple[str, tuple[int, ...]]] = []
    while body.op == "Stmt.alloc":
        name, shape, body = body.args  # type: ignore[assignment]
        allocs.append((str(name), tuple(shape)))  # type: ignore[arg-type]
    statements = _flatten(body)
    kept = []
    for name, shape in allocs:
        users = [n for n, s in enumerate(statements) if _touches(s, name)]
        row_loop = statements[users[0]] if len(users) == 1 else None
        if row_loop is not None and _contractible(row_loop, name, shape):
            axis, kind, inner = row_loop.args
            row = Term("Stmt.alloc", (name, (1, *shape[1:]), _first_index_to_zero(inner, name)))  # type: ignore[arg-type]
            statements[users[0]] = Term("Stmt.loop", (axis, kind, row))
        else:
            kept.append((name, shape))
    result = statements[-1]
    for statement in reversed(statements[:-1]):
        result = Term("Stmt.seq", (statement, result))
    for name, shape in reversed(kept):
        result = Term("Stmt.alloc", (name, shape, result))
    return result


def _flatten(statement: Term) -> list[Term]:
    if statement.op == "Stmt.seq":
        return [s for part in statement.args for s in _flatten(part)]  # type: ignore[arg-type]
    return [statement]


def _accesses(term: Term, buffer: str) -> list[Term]:
    """Index lists through which `term` loads, stores or accumulates `buffer`."""
    found = []
    if term.op in ("Scalar.load", "Stmt.store", "Stmt.accumulate") and term.args[0] == buffer:
        found.append(term.args[1])
    for arg in term.args:
        if isinstance(arg, Term):
            found.extend(_accesses(arg, buffer))
    return found  # type: ignore[return-value]


def _touches(statement: Term, buffer: str) -> bool:
    return bool(_accesses(statement, buffer))


def _contractible(loop: Term, buffer: str, shape: tuple[int, ...]) -> bool:
    if loop.op != "Stmt.loop" or len(shape) < 2:
        return False
    axis = loop.args[0]
    assert isinstance(axis, Term)
    if axis.op != "Axis.named" or axis.args[1] != shape[0]:
        return False
    plain = Term("Index.axis", (axis,))
    return all(index_items(ix)[0] == plain for ix in _accesses(loop, buffer))


def _first_index_to_zero(term: Term, buffer: str) -> Term:
    """`term` with the first index of every access to `buffer` replaced by 0."""
    args = tuple(
        _first_index_to_zero(a, buffer) if isinstance(a, Term) else a for a in term.args
    )
    if term.op in ("Scalar.load", "Stmt.store", "Stmt.accumulate") and args[0] == buffer:
        items = index_items(args[1])  # type: ignore[arg-type]
        args = (args[0], index_list([Term("Index.const", (0,)), *items[1:]]), *args[2:])
    return Term(term.op, args)
