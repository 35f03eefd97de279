"""Lowering: a tensor term becomes canonical loop nests over named axes.

Lowering is a translation, not a rewrite: it needs fresh buffer names and shape arithmetic, so it
runs in Python on the extracted stage-1 term, and its result seeds the stage-2 e-graph.

The canonical form, for `relu(x @ W + b)` with x (M, K), W (K, N)::

    alloc t0[M, N]:
      for i0 < M: for i1 < N: t0[i0, i1] = 0                                  # init
      for i0 < M: for i1 < N: for k < K: t0[i0, i1] += x[i0, k] * W[k, i1]   # accumulate
      for i0 < M: for i1 < N: out0[i0, i1] = relu(t0[i0, i1] + b[i1])          # epilogue

Rules of the translation:
- Axes are named by role and extent: output dimension d is `i{d}`, a reduced input dimension d is
  `r{d}`, the matmul contraction is `k`. Nests over the same tensor shape therefore share axis
  terms, which is what lets sibling-loop fusion work without renaming (ARCHITECTURE §3).
- Elementwise ops, broadcasts, transposes, reshapes and slices are inlined into the consumer's
  scalar expression (an index mapping, no loop of their own).
- A value gets a buffer of its own when it is a matmul or a reduction, an output, or used more
  than once and expensive to recompute (a transcendental function).
- The right operand of a matmul is copied into a buffer when it is a transpose that moves its
  last dimension (x @ K.T), or an elementwise op over one (x @ (0.125 * K.T)), and the left
  operand has at least PACK_MIN_ROWS rows: read in place, the vector axis of the product would
  stride through K; copied once, the product is a plain unit-stride matmul that register tiles
  (`eqsat.core.loops.register_tile`).
- The left operand of a matmul that is a transpose moving its last dimension (`x.T @ y`, a
  gram matrix or a gradient) is read in place by the canonical lowering, or copied into a
  buffer of rows along the contraction by the other lowering `lowerings` offers, when the product
  reuses each element PACK_MIN_ROWS times. Neither wins everywhere: copied, 2000x300 @ 2000x300
  ran 1.8x and 1000x256 @ 1000x256 1.5x faster; in place, 10000x64 @ 10000x64 1.4x and
  1926x252 @ 1926x26 1.6x faster (the copy is a pass over x that a short product does not
  repay). Stage 2 schedules both and keeps the cheaper by the cost model, with a preference
  for the copy (`optimizer.COPIED_LOWERING_PREFERENCE`): on 24 random shapes 1.15x numpy in
  geometric mean, worst 0.83x, against 1.11x and 0.64x always in place and 1.16x for the
  faster of the two each time (docs/MEASUREMENTS.md).
- A symmetric product (`x.T @ x`, `x @ x.T`, batched with the last two dimensions swapped:
  elements (i, j) and (j, i) are the same products summed in the same order) whose contraction
  is `eqsat.core.symmetry.MIRROR_MIN_DEPTH` or longer is computed into a buffer that consumers
  read as `where(i <= j, t[i, j], t[j, i])`. Every read then falls on or above the diagonal, so
  the blocks of the product below it are skipped (`eqsat.rewrites.masked_blocks`; extraction
  prices the guards, so the product gets row blocks that share its triangle out), and the
  result is exactly symmetric, as numpy's (a symmetric rank-k update) is. The mirror is a pass
  over the output, which a short contraction does not repay: mirrored, x.T @ x ran 0.5-0.7x as
  fast at contractions of 64-96, 1.1x at 121, as fast at 128 and 1.4-1.7x faster from 150 on
  (docs/MEASUREMENTS.md). Stage 1 prices such a product so (`eqsat.extract.tensor_cost`):
  `2 * (a @ a.T)` then wins over `(2 * a) @ a.T` in a distance matrix.
- An operand of a matmul whose elements evaluate arithmetic in place (`layernorm(x) @ W`,
  `relu(h) @ W2`, `x @ (W * s)`; not a view of an input or a buffer) gets a buffer when the
  product reuses each element at least PACK_MIN_ROWS times: inlined, the product would
  evaluate it once per column block (or row block) that reads it. Fusion and temporary
  contraction (`eqsat.rewrites.contraction`) then keep that buffer to the row blocks in flight.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from eqsat.core import shapes
from eqsat.core.errors import DTypeError, ShapeError
from eqsat.core.symmetry import computed_mirrored
from eqsat.core.term import REDUCE_IDENTITY, LoopProgram, Term, index_list
from eqsat.rewrites.flatten import ELEMENTWISE_OPS

EXPENSIVE_UNARY = frozenset(
    {"exp", "log", "tanh", "sigmoid", "sqrt", "erf", "log1p", "expm1", "sin", "cos"}
)
CONTRACTION = "k"  # the name of a matmul's contraction axis (a depth tile splits only it)
PACK_MIN_ROWS = 8  # rows of the left operand that reuse each copied element of the right one


def axis(name: str, extent: int) -> Term:
    return Term("Axis.named", (name, extent))


def index_of(axis_term: Term) -> Term:
    return Term("Index.axis", (axis_term,))


def const_index(value: int) -> Term:
    return Term("Index.const", (value,))


def loop(axis_term: Term, body: Term) -> Term:
    return Term("Stmt.loop", (axis_term, Term("LoopKind.serial", ()), body))


def seq(statements: Sequence[Term]) -> Term:
    """Right-nested Seq of one or more statements."""
    result = statements[-1]
    for statement in reversed(statements[:-1]):
        result = Term("Stmt.seq", (statement, result))
    return result


def nest(axes: Sequence[Term], body: Term) -> Term:
    """Loops over `axes`, outermost first, around `body`."""
    for axis_term in reversed(axes):
        body = loop(axis_term, body)
    return body


def load(buffer: str, indices: Sequence[Term]) -> Term:
    return Term("Scalar.load", (buffer, index_list(indices)))


def collect_inputs(roots: Sequence[Term]) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, dtype) of every input, in first-visit order; one name means one tensor."""
    found: dict[str, tuple[tuple[int, ...], str]] = {}
    seen: set[Term] = set()

    def visit(t: Term) -> None:
        if t in seen:
            return
        seen.add(t)
        if t.op == "TExpr.input":
            name, dtype = str(t.args[0]), str(t.args[2])
            shape = tuple(int(n) for n in t.args[1])  # type: ignore[union-attr, arg-type]
            previous = found.setdefault(name, (shape, dtype))
            if previous[0] != shape:
                raise ShapeError(f"input {name!r} is used with shapes {previous[0]} and {shape}")
            if previous[1] != dtype:
                raise DTypeError(f"input {name!r} is used with dtypes {previous[1]} and {dtype}")
        for arg in t.args:
            if isinstance(arg, Term):
                visit(arg)

    for root in roots:
        visit(root)
    return [(name, shape, dtype) for name, (shape, dtype) in found.items()]


