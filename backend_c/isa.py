"""One table drives vector emission: intrinsic spellings per ISA level and element type.

`VectorIsa.op(name, *args)` spells an operation; the emitter never names an intrinsic itself.
AVX-512 handles loop tails with masks; AVX2 finishes a loop with a scalar remainder.
"""

from __future__ import annotations

from dataclasses import dataclass

from eqsat.core.loops import MASKED_ISAS

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
}

COMPARE_PREDICATES = {
    "lt": "_CMP_LT_OQ",
    "le": "_CMP_LE_OQ",
    "gt": "_CMP_GT_OQ",
    "ge": "_CMP_GE_OQ",
    "eq": "_CMP_EQ_OQ",
    "ne": "_CMP_NEQ_UQ",
}


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
    def mask_type(self) -> str:
        return f"__mmask{self.lanes}" if self.masked_tail else self.vtype

    def _fn(self, stem: str) -> str:
        prefix = "_mm512_" if self.name == "avx512" else "_mm256_"
        return f"{prefix}{stem}_{'ps' if self.dtype == 'float32' else 'pd'}"

    def load(self, pointer: str, mask: str | None = None) -> str:
        if mask is None:
            return f"{self._fn('loadu')}({pointer})"
        return f"{self._fn('maskz_loadu')}({mask}, {pointer})"

    def store(self, pointer: str, value: str, mask: str | None = None) -> str:
        if mask is None:
            return f"{self._fn('storeu')}({pointer}, {value});"
        return f"{self._fn('mask_storeu')}({pointer}, {mask}, {value});"

    def stream(self, pointer: str, value: str) -> str:
        """A non-temporal store of a whole vector; `pointer` must be vector-aligned, and the
        stores must be fenced (`_mm_sfence()`) before another thread reads them."""
        return f"{self._fn('stream')}({pointer}, {value});"

    def broadcast(self, scalar: str) -> str:
        return f"{self._fn('set1')}({scalar})"

    def tail_mask(self, count: str) -> str:
        """Mask with the low `count` lanes set (AVX-512 only), 0 < count < lanes."""
        return f"(({self.mask_type})((1u << ({count})) - 1u))"

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
                return f"{self._fn('max')}({x}, {zero})"
        if op in VECTOR_FUNCTIONS:
            return f"{VECTOR_FUNCTIONS[op]}({x})"
        # eqsat.core.loops.VECTOR_UNARY lists exactly the ops above and those of VECTOR_FUNCTIONS.
        raise ValueError(f"no vector form for {op}")

    def binary(self, op: str, a: str, b: str) -> str:
        if op in COMPARE_PREDICATES:
            return self.select(self.compare(op, a, b), self.broadcast("1"), self.broadcast("0"))
        stem = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "max": "max", "min": "min"}[
            op
        ]
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
        """acc op value (op "sum" or "max"), only in the lanes of `mask` when given."""
        stem = "add" if op == "sum" else "max"
        if mask is None:
            return f"{self._fn(stem)}({acc}, {value})"
        return f"{self._fn('mask_' + stem)}({acc}, {mask}, {acc}, {value})"

    def fmadd(self, a: str, b: str, c: str) -> str:
        """a * b + c with one rounding (every vector ISA level here has FMA)."""
        return f"{self._fn('fmadd')}({a}, {b}, {c})"

    def reduce(self, op: str, vector: str) -> str:
        """Horizontal sum or max of all lanes (helper functions from `preamble`)."""
        return f"eq_hreduce_{op}({vector})"

    def preamble(self) -> str:
        """C helpers for horizontal reductions, emitted once per kernel (before the vector math
        functions of `backend_c.vmath.vector_math`, when the kernel calls them)."""
        ctype = "float" if self.dtype == "float32" else "double"
        lines = []
        for op, combine in (("sum", "{a} + {b}"), ("max", "({a} > {b} ? {a} : {b})")):
            step = combine.format(a="r", b="lanes[i]")
            lines.append(
                f"static inline {ctype} eq_hreduce_{op}({self.vtype} v) {{\n"
                f"    {ctype} lanes[{self.lanes}];\n"
                f"    {self._fn('storeu')}(lanes, v);\n"
                f"    {ctype} r = lanes[0];\n"
                f"    for (int i = 1; i < {self.lanes}; ++i) r = {step};\n"
                f"    return r;\n}}\n"
            )
        return "\n".join(lines)
