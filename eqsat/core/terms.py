"""The term language: every egglog sort eqsat uses, and a plain-Python read-back of terms.

Stage 1 works on tensor terms (`TExpr`), stage 2 on loop terms (`Axis`, `Index`, `Scalar`,
`Stmt`, `LoopKind`). Nothing outside this module declares a sort. Rules are written against
these classes; everything after extraction (interpreter, cost model, C emitter) works on `Term`,
a frozen tree of `(op, args)` that mirrors the constructors one to one::

    Stmt.loop(Axis.named("i0", 8), LoopKind.serial(), body)
      <->  Term("Stmt.loop", (Term("Axis.named", ("i0", 8)), Term("LoopKind.serial", ()), ...))

Invariants (ARCHITECTURE §3):
- Axes are unique terms; a split keeps the axis' name: `Axis.outer(a, T)` and `Axis.inner(a, T)`
  are new loop variables, and the body keeps referring to `a`, which the emitter and the
  interpreter resolve as `outer * T + inner`. Interchange and tiling never substitute inside a body.
- One loop nest never holds two loops over the same axis.
- Every sort has reference semantics in `eqsat.core.interp`.

`Term` itself, the operator vocabulary, the egglog-free builder of tensor terms (`texpr`) and
`LoopProgram` live in `eqsat.core.term`, which does not import egglog; they are re-exported here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from egglog import (
    EGraph,
    Expr,
    StringLike,
    VecLike,
    f64Like,
    get_callable_args,
    get_callable_fn,
    get_literal_value,
    i64,
    i64Like,
)
from egglog.egraph_state import EGraphState

from eqsat.core.term import (  # noqa: F401 - re-exported: the egglog-free half of the language
    ARITH_OPS,
    BINARY_OPS,
    COMPARE_OPS,
    REDUCE_IDENTITY,
    REDUCE_OPS,
    TEXPR_ARGUMENTS,
    UNARY_OPS,
    Arg,
    LoopProgram,
    Term,
    index_items,
    index_list,
    subterms,
    texpr,
)

# ---------------------------------------------------------------- egglog-python's sharing lets

# egglog-python binds each shared subexpression to a global `$__expr_N` (N = 0, 1, 2, ...), and
# egglog (13.2.0) names the variable for each use of a global in a command after the global plus
# a count of its uses so far: the 21st use of `$__expr_1` and the first of `$__expr_12` are both
# `@$__expr_120`, so a command using both reads one global's value for the other (a term mixing
# two registered terms, a rule writing the wrong op string; tests/test_let_names.py). Numbering
# the lets from LET_BASE gives every name as many digits, so none is another followed by digits.
LET_BASE = 1_000_000
_transform_let = EGraphState._transform_let


def _transform_let_from_base(self: EGraphState, typed_expr: Any) -> Any:
    if self.expr_to_let_counter < LET_BASE:
        self.expr_to_let_counter += LET_BASE
    assert self.expr_to_let_counter < 10 * LET_BASE, "let names would gain a digit"
    return _transform_let(self, typed_expr)


EGraphState._transform_let = _transform_let_from_base  # type: ignore[method-assign]


# ---------------------------------------------------------------- any thread (ARCHITECTURE §5e)

# egglog-python resolves declarations and rulesets lazily into process-wide state, without a
# lock: two threads building or running e-graphs at once raised KeyError (`Ident('shape_of')`)
# and "Recursively resolving thunk". Every use of egglog (a whole `eqsat.optimizer.optimize`, the
# egglog rules of a compile-cache key) holds this lock; the C build and the checks do not.
EGGLOG_LOCK = threading.RLock()


@contextmanager
def owned_egraph(egraph: EGraph) -> Iterator[EGraph]:
    """`egraph` for the block; when it ends, however it ends, `release(egraph)`."""
    try:
        yield egraph
    finally:
        release(egraph)


def release(egraph: EGraph) -> None:
    """Drop `egraph`'s Rust e-graph now, in this thread; `egraph` is unusable afterwards.

    egglog-python leaves a reference cycle through the e-graph's state at every run of a schedule
    (a recursive closure), so without this the cycle collector drops the Rust e-graph on whichever
    thread it next runs, and egglog refuses that: "EGraph is unsendable, but is being dropped on
    another thread", and the e-graph leaks. It requires: no other reference to the Rust e-graph
    (`EGraphState.egraph`) than egglog's own states."""
    for state in (egraph._state, *egraph._state_stack):
        if hasattr(state, "egraph"):
            del state.egraph


# ---------------------------------------------------------------- stage 1: tensor terms