class _Lowering:
    def __init__(
        self,
        roots: Sequence[Term],
        inputs: Sequence[tuple[str, tuple[int, ...]]],
        copy_transposed_left: bool,
    ):
        self.copy_transposed_left = copy_transposed_left
        self.mirrored: set[str] = set()  # buffers of symmetric products read as mirrored
        self.buffer_of_input = {name: f"in{i}" for i, (name, _) in enumerate(inputs)}
        self.uses = _count_uses(roots)
        self.statements: list[Term] = []
        self.temporaries: list[tuple[str, tuple[int, ...]]] = []
        self.buffer_of: dict[Term, str] = {}
        self.shape_memo: dict[Term, tuple[int, ...]] = {}

    def shape(self, t: Term) -> tuple[int, ...]:
        if t not in self.shape_memo:
            self.shape_memo[t] = shapes.infer(t)
        return self.shape_memo[t]

    def needs_buffer(self, t: Term) -> bool:
        if t.op in ("TExpr.matmul", "TExpr.reduce", "TExpr.concat"):
            return True
        return self.uses[t] > 1 and t.op == "TExpr.unary" and t.args[0] in EXPENSIVE_UNARY

    def computes(self, t: Term) -> bool:
        """Whether an element of `t`, inlined, evaluates arithmetic (`layernorm(x)`, `relu(h)`,
        `x * scale`), rather than loading an input or a buffer through layout ops."""
        if t in self.buffer_of or self.needs_buffer(t) or t.op == "TExpr.input":
            return False
        if t.op in ELEMENTWISE_OPS:
            return t.op != "TExpr.const"
        return any(self.computes(a) for a in t.args if isinstance(a, Term))

    def value_at(self, t: Term, idx: Sequence[Term]) -> Term:
        """The Scalar term of element `idx` of tensor `t`."""
        if t in self.buffer_of:
            return self.element(self.buffer_of[t], idx)
        if self.needs_buffer(t):
            return self.element(self.materialize(t), idx)
        return self.compute_at(t, idx)

    def element(self, buffer: str, idx: Sequence[Term]) -> Term:
        """Element `idx` of the tensor `buffer` holds: a load, or for a mirrored symmetric
        product, whose buffer is read only on and above the diagonal of its last two
        dimensions, `where(i <= j, buffer[.., i, j], buffer[.., j, i])`."""
        if buffer not in self.mirrored:
            return load(buffer, idx)
        *batch, i, j = idx
        on_or_above = Term(
            "Scalar.binary", ("le", Term("Scalar.index", (i,)), Term("Scalar.index", (j,)))
        )
        return Term("Scalar.where", (on_or_above, load(buffer, idx), load(buffer, [*batch, j, i])))

    def mirrors(self, t: Term) -> bool:
        """Whether `t` is a symmetric product computed on and above the diagonal only (module
        doc, `eqsat.core.symmetry`)."""
        left = t.args[0] if t.op == "TExpr.matmul" else None
        return isinstance(left, Term) and computed_mirrored(t, self.shape(left)[-1])

    def compute_at(self, t: Term, idx: Sequence[Term]) -> Term:
        """Element `idx` of an elementwise or layout op, computed from its operands."""
        a = t.args
        match t.op:
            case "TExpr.input":
                return load(self.buffer_of_input[str(a[0])], idx)
            case "TExpr.const":
                return Term("Scalar.const", (float(a[0]),))  # type: ignore[arg-type]
            case "TExpr.arange":
                return Term("Scalar.index", (idx[0],))
            case "TExpr.unary":
                return Term("Scalar.unary", (a[0], self.value_at(a[1], idx)))  # type: ignore
            case "TExpr.binary":
                operands = [self.broadcast_value(x, idx) for x in a[1:]]  # type: ignore
                return Term("Scalar.binary", (a[0], *operands))
            case "TExpr.where":
                return Term("Scalar.where", tuple(self.broadcast_value(x, idx) for x in a))  # type: ignore
            case "TExpr.broadcast":
                return self.broadcast_value(a[0], idx)  # type: ignore[arg-type]
            case "TExpr.transpose":
                source_idx = [idx[0]] * len(idx)
                for d, source_dim in enumerate(a[1]):  # type: ignore[arg-type]
                    source_idx[source_dim] = idx[d]  # type: ignore[index]
                return self.value_at(a[0], source_idx)  # type: ignore[arg-type]
            case "TExpr.reshape":
                source = a[0]
                assert isinstance(source, Term)
                return self.value_at(source, reshape_index(self.shape(source), self.shape(t), idx))
            case "TExpr.slice":
                source, starts, steps = a[0], a[1], a[2]
                assert isinstance(source, Term)
                return self.value_at(source, list(map(strided_index, idx, starts, steps)))  # type: ignore[call-overload]
        raise ValueError(f"cannot lower {t.op}")

    def broadcast_value(self, t: Term, idx: Sequence[Term]) -> Term:
        """Element `idx` of the broadcast of `t` to a shape of rank len(idx)."""
        source_shape = self.shape(t)
        offset = len(idx) - len(source_shape)
        source_idx = [
            const_index(0) if extent == 1 else idx[offset + d]
            for d, extent in enumerate(source_shape)
        ]
        return self.value_at(t, source_idx)

    def materialize(self, t: Term, buffer: str | None = None) -> str:
        """Emit the nests computing `t` into `buffer` (a new temporary when None)."""
        out_shape = self.shape(t)
        mirrored = t not in self.buffer_of and self.mirrors(t)
        if buffer is not None and mirrored:
            self.materialize(t)  # the triangle, then the output's copy mirrors it
        if buffer is None:
            buffer = f"t{len(self.temporaries)}"
            self.temporaries.append((buffer, out_shape))
        out_axes, out_idx = self.output_axes(t)
        target = index_list(out_idx)
        if t in self.buffer_of:
            copy = self.element(self.buffer_of[t], out_idx)
            self.statements.append(nest(out_axes, Term("Stmt.store", (buffer, target, copy))))
        elif t.op in ("TExpr.matmul", "TExpr.reduce"):
            op = "sum" if t.op == "TExpr.matmul" else str(t.args[0])
            # the operands' nests (buffers they need) come before the init, so that the init
            # and the accumulation are neighbours and can fuse with each other
            reduction_axis, value = self.reduction(t, out_idx)
            init = Term("Scalar.const", (REDUCE_IDENTITY[op],))
            self.statements.append(nest(out_axes, Term("Stmt.store", (buffer, target, init))))
            accumulate = Term("Stmt.accumulate", (buffer, target, op, value))
            self.statements.append(nest([*out_axes, reduction_axis], accumulate))
            if mirrored:
                self.mirrored.add(buffer)
        elif t.op == "TExpr.concat":
            self.concatenate(t, buffer)
        else:
            value = self.compute_at(t, out_idx)
            self.statements.append(nest(out_axes, Term("Stmt.store", (buffer, target, value))))
        self.buffer_of.setdefault(t, buffer)
        return buffer

    def output_axes(self, t: Term) -> tuple[list[Term], list[Term]]:
        """The loop axes of the nest that stores `t`, and the index of each of its dimensions:
        one axis a dimension, except that a dimension a reshape merges from several (a head
        merge's 768 from 12 x 64) gets an axis for each, its index their affine combination,
        so the reshape's source is read along its own axes (`_group_index`)."""
        out_shape = self.shape(t)
        merges: dict[int, list[int]] = {}
        if t.op == "TExpr.reshape":
            source_shape = self.shape(t.args[0])  # type: ignore[arg-type]
            for source_dims, dims in _groups(source_shape, out_shape):
                factors = [source_shape[d] for d in source_dims if source_shape[d] != 1]
                if len(dims) == 1 and len(factors) > 1:
                    merges[dims[0]] = factors
        axes: list[Term] = []
        indices: list[Term] = []
        for d, n in enumerate(out_shape):
            if d not in merges:
                axes.append(axis(f"i{d}", n))
                indices.append(index_of(axes[-1]))
                continue
            merged: Term | None = None
            for j, factor in enumerate(merges[d]):
                axes.append(axis(f"i{d}{chr(ord('a') + j)}", factor))
                step = index_of(axes[-1])
                merged = (
                    step
                    if merged is None
                    else Term("Index.add", (Term("Index.scale", (merged, factor)), step))
                )
            assert merged is not None
            indices.append(merged)
        return axes, indices

    def concatenate(self, t: Term, buffer: str) -> None:
        """One nest per part of concat `t` (nested concats along its axis, used nowhere else,
        are parts too): each stores its part at its offset along the axis."""
        dim = int(t.args[2])  # type: ignore[arg-type]
        offset = 0
        for part in self.concatenated_parts(t, dim):
            part_axes = [axis(f"i{d}", n) for d, n in enumerate(self.shape(part))]
            part_idx = [index_of(x) for x in part_axes]
            value = self.value_at(part, part_idx)
            at = [*part_idx[:dim], strided_index(part_idx[dim], offset, 1), *part_idx[dim + 1 :]]
            self.statements.append(
                nest(part_axes, Term("Stmt.store", (buffer, index_list(at), value)))
            )
            offset += self.shape(part)[dim]

    def concatenated_parts(self, t: Term, dim: int) -> list[Term]:
        """The operands of concat `t` in order, a nested concat along `dim` that has no buffer
        and no other use replaced by its own parts."""
        parts = []
        for part in t.args[:2]:
            assert isinstance(part, Term)
            inlined = part.op == "TExpr.concat" and part.args[2] == dim
            if inlined and part not in self.buffer_of and self.uses[part] == 1:
                parts += self.concatenated_parts(part, dim)
            else:
                parts.append(part)
        return parts

    def reduction(self, t: Term, out_idx: list[Term]) -> tuple[Term, Term]:
        """The reduction axis of a matmul or reduce, and the value accumulated per step."""
        if t.op == "TExpr.matmul":
            a, b = t.args
            assert isinstance(a, Term) and isinstance(b, Term)
            k = axis(CONTRACTION, self.shape(a)[-1])
            a_idx = [*out_idx[:-1], index_of(k)]
            b_idx = [*out_idx[:-2], index_of(k), out_idx[-1]]
            reused_a = self.shape(b)[-1] >= PACK_MIN_ROWS  # each element of a, by columns
            reused_b = self.shape(a)[-2] >= PACK_MIN_ROWS  # each element of b, by rows
            if reused_a and (
                self.computes(a) or (self.copy_transposed_left and _moves_last_dimension(a))
            ):
                left = load(self.materialize(a), a_idx)
            else:
                left = self.value_at(a, a_idx)
            if reused_b and (_moves_last_dimension(b) or self.computes(b)):
                right = load(self.materialize(b), b_idx)
            else:
                right = self.value_at(b, b_idx)
            return k, Term("Scalar.binary", ("mul", left, right))
        _op, dim, source = t.args
        assert isinstance(dim, int) and isinstance(source, Term)
        r = axis(f"r{dim}", self.shape(source)[dim])
        source_idx = [*out_idx[:dim], index_of(r), *out_idx[dim:]]
        return r, self.value_at(source, source_idx)


