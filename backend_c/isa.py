"""One table drives vector emission: intrinsic spellings per ISA level and element type.

`VectorIsa.op(name, *args)` spells an operation; the emitter never names an intrinsic itself.
AVX-512 handles loop tails with masks; AVX2 finishes a loop with a scalar remainder. Both load
and store a register tile's partial vector under a lane mask (AVX2: an integer vector whose
lanes' sign bits are the mask, for maskload and maskstore).

max and min are numpy's `maximum` and `minimum` (a NaN in either operand is the result) at every
level: C's fmax and the vector max instructions return the other operand when one is NaN, so
each is wrapped in a helper (`scalar_preamble`, `VectorIsa.preamble`) that puts the NaN back.
"""

from __future__ import annotations

from dataclasses import dataclass

from eqsat.core.loops import MASKED_ISAS, MASKED_TILE_ISAS

GCC_FLAGS = {
    "avx512": ("-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl", "-mavx2", "-mfma"),
    "avx2": ("-mavx2", "-mfma"),
    "scalar": (),
}

# eqsat op -> the C function of backend_c/vmath.py that computes it on one vector.
VECTOR_FUNCTIONS = {
    "exp": "eq_vexp",
    "log": "eq_vlog",
    "tanh": "eq_vtanh",
    "sigmoid": "eq_vsigmoid",
    "erf": "eq_verf",
}

COMPARE_PREDICATES = {
    "lt": "_CMP_LT_OQ",
    "le": "_CMP_LE_OQ",
    "gt": "_CMP_GT_OQ",
    "ge": "_CMP_GE_OQ",
    "eq": "_CMP_EQ_OQ",
    "ne": "_CMP_NEQ_UQ",
}


def scalar_preamble(dtype: str) -> str:
    """C helpers `eq_max` and `eq_min` of two `dtype` scalars, numpy's maximum and minimum bit
    for bit: `a` where `a` is NaN, else `a > b ? a : b` (resp. `<`), which is `b` where `b` is
    NaN. Emitted once per kernel, before anything that calls them. (So spelled, gcc emits one
    maxss or minss after a NaN test whose branch numbers never take.)"""
    ctype = "float" if dtype == "float32" else "double"
    return "".join(
        f"static inline {ctype} eq_{op}({ctype} a, {ctype} b) {{\n"
        f"    return a != a ? a : (a {sign} b ? a : b);\n}}\n"
        for op, sign in (("max", ">"), ("min", "<"))
    )


def sign_helper(dtype: str) -> str:
    """C helper `eq_sign` of a `dtype` scalar, numpy's sign: +0 for either zero, NaN for NaN.
    Emitted after `scalar_preamble` in kernels that compute a scalar sign."""
    ctype = "float" if dtype == "float32" else "double"
    return (
        f"static inline {ctype} eq_sign({ctype} x) {{\n"
        "    return x > 0 ? 1 : (x < 0 ? -1 : (x == x ? 0 : x));\n}\n"
    )


