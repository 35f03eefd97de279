"""Tiling: split a loop into an outer loop over tiles and an inner loop inside a tile.

Tiling a nest is split + interchange. Split depth is bounded by construction: a named axis may be
split once (by a cache tile or a register tile), and the inner loop of a cache tile may be split
once more by a register tile; outer loops are never split. Tile sizes come from the machine
(`tile_sizes`), not from enumeration, so each axis has at most a handful of split forms.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from egglog import Ruleset, String, i64, ne, ruleset
from egglog.egraph import FactLike

from eqsat.core.loops import REGISTER_BUDGET
from eqsat.core.terms import Axis, LoopKind, Stmt
from eqsat.extract.loop_cost import CACHE_USE
from eqsat.extract.machine import Machine
from eqsat.rewrites.lowering import CONTRACTION
from eqsat.rewrites.rule import Identity

SERIAL = LoopKind.serial()
MIN_ACCUMULATORS = 12
# A long depth tile's panel of a register tile's columns fills at most this share of L2: 1024
# deep for 32 floats and a 1 MiB L2. A 4096-deep product otherwise ran all of k at once, its
# panel too large to pack and read in place, or 64-deep blocks that reload the accumulators 64
# times: 1024 x 4096 @ 4096 x 1024 at avx512 on an AMD EPYC 64-70 -> 41-43 ms
# (docs/MEASUREMENTS.md).
LONG_PANEL_SHARE = 8


@dataclass(frozen=True)
class TileSizes:
    """Split factors for one kernel: `cache` tiles split named axes only; `register` tiles split
    named axes or the inner loop of a cache tile; `depth` tiles split only a matmul's
    contraction axis (`lowering.CONTRACTION`)."""

    cache: tuple[int, ...]
    register: tuple[int, ...]
    depth: tuple[int, ...] = ()


def _split_loops(axis: Axis, tile: int, body: Stmt) -> Stmt:
    """`for axis.outer(tile): for axis.inner(tile): body`."""
    return Stmt.loop(
        Axis.outer(axis, tile), SERIAL, Stmt.loop(Axis.inner(axis, tile), SERIAL, body)
    )


def _longer_than(tile: int) -> Callable[[i64], list[FactLike]]:
    def longer_than_tile(extent: i64) -> list[FactLike]:
        """The named axis has more than one tile of iterations (extent > tile)."""
        return [extent > i64(tile)]

    return longer_than_tile


def _not_contraction(name: String) -> list[FactLike]:
    """The axis is not a matmul's contraction axis: depth tiles split that one."""
    return [ne(name).to(String(CONTRACTION))]


def _at_most(tile: int) -> Callable[[i64], list[FactLike]]:
    def no_longer_than_tile(extent: i64) -> list[FactLike]:
        """The named axis has at most one tile of iterations (extent <= tile)."""
        return [extent <= i64(tile)]

    return no_longer_than_tile


def split_identity(tile: int) -> Identity:
    """A cache or register tile of a named axis other than a matmul's contraction axis."""
    return Identity(
        f"split-{tile}",
        f"for a: body -> for a.outer({tile}): for a.inner({tile}): body  (a != {CONTRACTION})",
        {"name": String, "extent": i64, "body": Stmt},
        lhs=lambda name, extent, body: Stmt.loop(Axis.named(name, extent), SERIAL, body),
        rhs=lambda name, extent, body: _split_loops(Axis.named(name, extent), tile, body),
        # A tile that does not divide the extent ends in a remainder tile (loops.trip_runs).
        guard=(_longer_than(tile), _not_contraction),
    )


def split_short_contraction_identity(tile: int, longest: int) -> Identity:
    """A cache or register tile of a matmul's contraction axis of at most `longest` (the
    longest depth tile) iterations: the short blocks a parallel sum over a few rows' product
    shares out (8 x 420 @ 420 x 420 in 105 blocks of 4). A longer contraction is split by depth
    tiles only: there a register tile's width as a depth tile made the cost model's pick, which
    prices B's panel read in place, before packing, within 2% of 128- or 512-deep blocks, and
    172x1998 @ 1998x649 at AVX2 ran 24-deep blocks 1.26x slower (docs/MEASUREMENTS.md)."""
    return _split_contraction(
        f"split-short-{CONTRACTION}-{tile}",
        tile,
        (_longer_than(tile), _at_most(longest)),
        f"  ({CONTRACTION} <= {longest})",
    )


def split_depth_identity(tile: int) -> Identity:
    """A split of a matmul's contraction axis only: its depth tile bounds the panels a register
    tile streams through L1, which the row and column blocks (cache tiles, sized by L2) do not."""
    return _split_contraction(f"split-depth-{tile}", tile, (_longer_than(tile),))


def _split_contraction(
    name: str, tile: int, guard: tuple[Callable[[i64], list[FactLike]], ...], condition: str = ""
) -> Identity:
    """The split of a matmul's contraction axis by `tile` under `guard` (on its extent)."""
    k = String(CONTRACTION)
    return Identity(
        name,
        f"for {CONTRACTION}: body -> for {CONTRACTION}.outer({tile}): "
        f"for {CONTRACTION}.inner({tile}): body{condition}",
        {"extent": i64, "body": Stmt},
        lhs=lambda extent, body: Stmt.loop(Axis.named(k, extent), SERIAL, body),
        rhs=lambda extent, body: _split_loops(Axis.named(k, extent), tile, body),
        guard=guard,
    )