def strided_index(index: Term, start: int, step: int) -> Term:
    """`start + step * index`, without the parts that change nothing."""
    scaled = index if step == 1 else Term("Index.scale", (index, step))
    return scaled if start == 0 else Term("Index.add", (scaled, const_index(start)))


def reshape_index(
    source_shape: Sequence[int], shape: Sequence[int], idx: Sequence[Term]
) -> list[Term]:
    """Index into `source_shape` of element `idx` of its row-major reshape to `shape`.

    The two shapes split into groups of consecutive dimensions of equal products (`_groups`):
    an index of one group depends on that group's indices only, so a head split (512, 512) ->
    (512, 8, 64) reads `[i0, i1 * 64 + i2]`, not a div and mod of the whole flat index."""
    result: list[Term] = []
    for source_dims, dims in _groups(source_shape, shape):
        result.extend(
            _group_index(
                [source_shape[d] for d in source_dims],
                [idx[d] for d in dims],
                [shape[d] for d in dims],
            )
        )
    return result


def _groups(source_shape: Sequence[int], shape: Sequence[int]) -> list[tuple[range, range]]:
    """The finest split of both shapes into runs of consecutive dimensions (of `source_shape`,
    of `shape`) whose products are equal, in order; size-1 dimensions join the run before them
    (or the first run). (512, 512) -> (512, 8, 64): [(0,), (0,)] and [(1,), (1, 2)].

    It requires: the products of the two shapes are equal."""
    groups: list[tuple[range, range]] = []
    i = j = 0
    while i < len(source_shape) or j < len(shape):
        start_i, start_j = i, j
        size_i = size_j = 1
        if i < len(source_shape):
            size_i, i = source_shape[i], i + 1
        if j < len(shape):
            size_j, j = shape[j], j + 1
        while size_i != size_j:  # the smaller product has dimensions left: the totals agree
            if size_i < size_j:
                size_i, i = size_i * source_shape[i], i + 1
            else:
                size_j, j = size_j * shape[j], j + 1
        while i < len(source_shape) and source_shape[i] == 1:
            i += 1
        while j < len(shape) and shape[j] == 1:
            j += 1
        groups.append((range(start_i, i), range(start_j, j)))
    return groups


