"""Vector exp, log, tanh, sigmoid and erf as C source for one `VectorIsa`, without libm.

`vector_math(isa, ops)` returns static inline C functions `eq_vexp`, `eq_vlog`, `eq_vtanh`,
`eq_vsigmoid`, and `eq_verf` when `ops` has erf, each taking and returning one vector
(`isa.vtype`). They are written once, in terms of a few `eqv_*` primitives that this module
spells per ISA, and they need no -ffast-math:

- exp: x = k*ln2 + r with |r| <= ln2/2 (two-constant Cody-Waite split, FMA), e^r = 1 + expm1(r)
  from its Taylor polynomial, then times 2^k, rounded once where the result is subnormal (AVX-512's
  scalef; on AVX2, 2^k built in the exponent field, in two steps). Lanes whose result is 0
  (below the clamp: -inf, a masked score) are computed from 0 and zeroed: an underflowing product
  costs a microcode assist on x86, which made causal attention's softmax 2x slower.
- log: x = m * 2^k with m in [sqrt(1/2), sqrt(2)) (subnormals scaled up first), f = m - 1,
  s = f / (2 + f) and log(m) = f - (f^2/2 - s * (f^2/2 + R(s^2))), R from the series of atanh.
- tanh: t = e / (e + 2) with e = expm1(2|x|) (no cancellation near 0), saturating to 1, with the
  sign of x put back (so tanh(-0) = -0).
- sigmoid: e = exp(-|x|), then 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0.
- erf: for a = |x| < 1, a + a * P(a^2); else 1 - exp(-a^2) * R(2 / (2 + a) - t0), a clamped where
  erf rounds to 1; the sign of x put back (erf(-0) = -0). P and R are polynomials fitted by
  `python -m eqsat.tools.fit_erf`, which prints `ERF_FITS`.

Accuracy (tests/test_vmath.py, ~1M points over the whole float range, AVX-512 and AVX2 alike):
max error in ulp of the correctly rounded float32 result / of numpy's float64 result is exp 1/1,
log 1/1, tanh 2/3, sigmoid 2/2, erf 1/1 (float64: of libm's erf, and of the correctly rounded
value from mpmath too); special values (0, +-inf, NaN, -0, overflow) exact.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Collection
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction

from eqsat.backend_c.isa import VECTOR_FUNCTIONS, VectorIsa


@dataclass(frozen=True)
class _Format:
    """Per dtype: mantissa bits and exponent bias; the Taylor degree of expm1 on |r| <= ln2/2 and
    the number of atanh-series terms R(z) = 2z/3 + 2z^2/5 + ... on z <= 0.0295 (each truncation
    error far below half an ulp); the exp clamp (beyond it exp is 0 or inf) and the |x| from
    which tanh rounds to 1."""

    mant: int
    bias: int
    expm1_degree: int
    atanh_terms: int
    exp_lo: float
    exp_hi: float
    tanh_one: float


_FORMAT = {
    "float32": _Format(23, 127, 8, 4, -110.0, 90.0, 9.1),
    "float64": _Format(52, 1023, 13, 10, -750.0, 710.0, 19.5),
}


@dataclass(frozen=True)
class ErfFit:
    """erf's polynomials for one dtype (coefficients low degree first, values of the dtype)."""

    small: tuple[float, ...]  # P of a^2, for a = |x| < 1 (erf = a + a * P)
    large: tuple[float, ...]  # R of 2 / (2 + a) - t0, for 1 <= a <= clamp
    t0: float
    clamp: float  # a little past the |x| from which erf rounds to 1


# Printed by `python -m eqsat.tools.fit_erf` (tests/test_vmath.py checks this copy against it).
ERF_FITS: dict[str, ErfFit] = {
    # fit errors relative to erf: P 1.2e-09, R 4.5e-11
    "float32": ErfFit(
        small=(
            0.12837916612625122,
            -0.3761262595653534,
            0.1128358244895935,
            -0.026853691786527634,
            0.005188099108636379,
            -0.0008008189033716917,
            7.847259257687256e-05,
        ),
        large=(
            0.2565942108631134,
            0.8570831418037415,
            0.9692855477333069,
            0.6322150230407715,
            0.05811974033713341,
            -0.23093053698539734,
        ),
        t0=0.5014005899429321,
        clamp=3.95,
    ),
    # fit errors relative to erf: P 7.4e-18, R 6.0e-19
    "float64": ErfFit(
        small=(
            0.12837916709551256,
            -0.37612638903183515,
            0.1128379167094405,
            -0.026866170643090832,
            0.005223977605955977,
            -0.0008548325921832884,
            0.00012055293361789941,
            -1.4924708324571507e-05,
            1.6447084274239356e-06,
            -1.6205964194101388e-07,
            1.3709519207384055e-08,
            -7.77682913736281e-10,
        ),
        large=(
            0.22204100875529975,
            0.7784871840461507,
            0.8898936616755809,
            0.6184061840411545,
            0.10383964137872079,
            -0.20628370767083581,
            -0.08913873679733439,
            0.11650220687146683,
            0.04541932803482385,
            -0.09501717087920844,
            -0.0019100025773669327,
            0.07985301793197348,
            -0.051740407299671894,
        ),
        t0=0.4591194968553459,
        clamp=5.95,
    ),
}


