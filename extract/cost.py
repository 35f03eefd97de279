"""A first analytical cost model: pure functions of a term and a machine.

Stage 1 (tensor terms): flops + bytes of each op, from shapes (the graph-level estimate that ranks
algebraic forms, e.g. matrix-chain orders). Stage 2 (loop terms): cycles, counted bottom-up —
a loop costs extent x (body + loop overhead); a Vector loop that the emitter can vectorize divides
that by the lanes; a Parallel loop divides by the cores and pays a start cost. Memory traffic per
cache level and the roofline come with the cost-model issue.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from eqsat import shapes
from eqsat.loops import axis_extent
from eqsat.loops import contains_parallel, vectorizable
from eqsat.terms import Arg, Term
from extract.machine import Machine

LOOP_OVERHEAD = 1.0  # cycles per iteration (increment, compare, branch)
PARALLEL_START = 20_000.0  # cycles to wake a thread team (measured ~5 us after the first region)
UNARY_CYCLES = {"exp": 20.0, "log": 20.0, "tanh": 25.0, "sigmoid": 25.0, "sqrt": 6.0}
BINARY_CYCLES = {"div": 4.0}


@dataclass(frozen=True)
class TensorCost:
    """Stage-1 estimate: flops + bytes moved by each op's result, counted once per tree use."""

    bytes_per_element: int = 4

    def __call__(self, op: str, children: Sequence[Arg], child_costs: Sequence[float]) -> float:
        term = Term(op, tuple(children))
        if op in ("TExpr.input", "TExpr.const"):
            return 0.0
        size = math.prod(shapes.infer(term))
        flops = float(size)
        if op == "TExpr.matmul":
            a = children[0]
            assert isinstance(a, Term)
            flops = 2.0 * size * shapes.infer(a)[-1]
        elif op in ("TExpr.transpose", "TExpr.broadcast", "TExpr.reshape"):
            flops = 0.0
        return flops + self.bytes_per_element * size + sum(child_costs)


@dataclass(frozen=True)
class LoopCost:
    """Stage-2 estimate in cycles for `machine` and element type `dtype`."""

    machine: Machine
    dtype: str

    def __call__(self, op: str, children: Sequence[Arg], child_costs: Sequence[float]) -> float:
        own = sum(child_costs)
        match op:
            case "Scalar.load" | "Scalar.where":
                return own + 1.0
            case "Scalar.unary":
                return own + UNARY_CYCLES.get(str(children[0]), 1.0)
            case "Scalar.binary":
                return own + BINARY_CYCLES.get(str(children[0]), 1.0)
            case "Stmt.store":
                return own + 1.0
            case "Stmt.accumulate":
                return own + 2.0
            case "Stmt.loop":
                return self.loop(children, child_costs[2])
            case "Stmt.alloc":
                shape = children[1]
                assert isinstance(shape, tuple)
                return own + math.prod(shape) / 16  # type: ignore[arg-type]  # first touch of the pages
        return own  # axes, indices, kinds, constants and seq cost nothing themselves

    def loop(self, children: Sequence[Arg], body_cost: float) -> float:
        axis, kind, body = children
        assert isinstance(axis, Term) and isinstance(kind, Term) and isinstance(body, Term)
        iterations = axis_extent(axis)
        if (
            kind.op == "LoopKind.vector"
            and self.machine.isa != "scalar"
            and vectorizable(axis, body)
        ):
            iterations = math.ceil(iterations / self.machine.lanes(self.dtype))
        cycles = iterations * (body_cost + LOOP_OVERHEAD)
        if kind.op == "LoopKind.parallel":
            # A parallel loop inside another runs on one thread: it only pays the start.
            speedup = 1 if contains_parallel(body) else self.machine.cores
            cycles = cycles / speedup + PARALLEL_START
        return cycles