def _group_index(
    source_dims: Sequence[int], idx: Sequence[Term], dims: Sequence[int]
) -> list[Term]:
    """The indices into `source_dims` of element `idx` of `dims`, one group of `_groups`. A
    digit of the flat index that its axes' extents decide without carries is their affine
    combination (`_digit`): a head merge written over the heads' own axes, `[s, h*64 + d]`,
    reads `[h, s, d]`, not a div and a mod."""
    if [n for n in source_dims if n != 1] == [n for n in dims if n != 1]:
        # Only size-1 dimensions differ: an index mapping without arithmetic.
        kept_idx = iter(i for i, n in zip(idx, dims, strict=True) if n != 1)
        return [const_index(0) if n == 1 else next(kept_idx) for n in source_dims]
    flat: Term | None = None
    stride = 1
    for d in reversed(range(len(dims))):
        term = idx[d] if stride == 1 else Term("Index.scale", (idx[d], stride))
        flat = term if flat is None else Term("Index.add", (term, flat))
        stride *= dims[d]
    assert flat is not None
    result = []
    stride = 1
    for d in reversed(range(len(source_dims))):
        extent = source_dims[d] if d > 0 else None
        digit = _digit(flat, stride, extent)
        if digit is None:
            digit = flat if stride == 1 else Term("Index.div", (flat, stride))
            if extent is not None:
                digit = Term("Index.mod", (digit, extent))
        result.append(digit)
        stride *= source_dims[d]
    return result[::-1]


