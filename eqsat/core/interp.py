"""Reference semantics of every sort, in numpy: the oracle of every soundness test.

`evaluate(term, inputs)` runs a tensor term; `run(program, inputs)` runs a loop program one
iteration at a time (slow on purpose: it is the definition, not an implementation). Arithmetic is
done in the dtype of the arrays given, so a float64 run is the reference for a float32 kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from eqsat.core.loops import split_tile, trips_here
from eqsat.core.term import Arg, LoopProgram, Term, index_items


def _erf(x: Any) -> Any:
    """erf elementwise in x's dtype (numpy has none): libm's erf of each element in float64
    (within an ulp of float64), rounded to x's dtype; a scalar for a 0-d x, as ufuncs give."""
    x = np.asarray(x)
    values = np.frompyfunc(math.erf, 1, 1)(x.astype(np.float64))
    return np.asarray(values, np.float64).astype(x.dtype)[()]


UNARY: dict[str, Callable[[Any], Any]] = {
    "neg": np.negative,
    "abs": np.abs,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0),
    "log1p": np.log1p,
    "expm1": np.expm1,
    "sin": np.sin,
    "cos": np.cos,
    "sign": np.sign,
    "floor": np.floor,
    "ceil": np.ceil,
    "rint": np.rint,
    "trunc": np.trunc,
    "erf": _erf,
}

BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": np.maximum,
    "min": np.minimum,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
}

REDUCE_COMBINE: dict[str, Callable[[Any, Any], Any]] = {
    "sum": np.add,
    "max": np.maximum,
    "prod": np.multiply,
}
REDUCE: dict[str, Callable[..., Any]] = {"sum": np.sum, "max": np.max, "prod": np.prod}


def _binary(op: str, a: Any, b: Any, dtype: np.dtype) -> Any:
    """Comparisons yield 1.0/0.0 in `dtype`, like every other op."""
    return np.asarray(BINARY[op](a, b)).astype(dtype, copy=False)


# ---------------------------------------------------------------- tensor terms