def vector_math(isa: VectorIsa, ops: Collection[str] = tuple(VECTOR_FUNCTIONS)) -> str:
    """C source of `eq_vexp`, `eq_vlog`, `eq_vtanh` and `eq_vsigmoid` for `isa`, and of `eq_verf`
    when `ops` (the ops of `VECTOR_FUNCTIONS` a kernel calls) has erf: the largest, so only
    kernels that call it carry it.

    It requires: the source is included once per translation unit, after <math.h> and
    <immintrin.h>, and compiled with `GCC_FLAGS[isa.name]` (AVX-512 F/DQ, or AVX2 + FMA).
    """
    constants = _constants(isa.dtype)
    erf = _ERF.format(**constants) if "erf" in ops else ""
    scalef = "_mm512_scalef_" + ("ps" if isa.dtype == "float32" else "pd")
    ldexp = _LDEXP_SCALEF.format(scalef=scalef) if isa.name == "avx512" else _LDEXP
    return _primitives(isa) + _ALGORITHMS.format(ldexp=ldexp, **constants) + erf


def _round(value: float | Fraction | Decimal, dtype: str) -> float:
    """`value` rounded to `dtype` (float32 via a correctly rounding double -> float cast)."""
    double = float(value)
    if dtype == "float64":
        return double
    return float(struct.unpack("<f", struct.pack("<f", double))[0])


def _literal(value: float, dtype: str) -> str:
    """An exact C literal for `value` rounded to `dtype` (hexadecimal, trailing zeros dropped)."""
    mantissa, exponent = _round(value, dtype).hex().split("p")
    return f"{mantissa.rstrip('0').rstrip('.')}p{exponent}"


def _constants(dtype: str) -> dict[str, str]:
    """The C literals that `_ALGORITHMS` names, for `dtype`."""
    fmt = _FORMAT[dtype]
    with localcontext() as context:
        context.prec = 60
        ln2 = Decimal(2).ln()
        ln2_hi = _round(ln2, dtype)
        ln2_lo = _round(ln2 - Decimal(ln2_hi), dtype)
        log2e = _round(1 / ln2, dtype)
    expm1 = [Fraction(1, math.factorial(n)) for n in range(2, fmt.expm1_degree + 1)]
    atanh = [Fraction(2, 2 * n + 1) for n in range(1, fmt.atanh_terms + 1)]
    mant, bias = fmt.mant, fmt.bias
    sqrt_half_bits = _bits(math.sqrt(0.5), dtype)
    one_bits = _bits(1.0, dtype)
    erf = ERF_FITS[dtype]

    def lit(value: float | Fraction) -> str:
        return _literal(float(value), dtype)

    return {
        "ln2_hi": lit(ln2_hi),
        "ln2_lo": lit(ln2_lo),
        "log2e": lit(log2e),
        "expm1_poly": _horner("r", [lit(c) for c in expm1]),
        "atanh_poly": _horner("z", [lit(c) for c in atanh]),
        "erf_small_poly": _horner("a2", [lit(c) for c in erf.small], "small"),
        "erf_large_poly": _horner("u", [lit(c) for c in erf.large], "r"),
        "erf_t0": lit(erf.t0),
        "erf_clamp": lit(erf.clamp),
        "exp_lo": lit(fmt.exp_lo),
        "exp_hi": lit(fmt.exp_hi),
        "two_tanh_one": lit(2 * fmt.tanh_one),
        "pow2_magic": lit(1.5 * 2.0**mant + bias),
        "exponent_magic": hex(_bits(2.0**mant, dtype)),
        "exponent_offset": lit(2.0**mant + bias),
        "mant_mask": hex(2**mant - 1),
        "sqrt_half_bits": hex(sqrt_half_bits),
        "one_minus_sqrt_half_bits": hex(one_bits - sqrt_half_bits),
        "min_normal": lit(2.0 ** (1 - bias)),
        "subnormal_scale": lit(2.0 ** (mant + 1)),
        "subnormal_shift": lit(mant + 1),
    }