@dataclass(frozen=True)
class VectorIsa:
    name: str  # "avx512" or "avx2"
    dtype: str  # "float32" or "float64"

    @property
    def lanes(self) -> int:
        return (512 if self.name == "avx512" else 256) // (32 if self.dtype == "float32" else 64)

    @property
    def masked_tail(self) -> bool:
        return self.name in MASKED_ISAS

    @property
    def vtype(self) -> str:
        width = "512" if self.name == "avx512" else "256"
        return f"__m{width}" + ("" if self.dtype == "float32" else "d")

    @property
    def masked_tile(self) -> bool:
        """A register tile's partial vector is loaded and stored under a mask (`tail_mask`)."""
        return self.name in MASKED_TILE_ISAS

    @property
    def mask_type(self) -> str:
        return f"__mmask{self.lanes}" if self.masked_tail else "__m256i"

    def _fn(self, stem: str) -> str:
        prefix = "_mm512_" if self.name == "avx512" else "_mm256_"
        return f"{prefix}{stem}_{'ps' if self.dtype == 'float32' else 'pd'}"

    def load(self, pointer: str, mask: str | None = None) -> str:
        """A vector from `pointer`; under `mask`, lanes outside it read nothing and are 0."""
        if mask is None:
            return f"{self._fn('loadu')}({pointer})"
        if not self.masked_tail:
            return f"{self._fn('maskload')}({pointer}, {mask})"
        return f"{self._fn('maskz_loadu')}({mask}, {pointer})"

    def store(self, pointer: str, value: str, mask: str | None = None) -> str:
        if mask is None:
            return f"{self._fn('storeu')}({pointer}, {value});"
        if not self.masked_tail:
            return f"{self._fn('maskstore')}({pointer}, {mask}, {value});"
        return f"{self._fn('mask_storeu')}({pointer}, {mask}, {value});"

    def stream(self, pointer: str, value: str) -> str:
        """A non-temporal store of a whole vector; `pointer` must be vector-aligned, and the
        stores must be fenced (`_mm_sfence()`) before another thread reads them."""
        return f"{self._fn('stream')}({pointer}, {value});"

    def zip(self, a: str, b: str) -> tuple[str, str]:
        """The lanes of `a` and `b` interleaved, a0 b0 a1 b1 ...: the low half of that sequence
        and the high half, one vector each."""
        if self.name == "avx512":
            if self.dtype == "float32":
                setr, half = "_mm512_setr_epi32", 16
            else:
                setr, half = "_mm512_setr_epi64", 8
            lanes = [(j // 2) + (j % 2) * half for j in range(half)]  # b's lane j is j + half
            low = f"{setr}({', '.join(map(str, lanes))})"
            high = f"{setr}({', '.join(str(lane + half // 2) for lane in lanes)})"
            return (
                f"{self._fn('permutex2var')}({a}, {low}, {b})",
                f"{self._fn('permutex2var')}({a}, {high}, {b})",
            )
        # AVX2: unpack interleaves within each 128-bit half; permute2f128 joins the halves.
        lows, highs = f"{self._fn('unpacklo')}({a}, {b})", f"{self._fn('unpackhi')}({a}, {b})"
        return (
            f"{self._fn('permute2f128')}({lows}, {highs}, 0x20)",
            f"{self._fn('permute2f128')}({lows}, {highs}, 0x31)",
        )

    def broadcast(self, scalar: str) -> str:
        return f"{self._fn('set1')}({scalar})"

    def lane_values(self, first: str) -> str:
        """Lane j = first + j: the values of an index that steps by one a lane."""
        steps = ", ".join(str(lane) for lane in range(self.lanes))
        return self.binary("add", self.broadcast(first), f"{self._fn('setr')}({steps})")

    def tail_mask(self, count: str) -> str:
        """Mask with the low `count` lanes set, 0 <= count <= lanes (of `mask_type`)."""
        if self.masked_tail:
            return f"(({self.mask_type})((1u << ({count})) - 1u))"
        lanes = ", ".join(map(str, range(self.lanes)))
        if self.dtype == "float32":
            return f"_mm256_cmpgt_epi32(_mm256_set1_epi32({count}), _mm256_setr_epi32({lanes}))"
        return f"_mm256_cmpgt_epi64(_mm256_set1_epi64x({count}), _mm256_setr_epi64x({lanes}))"

    def unary(self, op: str, x: str) -> str:
        zero = self.broadcast("0")
        match op:
            case "neg":
                return f"{self._fn('xor')}({x}, {self.broadcast('-0.0')})"
            case "abs":
                return f"{self._fn('andnot')}({self.broadcast('-0.0')}, {x})"
            case "sqrt":
                return f"{self._fn('sqrt')}({x})"
            case "relu":
                return self.binary("max", x, zero)
            case "floor" | "ceil" | "rint" | "trunc":
                # to nearest even (0), toward -inf (1), +inf (2) or zero (3); no exceptions (8)
                mode = {"rint": "0x08", "floor": "0x09", "ceil": "0x0A", "trunc": "0x0B"}[op]
                if self.name == "avx512":
                    return f"{self._fn('roundscale')}({x}, {mode})"
                return f"{self._fn('round')}({x}, {mode})"
            case "sign":  # numpy's: +0 for either zero, NaN for NaN
                one, minus_one = self.broadcast("1"), self.broadcast("-1")
                kept = self.select(self.compare("eq", x, x), zero, x)
                negative = self.select(self.compare("lt", x, zero), minus_one, kept)
                return self.select(self.compare("gt", x, zero), one, negative)
        if op in VECTOR_FUNCTIONS:
            return f"{VECTOR_FUNCTIONS[op]}({x})"
        # eqsat.core.loops.VECTOR_UNARY lists exactly the ops above and those of VECTOR_FUNCTIONS.
        raise ValueError(f"no vector form for {op}")

    def binary(self, op: str, a: str, b: str) -> str:
        if op in COMPARE_PREDICATES:
            return self.select(self.compare(op, a, b), self.broadcast("1"), self.broadcast("0"))
        if op in ("max", "min"):
            return f"eq_v{op}({a}, {b})"  # NaN-propagating helpers of `preamble`
        stem = {"add": "add", "sub": "sub", "mul": "mul", "div": "div"}[op]
        return f"{self._fn(stem)}({a}, {b})"

    def compare(self, op: str, a: str, b: str) -> str:
        """A lane mask where `a op b` holds."""
        predicate = COMPARE_PREDICATES[op]
        if self.masked_tail:
            return f"{self._fn('cmp')}_mask({a}, {b}, {predicate})"
        return f"{self._fn('cmp')}({a}, {b}, {predicate})"

    def select(self, mask: str, if_true: str, if_false: str) -> str:
        if self.masked_tail:
            return f"{self._fn('mask_blend')}({mask}, {if_false}, {if_true})"
        return f"{self._fn('blendv')}({if_false}, {if_true}, {mask})"

    def combine(self, op: str, acc: str, value: str, mask: str | None = None) -> str:
        """acc op value (op "sum", "max" or "prod"), only in the lanes of `mask` when given. A
        max takes `value` first, so the NaN test of `eq_vmax` is off the chain through `acc`."""
        if op in ("sum", "prod"):
            stem = "add" if op == "sum" else "mul"
            if mask is None:
                return f"{self._fn(stem)}({acc}, {value})"
            if self.masked_tail:
                return f"{self._fn('mask_' + stem)}({acc}, {mask}, {acc}, {value})"
            combined = f"{self._fn(stem)}({acc}, {value})"
        else:
            combined = self.binary("max", value, acc)
        if mask is None:
            return combined
        if self.masked_tail:
            return f"{self._fn('mask_mov')}({acc}, {mask}, {combined})"
        cast = "_mm256_castsi256_ps" if self.dtype == "float32" else "_mm256_castsi256_pd"
        return f"{self._fn('blendv')}({acc}, {combined}, {cast}({mask}))"

    def fmadd(self, a: str, b: str, c: str) -> str:
        """a * b + c with one rounding (every vector ISA level here has FMA)."""
        return f"{self._fn('fmadd')}({a}, {b}, {c})"

    def reduce(self, op: str, vector: str) -> str:
        """Horizontal sum, max or prod of all lanes (helper functions from `preamble`, and
        `horizontal_helper("prod")` in a kernel that reduces a product)."""
        return f"eq_hreduce_{op}({vector})"

    def preamble(self) -> str:
        """C helpers, emitted once per kernel (before the vector math functions of
        `backend_c.vmath.vector_math`, when the kernel calls them): `scalar_preamble`'s, the
        vector max and min (`_nan_propagating`), and the horizontal reductions."""
        lines = [scalar_preamble(self.dtype), self._nan_propagating()]
        lines += [self.horizontal_helper(op) for op in ("sum", "max")]
        return "\n".join(lines)

    def horizontal_helper(self, op: str) -> str:
        """C helper `eq_hreduce_<op>`: the lanes of a vector combined in lane order."""
        ctype = "float" if self.dtype == "float32" else "double"
        combine = {"sum": "r + lanes[i]", "max": "eq_max(lanes[i], r)", "prod": "r * lanes[i]"}
        return (
            f"static inline {ctype} eq_hreduce_{op}({self.vtype} v) {{\n"
            f"    {ctype} lanes[{self.lanes}];\n"
            f"    {self._fn('storeu')}(lanes, v);\n"
            f"    {ctype} r = lanes[0];\n"
            f"    for (int i = 1; i < {self.lanes}; ++i) r = {combine[op]};\n"
            f"    return r;\n}}\n"
        )

    def _nan_propagating(self) -> str:
        """`eq_vmax` and `eq_vmin`: numpy's maximum and minimum, lane by lane, bit for bit. The
        max instruction returns `b` where either lane is NaN (or they are equal), so only a NaN
        in `a` needs putting back: a masked max on AVX-512 (one compare more than a bare max),
        a blend on AVX2 (a compare and a blend more)."""
        functions = []
        for op in ("max", "min"):
            if self.masked_tail:
                ordered = f"{self._fn('cmp')}_mask(a, a, _CMP_ORD_Q)"
                body = f"{self._fn('mask_' + op)}(a, {ordered}, a, b)"
            else:
                nan = f"{self._fn('cmp')}(a, a, _CMP_UNORD_Q)"
                body = f"{self._fn('blendv')}({self._fn(op)}(a, b), a, {nan})"
            functions.append(
                f"static inline {self.vtype} eq_v{op}({self.vtype} a, {self.vtype} b) {{\n"
                f"    return {body};\n}}\n"
            )
        return "".join(functions)