def evaluate(
    term: Term,
    inputs: Mapping[str, np.ndarray],
    perturbed: Callable[[Term, np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """Value of a tensor term. Precondition: every input it names is in `inputs`, right shape.
    `perturbed`, if given, maps each node and its value to the value the nodes above it read
    (`eqsat.validation` adds rounding noise)."""
    dtype = np.result_type(*inputs.values()) if inputs else np.dtype(np.float32)
    memo: dict[Term, np.ndarray] = {}

    def ev(t: Arg) -> Any:
        assert isinstance(t, Term)
        if t not in memo:
            value = np.asarray(_eval_node(t, ev, inputs, dtype), dtype=dtype)
            memo[t] = value if perturbed is None else perturbed(t, value)
        return memo[t]

    with np.errstate(all="ignore"):
        return ev(term)


def _eval_node(
    t: Term, ev: Callable[[Arg], Any], inputs: Mapping[str, np.ndarray], dtype: np.dtype
) -> Any:
    a = t.args
    match t.op:
        case "TExpr.input":
            return inputs[str(a[0])]
        case "TExpr.const":
            return a[0]
        case "TExpr.unary":
            return UNARY[str(a[0])](ev(a[1]))
        case "TExpr.binary":
            return _binary(str(a[0]), ev(a[1]), ev(a[2]), dtype)
        case "TExpr.where":
            return np.where(ev(a[0]) != 0, ev(a[1]), ev(a[2]))
        case "TExpr.reduce":
            axis = int(a[1])  # type: ignore[arg-type]
            return REDUCE[str(a[0])](ev(a[2]), axis=axis)
        case "TExpr.matmul":
            return np.matmul(ev(a[0]), ev(a[1]))
        case "TExpr.transpose":
            return np.transpose(ev(a[0]), a[1])  # type: ignore[arg-type]
        case "TExpr.broadcast":
            return np.broadcast_to(ev(a[0]), a[1])  # type: ignore[arg-type]
        case "TExpr.reshape":
            return np.reshape(ev(a[0]), a[1])
        case "TExpr.arange":
            return np.arange(int(a[0]), dtype=np.float64)  # type: ignore[call-overload]
        case "TExpr.concat":
            return np.concatenate((ev(a[0]), ev(a[1])), axis=int(a[2]))  # type: ignore[arg-type]
        case "TExpr.slice":
            starts, steps, extents = a[1], a[2], a[3]
            picks = [s + t * np.arange(n) for s, t, n in zip(starts, steps, extents, strict=True)]  # type: ignore[call-overload]
            return ev(a[0])[np.ix_(*picks)]
    raise ValueError(f"not a tensor term: {t.op}")


# ---------------------------------------------------------------- loop terms


class _Machine:
    """Executes a Stmt. `env` maps each enclosing loop's axis term to its current value."""

    def __init__(self, buffers: dict[str, np.ndarray], dtype: np.dtype) -> None:
        self.buffers = buffers
        self.dtype = dtype
        self.env: dict[Term, int] = {}

    def axis_value(self, axis: Term) -> int:
        """A loop's own axis, or a split axis rebuilt as outer*tile + inner."""
        if axis in self.env:
            return self.env[axis]
        tile = split_tile(axis, self.env)
        if tile is not None:
            outer, inner = Term("Axis.outer", (axis, tile)), Term("Axis.inner", (axis, tile))
            return self.axis_value(outer) * tile + self.axis_value(inner)
        raise ValueError(f"axis used outside its loop: {axis}")

    def outer_value(self, outer: Term) -> int:
        """The value of the enclosing loop over split piece `outer` (`loops.trips_here`)."""
        if outer not in self.env:
            raise ValueError(
                f"a loop over an inner piece of {outer.args[0]} outside a loop over its outer "
                f"piece {outer}"
            )
        return self.env[outer]

    def index(self, t: Term) -> int:
        a = t.args
        match t.op:
            case "Index.axis":
                return self.axis_value(a[0])  # type: ignore[arg-type]
            case "Index.const":
                return int(a[0])  # type: ignore[arg-type]
            case "Index.add":
                return self.index(a[0]) + self.index(a[1])  # type: ignore[arg-type]
            case "Index.scale":
                return self.index(a[0]) * int(a[1])  # type: ignore[arg-type]
            case "Index.div":
                return self.index(a[0]) // int(a[1])  # type: ignore[arg-type]
            case "Index.mod":
                return self.index(a[0]) % int(a[1])  # type: ignore[arg-type]
        raise ValueError(f"not an index: {t.op}")

    def element(self, index_list: Term) -> tuple[int, ...]:
        return tuple(self.index(i) for i in index_items(index_list))

    def scalar(self, t: Term) -> Any:
        a = t.args
        match t.op:
            case "Scalar.load":
                return self.buffers[str(a[0])][self.element(a[1])]  # type: ignore[arg-type,index]
            case "Scalar.const":
                return self.dtype.type(a[0])
            case "Scalar.index":
                return self.dtype.type(self.index(a[0]))  # type: ignore[arg-type]
            case "Scalar.unary":
                return self.dtype.type(UNARY[str(a[0])](self.scalar(a[1])))  # type: ignore[arg-type]
            case "Scalar.binary":
                x, y = self.scalar(a[1]), self.scalar(a[2])  # type: ignore[arg-type]
                return self.dtype.type(_binary(str(a[0]), x, y, self.dtype))
            case "Scalar.where":
                cond = self.scalar(a[0])  # type: ignore[arg-type]
                return self.scalar(a[1] if cond != 0 else a[2])  # type: ignore[arg-type]
        raise ValueError(f"not a scalar: {t.op}")

    def execute(self, t: Term) -> None:
        a = t.args
        match t.op:
            case "Stmt.loop":
                axis, body = a[0], a[2]
                assert isinstance(axis, Term) and isinstance(body, Term)
                if axis in self.env:
                    raise ValueError(f"loop nested inside a loop over the same axis: {axis}")
                for value in range(trips_here(axis, self.outer_value)):
                    self.env[axis] = value
                    self.execute(body)
                del self.env[axis]
            case "Stmt.seq":
                self.execute(a[0])  # type: ignore[arg-type]
                self.execute(a[1])  # type: ignore[arg-type]
            case "Stmt.store":
                buffer = self.buffers[str(a[0])]
                buffer[self.element(a[1])] = self.scalar(a[2])  # type: ignore[arg-type]
            case "Stmt.accumulate":
                buffer = self.buffers[str(a[0])]
                element = self.element(a[1])  # type: ignore[arg-type]
                value = self.scalar(a[3])  # type: ignore[arg-type]
                buffer[element] = REDUCE_COMBINE[str(a[2])](buffer[element], value)
            case "Stmt.guard":
                if self.index(a[0]) <= int(a[1]):  # type: ignore[arg-type]
                    self.execute(a[2])  # type: ignore[arg-type]
            case "Stmt.alloc":
                name = str(a[0])
                # Garbage, not zeros: a program that reads a temporary before writing it is wrong.
                self.buffers[name] = np.full(a[1], np.nan, dtype=self.dtype)  # type: ignore[arg-type]
                self.execute(a[2])  # type: ignore[arg-type]
                del self.buffers[name]
            case _:
                raise ValueError(f"not a statement: {t.op}")


def run(
    program: LoopProgram, inputs: Mapping[str, np.ndarray], dtype: Any = None
) -> list[np.ndarray]:
    """Execute a loop program on inputs keyed by user name; returns the outputs in order.

    `dtype` overrides the program's dtype (pass float64 for a reference run)."""
    compute = np.dtype(dtype or program.dtype)
    buffers = {
        f"in{i}": np.asarray(inputs[name], dtype=compute)
        for i, (name, _shape) in enumerate(program.inputs)
    }
    outputs = [np.full(shape, np.nan, dtype=compute) for shape in program.outputs]
    buffers.update({f"out{k}": out for k, out in enumerate(outputs)})
    with np.errstate(all="ignore"):
        _Machine(buffers, compute).execute(program.body)
    return outputs