def _bits(value: float, dtype: str) -> int:
    """The IEEE bit pattern of `value` rounded to `dtype`, as an unsigned int."""
    code = ("<f", "<I") if dtype == "float32" else ("<d", "<Q")
    return int(struct.unpack(code[1], struct.pack(code[0], value))[0])


def _horner(var: str, coefficients: list[str], result: str = "p") -> str:
    """C statements leaving c[0] + var*(c[1] + var*(...)) in `result` (coefficients low to
    high)."""
    lines = [f"    eqv_f {result} = eqv_set({coefficients[-1]});"]
    lines += [
        f"    {result} = eqv_fma({result}, {var}, eqv_set({c}));"
        for c in reversed(coefficients[:-1])
    ]
    return "\n".join(lines)


def _primitives(isa: VectorIsa) -> str:
    """Typedefs and one-line wrappers `eqv_*` over the intrinsics of `isa`."""
    wide = isa.name == "avx512"
    prefix = "_mm512_" if wide else "_mm256_"
    suffix = "ps" if isa.dtype == "float32" else "pd"
    si = "si512" if wide else "si256"
    epi = "epi32" if isa.dtype == "float32" else "epi64"
    set1_int = f"{prefix}set1_{epi}" + ("x" if not wide and epi == "epi64" else "")
    ctype = "float" if isa.dtype == "float32" else "double"
    itype = "int32_t" if isa.dtype == "float32" else "int64_t"
    mant = _FORMAT[isa.dtype].mant
    mask = f"__mmask{isa.lanes}" if wide else isa.vtype

    def fn(stem: str) -> str:
        return f"{prefix}{stem}_{suffix}"

    def compare(predicate: str) -> str:
        return f"{fn('cmp')}_mask(a, b, {predicate})" if wide else f"{fn('cmp')}(a, b, {predicate})"

    # AVX-512 compares give bit masks (__mmask); AVX2 compares give all-ones / all-zero lanes.
    both = "a & b" if wide else f"{fn('and')}(a, b)"
    select = f"{fn('mask_blend')}(m, f, t)" if wide else f"{fn('blendv')}(f, t, m)"
    zero_where = f"{fn('mask_mov')}(a, m, {fn('setzero')}())" if wide else f"{fn('andnot')}(m, a)"

    lines = [
        f"/* Vector math primitives for {isa.name} {isa.dtype} (backend_c/vmath.py). */",
        f"typedef {isa.vtype} eqv_f;",
        f"typedef {isa.vtype[:-1] if suffix == 'pd' else isa.vtype}i eqv_i;",
        f"typedef {mask} eqv_m;",
        f"static inline eqv_f eqv_set({ctype} c) {{ return {fn('set1')}(c); }}",
        f"static inline eqv_i eqv_iset({itype} c) {{ return {set1_int}(c); }}",
        f"static inline eqv_i eqv_bits(eqv_f a) {{ return {prefix}cast{suffix}_{si}(a); }}",
        f"static inline eqv_f eqv_float(eqv_i a) {{ return {prefix}cast{si}_{suffix}(a); }}",
    ]
    for name in ("add", "sub", "mul", "div", "and", "or", "andnot", "min", "max"):
        lines.append(
            f"static inline eqv_f eqv_{name}(eqv_f a, eqv_f b) {{ return {fn(name)}(a, b); }}"
        )
    lines += [
        "/* a*b + c and c - a*b, rounded once. */",
        "static inline eqv_f eqv_fma(eqv_f a, eqv_f b, eqv_f c) "
        f"{{ return {fn('fmadd')}(a, b, c); }}",
        "static inline eqv_f eqv_fnma(eqv_f a, eqv_f b, eqv_f c) "
        f"{{ return {fn('fnmadd')}(a, b, c); }}",
        "static inline eqv_f eqv_round(eqv_f a) "
        f"{{ return {fn('roundscale' if wide else 'round')}"
        "(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }",
        f"static inline eqv_m eqv_lt(eqv_f a, eqv_f b) {{ return {compare('_CMP_LT_OQ')}; }}",
        f"static inline eqv_m eqv_gt(eqv_f a, eqv_f b) {{ return {compare('_CMP_GT_OQ')}; }}",
        f"static inline eqv_m eqv_ge(eqv_f a, eqv_f b) {{ return {compare('_CMP_GE_OQ')}; }}",
        f"static inline eqv_m eqv_eq(eqv_f a, eqv_f b) {{ return {compare('_CMP_EQ_OQ')}; }}",
        f"static inline eqv_m eqv_both(eqv_m a, eqv_m b) {{ return {both}; }}",
        "/* The lanes of t where m is set, of f elsewhere. */",
        f"static inline eqv_f eqv_select(eqv_m m, eqv_f t, eqv_f f) {{ return {select}; }}",
        "/* a with the lanes where m is set made +0 (one instruction, where a select is two). */",
        f"static inline eqv_f eqv_zero_where(eqv_m m, eqv_f a) {{ return {zero_where}; }}",
        f"static inline eqv_i eqv_iadd(eqv_i a, eqv_i b) {{ return {prefix}add_{epi}(a, b); }}",
        f"static inline eqv_i eqv_iand(eqv_i a, eqv_i b) {{ return {prefix}and_{si}(a, b); }}",
        f"static inline eqv_i eqv_ior(eqv_i a, eqv_i b) {{ return {prefix}or_{si}(a, b); }}",
        "/* Shift left / right (logical) by the mantissa width. */",
        f"static inline eqv_i eqv_ishl(eqv_i a) {{ return {prefix}slli_{epi}(a, {mant}); }}",
        f"static inline eqv_i eqv_ishr(eqv_i a) {{ return {prefix}srli_{epi}(a, {mant}); }}",
    ]
    return "\n".join(lines) + "\n"


