"""C emission: a pure function from a loop program to C source.

Loops marked `Vector` become SIMD loops through the ISA table in `isa.py` (masked tail on
AVX-512, scalar remainder on AVX2). A vector loop storing to a large output at vector-aligned
addresses (`eqsat.core.loops.streamed_store`) uses non-temporal stores, fenced by each thread: the
output cannot stay in cache for its reader anyway, and the stores then skip reading each line
first. The emitter re-checks that a vector loop is safe to vectorize (a single store or
accumulate whose loads are contiguous or uniform along the loop, with ops that have a vector
form) and emits the scalar loop otherwise, so correctness never rests on the guard
of the rule that placed the mark. `Parallel` becomes an OpenMP loop, `Parallel-sum` one whose
threads sum into their own copies of the buffers its iterations share, added in thread order
after it (`eqsat.core.loops.privatized`), `Unroll(n)` a GCC pragma. The
copy that packs a register tile's rows (`eqsat.rewrites.packing`) loads a vector from each row
and interleaves them in registers instead of copying one element at a time.
Every identifier in the C comes from the lowering (in0, out0, t0, i0, k, ...), never from a user.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from itertools import product

from eqsat.backend_c.abi import C_TYPES, prototype
from eqsat.backend_c.build import (
    KERNEL_HEADERS,
    THREADS_PREAMBLE,
    VECTOR_HEADER,
    include_lines,
)
from eqsat.backend_c.isa import VECTOR_FUNCTIONS, VectorIsa, scalar_preamble, sign_helper
from eqsat.backend_c.vmath import vector_math
from eqsat.core.loops import (
    PARALLEL_KINDS,
    REGISTER_BUDGET,
    RegisterTile,
    access_kind,
    axis_extent,
    buffers_accessed,
    depends_on,
    has_remainder,
    horizontal,
    moves_with,
    pieces_of,
    privatized,
    register_tile,
    split_tile,
    statements_in,
    streamed_store,
    top_statements,
    transposed_copy,
    trip_runs,
    trips_here,
    unit_stride_axes,
    vectorizable,
)
from eqsat.core.term import REDUCE_IDENTITY, LoopProgram, Term, index_items, index_list
from eqsat.extract.machine import CACHE_LINE_BYTES, rows_share_sets

_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_SCALAR_UNARY = {
    "neg": "(-{x})",
    "abs": "fabs{f}({x})",
    "exp": "exp{f}({x})",
    "log": "log{f}({x})",
    "sqrt": "sqrt{f}({x})",
    "tanh": "tanh{f}({x})",
    "sigmoid": "(1 / (1 + exp{f}(-({x}))))",
    "relu": "eq_max({x}, 0)",
    "log1p": "log1p{f}({x})",
    "expm1": "expm1{f}({x})",
    "sin": "sin{f}({x})",
    "cos": "cos{f}({x})",
    "sign": "eq_sign({x})",
    "floor": "floor{f}({x})",
    "ceil": "ceil{f}({x})",
    "rint": "rint{f}({x})",  # to nearest, ties to even (the default rounding mode), as numpy
    "trunc": "trunc{f}({x})",
    "erf": "erf{f}({x})",
}
_SCALAR_BINARY = {
    "add": "({a} + {b})",
    "sub": "({a} - {b})",
    "mul": "({a} * {b})",
    "div": "({a} / {b})",
    "max": "eq_max({a}, {b})",
    "min": "eq_min({a}, {b})",
    "lt": "({a} < {b})",
    "le": "({a} <= {b})",
    "gt": "({a} > {b})",
    "ge": "({a} >= {b})",
    "eq": "({a} == {b})",
    "ne": "({a} != {b})",
}


def _identifier(name: str) -> str:
    if not _IDENTIFIER.match(name):
        raise ValueError(f"not a C identifier: {name!r} (names must come from the lowering)")
    return name


def dense_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Elements between consecutive indices of each dimension of a row-major array."""
    strides = [1] * len(shape)
    for d in reversed(range(len(shape) - 1)):
        strides[d] = strides[d + 1] * shape[d + 1]
    return tuple(strides)


def temporary_strides(shape: tuple[int, ...], item_bytes: int) -> tuple[int, ...]:
    """`dense_strides`, except that rows a multiple of L1_SET_SPAN bytes long are one cache line
    longer: such rows put the same column of consecutive rows in the same cache sets, so a
    register tile's rows and a column block's rows evict each other from L1 and L2 (relu(x @ W
    + b), 512x1024 @ 1024x1024 at AVX-512, its column blocks of a 512 x 1024 temporary: 3.89 ->
    3.60 ms, docs/MEASUREMENTS.md). Inputs and outputs are the caller's, dense."""
    if len(shape) < 2 or not rows_share_sets(shape[-1] * item_bytes):
        return dense_strides(shape)
    row = shape[-1] + CACHE_LINE_BYTES // item_bytes
    return (*(rows * row for rows in dense_strides(shape[:-1])), 1)


def axis_var(axis: Term) -> str:
    """The C variable of a loop over `axis`: i0, i0_o16, i0_i16, ..."""
    if axis.op == "Axis.named":
        return _identifier(str(axis.args[0]))
    parent = axis.args[0]
    assert isinstance(parent, Term)
    suffix = "o" if axis.op == "Axis.outer" else "i"
    return f"{axis_var(parent)}_{suffix}{axis.args[1]}"


