"""Tests of eqsat.backend_c.vmath: accuracy in ulp over the whole float range, exact special values,
and vectorized exp/log/tanh/sigmoid in kernels built by `eqsat.compile`.

Each function runs through a small C harness built from the same `VectorIsa` methods the emitter
uses (full vectors, then a masked AVX-512 tail or a padded AVX2 remainder). References: the
float64 numpy result rounded to float32 for float32, numpy float64 for float64 (sigmoid, which
numpy lacks, from a stable formula in the next wider type; erf, which numpy lacks too, from libm's
float64 erf, `math.erf`, within an ulp of the exact value).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import eqsat
from eqsat.backend_c.build import build_library
from eqsat.backend_c.isa import GCC_FLAGS, VECTOR_FUNCTIONS, VectorIsa
from eqsat.backend_c.vmath import ERF_FITS, vector_math
from tests.isas import VECTOR_ISAS, skip_unless_runs

OPS = tuple(VECTOR_FUNCTIONS)
DTYPES = ("float32", "float64")
MAX_ULP = 4
RANDOM_POINTS = 1 << 19  # random finite bit patterns, plus about as many in dense regions


# ------------------------------------------------------------------ harness


@functools.cache
def harness(isa_name: str, dtype: str) -> Any:
    """The loaded library of `eq_apply_<op>(x, y, n)`: y[i] = op(x[i]) for 0 <= i < n."""
    isa = VectorIsa(isa_name, dtype)
    ctype = "float" if dtype == "float32" else "double"
    lanes = isa.lanes
    functions = []
    for op in OPS:
        if isa.masked_tail:
            tail = [
                f"{isa.mask_type} tail = {isa.tail_mask('n - i')};",
                isa.store("&y[i]", isa.unary(op, isa.load("&x[i]", "tail")), "tail"),
            ]
        else:
            tail = [
                f"{ctype} lanes[{lanes}] = {{0}};",
                "memcpy(lanes, &x[i], (size_t)(n - i) * sizeof *x);",
                isa.store("lanes", isa.unary(op, isa.load("lanes"))),
                "memcpy(&y[i], lanes, (size_t)(n - i) * sizeof *y);",
            ]
        functions.append(
            f"void eq_apply_{op}(const {ctype} *x, {ctype} *y, int64_t n) {{\n"
            "    int64_t i = 0;\n"
            f"    for (; i + {lanes} <= n; i += {lanes}) {{\n"
            f"        {isa.store('&y[i]', isa.unary(op, isa.load('&x[i]')))}\n"
            "    }\n"
            "    if (i < n) {\n" + "".join(f"        {line}\n" for line in tail) + "    }\n}\n"
        )
    source = "\n".join(
        [
            "#include <math.h>",
            "#include <stdint.h>",
            "#include <string.h>",
            "#include <immintrin.h>",
            isa.preamble(),
            vector_math(isa),
            *functions,
        ]
    )
    cdef = "\n".join(f"void eq_apply_{op}(const {ctype} *x, {ctype} *y, int64_t n);" for op in OPS)
    return build_library(source, cdef, GCC_FLAGS[isa_name])


def apply(op: str, isa_name: str, x: np.ndarray) -> np.ndarray:
    """op(x) computed by the vector function of `isa_name` for x's dtype (the library is built
    at any level; the rest of the test is skipped where the host does not run `isa_name`)."""
    library = harness(isa_name, x.dtype.name)
    skip_unless_runs(isa_name)
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    ctype = "float *" if x.dtype == np.float32 else "double *"
    getattr(library.lib, f"eq_apply_{op}")(
        library.ffi.cast(ctype, x.ctypes.data), library.ffi.cast(ctype, y.ctypes.data), x.size
    )
    return y


# ------------------------------------------------------------------ references and ulp


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


REFERENCE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "erf": lambda x: np.array([math.erf(v) for v in x.astype(np.float64)]),
}


def reference(op: str, x: np.ndarray) -> np.ndarray:
    """The float32 result rounded from float64, or the numpy float64 result (sigmoid: from
    long double)."""
    wider = np.float64 if x.dtype == np.float32 or op != "sigmoid" else np.longdouble
    with np.errstate(all="ignore"):
        return REFERENCE[op](x.astype(wider)).astype(x.dtype)


def ordered(a: np.ndarray) -> np.ndarray:
    """Map floats to int64 keys in the order of their values, consecutive floats differing by 1
    (+0 and -0 both map to 0)."""
    itype, magnitude = (np.int32, 0x7FFF_FFFF) if a.dtype == np.float32 else (np.int64, 2**63 - 1)
    bits = a.view(itype).astype(np.int64)
    return np.where(bits < 0, -(bits & magnitude), bits)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many representable values apart a and b are (both not NaN; inf counts as the value
    after the largest finite one), across a change of sign too."""
    ka, kb = ordered(a), ordered(b)
    low, high = np.minimum(ka, kb), np.maximum(ka, kb)
    return high.view(np.uint64) - low.view(np.uint64)  # exact modulo 2^64, and < 2^64


