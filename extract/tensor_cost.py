"""The stage-1 cost model: flops first, bytes moved to break ties (a pure function of a term).

Stage 1 chooses among algebraic forms before any loop exists, so it counts work, not time:

- flops: a matmul (..., m, k) @ (..., k, n) costs 2·m·k·n per batch element, a symmetric one
  computed mirrored (`eqsat.core.symmetry`) half that and a pass over its result; an elementwise op
  one flop per result element, a math function or a division as many as the cycles the stage-2
  model charges it (`eqsat.extract.loop_cost`); a reduction one per input element; layout ops
  (transpose, broadcast, reshape) none.
- bytes: every op reads its tensor operands and writes its result, `bytes_per_element` each.

cost = flops + BYTE_WEIGHT · bytes. Below 4 GiB of traffic the byte term is under one flop, and
flop counts are whole numbers, so a form with fewer flops always wins and bytes only decide
between forms of equal flops (which transpose to keep, whether to materialize a broadcast).
Extraction sums the costs over the tree, so the cheapest bracketing of a matrix chain is the
one with the fewest flops: the classical matrix-chain optimum.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from eqsat.core import shapes
from eqsat.core.shapes import Shape
from eqsat.core.symmetry import computed_mirrored
from eqsat.core.term import Arg, Term, subterms
from eqsat.extract.loop_cost import BINARY_CYCLES, UNARY_CYCLES
from eqsat.extract.machine import Machine

BYTE_WEIGHT = 2.0**-32
LAYOUT_OPS = (
    "TExpr.transpose",
    "TExpr.broadcast",
    "TExpr.reshape",
    "TExpr.slice",
    "TExpr.concat",
)


@dataclass(frozen=True)
class TensorCost:
    """Stage-1 cost of one node given its children's costs (`eqsat.extract.extractor.NodeCost`).

    It requires: `children` are the node's arguments, tensor children as well-shaped terms.
    """

    bytes_per_element: int = 4
    _shapes: dict[Term, Shape] = field(default_factory=dict, init=False, repr=False, compare=False)
    # shapes by (op, literal arguments and children's shapes): `shape`
    _levels: dict[tuple[str, tuple[Arg, ...]], Shape] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __call__(self, op: str, children: Sequence[Arg], child_costs: Sequence[float]) -> float:
        flops, moved = self.work(op, children)
        return flops + BYTE_WEIGHT * moved + sum(child_costs)

    def work(self, op: str, children: Sequence[Arg]) -> tuple[float, float]:
        """(flops, bytes) of one node, not counting its children's own work."""
        if op in ("TExpr.input", "TExpr.const"):
            return 0.0, 0.0
        operands = [self.shape(c) for c in children if isinstance(c, Term)]
        term = Term(op, tuple(children))
        size = math.prod(self.shape(term))
        moved = self.bytes_per_element * (size + sum(math.prod(s) for s in operands))
        if op == "TExpr.matmul":
            depth = operands[0][-1]
            if computed_mirrored(term, depth):
                return size * depth + size, moved  # half the products, and the mirror's pass
            return 2.0 * size * depth, moved
        if op == "TExpr.reduce":
            return float(math.prod(operands[0])), moved
        if op in LAYOUT_OPS:
            return 0.0, moved
        per_element = 1.0  # add, mul, compare, where, ...
        if op == "TExpr.unary":
            per_element = UNARY_CYCLES.get(str(children[0]), 1.0)
        elif op == "TExpr.binary":
            per_element = BINARY_CYCLES.get(str(children[0]), 1.0)
        return per_element * size, moved

    def shape(self, term: Term) -> Shape:
        """The shape of `term`, from its children's cached shapes (one level of inference, run
        once per op, literal arguments and children's shapes: an e-class's many terms share
        them)."""
        known = self._shapes.get(term)
        if known is None:
            children = tuple(self.shape(c) if isinstance(c, Term) else c for c in term.args)
            level = (term.op, children)
            known = self._levels.get(level)
            if known is None:
                known = self._levels[level] = shapes.infer_node(term, self.shape)  # type: ignore[arg-type]
            self._shapes[term] = known
        return known


def work_flops(roots: Sequence[Term]) -> float:
    """Flops of tensor terms, each shared sub-term once (`TensorCost.work`: a math function
    counts as many flops as the cycles it costs)."""
    cost = TensorCost()
    return sum(cost.work(t.op, t.args)[0] for t in subterms(roots) if isinstance(t, Term))


def roofline_seconds(roots: Sequence[Term], machine: Machine, bytes_per_element: int) -> float:
    """The time of the work of a kernel computing `roots` on `machine`'s cores: its flops
    (`work_flops`) at the calibrated peak, or its inputs and outputs through DRAM, whichever is
    longer; 0 for an uncalibrated machine."""
    calibration = machine.calibration
    if calibration is None:
        return 0.0
    dtype = "float32" if bytes_per_element == 4 else "float64"
    inputs = [t for t in subterms(roots) if isinstance(t, Term) and t.op == "TExpr.input"]
    elements = sum(math.prod(shapes.infer(t)) for t in [*inputs, *roots])
    flops, dram = calibration.peak_flops[dtype], calibration.bandwidth["DRAM"]
    peak, bandwidth = flops[max(flops)], dram[max(dram)]  # on all the cores measured
    return max(work_flops(roots) / peak, bytes_per_element * elements / bandwidth)
