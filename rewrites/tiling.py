"""Tiling: split a loop into an outer loop over tiles and an inner loop inside a tile.

Tiling a nest is split + interchange. Tile sizes come from the machine (the vector width), not
from enumeration, and only named axes are split, so a split never splits again (depth 1 here;
the loop-transformations issue adds the register/cache two-level form).
"""

from __future__ import annotations

from collections.abc import Sequence

from egglog import Ruleset, String, eq, i64, ruleset

from eqsat.terms import Axis, LoopKind, Stmt
from rewrites.rule import Identity

SERIAL = LoopKind.serial()


def split_identity(tile: int) -> Identity:
    return Identity(
        f"split-{tile}",
        f"for a: body -> for a.outer({tile}): for a.inner({tile}): body",
        {"name": String, "extent": i64, "body": Stmt},
        lhs=lambda name, extent, body: Stmt.loop(Axis.named(name, extent), SERIAL, body),
        rhs=lambda name, extent, body: Stmt.loop(
            Axis.outer(Axis.named(name, extent), tile),
            SERIAL,
            Stmt.loop(Axis.inner(Axis.named(name, extent), tile), SERIAL, body),
        ),
        guard=lambda extent: [eq(extent % tile).to(i64(0)), extent > i64(tile)],
        guard_text=f"the extent is a multiple of {tile} and larger than it",
    )


def tile_sizes(lanes: int) -> tuple[int, ...]:
    """Split factors for a machine with `lanes` elements per vector register."""
    return (lanes,) if lanes > 1 else (8,)


def tiling_rules(tiles: Sequence[int]) -> Ruleset:
    rules = ruleset(name="tiling")
    rules.register(*(split_identity(t).egglog_rule() for t in tiles))
    return rules
