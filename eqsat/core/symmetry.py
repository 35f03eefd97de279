"""Symmetric products, which eqsat computes on and above the diagonal only and mirrors
(`eqsat.rewrites.lowering`); the stage-1 cost model prices them so (no egglog here)."""

from __future__ import annotations

from eqsat.core.term import Term

# The shortest contraction of a symmetric product computed mirrored: the mirror is a pass over
# the output, which a shorter one does not repay (x.T @ x ran 1.4-2x slower mirrored at depths
# 64-96 and 1.1-1.7x faster from 121 on; docs/MEASUREMENTS.md).
MIRROR_MIN_DEPTH = 128


def computed_mirrored(t: Term, contraction: int) -> bool:
    """Whether tensor term `t`, whose contraction (if a matmul) is `contraction` long, is a
    symmetric product computed mirrored: `x.T @ x` or `x @ x.T` (batched: the transpose swaps
    the last two dimensions), whose elements (i, j) and (j, i) are the same products summed in
    the same order, with a contraction of MIRROR_MIN_DEPTH or longer."""
    if t.op != "TExpr.matmul" or contraction < MIRROR_MIN_DEPTH:
        return False
    a, b = t.args
    assert isinstance(a, Term) and isinstance(b, Term)
    for transposed, plain in ((a, b), (b, a)):
        if transposed.op == "TExpr.transpose" and transposed.args[0] == plain:
            permutation = transposed.args[1]
            assert isinstance(permutation, tuple)
            rank = len(permutation)
            if rank >= 2 and tuple(permutation) == (*range(rank - 2), rank - 1, rank - 2):
                return True
    return False