def split_tile_identity(cache: int, tile: int) -> Identity:
    """The second level: the inner loop of a cache tile is split by a register tile.

    It needs no guard: `split_identities` builds it only where `cache` is a multiple of `tile`."""
    inner = f"a.inner({cache})"
    return Identity(
        f"split-tile-{cache}-{tile}",
        f"for {inner}: body -> for {inner}.outer({tile}): for {inner}.inner({tile}): body",
        {"name": String, "extent": i64, "body": Stmt},
        lhs=lambda name, extent, body: Stmt.loop(
            Axis.inner(Axis.named(name, extent), cache), SERIAL, body
        ),
        rhs=lambda name, extent, body: _split_loops(
            Axis.inner(Axis.named(name, extent), cache), tile, body
        ),
    )


def tile_sizes(machine: Machine, dtype: str, small_kernel: bool = False) -> TileSizes:
    """Tiles for `machine`: a register tile of `rows` x (2 or 3 vectors: MIN_ACCUMULATORS), a
    cache tile T (a power of two) such that T-deep panels of both register-tile operands fit L1
    together and a T x T block fits half of L2 (ARCHITECTURE §5b: 8 rows x 32 columns, 256-deep
    blocks on an AVX-512 machine with a 48 KiB L1), and depth tiles for the contraction axis:
    D < T where the cost model would not keep a T-deep panel in L1 (D-deep rows of both
    operands of a register tile fit the part of L1 a footprint may fill, CACHE_USE), and a long
    one L > T, the deepest whose panel of the register tile's columns fills at most
    1/LONG_PANEL_SHARE of L2 (contractions deeper than L, e.g. 4096, run in L-deep blocks of
    packed panels).

    A `small_kernel` (`eqsat.optimizer`'s, whose roofline time is under 0.1 ms) gets more tiles
    for the cost model to choose from. Where rows >= 8, tiles of rows/2 rows: its narrow products
    (99x17 @ 17x75) otherwise run one row of up to 6 vectors, 5 FMA chains that wait on each
    other's latency (8 rows of 5 vectors overflow the registers), at half the speed of 4 rows.
    Where the tile is 3 vectors wide (AVX2: 4 x 3 of 16 registers), tiles of 2 vectors: 12
    accumulators, 3 operand vectors and a broadcast fill every register, and gcc then reads 1-2
    of the operand vectors from memory at each FMA, which made products that read B's unaligned
    rows in place load-bound; 4 x 2 keeps every operand in a register (788x77 @ 77x169: 0.195 ->
    0.151 ms). Large kernels keep their e-graph: the extra split took a 1024-cubed product's
    from 2.6k e-nodes, saturated, to its 4.8k budget, and offering 2 vectors at AVX2 to every
    kernel made the transformer block's parts stop a round earlier, 1.36x -> 1.16x numpy."""
    lanes = machine.lanes(dtype)
    item = 4 if dtype == "float32" else 8
    budget = REGISTER_BUDGET[machine.isa]
    rows = 1 << ((budget // 2).bit_length() - 1)
    vectors = 2 if rows * 2 >= MIN_ACCUMULATORS or rows * 3 > budget else 3
    columns = vectors * lanes if lanes > 1 else 4
    cache = 512
    while cache > columns and (
        cache * (columns + rows) * item > machine.l1_bytes
        or cache * cache * item > machine.l2_bytes // 2
    ):
        cache //= 2
    depth = cache
    while depth > columns and depth * (columns + rows) * item > machine.l1_bytes * CACHE_USE:
        depth //= 2
    long_depth = cache
    while 2 * long_depth * columns * item <= machine.l2_bytes // LONG_PANEL_SHARE:
        long_depth *= 2
    register = {rows, columns}
    if small_kernel:
        register |= {rows // 2} if rows >= 8 else set()
        register |= {2 * lanes} if vectors == 3 else set()
    return TileSizes(
        cache=(cache,),
        register=tuple(sorted(register)),
        depth=tuple(d for d in (depth, long_depth) if d != cache),
    )


def split_identities(tiles: TileSizes) -> tuple[Identity, ...]:
    first = sorted(set(tiles.cache) | set(tiles.register))
    longest = max(first + list(tiles.depth))
    return (
        *(split_identity(t) for t in first),
        *(split_short_contraction_identity(t, longest) for t in first if t < longest),
        *(split_depth_identity(t) for t in tiles.depth if t not in first),
        *(
            split_tile_identity(cache, t)
            for cache in tiles.cache
            for t in tiles.register
            if cache % t == 0 and cache > t
        ),
    )


def tiling_rules(tiles: TileSizes) -> Ruleset:
    rules = ruleset(name="tiling")
    rules.register(*(identity.egglog_rule() for identity in split_identities(tiles)))
    return rules