def _affine_terms(index: Term) -> list[tuple[Term, int]] | None:
    """`index` as a sum of (named axis index, coefficient), or None if it is not one."""
    match index.op:
        case "Index.axis" if index.args[0].op == "Axis.named":  # type: ignore[union-attr]
            return [(index, 1)]
        case "Index.scale":
            inner = _affine_terms(index.args[0])  # type: ignore[arg-type]
            factor = int(index.args[1])  # type: ignore[arg-type]
            return None if inner is None else [(t, c * factor) for t, c in inner]
        case "Index.add":
            left, right = (_affine_terms(a) for a in index.args)  # type: ignore[arg-type]
            return None if left is None or right is None else left + right
    return None


def _digit(flat: Term, stride: int, extent: int | None) -> Term | None:
    """`(flat // stride) % extent` (no mod when `extent` is None) as an affine index of the axes
    of `flat`, where their extents make it one: the terms below `stride` never reach it, the
    terms of the digit never reach `extent`, and every other coefficient is a multiple of
    `stride` (resp. `stride * extent`); else None."""
    terms = _affine_terms(flat)
    if terms is None:
        return None
    low = sum(c * (int(t.args[0].args[1]) - 1) for t, c in terms if c < stride)  # type: ignore[union-attr]
    if low >= stride:
        return None
    top = None if extent is None else stride * extent
    digit = [(t, c // stride) for t, c in terms if c >= stride and (top is None or c < top)]
    if any(c % stride for t, c in terms if c >= stride):
        return None
    if top is not None:
        if any(c % top for t, c in terms if c >= top):
            return None
        if sum(c * (int(t.args[0].args[1]) - 1) for t, c in digit) >= extent:  # type: ignore[union-attr, operator]
            return None
    result: Term | None = None
    for t, c in reversed(digit):
        term = t if c == 1 else Term("Index.scale", (t, c))
        result = term if result is None else Term("Index.add", (term, result))
    return result if result is not None else const_index(0)


def _moves_last_dimension(t: Term) -> bool:
    """Whether `t` is a transpose whose last dimension is not its operand's last dimension, or
    an elementwise op with such an operand (`0.125 * K.T`: copying it also scales each element
    once, where read in place the product would scale it once per row of the left operand)."""
    if t.op in ELEMENTWISE_OPS:
        return any(_moves_last_dimension(a) for a in t.args if isinstance(a, Term))
    if t.op != "TExpr.transpose":
        return False
    permutation = t.args[1]
    assert isinstance(permutation, tuple)
    return permutation[-1] != len(permutation) - 1


def _count_uses(roots: Sequence[Term]) -> Counter[Term]:
    """How many distinct parents (and outputs) use each sub-term."""
    uses: Counter[Term] = Counter(roots)
    seen: set[Term] = set()

    def visit(t: Term) -> None:
        if t in seen:
            return
        seen.add(t)
        for arg in t.args:
            if isinstance(arg, Term):
                uses[arg] += 1
                visit(arg)

    for root in roots:
        visit(root)
    return uses


# The note of the lowering that copies reused transposed left operands (`lowerings`).
COPIED_TRANSPOSED_LEFT = "transposed left operands copied"


def lowerings(roots: Sequence[Term], written: Sequence[Term]) -> list[tuple[str, LoopProgram]]:
    """The loop programs of `roots` that stage 2 schedules, each with a note of how it differs
    from the first (the canonical `lower`, whose note is empty): also the one that copies each
    reused transposed left operand of a matmul (module doc), where there is one."""
    canonical = lower(roots, written)
    copied = lower(roots, written, copy_transposed_left=True)
    if copied == canonical:
        return [("", canonical)]
    return [("", canonical), (COPIED_TRANSPOSED_LEFT, copied)]


def lower(
    roots: Sequence[Term],
    written: Sequence[Term] | None = None,
    copy_transposed_left: bool = False,
) -> LoopProgram:
    """Canonical loop program computing every root (`copy_transposed_left`: with the reused
    transposed left operands of matmuls copied, module doc).

    Its inputs and dtype are those of `written` (default: the roots), in first-visit order: a
    program rewritten by algebra keeps the signature the user wrote, even where an input
    cancelled out (x - x + b) or the operands were swapped ((a.T @ b.T).T -> b @ a).
    Precondition: the roots are well-shaped tensor terms of one dtype (the frontend checks), and
    every input of the roots is an input of `written`."""
    inputs = collect_inputs(written if written is not None else roots)
    dtypes = {dtype for _, _, dtype in inputs} or {"float32"}
    if len(dtypes) > 1:
        raise DTypeError(f"one kernel cannot mix dtypes {sorted(dtypes)}")
    signature = [(name, shape) for name, shape, _ in inputs]
    lowering = _Lowering(roots, signature, copy_transposed_left)
    for k, root in enumerate(roots):
        lowering.materialize(root, f"out{k}")
    body = seq(lowering.statements)
    for name, shape in reversed(lowering.temporaries):
        body = Term("Stmt.alloc", (name, shape, body))
    return LoopProgram(
        body, tuple(signature), tuple(lowering.shape(r) for r in roots), dtypes.pop()
    )