def test_ulp_distance_counts_across_zero() -> None:
    tiny = np.float32(np.finfo(np.float32).smallest_subnormal)
    a = np.array([1.0, -tiny, 0.0, -0.0, np.inf, -2.0], np.float32)
    largest = np.finfo(np.float32).max
    b = np.array([np.nextafter(np.float32(1), np.float32(2)), tiny, -0.0, tiny, largest, -2.0])
    assert ulp_distance(a, b.astype(np.float32)).tolist() == [1, 2, 0, 1, 1, 0]
    huge = np.array([np.finfo(np.float64).max])
    assert ulp_distance(huge, -huge)[0] == 2 * int(ordered(huge)[0])


# ------------------------------------------------------------------ sample points


def _finite_bits(rng: np.random.Generator, dtype: str, count: int) -> np.ndarray:
    """Random bit patterns of finite floats, so every exponent is about equally likely."""
    itype = np.uint32 if dtype == "float32" else np.uint64
    x = rng.integers(0, np.iinfo(itype).max, count, dtype=itype, endpoint=True).view(dtype)
    return x[np.isfinite(x)]


def _around(centre: float, width: float, count: int, rng: np.random.Generator) -> np.ndarray:
    return centre + width * rng.uniform(-1, 1, count)


def samples(op: str, dtype: str) -> np.ndarray:
    """About 1M points: random finite bit patterns plus dense sampling where `op` is delicate."""
    rng = np.random.default_rng(20240601)
    info = np.finfo(dtype)
    overflow = float(np.log(info.max))  # exp beyond it is +inf
    underflow = float(np.log(info.smallest_subnormal))  # exp below it is 0
    normal = float(np.log(info.smallest_normal))  # exp below it is subnormal
    n = RANDOM_POINTS // 6
    tiny_to_one = np.geomspace(info.smallest_subnormal, 1, n)
    near_zero = np.concatenate([tiny_to_one, -tiny_to_one])
    dense = {
        "exp": [
            near_zero,
            rng.uniform(underflow - 2, overflow + 2, n),
            _around(overflow, 0.01, n, rng),
            _around(underflow, 0.01, n, rng),
            rng.uniform(underflow, normal, n),
        ],
        "log": [
            np.abs(near_zero),
            _around(1.0, 0.5, n, rng),
            _around(1.0, 1e-5, n, rng),
            _around(np.sqrt(2), 0.01, n, rng),
            _around(np.sqrt(0.5), 0.01, n, rng),
            rng.uniform(0, info.smallest_normal, n),
        ],
        "tanh": [
            near_zero,
            rng.uniform(-25, 25, n),  # past the saturation to +-1 (near 9 or 19)
            _around(0.35, 0.3, n, rng),
            _around(-0.35, 0.3, n, rng),
            _around(0.5 * float(np.log(4 / info.epsneg)), 0.5, n, rng),  # tanh rounds to 1
        ],
        "sigmoid": [
            near_zero,
            rng.uniform(underflow - 2, -underflow / 3, n),
            _around(normal, 1.0, n, rng),
            rng.uniform(-40, 40, n),
        ],
        "erf": [
            near_zero,
            rng.uniform(-7, 7, n),
            _around(1.0, 0.02, n, rng),  # where the two polynomials meet
            _around(0.0, 4.0, n, rng),  # |x| in 0.5..4, where erf bends towards 1
            _around(ERF_FITS[dtype].clamp, 0.3, n, rng),  # saturation to 1
            -_around(ERF_FITS[dtype].clamp, 0.3, n, rng),
        ],
    }[op]
    points = np.concatenate([_finite_bits(rng, dtype, RANDOM_POINTS), *dense]).astype(dtype)
    return points[: points.size - points.size % 16 - 11]  # not a whole number of vectors