# p * 2^k, the one step of the algorithms an ISA spells its own way.
_LDEXP = """
/* p * 2^k for integer-valued k with |k| at most twice the exponent bias and p near 1: the first
   factor keeps the product normal, so a subnormal result is rounded once, by the second. */
static inline eqv_f eqv_ldexp(eqv_f p, eqv_f k) {
    eqv_f k1 = eqv_round(eqv_mul(k, eqv_set(0.5)));
    return eqv_mul(eqv_mul(p, eqv_pow2i(k1)), eqv_pow2i(eqv_sub(k, k1)));
}"""
_LDEXP_SCALEF = """
/* p * 2^k for integer-valued k, rounded once (AVX-512's scalef, one instruction). */
static inline eqv_f eqv_ldexp(eqv_f p, eqv_f k) {{ return {scalef}(p, k); }}"""

# The algorithms, the same for every ISA and dtype but for `eqv_ldexp`; {names} are the
# constants of `_constants`.
_ALGORITHMS = """
/* 2^k for integer-valued k whose power is a normal number: k + 1.5*2^mant + bias has k + bias
   in its low bits, which the shift moves into the exponent field. */
static inline eqv_f eqv_pow2i(eqv_f k) {{
    return eqv_float(eqv_ishl(eqv_bits(eqv_add(k, eqv_set({pow2_magic})))));
}}

{ldexp}

/* k = round(x / ln2) and *r = x - k*ln2, |*r| <= ln2/2 (plus rounding); ln2 = hi + lo. */
static inline eqv_f eqv_reduce(eqv_f x, eqv_f *r) {{
    eqv_f k = eqv_round(eqv_mul(x, eqv_set({log2e})));
    *r = eqv_fnma(k, eqv_set({ln2_lo}), eqv_fnma(k, eqv_set({ln2_hi}), x));
    return k;
}}

/* expm1(r) for |r| <= ln2/2: r + r^2 * (1/2! + r/3! + ...), Taylor, relatively accurate at 0. */
static inline eqv_f eqv_expm1_reduced(eqv_f r) {{
{expm1_poly}
    return eqv_fma(eqv_mul(r, r), p, r);
}}

/* e^x: 0 below the clamp, +inf past overflow, NaN for NaN. Lanes below the clamp compute
   e^0 and are then set to 0: computed at the clamp, their product underflows, and an underflow
   costs a microcode assist on x86 (a softmax row masked with -inf ran at a fifth of the speed). */
static inline eqv_f eq_vexp(eqv_f x) {{
    eqv_m below = eqv_lt(x, eqv_set({exp_lo}));
    /* min/max return their second operand when either is NaN, so NaN passes the clamp. */
    eqv_f clamped = eqv_zero_where(below, eqv_min(eqv_set({exp_hi}), x));
    eqv_f r;
    eqv_f k = eqv_reduce(clamped, &r);
    return eqv_zero_where(below, eqv_ldexp(eqv_add(eqv_expm1_reduced(r), eqv_set(1)), k));
}}

/* log(x): -inf at +-0, NaN below 0 and for NaN, +inf at +inf; subnormal x is exact-scaled. */
static inline eqv_f eq_vlog(eqv_f x) {{
    eqv_m tiny = eqv_lt(x, eqv_set({min_normal}));
    eqv_f scaled = eqv_select(tiny, eqv_mul(x, eqv_set({subnormal_scale})), x);
    /* x = m * 2^k, m in [sqrt(1/2), sqrt(2)): after adding bits(1) - bits(sqrt(1/2)), the
       exponent field holds k + bias and the mantissa field plus bits(sqrt(1/2)) is m. */
    eqv_i bits = eqv_iadd(eqv_bits(scaled), eqv_iset({one_minus_sqrt_half_bits}));
    eqv_i mantissa = eqv_iand(bits, eqv_iset({mant_mask}));
    eqv_f m = eqv_float(eqv_iadd(mantissa, eqv_iset({sqrt_half_bits})));
    eqv_f k = eqv_sub(eqv_float(eqv_ior(eqv_ishr(bits), eqv_iset({exponent_magic}))),
                      eqv_set({exponent_offset}));
    k = eqv_sub(k, eqv_select(tiny, eqv_set({subnormal_shift}), eqv_set(0)));
    /* log(1 + f) = 2 atanh(s) = f - (f^2/2 - s * (f^2/2 + R)), R = 2s^2/3 + 2s^4/5 + ... */
    eqv_f f = eqv_sub(m, eqv_set(1));
    eqv_f s = eqv_div(f, eqv_add(f, eqv_set(2)));
    eqv_f z = eqv_mul(s, s);
{atanh_poly}
    eqv_f half_f2 = eqv_mul(eqv_mul(f, f), eqv_set(0.5));
    eqv_f log_m = eqv_sub(f, eqv_fnma(s, eqv_fma(z, p, half_f2), half_f2));
    eqv_f y = eqv_fma(k, eqv_set({ln2_hi}), eqv_fma(k, eqv_set({ln2_lo}), log_m));
    eqv_f zero = eqv_set(0);
    eqv_f special = eqv_select(eqv_eq(x, zero), eqv_set(-INFINITY),
                               eqv_select(eqv_lt(x, zero), eqv_set(NAN), x));
    return eqv_select(eqv_both(eqv_gt(x, zero), eqv_lt(x, eqv_set(INFINITY))), y, special);
}}

/* tanh(x) = e / (e + 2) with e = expm1(2|x|), sign of x restored; +-1 beyond rounding to 1. */
static inline eqv_f eq_vtanh(eqv_f x) {{
    eqv_f sign = eqv_set(-0.0);
    eqv_f a = eqv_andnot(sign, x);
    eqv_f y = eqv_min(eqv_set({two_tanh_one}), eqv_add(a, a));  /* NaN passes */
    eqv_f r;
    eqv_f k = eqv_reduce(y, &r);
    /* expm1(y) = 2^k expm1(r) + (2^k - 1) */
    eqv_f scale = eqv_pow2i(k);
    eqv_f e = eqv_fma(scale, eqv_expm1_reduced(r), eqv_sub(scale, eqv_set(1)));
    eqv_f t = eqv_div(e, eqv_add(e, eqv_set(2)));
    return eqv_or(t, eqv_and(sign, x));
}}

/* 1 / (1 + e^-x), as 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0, e = e^-|x| <= 1. */
static inline eqv_f eq_vsigmoid(eqv_f x) {{
    eqv_f sign = eqv_set(-0.0);
    eqv_f e = eq_vexp(eqv_or(x, sign));
    eqv_f numerator = eqv_select(eqv_ge(x, eqv_set(0)), eqv_set(1), e);
    return eqv_div(numerator, eqv_add(eqv_set(1), e));
}}
"""

# erf, after _ALGORITHMS (it calls eq_vexp).
_ERF = """
/* erf(x): a + a P(a^2) for a = |x| < 1, else 1 - e^(-a^2) R(2 / (2 + a) - t0) with a clamped
   where erf rounds to 1 (so +-inf give +-1); the sign of x put back, NaN for NaN. */
static inline eqv_f eq_verf(eqv_f x) {{
    eqv_f sign = eqv_set(-0.0);
    eqv_f a = eqv_andnot(sign, x);
    eqv_f a2 = eqv_mul(a, a);
{erf_small_poly}
    small = eqv_fma(a, small, a);
    eqv_f clamped = eqv_min(eqv_set({erf_clamp}), a);  /* NaN passes */
    eqv_f u = eqv_sub(eqv_div(eqv_set(2), eqv_add(clamped, eqv_set(2))), eqv_set({erf_t0}));
{erf_large_poly}
    eqv_f gauss = eq_vexp(eqv_fnma(clamped, clamped, eqv_set(0)));  /* e^(-a^2) */
    eqv_f large = eqv_fnma(gauss, r, eqv_set(1));
    return eqv_or(eqv_select(eqv_lt(a, eqv_set(1)), small, large), eqv_and(sign, x));
}}
"""