class _Emitter:
    def __init__(self, program: LoopProgram, isa: str, threads: int | None) -> None:
        self.threads = threads
        self.dtype = program.dtype
        self.ctype = C_TYPES[program.dtype]
        self.suffix = "f" if program.dtype == "float32" else ""
        self.item_bytes = 4 if program.dtype == "float32" else 8
        self.vector = VectorIsa(isa, program.dtype) if isa != "scalar" else None
        self.inputs = tuple(f"in{i}" for i in range(len(program.inputs)))  # read-only buffers
        self.shapes: dict[str, tuple[int, ...]] = {
            name: shape for name, (_, shape) in zip(self.inputs, program.inputs, strict=True)
        }
        self.shapes.update({f"out{k}": shape for k, shape in enumerate(program.outputs)})
        # elements between consecutive indices of each dimension: row-major, and a temporary's
        # rows padded (`temporary_strides`)
        self.strides = {name: dense_strides(shape) for name, shape in self.shapes.items()}
        self.isa = isa
        self.scope: list[Term] = []
        self.fixed: dict[Term, str] = {}  # axes of unrolled loops -> their value in this copy
        # In a transposed block (`transposed_blocks_loop`): (load, row of the block) -> the
        # vector register holding that load's values along the inner axis, and the row emitted.
        self.registers: dict[tuple[Term, int], str] = {}
        self.block_row: int | None = None
        self.math_ops: set[str] = set()  # ops of VECTOR_FUNCTIONS emitted (vmath's functions)
        self.uses_sign = False  # a scalar sign was emitted (it calls `isa.sign_helper`'s)
        self.uses_prod = False  # a horizontal product was emitted (`horizontal_helper("prod")`)
        self.parallel_depth = 0
        self.renamed: dict[str, str] = {}  # buffer -> this thread's copy (`thread_copy`)
        self.has_region = False  # an OpenMP parallel region was emitted (THREADS_PREAMBLE)
        # Non-temporal stores emitted since the last fence: fenced once per iteration of the
        # parallel loop around them, or at the end of the kernel (a fence after every short
        # vector loop made such nests much slower; docs/MEASUREMENTS.md).
        self.unfenced = False
        self.reread = _reread_buffers(program.body)  # stored, then loaded or accumulated
        self.lines: list[str] = []
        self.depth = 1
        self.functions: list[str] = []  # definitions of the `outlined` blocks, eq_tile0, ...
        self.outlining = False  # inside an `outlined` block

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    @property
    def lanes(self) -> int:
        """Elements per vector register (1 at the scalar level)."""
        return self.vector.lanes if self.vector is not None else 1

    # ------------------------------------------------------------ indices and scalars

    def axis_expr(self, axis: Term) -> str:
        """C expression of an axis: its loop variable, or outer*tile + inner of a split."""
        if axis in self.fixed:
            return self.fixed[axis]
        if axis in self.scope:
            return axis_var(axis)
        tile = split_tile(axis, self.scope)
        if tile is not None:
            outer = self.axis_expr(Term("Axis.outer", (axis, tile)))
            inner = self.axis_expr(Term("Axis.inner", (axis, tile)))
            return f"({outer} * {tile} + {inner})"
        raise ValueError(f"axis used outside its loop: {axis}")

    def trips_expr(self, axis: Term) -> str:
        """C expression of the iterations of a loop over `axis` here: a constant, or for a
        split piece in a remainder tile (`eqsat.core.loops.trip_runs`), the part of the tile
        left before the extent, from the enclosing pieces."""
        runs = trip_runs(axis)
        if len(runs) == 1:
            return str(next(iter(runs)))
        parent, tile = axis.args
        assert isinstance(parent, Term)
        if axis.op == "Axis.outer":
            return f"(({self.trips_expr(parent)} + {int(tile) - 1}) / {tile})"  # type: ignore[arg-type]
        outer = self.axis_expr(Term("Axis.outer", (parent, tile)))
        left = f"({self.trips_expr(parent)} - {outer} * {tile})"
        return f"({left} < {tile} ? {left} : {tile})"

    def index_expr(self, index: Term) -> str:
        a = index.args
        match index.op:
            case "Index.axis":
                return self.axis_expr(a[0])  # type: ignore[arg-type]
            case "Index.const":
                return str(a[0])
            case "Index.add":
                return f"({self.index_expr(a[0])} + {self.index_expr(a[1])})"  # type: ignore
            case "Index.scale":
                return f"({self.index_expr(a[0])} * {a[1]})"  # type: ignore[arg-type]
            case "Index.div":
                return f"({self.index_expr(a[0])} / {a[1]})"  # type: ignore[arg-type]
            case "Index.mod":
                return f"({self.index_expr(a[0])} % {a[1]})"  # type: ignore[arg-type]
        raise ValueError(f"not an index: {index.op}")

    def element(self, buffer: str, index_list: Term) -> str:
        """`buffer[flat offset]`, by the buffer's strides."""
        terms = []
        for item, stride in zip(index_items(index_list), self.strides[buffer], strict=True):
            expr = self.index_expr(item)
            terms.append(expr if stride == 1 else f"{expr} * {stride}")
        name = self.renamed.get(buffer, buffer)  # a thread's copy in a parallel-sum loop
        return f"{_identifier(name)}[{' + '.join(terms) or '0'}]"

    def elements(self, buffer: str) -> int:
        """The elements `buffer` takes in memory, its rows' padding included."""
        shape, strides = self.shapes[buffer], self.strides[buffer]
        return shape[0] * strides[0] if shape else 1

    def literal(self, value: float) -> str:
        if math.isnan(value):
            return "NAN"
        if math.isinf(value):
            return "INFINITY" if value > 0 else "(-INFINITY)"
        return f"{value!r}{self.suffix}" if value >= 0 else f"({value!r}{self.suffix})"

    def scalar(self, s: Term) -> str:
        a = s.args
        match s.op:
            case "Scalar.load":
                return self.element(str(a[0]), a[1])  # type: ignore[arg-type]
            case "Scalar.const":
                return self.literal(float(a[0]))  # type: ignore[arg-type]
            case "Scalar.index":
                return f"({self.ctype})({self.index_expr(a[0])})"  # type: ignore[arg-type]
            case "Scalar.unary":
                x = self.scalar(a[1])  # type: ignore[arg-type]
                self.uses_sign |= a[0] == "sign"
                return _SCALAR_UNARY[str(a[0])].format(x=x, f=self.suffix)
            case "Scalar.binary":
                x, y = self.scalar(a[1]), self.scalar(a[2])  # type: ignore[arg-type]
                text = _SCALAR_BINARY[str(a[0])].format(a=x, b=y, f=self.suffix)
                return f"({self.ctype}){text}" if a[0] not in _ARITH else text
            case "Scalar.where":
                c, x, y = (self.scalar(t) for t in a)  # type: ignore[arg-type]
                return f"({c} != 0 ? {x} : {y})"
        raise ValueError(f"not a scalar: {s.op}")

    def vector_scalar(self, s: Term, axis: Term, mask: str | None) -> str:
        """Vector expression of `s` for the lanes of a SIMD loop over `axis`."""
        assert self.vector is not None
        a = s.args
        match s.op:
            case "Scalar.load":
                if (s, self.block_row) in self.registers:  # a transposed block's column
                    return self.registers[(s, self.block_row)]
                element = self.element(str(a[0]), a[1])  # type: ignore[arg-type]
                if access_kind(a[1], axis) == "uniform":  # type: ignore[arg-type]
                    return self.vector.broadcast(element)
                return self.vector.load(f"&{element}", mask)
            case "Scalar.const":
                return self.vector.broadcast(self.literal(float(a[0])))  # type: ignore[arg-type]
            case "Scalar.index":
                first = f"({self.ctype})({self.index_expr(a[0])})"  # type: ignore[arg-type]
                if access_kind(index_list([a[0]]), axis) == "uniform":  # type: ignore[list-item]
                    return self.vector.broadcast(first)
                return self.vector.lane_values(first)
            case "Scalar.unary":
                if a[0] in VECTOR_FUNCTIONS:
                    self.math_ops.add(str(a[0]))
                return self.vector.unary(str(a[0]), self.vector_scalar(a[1], axis, mask))  # type: ignore
            case "Scalar.binary":
                x = self.vector_scalar(a[1], axis, mask)  # type: ignore[arg-type]
                y = self.vector_scalar(a[2], axis, mask)  # type: ignore[arg-type]
                return self.vector.binary(str(a[0]), x, y)
            case "Scalar.where":
                c, x, y = (self.vector_scalar(t, axis, mask) for t in a)  # type: ignore
                nonzero = self.vector.compare("ne", c, self.vector.broadcast("0"))
                return self.vector.select(nonzero, x, y)
        raise ValueError(f"not a scalar: {s.op}")

    # ------------------------------------------------------------ statements

    def statement(self, s: Term) -> None:
        a = s.args
        match s.op:
            case "Stmt.loop":
                self.loop(a[0], a[1], a[2])  # type: ignore[arg-type]
            case "Stmt.seq":
                self.sequence(top_statements(s))
            case "Stmt.store":
                self.line(f"{self.element(str(a[0]), a[1])} = {self.scalar(a[2])};")  # type: ignore
            case "Stmt.accumulate":
                target = self.element(str(a[0]), a[1])  # type: ignore[arg-type]
                value = self.scalar(a[3])  # type: ignore[arg-type]
                if a[2] == "sum":  # the compound form: `t += v`, not `t = t + v`
                    self.line(f"{target} += {value};")
                else:
                    self.line(f"{target} = {self.scalar_combine(str(a[2]), target, value)};")
            case "Stmt.guard":
                self.line(f"if ({self.index_expr(a[0])} <= {a[1]}) {{")  # type: ignore[arg-type]
                self.depth += 1
                self.statement(a[2])  # type: ignore[arg-type]
                self.depth -= 1
                self.line("}")
            case "Stmt.alloc":
                name, shape = _identifier(str(a[0])), tuple(a[1])  # type: ignore[arg-type]
                self.shapes[name] = shape  # type: ignore[assignment]
                self.strides[name] = temporary_strides(shape, self.item_bytes)  # type: ignore[arg-type]
                count = self.elements(name)
                size = -(-count * self.item_bytes // 64) * 64
                if size <= STACK_TEMPORARY_BYTES:  # no allocator call per trip of a loop
                    self.line("{")
                    self.depth += 1
                    self.line(f"{self.ctype} {name}[{count}] __attribute__((aligned(64)));")
                    self.statement(a[2])  # type: ignore[arg-type]
                    self.depth -= 1
                    self.line("}")
                    return
                self.line(f"{self.ctype} *restrict {name} = aligned_alloc(64, {size});")
                self.statement(a[2])  # type: ignore[arg-type]
                self.line(f"free({name});")
            case _:
                raise ValueError(f"not a statement: {s.op}")

    def sequence(self, statements: list[Term]) -> None:
        """Statements run one after the other. A statement that fills exactly the accumulators of
        the register tile right after it with a constant (`fills_tile`: a product's zeroed
        output rows) is not emitted: the tile's accumulators start at the constant instead of
        loading what it stored (on AVX-512 a load from a masked store waits for the store). So
        is one that a loop nest right after it can take down to its tile (`fill_sunk`: a
        product's zeroed rows, then its column panels)."""
        position = 0
        while position < len(statements):
            here = statements[position]
            after = statements[position + 1] if position + 1 < len(statements) else None
            if after is not None and self.fills_tile(here, after):
                self.loop(*after.args, fill=here)  # type: ignore[arg-type]
                position += 2
            elif after is not None and (sunk := self.fill_sunk(here, after)) is not None:
                self.statement(sunk)
                position += 2
            else:
                self.statement(here)
                position += 1

    def fill_sunk(self, fill: Term, following: Term) -> Term | None:
        """`following` with `fill` moved down to right before the register tile inside it whose
        accumulators it fills (`fills_tile`), where that does the same: `fill` stores a constant
        over loops that run in order (a product's zeroed rows), and on the way down `following`
        is serial, unrolled or parallel loops (FILL_SINK_KINDS), allocations and sequences
        whose other statements do not touch the filled buffer. Each loop there runs over an axis
        `fill` loops over too (each iteration then fills its own part of it) or over `a.outer(T)`
        where `fill` loops over a named axis `a` (it then fills `a.inner(T)`: a column panel).
        None where there is no such tile, or the tile reads the buffer. 1607x39 @ 39x292 at
        AVX2 on 2 threads ran 1.31x as fast (docs/MEASUREMENTS.md)."""
        store = _loops_around(fill)[1]
        if store.op != "Stmt.store" or store.args[2].op != "Scalar.const":  # type: ignore[union-attr]
            return None
        return self.sunk(fill, following, str(store.args[0]))

    def sunk(self, fill: Term, statement: Term, buffer: str) -> Term | None:
        """`statement` with `fill` of `buffer` moved down into it (`fill_sunk`), or None."""
        match statement.op:
            case "Stmt.loop":
                axis, kind, body = statement.args
                assert isinstance(axis, Term) and isinstance(kind, Term) and isinstance(body, Term)
                if kind.op not in FILL_SINK_KINDS:
                    return None
                if self.fills_tile(fill, statement):
                    accumulate = self.serial_tile(statement).accumulate  # type: ignore[union-attr]
                    if buffer in _reread_buffers(accumulate.args[3]):  # type: ignore[arg-type]
                        return None  # it reads elements that other iterations fill
                    return Term("Stmt.seq", (fill, statement))
                loops, store = _loops_around(fill)
                axes = [loop_axis for loop_axis, _ in loops]
                # each iteration fills its own elements: the buffer is indexed by the named axis
                # the loop walks, plainly
                plain = Term("Index.axis", (pieces_of(axis)[-1],))
                if plain not in index_items(store.args[1]):  # type: ignore[arg-type]
                    return None
                if axis in axes:  # the iteration's part of the fill
                    loops = [(a, k) for a, k in loops if a != axis]
                elif axis.op == "Axis.outer" and axis.args[0] in axes:  # a panel of it
                    panel = Term("Axis.inner", axis.args)
                    loops = [(panel if a == axis.args[0] else a, k) for a, k in loops]
                else:
                    return None
                inside = self.sunk(_nest_loops(loops, store), body, buffer)
                return None if inside is None else Term("Stmt.loop", (axis, kind, inside))
            case "Stmt.alloc":
                name, shape, body = statement.args
                assert isinstance(body, Term)
                inside = self.sunk(fill, body, buffer)
                return None if inside is None else Term("Stmt.alloc", (name, shape, inside))
            case "Stmt.seq":
                first, second = statement.args
                assert isinstance(first, Term) and isinstance(second, Term)
                if buffer not in buffers_accessed(first):
                    inside = self.sunk(fill, second, buffer)
                    return None if inside is None else Term("Stmt.seq", (first, inside))
                if buffer not in buffers_accessed(second):
                    inside = self.sunk(fill, first, buffer)
                    return None if inside is None else Term("Stmt.seq", (inside, second))
        return None

    def fills_tile(self, fill: Term, following: Term) -> bool:
        """Whether `fill` is loops storing one constant into the target of the register tile
        `following` over exactly the tile's axes: the elements the tile's accumulators hold."""
        tile = self.serial_tile(following)
        if tile is None:
            return False
        axes, store = _loops_around(fill)
        return (
            store.op == "Stmt.store"
            and store.args[2].op == "Scalar.const"  # type: ignore[union-attr]
            and store.args[:2] == tile.accumulate.args[:2]
            and all(kind.op in FILL_LOOP_KINDS for _, kind in axes)
            and len(axes) == len(_tile_axes(tile))
            and {axis for axis, _ in axes} == set(_tile_axes(tile))
        )

    def loop(
        self, axis: Term, kind: Term, body: Term, tiled: bool = True, fill: Term | None = None
    ) -> None:
        """A loop statement; `tiled=False` emits a register tile's plain loops instead. `fill`
        (`fills_tile`) runs before the loop, or seeds its register tile's accumulators."""
        if kind.op == "LoopKind.vector" and self.vector is not None and vectorizable(axis, body):
            self.vector_loop(axis, body)
            return
        serial = kind.op == "LoopKind.serial" and tiled
        tile = register_tile(axis, body, self.isa, self.lanes) if serial else None
        if not self.outlining and (
            (tile is not None and self.takes_every_register(tile))
            or (serial and fill is None and self.around_full_tile(body))
        ):
            with self.outlined():
                self.loop(axis, kind, body, tiled, fill)
            return
        if tile is not None:
            self.register_tile_loop(axis, kind, body, tile, fill)
            return
        if fill is not None:
            self.statement(fill)
        transpose = self.rows_transpose(axis, body) if kind.op == "LoopKind.serial" else None
        if transpose is not None:
            self.transposed_rows_loop(axis, body, transpose)
            return
        across = transposed_copy(axis, kind, body) if self.vector is not None else None
        if across is not None:
            self.transposed_blocks_loop(*across)
            return
        var, extent = axis_var(axis), self.trips_expr(axis)
        parallel = kind.op in PARALLEL_KINDS
        region = parallel and not self.in_parallel
        shared = privatized(axis, body) if region and kind.op == "LoopKind.parallel_sum" else ()
        if region:
            self.has_region = True
            self.line("{")
            self.depth += 1
            self.line("eq_team team = {sched_getcpu(), 0};")
            self.line(
                "#pragma omp parallel"
                + ("" if self.threads is None else f" num_threads({self.threads})")
            )
            self.line("{")
            self.line("eq_join(&team);")
            for buffer in shared:
                self.thread_copy(buffer)
            # iterations that may skip their work (a guard) go round-robin: a causal mask's
            # blocks below the diagonal grow with the row, contiguous halves would not balance
            guarded = any(x.op == "Stmt.guard" for x in statements_in(body))
            self.line(f"#pragma omp for schedule(static{', 1' if guarded else ''}) nowait")
        elif kind.op == "LoopKind.unroll":
            self.line(f"#pragma GCC unroll {kind.args[0]}")
        self.line(f"for (int64_t {var} = 0; {var} < {extent}; ++{var}) {{")
        self.parallel_depth += parallel
        self.renamed.update({buffer: f"{buffer}_sum" for buffer in shared})
        self.nested(axis, body)
        for buffer in shared:
            del self.renamed[buffer]
        self.parallel_depth -= parallel
        if region and self.unfenced:  # each thread fences its own streamed stores
            self.depth += 1
            self.line("_mm_sfence();")
            self.depth -= 1
            self.unfenced = False
        self.line("}")
        if region:
            if shared:
                self.add_thread_copies(shared)
            self.line("eq_wait_for_team(&team);")
            self.line("}")
            self.depth -= 1
            self.line("}")

    def thread_copy(self, buffer: str) -> None:
        """Declare and zero this thread's copy of `buffer`, which a parallel-sum loop sums into
        (`eqsat.core.loops.privatized`), at the top of the parallel region."""
        name, count = _identifier(f"{buffer}_sum"), self.elements(buffer)
        size = self.copy_bytes(buffer)
        if size <= STACK_TEMPORARY_BYTES:
            self.line(f"{self.ctype} {name}[{count}] __attribute__((aligned(64)));")
        else:
            self.line(f"{self.ctype} *restrict {name} = aligned_alloc(64, {size});")
        self.line(f"for (int64_t eq_e = 0; eq_e < {count}; ++eq_e) {name}[eq_e] = 0;")

    def add_thread_copies(self, shared: tuple[str, ...]) -> None:
        """After a parallel-sum loop: each thread adds its copies into the buffers, thread 0
        first, then 1, ... (the same order on every call, so the same sums), and frees the
        copies it allocated."""
        self.line("#pragma omp for ordered schedule(static, 1)")
        self.line("for (int eq_t = 0; eq_t < omp_get_num_threads(); ++eq_t) {")
        self.depth += 1
        self.line("#pragma omp ordered")
        self.line("{")
        self.depth += 1
        for buffer in shared:
            count, name = self.elements(buffer), _identifier(buffer)
            self.line(f"for (int64_t eq_e = 0; eq_e < {count}; ++eq_e)")
            self.line(f"    {name}[eq_e] += {name}_sum[eq_e];")
        self.depth -= 1
        self.line("}")
        self.depth -= 1
        self.line("}")
        for buffer in shared:
            if self.copy_bytes(buffer) > STACK_TEMPORARY_BYTES:
                self.line(f"free({buffer}_sum);")

    def copy_bytes(self, buffer: str) -> int:
        """The bytes of a thread's copy of `buffer`, whole 64-byte lines."""
        return -(-self.elements(buffer) * self.item_bytes // 64) * 64

    def rows_transpose(self, axis: Term, body: Term) -> _RowsTranspose | None:
        """The transposing copy for `for axis: for r unroll(R): pk[..., axis, r] = src[...]`,
        a packing copy of a register tile's rows (`eqsat.rewrites.packing`), or None when the
        loop is not such a copy. It requires: every run of r has R trips, R > 1 divides the
        lanes, `src` is contiguous along `axis` and walks a whole dimension with r."""
        vector = self.vector
        if vector is None or body.op != "Stmt.loop" or body.args[1].op != "LoopKind.unroll":  # type: ignore[union-attr]
            return None
        rows_axis, _, copy = body.args
        assert isinstance(rows_axis, Term) and isinstance(copy, Term)
        runs = trip_runs(rows_axis)
        rows = next(iter(runs))
        if len(runs) != 1 or rows < 2 or vector.lanes % rows or copy.op != "Stmt.store":
            return None
        target, value = copy.args[1], copy.args[2]
        assert isinstance(target, Term) and isinstance(value, Term)
        if self.shapes[str(copy.args[0])][-1] != rows:
            return None
        if value.op != "Scalar.load" or index_items(target)[-2:] != [
            Term("Index.axis", (axis,)),
            Term("Index.axis", (rows_axis,)),
        ]:
            return None
        source, source_index = str(value.args[0]), value.args[1]
        assert isinstance(source_index, Term)
        if access_kind(source_index, axis) != "contiguous":
            return None
        items = index_items(source_index)
        moving = [d for d, item in enumerate(items) if moves_with(item, rows_axis)]
        if len(moving) != 1 or items[moving[0]].op != "Index.axis":
            return None
        if items[moving[0]].args[0] not in unit_stride_axes(rows_axis):
            return None
        row_stride = self.strides[source][moving[0]]
        return _RowsTranspose(rows_axis, copy, rows, row_stride)

    def transposed_rows_loop(self, axis: Term, body: Term, transpose: _RowsTranspose) -> None:
        """`rows_transpose`'s copy: for each `lanes` values of `axis`, one vector load from
        each of the R rows, interleaved in log2(R) rounds of `VectorIsa.zip` into R vectors
        stored side by side; then the plain loop for the values left."""
        vector = self.vector
        assert vector is not None
        var, extent, lanes = axis_var(axis), self.trips_expr(axis), vector.lanes
        self.line("{")
        self.depth += 1
        self.line(f"int64_t {var} = 0;")
        self.line(f"for (; {var} + {lanes} <= {extent}; {var} += {lanes}) {{")
        self.depth += 1
        self.scope.append(axis)
        self.fixed[transpose.rows_axis] = "0"
        target = self.element(str(transpose.copy.args[0]), transpose.copy.args[1])  # type: ignore[arg-type]
        source = self.element(*transpose.copy.args[2].args)  # type: ignore[union-attr]
        del self.fixed[transpose.rows_axis]
        self.scope.pop()
        names = self.interleaved_rows(source, transpose.row_stride, transpose.rows, var)
        for j, name in enumerate(names):
            self.line(vector.store(f"&{target}" + (f" + {j * lanes}" if j else ""), name))
        self.depth -= 1
        self.line("}")
        self.line(f"for (; {var} < {extent}; ++{var}) {{")
        self.nested(axis, body)
        self.line("}")
        self.depth -= 1
        self.line("}")

    def transposed_blocks_loop(self, outer: Term, body: Term, loads: list[Term]) -> None:
        """`transposed_copy`'s nest: for each block of lanes values of `outer` and of the inner
        axis, one vector along `outer` from each of the block's rows of every transposed load,
        transposed in log2(lanes) rounds of `VectorIsa.zip`; then a vector store along the inner
        axis for each `outer` value, the transposed loads read from registers. The values of
        either axis left after whole blocks run the plain loops."""
        vector = self.vector
        assert vector is not None
        inner, _, store = body.args
        assert isinstance(inner, Term) and isinstance(store, Term)
        lanes = vector.lanes
        a, b = axis_var(outer), axis_var(inner)
        a_extent, b_extent = self.trips_expr(outer), self.trips_expr(inner)
        self.line("{")
        self.depth += 1
        self.line(f"int64_t {a} = 0;")
        self.line(f"for (; {a} + {lanes} <= {a_extent}; {a} += {lanes}) {{")
        self.depth += 1
        self.scope.append(outer)
        self.line(f"int64_t {b} = 0;")
        self.line(f"for (; {b} + {lanes} <= {b_extent}; {b} += {lanes}) {{")
        self.depth += 1
        self.scope.append(inner)
        for number, load in enumerate(loads):
            first = self.element(str(load.args[0]), load.args[1])  # type: ignore[arg-type]
            stride = self.row_stride(load, inner)
            columns = self.interleaved_rows(first, stride, lanes, f"{b}_t{number}")
            for i, name in enumerate(columns):
                self.registers[(load, i)] = name
        for i in range(lanes):
            self.fixed[outer] = f"({a} + {i})"
            self.block_row = i
            value = self.vector_scalar(store.args[2], inner, None)  # type: ignore[arg-type]
            target = self.element(str(store.args[0]), store.args[1])  # type: ignore[arg-type]
            self.line(vector.store(f"&{target}", value))
        del self.fixed[outer]
        self.block_row = None
        self.registers.clear()
        self.scope.pop()
        self.depth -= 1
        self.line("}")
        self.line(f"for (; {b} < {b_extent}; ++{b}) {{")
        self.depth += 1
        self.line(f"for (int64_t {a}_in = 0; {a}_in < {lanes}; ++{a}_in) {{")
        self.fixed[outer] = f"({a} + {a}_in)"
        self.nested(inner, store)
        del self.fixed[outer]
        self.line("}")
        self.depth -= 1
        self.line("}")
        self.scope.pop()
        self.depth -= 1
        self.line("}")
        self.line(f"for (; {a} < {a_extent}; ++{a}) {{")
        self.nested(outer, body)
        self.line("}")
        self.depth -= 1
        self.line("}")

    def row_stride(self, load: Term, axis: Term) -> int:
        """Elements between `load`'s elements at consecutive values of `axis`, which it moves
        with through one plain unit-stride index (`eqsat.core.loops.transposed_loads`)."""
        buffer = str(load.args[0])
        items = index_items(load.args[1])  # type: ignore[arg-type]
        moving = next(d for d, item in enumerate(items) if moves_with(item, axis))
        return self.strides[buffer][moving]

    def interleaved_rows(self, first: str, stride: int, rows: int, prefix: str) -> list[str]:
        """Declares a vector loaded from each of `rows` rows, element `first` and every
        `stride` elements after it, then interleaves them lane by lane in log2(rows) rounds of
        `VectorIsa.zip`, each pairing a vector with the one half the list away (the list keeps
        lane order); returns the interleaved vectors' names, in order. It requires: `rows` is a
        power of two that divides the lanes."""
        vector = self.vector
        assert vector is not None
        names = [f"{prefix}_row{r}" for r in range(rows)]
        for r, name in enumerate(names):
            address = f"&{first}" + (f" + {r * stride}" if r else "")
            self.line(f"const {vector.vtype} {name} = {vector.load(address)};")
        for number in range(rows.bit_length() - 1):
            half, zipped = len(names) // 2, []
            for j in range(half):
                low, high = vector.zip(names[j], names[j + half])
                zipped += [f"{prefix}_z{number}_{2 * j}", f"{prefix}_z{number}_{2 * j + 1}"]
                self.line(f"const {vector.vtype} {zipped[-2]} = {low};")
                self.line(f"const {vector.vtype} {zipped[-1]} = {high};")
            names = zipped
        return names

    @property
    def in_parallel(self) -> bool:
        """Inside a parallel loop, a nested one runs serially (OpenMP nesting is off)."""
        return self.parallel_depth > 0

    def nested(self, axis: Term, body: Term) -> None:
        self.scope.append(axis)
        self.depth += 1
        self.statement(body)
        self.depth -= 1
        self.scope.pop()

    def tile_edges(self, tile: RegisterTile) -> list[Term]:
        """The split pieces that clip a register tile's axes to their extent from outside the
        tile (a remainder tile of a loop around it): the tile's copies cannot know their
        iterations, so `register_tile_loop` emits a variant of the tile per number of
        iterations they can have, chosen at run time."""
        inside = set(_tile_axes(tile))
        edges: list[Term] = []

        def visit(axis: Term) -> None:
            if not has_remainder(axis):
                return
            parent, tile_size = axis.args
            assert isinstance(parent, Term)
            if axis.op == "Axis.inner" and Term("Axis.outer", (parent, tile_size)) not in inside:
                edges.append(axis)
            else:
                visit(parent)

        for axis in _tile_axes(tile):
            visit(axis)
        return list(dict.fromkeys(edges))

    def tile_copies(
        self, tile: RegisterTile, assumed: Mapping[Term, int]
    ) -> list[tuple[dict[Term, str], str | None]]:
        """One binding of the tile's unrolled axes (and vector-lane starts) per accumulator,
        with the lane mask of a partial vector (None for a whole one). A vector axis clipped
        from outside the tile (not in `assumed`) gets masks computed at run time."""
        copies: list[dict[Term, int]] = [{}]
        for axis in tile.unrolled:
            copies = [
                {**c, axis: v}
                for c in copies
                for v in range(trips_here(axis, c.__getitem__, assumed))
            ]
        masked: list[tuple[dict[Term, int], str | None]] = [(c, None) for c in copies]
        vector_axis = tile.vector_axis
        if vector_axis is not None:
            assert self.vector is not None
            lanes, masked = self.vector.lanes, []
            outside = vector_axis in self.tile_edges(tile) and vector_axis not in assumed
            for c in copies:
                if outside:
                    trips = self.trips_expr(vector_axis)
                    for start in range(0, axis_extent(vector_axis), lanes):
                        left = f"{trips} - {start}"
                        count = f"({left} >= {lanes} ? {lanes} : {left} > 0 ? {left} : 0)"
                        masked.append(({**c, vector_axis: start}, self.vector.tail_mask(count)))
                    continue
                in_copy = trips_here(vector_axis, c.__getitem__, assumed)
                for start in range(0, in_copy, lanes):
                    short = in_copy - start < lanes
                    mask = self.vector.tail_mask(str(in_copy - start)) if short else None
                    masked.append(({**c, vector_axis: start}, mask))
        return [({a: str(v) for a, v in c.items()}, mask) for c, mask in masked]

    def register_tile_loop(
        self, axis: Term, kind: Term, body: Term, tile: RegisterTile, fill: Term | None
    ) -> None:
        """Unroll-and-jam with register promotion: the tile's accumulators are loaded into
        registers before the loop (or set to the constant of `fill`, `fills_tile`), updated in
        it, and stored after it (eqsat.core.loops.RegisterTile). Where a loop outside the tile
        clips a tile axis to its extent (`tile_edges`), one variant of the tile is emitted for
        each number of iterations the axis can have, chosen at run time (on AVX-512, masks
        computed at run time clip the vector axis instead). A variant's partial vector is masked
        (`VectorIsa.masked_tile`); on an ISA without masks the variant runs the plain loops."""
        assert self.vector is not None or tile.vector_axis is None
        # AVX-512 clips the vector axis by masks computed at run time (cheap mask registers);
        # AVX2 gets a variant per trip count, only a partial vector masked (a masked load of
        # every operand vector of a whole tile made a 1024-cubed product 1.5x slower there)
        runtime_masks = self.vector is not None and self.vector.masked_tail
        masks = self.vector is not None and self.vector.masked_tile
        edges = [e for e in self.tile_edges(tile) if not (runtime_masks and e == tile.vector_axis)]
        choices = [sorted(trip_runs(edge), reverse=True) for edge in edges]  # full tiles first
        variants = [dict(zip(edges, trips, strict=True)) for trips in product(*choices)]
        for n, assumed in enumerate(variants):
            if len(variants) > 1:
                test = " && ".join(f"{self.trips_expr(e)} == {v}" for e, v in assumed.items())
                opening = "if" if n == 0 else "} else if"
                self.line(f"{opening} ({test}) {{" if n < len(variants) - 1 else "} else {")
                self.depth += 1
            copies = self.tile_copies(tile, assumed)
            if not masks and any(mask is not None for _, mask in copies):
                self.loop(axis, kind, body, tiled=False, fill=fill)
            else:
                self.promoted_tile(axis, tile, copies, fill)
            if len(variants) > 1:
                self.depth -= 1
        if len(variants) > 1:
            self.line("}")

    def promoted_tile(
        self,
        axis: Term,
        tile: RegisterTile,
        copies: list[tuple[dict[Term, str], str | None]],
        fill: Term | None,
    ) -> None:
        """The register tile's loop with one accumulator per copy (`tile_copies`), each loaded
        from its element or set to the constant `fill` stores there."""
        buffer, target, op, value = tile.accumulate.args
        assert isinstance(target, Term) and isinstance(value, Term)
        vector = self.vector if tile.vector_axis is not None else None
        inner_axes = _tile_axes(tile)
        self.line("{")
        self.depth += 1
        names: dict[str, str] = {}  # each distinct lane mask computed once, before the loop
        for _, mask in copies:
            if mask is not None and mask not in names:
                assert vector is not None
                names[mask] = f"lanes{len(names)}"
                self.line(f"const {vector.mask_type} {names[mask]} = {mask};")
        copies = [(binding, names.get(mask, mask)) for binding, mask in copies]  # type: ignore
        enclosing = self.scope[-1] if self.scope else None
        self.scope.extend(inner_axes)
        elements = []
        for n, (binding, mask) in enumerate(copies):
            self.fixed.update(binding)
            element = self.element(str(buffer), target)
            elements.append(element)
            if fill is not None:
                constant = _loops_around(fill)[1].args[2].args[0]  # type: ignore[union-attr]
                start = self.literal(float(constant))  # type: ignore[arg-type]
                start = vector.broadcast(start) if vector is not None else start
            else:
                start = vector.load("&" + element, mask) if vector is not None else element
            self.line(f"{vector.vtype if vector is not None else self.ctype} acc{n} = {start};")
        reloads = fill is None and enclosing is not None and depends_on(target, enclosing)
        if vector is not None and reloads:
            self.prefetch_next_tile(str(buffer), target, copies, enclosing)
        var, extent = axis_var(axis), self.trips_expr(axis)
        self.line(f"for (int64_t {var} = 0; {var} < {extent}; ++{var}) {{")
        self.depth += 1
        self.scope.append(axis)
        for n, (binding, mask) in enumerate(copies):
            self.fixed.update(binding)
            if vector is not None and tile.vector_axis is not None:
                update = self.vector_update(str(op), f"acc{n}", value, tile.vector_axis, mask)
                self.line(f"acc{n} = {update};")
            else:
                self.line(f"acc{n} = {self.scalar_update(str(op), f'acc{n}', value)};")
        self.scope.pop()
        self.depth -= 1
        self.line("}")
        for n, ((binding, mask), element) in enumerate(zip(copies, elements, strict=True)):
            self.fixed.update(binding)
            if vector is not None:
                self.line(vector.store("&" + element, f"acc{n}", mask))
            else:
                self.line(f"{element} = acc{n};")
        for a in inner_axes:
            self.fixed.pop(a, None)
        del self.scope[len(self.scope) - len(inner_axes) :]
        self.depth -= 1
        self.line("}")

    def takes_every_register(self, tile: RegisterTile) -> bool:
        """Whether `tile` is a vector tile whose accumulators take the ISA's whole budget
        (REGISTER_BUDGET): such a tile is emitted in a function of its own (`outlined`)."""
        return tile.vector_axis is not None and tile.count >= REGISTER_BUDGET[self.isa]

    def around_full_tile(self, body: Term) -> bool:
        """Whether `body` is a serial loop that is such a register tile: the loop around it is
        outlined with it, one call per run of that loop instead of one per tile. (Not after a
        fill that seeds the tile: outlined with its panels' loop, 1607x39 @ 39x292 ran at 0.81x
        the speed of one call per tile; docs/MEASUREMENTS.md.)"""
        tile = self.serial_tile(body)
        return tile is not None and self.takes_every_register(tile)

    def serial_tile(self, statement: Term) -> RegisterTile | None:
        """The register tile of `statement` where it is a serial loop, else None."""
        if statement.op != "Stmt.loop" or statement.args[1] != Term("LoopKind.serial", ()):
            return None
        return register_tile(*statement.args[::2], self.isa, self.lanes)  # type: ignore[arg-type]

    @contextmanager
    def outlined(self) -> Iterator[None]:
        """Move what is emitted inside the block into a function of its own and call it there.
        Inside the kernel's one large function gcc kept a vector register live across a tile
        that needs all 16 AVX2 registers (12 accumulators, 3 operand vectors, a broadcast) and
        read its third operand vector from memory at each FMA; in a function of its own the
        tile gets every register (1024-cubed product at AVX2, 1 thread: 92.8 -> 101.3
        GFLOP/s; docs/MEASUREMENTS.md). The function takes the enclosing loops' variables and
        the buffers the block names."""
        start, base = len(self.lines), "    " * self.depth
        self.outlining = True
        try:
            yield
        finally:
            self.outlining = False
        block = ["    " + line.removeprefix(base) for line in self.lines[start:]]
        del self.lines[start:]
        named = set(re.findall(r"\b[A-Za-z_]\w*\b", "\n".join(block)))
        loop_vars = [v for v in dict.fromkeys(axis_var(a) for a in self.scope) if v in named]
        buffers = sorted(name for name in {*self.shapes, *self.renamed.values()} if name in named)
        params = [f"int64_t {v}" for v in loop_vars] + [
            f"{'const ' if b in self.inputs else ''}{self.ctype} *restrict {b}" for b in buffers
        ]
        name = f"eq_tile{len(self.functions)}"
        self.functions.append(
            f"static void __attribute__((noinline)) {name}({', '.join(params)}) {{\n"
            + "\n".join(block)
            + "\n}\n"
        )
        self.line(f"{name}({', '.join(loop_vars + buffers)});")

    def prefetch_next_tile(
        self,
        buffer: str,
        target: Term,
        copies: list[tuple[dict[Term, str], str | None]],
        enclosing: Term,
    ) -> None:
        """Prefetch hints for the accumulators of the tile that the next iteration of the loop
        over `enclosing` (around the tile's loop, moving its `target`) loads. Tiles of a product's
        output rows are a row apart and come back from L2 or L3 after the other tiles ran; loaded
        only as a tile starts, they stall it (a 1024-cubed product ran 3-8% faster prefetched,
        docs/MEASUREMENTS.md). A hint past the buffer's end, after the last iteration, does not
        fault."""
        self.fixed[enclosing] = f"({axis_var(enclosing)} + 1)"
        for binding, _ in copies:
            self.fixed.update(binding)
            self.line(f"_mm_prefetch((const char *)&{self.element(buffer, target)}, _MM_HINT_T0);")
        del self.fixed[enclosing]

    def vector_update(
        self, op: str, acc: str, value: Term, axis: Term, mask: str | None = None
    ) -> str:
        """`acc op value` for a vector (its lanes in `mask` only, when given); a sum of a
        product is one FMA (lanes outside the mask load zeros and are never stored)."""
        assert self.vector is not None
        if op == "sum" and value.op == "Scalar.binary" and value.args[0] == "mul":
            x = self.vector_scalar(value.args[1], axis, mask)  # type: ignore[arg-type]
            y = self.vector_scalar(value.args[2], axis, mask)  # type: ignore[arg-type]
            return self.vector.fmadd(x, y, acc)
        return self.vector.combine(op, acc, self.vector_scalar(value, axis, mask), mask)

    def scalar_update(self, op: str, acc: str, value: Term) -> str:
        return self.scalar_combine(op, acc, self.scalar(value))

    def scalar_combine(self, op: str, acc: str, value: str) -> str:
        """C expression of `acc op value` for an accumulate's op ("sum", "max" or "prod"; a max
        takes value first, as `VectorIsa.combine`)."""
        return {
            "sum": f"{acc} + {value}",
            "max": f"eq_max({value}, {acc})",
            "prod": f"{acc} * {value}",
        }[op]

    # ------------------------------------------------------------ SIMD loops

    def vector_loop(self, axis: Term, body: Term) -> None:
        """SIMD loop: full vectors, then a masked vector (AVX-512) or scalar (AVX2) tail. A
        horizontal reduction runs on vector accumulators (`reduction_chains`), reduced to the
        target element after the vectors (`reduce_accumulator`)."""
        loop = self.simd_loop(axis, body)
        self.line("{")
        self.depth += 1
        self.line(f"int64_t {loop.var} = 0;")
        chains = self.declare_accumulators(loop)
        self.scope.append(axis)
        if chains > 1:
            self.reduction_chains(loop, chains)
        self.full_vectors(loop)
        self.masked_tail(loop)
        self.scope.pop()
        if loop.reduction:
            self.reduce_accumulator(loop)
        self.scalar_tail(loop)
        self.unfenced |= loop.streaming
        self.depth -= 1
        self.line("}")

    def simd_loop(self, axis: Term, body: Term) -> _SimdLoop:
        """What the parts of the SIMD loop over `axis` running `body` share."""
        assert self.vector is not None
        buffer, target, value = str(body.args[0]), body.args[1], body.args[-1]
        assert isinstance(target, Term) and isinstance(value, Term)
        op = str(body.args[2]) if body.op == "Stmt.accumulate" else "store"
        return _SimdLoop(
            axis=axis,
            body=body,
            var=axis_var(axis),
            extent=self.trips_expr(axis),
            buffer=buffer,
            target=target,
            value=value,
            op=op,
            reduction=horizontal(axis, body),
            streaming=op == "store" and self.streams(buffer, target, axis),
            partial_vector=any(trips % self.vector.lanes for trips in trip_runs(axis)),
        )

    def declare_accumulators(self, loop: _SimdLoop) -> int:
        """The vector accumulators of a horizontal reduction (`acc`, `acc1`, ...), each the
        identity of its op; returns how many chains the reduction runs (1 when it is not one,
        or is too short for HORIZONTAL_CHAINS full vectors)."""
        vector = self.vector
        assert vector is not None
        if not loop.reduction:
            return 1
        long_enough = axis_extent(loop.axis) >= HORIZONTAL_CHAINS * vector.lanes
        chains = HORIZONTAL_CHAINS if long_enough else 1
        identity = vector.broadcast(self.literal(REDUCE_IDENTITY[loop.op]))
        self.line(f"{vector.vtype} acc = {identity};")
        for chain in range(1, chains):
            self.line(f"{vector.vtype} acc{chain} = {identity};")
        return chains

    def reduction_chains(self, loop: _SimdLoop, chains: int) -> None:
        """`chains` vectors a step, each into its own accumulator (independent partial results
        hide the add/FMA latency), then the accumulators combined into `acc`."""
        vector = self.vector
        assert vector is not None
        var, lanes = loop.var, vector.lanes
        self.line(f"for (; {var} + {chains * lanes} <= {loop.extent};) {{")
        self.depth += 1
        for chain in range(chains):
            name = f"acc{chain}" if chain else "acc"
            self.line(f"{name} = {self.vector_update(loop.op, name, loop.value, loop.axis)};")
            self.line(f"{var} += {lanes};")
        self.depth -= 1
        self.line("}")
        for chain in range(1, chains):
            self.line(f"acc = {vector.combine(loop.op, 'acc', value=f'acc{chain}')};")

    def reduce_accumulator(self, loop: _SimdLoop) -> None:
        """The target element combined with the horizontal reduction of `acc`'s lanes."""
        assert self.vector is not None
        target = self.element(loop.buffer, loop.target)
        reduced = self.vector.reduce(loop.op, "acc")
        self.uses_prod |= loop.op == "prod"
        self.line(f"{target} = {self.scalar_combine(loop.op, target, reduced)};")

    def full_vectors(self, loop: _SimdLoop) -> None:
        """One whole vector a step, while one fits before the extent."""
        assert self.vector is not None
        var, lanes = loop.var, self.vector.lanes
        self.line(f"for (; {var} + {lanes} <= {loop.extent}; {var} += {lanes}) {{")
        self.depth += 1
        self.vector_step(loop, None)
        self.depth -= 1
        self.line("}")

    def masked_tail(self, loop: _SimdLoop) -> None:
        """On an ISA with lane masks, the elements left after the whole vectors as one masked
        vector (none when every trip count is a multiple of the lanes)."""
        vector = self.vector
        assert vector is not None
        if not (vector.masked_tail and loop.partial_vector):
            return
        var, extent = loop.var, loop.extent
        self.line(f"if ({var} < {extent}) {{")
        self.depth += 1
        self.line(f"{vector.mask_type} tail = {vector.tail_mask(f'{extent} - {var}')};")
        self.vector_step(loop, "tail")
        self.depth -= 1
        self.line("}")

    def scalar_tail(self, loop: _SimdLoop) -> None:
        """On an ISA without lane masks, the elements left after the whole vectors as the scalar
        loop body (after the reduction's accumulator has reached the target)."""
        assert self.vector is not None
        if self.vector.masked_tail or not loop.partial_vector:
            return
        var, extent = loop.var, loop.extent
        self.line(f"for (; {var} < {extent}; ++{var}) {{")
        self.nested(loop.axis, loop.body)
        self.line("}")

    def vector_step(self, loop: _SimdLoop, mask: str | None) -> None:
        """One vector of the loop body (its lanes in `mask` only, when given): into `acc` for a
        horizontal reduction, else stored (streamed when whole and `streaming`) or accumulated
        into the target."""
        vector = self.vector
        assert vector is not None
        op, value, axis = loop.op, loop.value, loop.axis
        if mask is None and op != "store":
            update = partial(self.vector_update, op, value=value, axis=axis)
        else:
            v = self.vector_scalar(value, axis, mask)
            update = partial(vector.combine, op, value=v, mask=mask)
        if loop.reduction:
            self.line(f"acc = {update('acc')};")
            return
        pointer = f"&{self.element(loop.buffer, loop.target)}"
        if loop.streaming and mask is None:
            self.line(vector.stream(pointer, v))
        elif op == "store":
            self.line(vector.store(pointer, v, mask))
        else:
            self.line(vector.store(pointer, update(vector.load(pointer, mask)), mask))

    def streams(self, buffer: str, target: Term, axis: Term) -> bool:
        """`eqsat.core.loops.streamed_store` for this kernel, and `buffer` is never read back in it
        (a zeroed matmul output is accumulated into at once)."""
        assert self.vector is not None
        if buffer in self.reread:
            return False
        return streamed_store(
            buffer, self.shapes[buffer], self.item_bytes, target, axis, self.vector.lanes
        )


@dataclass(frozen=True)
class _SimdLoop:
    """A SIMD loop's statement and what its parts (`_Emitter.vector_loop`) share."""

    axis: Term
    body: Term  # a single store or accumulate (`eqsat.core.loops.vectorizable`)
    var: str  # the C loop variable
    extent: str  # C expression of its iterations (`_Emitter.trips_expr`)
    buffer: str  # the stored or accumulated buffer, at `target`
    target: Term
    value: Term
    op: str  # the accumulate's op ("sum", "max"), or "store"
    reduction: bool  # horizontal: every lane accumulates into one element
    streaming: bool  # whole vectors are non-temporal stores (`_Emitter.streams`)
    partial_vector: bool  # some trip count is not a multiple of the lanes: a tail runs


_ARITH = frozenset({"add", "sub", "mul", "div", "max", "min"})
# Temporaries up to this size live on the stack (an OpenMP thread's stack is at least 2 MiB);
# larger ones come from the heap.
STACK_TEMPORARY_BYTES = 64 * 1024
# Vector accumulators of a horizontal reduction (sums may be reassociated, ARCHITECTURE §4):
# on one chain, each FMA waits for the last one's latency, which held a matrix-vector row well
# below the load rate (docs/MEASUREMENTS.md).
HORIZONTAL_CHAINS = 4
# Loops whose iterations run one after the other on the calling thread.
IN_ORDER_KINDS = frozenset({"LoopKind.serial", "LoopKind.unroll"})
# Loops of a statement whose stores may seed a register tile (`Emitter.fills_tile`): run in
# order in the calling thread, so the tile right after sees every element they store.
FILL_LOOP_KINDS = IN_ORDER_KINDS | {"LoopKind.vector"}
# Loops `Emitter.sunk` takes a fill down through. Each iteration fills only its own part of the
# buffer, right before the tile that seeds from it, so the order of iterations does not matter:
# an unrolled loop (`for i0.outer unroll(7)` around a product's depth loop kept its output's
# zeroing, and the tiles loaded the zeros back) and a parallel one, whose threads otherwise
# waited on the starting thread's pass of zeros and fetched its lines from that core (25x34 @
# 34x513 at AVX2 on 2 threads, docs/MEASUREMENTS.md).
FILL_SINK_KINDS = IN_ORDER_KINDS | {"LoopKind.parallel"}


@dataclass(frozen=True)
class _RowsTranspose:
    """A packing copy of `rows` rows of `rows_axis`, `row_stride` elements apart in its source
    (`_Emitter.rows_transpose`)."""

    rows_axis: Term
    copy: Term  # the copy's store
    rows: int
    row_stride: int


def _nest_loops(loops: list[tuple[Term, Term]], body: Term) -> Term:
    """Loops of (axis, kind), outermost first, around `body` (`_loops_around` undone)."""
    for axis, kind in reversed(loops):
        body = Term("Stmt.loop", (axis, kind, body))
    return body


def _loops_around(statement: Term) -> tuple[list[tuple[Term, Term]], Term]:
    """The (axis, kind) of the loops nested around one statement, outermost first, and that
    statement (`statement` itself and no loops when it is not a loop)."""
    loops = []
    while statement.op == "Stmt.loop":
        axis, kind, statement = statement.args  # type: ignore[assignment]
        loops.append((axis, kind))
    return loops, statement  # type: ignore[return-value]


def _tile_axes(tile: RegisterTile) -> list[Term]:
    """The unrolled axes and the vector axis of a register tile, outermost first."""
    return [*tile.unrolled, *([tile.vector_axis] if tile.vector_axis is not None else [])]


def _reread_buffers(term: Term) -> set[str]:
    """Buffers that `term` loads from or accumulates into somewhere."""
    found = {str(term.args[0])} if term.op in ("Scalar.load", "Stmt.accumulate") else set()
    for a in term.args:
        if isinstance(a, Term):
            found |= _reread_buffers(a)
    return found


def emit(
    program: LoopProgram, isa: str, symbol: str = "eqsat_kernel", threads: int | None = None
) -> str:
    """C source of `program` for ISA level `isa` ("avx512", "avx2" or "scalar"); its parallel
    loops run on `threads` threads (None: OpenMP's default, OMP_NUM_THREADS or all cores)."""
    emitter = _Emitter(program, isa, threads)
    emitter.statement(program.body)
    if emitter.unfenced:
        emitter.line("_mm_sfence();")
    header = [
        "/* generated by eqsat */",
        *(["#define _GNU_SOURCE"] if emitter.has_region else []),
        include_lines(KERNEL_HEADERS).rstrip("\n"),
    ]
    if emitter.has_region:
        header += ["", THREADS_PREAMBLE]
    if emitter.vector is not None:
        header += [include_lines([VECTOR_HEADER]).rstrip("\n"), "", emitter.vector.preamble()]
        if emitter.uses_prod:
            header[-1] += "\n" + emitter.vector.horizontal_helper("prod")
        if emitter.math_ops:
            header[-1] += "\n" + vector_math(emitter.vector, emitter.math_ops)
    else:
        header += ["", scalar_preamble(program.dtype)]
    if emitter.uses_sign:
        header[-1] += sign_helper(program.dtype)
    signature = prototype(
        _identifier(symbol),
        len(program.inputs),
        len(program.outputs),
        program.dtype,
        for_cdef=False,
    )
    return "\n".join([*header, "", *emitter.functions, signature + " {", *emitter.lines, "}", ""])