# ------------------------------------------------------------------ accuracy and specials


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("isa_name", VECTOR_ISAS)
@pytest.mark.parametrize("op", OPS)
def test_within_4_ulp(op: str, isa_name: str, dtype: str) -> None:
    x = samples(op, dtype)
    got, want = apply(op, isa_name, x), reference(op, x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"NaN where not in {op}")
    finite = ~np.isnan(want)
    distance = ulp_distance(got[finite], want[finite])
    worst = int(np.argmax(distance))
    assert distance[worst] <= MAX_ULP, (
        f"{op}({x[finite][worst]!r}) = {got[finite][worst]!r}, expected {want[finite][worst]!r}: "
        f"{distance[worst]} ulp"
    )
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want), err_msg="overflow differs")


NAN, INF = float("nan"), float("inf")
SPECIALS = {
    "exp": [(0.0, 1.0), (-0.0, 1.0), (-INF, 0.0), (INF, INF), (NAN, NAN), (710.0, INF),
            (1e30, INF), (-1e30, 0.0), (-800.0, 0.0)],
    "log": [(1.0, 0.0), (0.0, -INF), (-0.0, -INF), (-1.0, NAN), (-INF, NAN), (INF, INF),
            (NAN, NAN), (-1e-30, NAN)],
    "tanh": [(0.0, 0.0), (-0.0, -0.0), (INF, 1.0), (-INF, -1.0), (NAN, NAN), (30.0, 1.0),
             (-30.0, -1.0), (1e-30, 1e-30), (-1e-30, -1e-30)],
    "sigmoid": [(-INF, 0.0), (INF, 1.0), (NAN, NAN), (0.0, 0.5), (-0.0, 0.5), (-1e4, 0.0),
                (1e4, 1.0), (800.0, 1.0)],
    "erf": [(0.0, 0.0), (-0.0, -0.0), (INF, 1.0), (-INF, -1.0), (NAN, NAN), (6.0, 1.0),
            (-6.0, -1.0), (1e30, 1.0), (-1e30, -1.0)],
}  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("isa_name", VECTOR_ISAS)
@pytest.mark.parametrize("op", OPS)
def test_special_values_exact(op: str, isa_name: str, dtype: str) -> None:
    inputs, expected = (np.array(column, dtype) for column in zip(*SPECIALS[op], strict=True))
    repeats = 3  # puts the values in full vectors and in the tail
    x, want = np.tile(inputs, repeats), np.tile(expected, repeats)
    got = apply(op, isa_name, x)
    # equal bit patterns, except that any NaN matches any NaN: the sign of a zero must agree
    same = (got.view(f"u{got.itemsize}") == want.view(f"u{want.itemsize}")) | (
        np.isnan(got) & np.isnan(want)
    )
    assert same.all(), f"{op}({x[~same]}) = {got[~same]}, expected {want[~same]}"


@pytest.mark.parametrize("isa_name", VECTOR_ISAS)
def test_exp_gradual_underflow(isa_name: str) -> None:
    """exp of the log of every power of two from the smallest normal down lands on it."""
    tiny = np.ldexp(np.float64(1), np.arange(-126, -150, -1))
    x = np.log(tiny).astype(np.float32)
    got = apply("exp", isa_name, x)
    assert ulp_distance(got, reference("exp", x)).max() <= MAX_ULP
    assert (got > 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_erf_fits_are_what_the_fitting_tool_prints(dtype: str) -> None:
    from eqsat.tools.fit_erf import fit_erf

    assert fit_erf(dtype)[0] == ERF_FITS[dtype]


# ------------------------------------------------------------------ end to end

_LIBM_CALL = re.compile(r"\b(exp|log|tanh|erf)f?\(")
_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("isa_name", VECTOR_ISAS)
@pytest.mark.parametrize("op", OPS)
def test_compiled_kernel_is_vectorized(op: str, isa_name: str, dtype: str) -> None:
    x = eqsat.tensor("x", (1003,), dtype)
    kernel = eqsat.compile(getattr(eqsat, op)(x), isa=isa_name)
    code = _COMMENT.sub("", kernel.c_source)
    assert f"{VECTOR_FUNCTIONS[op]}(" in code.partition("eqsat_kernel(")[2]
    if isa_name == "avx512":
        vector_code = code  # the masked tail is vector code too
    else:  # the scalar remainder loop may call libm
        vector_code = "\n".join(line for line in code.splitlines() if "_mm256_" in line)
    assert not _LIBM_CALL.search(vector_code), "libm call in vector code"
    rng = np.random.default_rng(7)
    data = rng.uniform(-20, 20, 1003).astype(dtype)
    if op == "log":
        data = np.abs(data)
    got = kernel(x=data)
    assert ulp_distance(got, reference(op, data)).max() <= MAX_ULP