class TExpr(Expr):
    """A tensor-valued program; numpy semantics. Built only from shape-checked frontend calls."""

    @classmethod
    def input(cls, name: StringLike, shape: VecLike[i64, i64Like], dtype: StringLike) -> TExpr:
        """A named argument of the kernel."""

    @classmethod
    def const(cls, value: f64Like) -> TExpr:
        """A rank-0 constant; it takes the dtype of the program."""

    @classmethod
    def unary(cls, op: StringLike, x: TExpr) -> TExpr:
        """Elementwise `op` in UNARY_OPS."""

    @classmethod
    def binary(cls, op: StringLike, a: TExpr, b: TExpr) -> TExpr:
        """Elementwise `op` in BINARY_OPS with numpy broadcasting."""

    @classmethod
    def where(cls, cond: TExpr, a: TExpr, b: TExpr) -> TExpr:
        """`a` where `cond` is nonzero, else `b` (broadcasting all three)."""

    @classmethod
    def reduce(cls, op: StringLike, axis: i64Like, x: TExpr) -> TExpr:
        """`op` in REDUCE_OPS over one axis, which is removed from the shape."""

    @classmethod
    def matmul(cls, a: TExpr, b: TExpr) -> TExpr:
        """(..., m, k) @ (..., k, n) with equal batch dimensions (the frontend broadcasts)."""

    @classmethod
    def transpose(cls, x: TExpr, perm: VecLike[i64, i64Like]) -> TExpr:
        """numpy.transpose(x, perm)."""

    @classmethod
    def broadcast(cls, x: TExpr, shape: VecLike[i64, i64Like]) -> TExpr:
        """numpy.broadcast_to(x, shape)."""

    @classmethod
    def reshape(cls, x: TExpr, shape: VecLike[i64, i64Like]) -> TExpr:
        """numpy.reshape(x, shape) in row-major order."""

    @classmethod
    def arange(cls, n: i64Like) -> TExpr:
        """numpy.arange(n) in the program's dtype: 0, 1, ..., n - 1 (n >= 1)."""

    @classmethod
    def concat(cls, a: TExpr, b: TExpr, axis: i64Like) -> TExpr:
        """numpy.concatenate((a, b), axis): equal shapes but along `axis` (0 <= axis < rank)."""

    @classmethod
    def slice(
        cls,
        x: TExpr,
        starts: VecLike[i64, i64Like],
        steps: VecLike[i64, i64Like],
        shape: VecLike[i64, i64Like],
    ) -> TExpr:
        """A strided view of x, of the same rank: element idx is x[starts + steps * idx] (one
        start, step and extent per dimension; steps are nonzero, negative ones walk backwards,
        and every element is inside x). numpy's basic slicing `x[a:b:s, ...]`."""


# ---------------------------------------------------------------- stage 2: loop terms


class Axis(Expr):
    """A named iteration dimension with an extent, or one half of a split axis."""

    @classmethod
    def named(cls, name: StringLike, extent: i64Like) -> Axis:
        """An axis running 0 .. extent-1."""

    @classmethod
    def outer(cls, axis: Axis, tile: i64Like) -> Axis:
        """The tile number of `axis` split by `tile`: 0 .. ceil(extent/tile)-1."""

    @classmethod
    def inner(cls, axis: Axis, tile: i64Like) -> Axis:
        """The position inside a tile: 0 .. tile-1, with axis = outer*tile + inner."""


class Index(Expr):
    """An affine integer expression over axes."""

    @classmethod
    def axis(cls, axis: Axis) -> Index: ...

    @classmethod
    def const(cls, value: i64Like) -> Index: ...

    @classmethod
    def add(cls, a: Index, b: Index) -> Index: ...

    @classmethod
    def scale(cls, a: Index, factor: i64Like) -> Index: ...

    @classmethod
    def div(cls, a: Index, divisor: i64Like) -> Index:
        """Floor division by a positive constant (reshape needs it; not affine)."""

    @classmethod
    def mod(cls, a: Index, divisor: i64Like) -> Index:
        """Remainder by a positive constant, for a >= 0."""


class IndexList(Expr):
    """One Index per dimension of a buffer, as a cons list so analyses can recurse over it."""

    @classmethod
    def nil(cls) -> IndexList: ...

    @classmethod
    def cons(cls, head: Index, tail: IndexList) -> IndexList: ...


class Scalar(Expr):
    """A scalar value computed inside a loop body."""

    @classmethod
    def load(cls, buffer: StringLike, index: IndexList) -> Scalar:
        """buffer[index], one Index per dimension of the buffer."""

    @classmethod
    def const(cls, value: f64Like) -> Scalar: ...

    @classmethod
    def index(cls, index: Index) -> Scalar:
        """The value of an index, as a number of the program's dtype (`TExpr.arange`)."""

    @classmethod
    def unary(cls, op: StringLike, x: Scalar) -> Scalar: ...

    @classmethod
    def binary(cls, op: StringLike, a: Scalar, b: Scalar) -> Scalar: ...

    @classmethod
    def where(cls, cond: Scalar, a: Scalar, b: Scalar) -> Scalar: ...


class LoopKind(Expr):
    """How a loop is executed; the meaning of the loop never depends on it."""

    @classmethod
    def serial(cls) -> LoopKind: ...

    @classmethod
    def parallel(cls) -> LoopKind: ...

    @classmethod
    def parallel_sum(cls) -> LoopKind:
        """Parallel, with the sums into buffers its iterations share kept per thread and added
        in thread order after the loop (`eqsat.core.loops.privatized`)."""

    @classmethod
    def vector(cls, width: i64Like) -> LoopKind: ...

    @classmethod
    def unroll(cls, factor: i64Like) -> LoopKind: ...


class Stmt(Expr):
    """A statement of a loop program."""

    @classmethod
    def loop(cls, axis: Axis, kind: LoopKind, body: Stmt) -> Stmt:
        """for axis in range(extent): body"""

    @classmethod
    def seq(cls, first: Stmt, second: Stmt) -> Stmt: ...

    @classmethod
    def store(cls, buffer: StringLike, index: IndexList, value: Scalar) -> Stmt:
        """buffer[index] = value"""

    @classmethod
    def accumulate(
        cls, buffer: StringLike, index: IndexList, op: StringLike, value: Scalar
    ) -> Stmt:
        """buffer[index] = op(buffer[index], value), op in REDUCE_OPS."""

    @classmethod
    def alloc(cls, buffer: StringLike, shape: VecLike[i64, i64Like], body: Stmt) -> Stmt:
        """A temporary buffer of the program's dtype, live during `body`."""

    @classmethod
    def guard(cls, index: Index, limit: i64Like, body: Stmt) -> Stmt:
        """if index <= limit: body. Placed after extraction only (`eqsat.rewrites.masked_blocks`),
        never in an e-graph."""


class Footprint(Expr):
    """Analysis value: the one index list through which a statement touches a buffer."""

    @classmethod
    def at(cls, index: IndexList) -> Footprint: ...

    @classmethod
    def join(cls, a: Footprint, b: Footprint) -> Footprint:
        """Two different index lists: the statement touches the buffer in more than one way."""


SORTS: tuple[type[Expr], ...] = (TExpr, Axis, Index, IndexList, Scalar, LoopKind, Stmt, Footprint)

# ---------------------------------------------------------------- read-back


def _constructor_table() -> dict[str, Callable[..., Expr]]:
    return {
        f"{sort.__name__}.{name}": getattr(sort, name)
        for sort in SORTS
        for name in dir(sort)
        if not name.startswith("_")
    }


CONSTRUCTORS: dict[str, Callable[..., Expr]] = _constructor_table()


def sort_of(expr: Any) -> type[Expr]:
    """The sort of an expression built by a constructor (variables allowed inside)."""
    sort_name = str(get_callable_fn(expr)).split(".")[0]
    return next(sort for sort in SORTS if sort.__name__ == sort_name)


def to_term(expr: Any) -> Arg:
    """Read an egglog expression (built from the sorts above) back as a Term; a Term (the
    frontend's `Tensor.expr`, built by `texpr`) is returned as it is."""
    if isinstance(expr, Term):
        return expr
    return _to_term(expr, {})


def _to_term(expr: Any, read: dict[Any, Arg]) -> Arg:
    """`to_term`, reading each shared subexpression once: `read` maps egglog's declaration of
    an expression (equal for equal subexpressions) to its Term. A program's DAG (a residual
    stream read by every layer) is otherwise read once per path through it."""
    literal = get_literal_value(expr)
    if literal is not None:
        return literal
    declaration = expr.__egg_typed_expr__
    known = read.get(declaration)
    if known is not None:
        return known
    fn = str(get_callable_fn(expr))
    args = tuple(_to_term(a, read) for a in get_callable_args(expr))
    if fn.startswith("Vec"):
        term: Arg = args
    elif fn in CONSTRUCTORS:
        term = Term(fn, args)
    else:
        raise ValueError(f"not a term constructor: {fn}")
    read[declaration] = term
    return term


def to_egglog(term: Arg, built: dict[Term, Any] | None = None) -> Any:
    """Build the egglog expression for a Term (tuples become Vecs, literals stay literals).

    `built` holds the expressions of terms built before (calls that share it build each shared
    subterm once: egglog-python's constructors are slow enough for this to matter)."""
    if built is None:
        built = {}
    if isinstance(term, Term):
        expression = built.get(term)
        if expression is None:
            args = [to_egglog(a, built) for a in term.args]
            expression = built[term] = CONSTRUCTORS[term.op](*args)
        return expression
    if isinstance(term, tuple):
        return tuple(to_egglog(a, built) for a in term)
    return term
