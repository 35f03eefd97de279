"""Value dtypes (`eqsat.core.dtypes`): bool, integer and float16 arrays in and out, numpy's
promotion rules, and the refusals where numpy's integers would wrap around.

Each program is built once on symbolic tensors and once on numpy arrays by the same function:
the tensor's dtype must be numpy's, and the compiled kernel must return numpy's dtype and
values (with NaN, ±inf and -0.0 among the float inputs).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import eqsat
from eqsat.core.errors import DTypeError, InexactInputError, UnsupportedError
from eqsat.core.saturate import Limits
from tests.test_numerics import assert_specials_agree, with_specials

LIMITS = Limits(nodes=20_000, seconds=0.5, iterations=8, extraction_seconds=0.5)
SHAPE = (6, 9)
# the inputs every program may use, by name: their dtypes, and how to draw their values
INPUTS: dict[str, str] = {
    "x": "float32",
    "d": "float64",
    "h": "float16",
    "m": "bool",
    "i": "int32",
    "b": "int8",
    "u": "uint8",
    "q": "int64",
}


def draw(name: str, rng: np.random.Generator) -> np.ndarray:
    """Values for input `name`: floats with specials, integers over their dtype's range
    (int32 and int64 over ±2**31 and ±2**53), bools half true."""
    dtype = np.dtype(INPUTS[name])
    if dtype.kind == "f":
        return with_specials(rng, SHAPE, 0.1).astype(dtype)
    if dtype.kind == "b":
        return rng.random(SHAPE) < 0.5
    limit = 2**53 if dtype.itemsize == 8 else int(np.iinfo(dtype).max)
    low = 0 if dtype.kind == "u" else -limit
    return rng.integers(low, limit, SHAPE, endpoint=True).astype(dtype)


# (id, program): each takes numpy (or eqsat tensors) by the input names it declares
PROGRAMS: list[tuple[str, Callable[..., Any]]] = [
    ("float32 + int32 is float64", lambda x, i: x + i),
    ("float32 with a Python float stays float32", lambda x: x * 2.5 - 1),
    ("float32 + float64 is float64", lambda x, d: x * d),
    ("float16 arithmetic", lambda h: h * h + 1),
    ("float16 + float32 is float32", lambda h, x: h + x),
    ("float16 function", lambda h: np.exp(h)),
    ("int8 function is float16", lambda b: np.exp(b) * 0.5),
    ("int16 function is float32", lambda b: np.sqrt(np.abs(b.astype(np.int16)))),
    ("int32 comparison", lambda i: i > 7),
    ("int64 equality", lambda q: q == 3),
    ("bool mask selects", lambda m, x: np.where(m, x, 0)),
    ("bool mask multiplies", lambda m, x: m * x),
    ("logical operators", lambda m, x: (m & (x > 0)) | ~m),
    ("logical functions", lambda m, i: np.logical_xor(m, np.logical_not(i > 0))),
    ("isnan isinf isfinite", lambda x: np.isnan(x) | np.isinf(x) ^ np.isfinite(x)),
    ("count of a mask", lambda m: m.sum(axis=1)),
    ("count of a comparison", lambda x: (x > 0).sum()),
    ("any and all", lambda x: np.logical_and((x > 1).any(axis=0), (x < 2).all(axis=0))),
    ("argmax is int64", lambda x: np.argmax(x, axis=1)),
    ("argmin plus one", lambda x: np.argmin(x, axis=0) + 1),
    ("int32 max and min", lambda i: np.stack([i.max(axis=0), i.min(axis=0)])),
    ("int8 sum", lambda b: b.sum(axis=1)),
    ("uint8 sum", lambda u: u.sum()),
    ("int32 sum is int64", lambda i: i.sum(axis=0)),
    ("int32 mean is float64", lambda i: i.mean(axis=0)),
    ("int32 var", lambda i: i.var()),
    ("int32 divided is float64", lambda i, b: i / (b.astype(np.int32) * 2 + 1)),
    ("int32 maximum and clip", lambda i: np.clip(np.maximum(i, -5), -100, 100)),
    ("int8 where", lambda b, m: np.where(m, b, 3)),
    ("int8 concatenated with uint8", lambda b, u: np.concatenate([b, u], axis=1)),
    ("int8 padded", lambda b: np.pad(b, 1, constant_values=7)),
    ("int8 layout", lambda b: np.maximum(b.T[::2, 1:], 3)),
    ("astype float32", lambda i: i.astype(np.float32) / 7),
    ("float astype int32 truncates", lambda x: np.clip(x, -2, 2).astype(np.int32)),
    ("float astype bool", lambda x: x.astype(bool)),
    ("bool astype int", lambda m: m.astype(np.int16) * 3),
    ("float64 astype float32", lambda d: (d * 3).astype(np.float32)),
    (
        "int8 matmul is int8 when it cannot overflow",
        lambda m: m.astype(np.int8) @ m.T.astype(np.int8),
    ),
    ("float32 @ int8 is float32", lambda x, b: x @ b.T),
    # integers wrap around as numpy's: computed exactly, then wrapped
    ("int32 + int32 wraps", lambda i: i + i.T.reshape(SHAPE)),
    ("int32 + 1 wraps", lambda i: i + 1),
    ("int8 * int8 wraps", lambda b: b * b),
    ("int32 * int32 wraps", lambda i: i * i.T.reshape(SHAPE) * 7),
    ("uint32 * uint32 wraps", lambda i: i.astype(np.uint32) * (i + 3).astype(np.uint32)),
    ("int16 * int16 wraps", lambda b: b.astype(np.int16) * 300 * b),
    ("negating and abs of int8 wrap", lambda b: np.stack([-b, np.abs(b)])),
    ("uint8 - uint8 wraps", lambda u: u - u.T.reshape(SHAPE)),
    ("narrowing astype wraps", lambda i: i.astype(np.int8)),
    ("int32 floor division and remainder", lambda i, b: np.stack([i // b, i % b])),
    ("int8 floor division by a constant", lambda b: np.stack([b // -3, b % 7, 100 // b])),
    ("bool + bool is or", lambda m: m + m.T.reshape(SHAPE)),
    ("bool matmul is or of ands", lambda m: m @ m.T),
    ("int8 matmul wraps", lambda b: b @ b.T),
]


def _names(program: Callable[..., Any]) -> list[str]:
    return list(program.__code__.co_varnames[: program.__code__.co_argcount])


@pytest.mark.parametrize(("name", "program"), PROGRAMS, ids=[name for name, _ in PROGRAMS])
def test_a_program_gives_numpys_dtype_and_values(name: str, program: Callable[..., Any]) -> None:
    names = _names(program)
    rng = np.random.default_rng(len(name))
    arrays = {n: draw(n, rng) for n in names}
    with np.errstate(all="ignore"):
        want = np.asarray(program(**arrays))
    symbolic = program(**{n: eqsat.tensor(n, SHAPE, INPUTS[n]) for n in names})
    assert symbolic.dtype == want.dtype.name
    kernel = eqsat.compile(symbolic, limits=LIMITS, progress=False, cache=False)
    got = kernel(**arrays)
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind in "biu":  # the report shows the form and nest chosen, if they differ
        np.testing.assert_array_equal(got, want, err_msg=kernel.explain())
        return
    with np.errstate(all="ignore"):
        reference = np.asarray(
            program(
                **{n: a.astype(np.float64) if a.dtype.kind == "f" else a for n, a in arrays.items()}
            )
        ).astype(np.float64)
    # float16 and float32 results were computed in float32 (or float64) and rounded once
    compared = got.astype(np.float32) if got.dtype == np.float16 else got
    wanted = want.astype(np.float32) if want.dtype == np.float16 else want
    if got.dtype == np.float16:
        finite = np.isfinite(wanted) & np.isfinite(compared)
        np.testing.assert_allclose(compared[finite], wanted[finite], rtol=2e-3, atol=2e-3)
        np.testing.assert_array_equal(np.isnan(compared), np.isnan(wanted))
        return
    assert_specials_agree(compared, wanted, reference)


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_masks_and_indices_at_every_isa(isa: str) -> None:
    x, m, i = (eqsat.tensor(n, SHAPE, INPUTS[n]) for n in "xmi")
    rng = np.random.default_rng(3)
    arrays = {n: draw(n, rng) for n in "xmi"}
    outputs = [np.where(m & (i > 0), x, -1.0), np.argmax(x, axis=1), (x > 0).sum(axis=0)]
    kernel = eqsat.compile(outputs, isa=isa, limits=LIMITS, progress=False, cache=False)
    got = kernel(**arrays)
    xs, ms, is_ = arrays["x"], arrays["m"], arrays["i"]
    want = [np.where(ms & (is_ > 0), xs, -1.0), np.argmax(xs, axis=1), (xs > 0).sum(axis=0)]
    assert_specials_agree(got[0], want[0], want[0].astype(np.float64))
    for g, w in zip(got[1:], want[1:], strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_wrapping_integers_at_every_isa(isa: str) -> None:
    """The wraparound (floor and multiplies), floor division and the 16-bit split product in
    vector bodies, tails and scalar code: numpy's int32 values bit for bit."""
    i, b = eqsat.tensor("i", SHAPE, "int32"), eqsat.tensor("b", SHAPE, "int8")
    rng = np.random.default_rng(4)
    arrays = {"i": draw("i", rng), "b": draw("b", rng)}
    outputs = [i + i * 3, i // b, i % b, i * i.T.reshape(SHAPE), -(b * b)]
    kernel = eqsat.compile(outputs, isa=isa, limits=LIMITS, progress=False, cache=False)
    x, y = arrays["i"], arrays["b"]
    with np.errstate(all="ignore"):
        want = [x + x * 3, x // y, x % y, x * x.T.reshape(SHAPE), -(y * y)]
    for got, expected in zip(kernel(**arrays), want, strict=True):
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


REFUSED: list[tuple[str, Callable[..., Any], str]] = [
    ("int32 * uint32 is int64", lambda i: i * i.astype(np.uint32), "mul: the int64 result could"),
    ("int64 + int64", lambda q: q + q, "add: the int64 result could reach"),
    ("int64 sum", lambda q: q.sum(), "sum: the int64 result could reach"),
    ("bool - bool", lambda m: m - m, "sub: numpy refuses these operands"),
    ("bitwise and of integers", lambda i: i & i, "&: eqsat takes it on bools only"),
    ("& of floats", lambda x, m: x & m, "&: eqsat takes it on bools only (logical), got float32"),
    ("integer to a negative power", lambda i: i**-1, "integers to negative integer powers"),
    ("rounding an integer to tens", lambda i: np.round(i, -1), "round: rounding int32"),
    ("uint8 + a negative int", lambda u: u + (-300), "numpy refuses these operands"),
    ("float floor division", lambda x: x // 2, "floor_divide: eqsat computes it on integers only"),
    ("float remainder", lambda i, x: i % x, "remainder: eqsat computes it on integers only"),
]


@pytest.mark.parametrize(("name", "program", "message"), REFUSED, ids=[n for n, _, _ in REFUSED])
def test_integer_arithmetic_beyond_what_floats_hold_is_refused(
    name: str, program: Callable[..., Any], message: str
) -> None:
    tensors = {n: eqsat.tensor(n, SHAPE, INPUTS[n]) for n in _names(program)}
    with pytest.raises(UnsupportedError, match=re.escape(message)):
        program(**tensors)


def test_a_refusal_says_how_to_compute_it() -> None:
    i = eqsat.tensor("i", SHAPE, "int32")
    with pytest.raises(UnsupportedError, match=re.escape("x.astype(np.float64)")):
        i * i.astype(np.uint32)  # noqa: B018 - building it is the test
    x = i.astype(np.float64)
    assert (x * x).dtype == "float64"


def test_a_kernel_checks_its_inputs_dtypes_and_integer_range() -> None:
    q, m = eqsat.tensor("q", (4,), "int64"), eqsat.tensor("m", (4,), "bool")
    kernel = eqsat.compile(np.where(m, q, -1), limits=LIMITS, progress=False, cache=False)
    values = np.array([1, -(2**53), 2**53, 5])
    mask = np.array([True, True, True, False])
    np.testing.assert_array_equal(kernel(q=values, m=mask), np.where(mask, values, -1))
    with pytest.raises(DTypeError, match=re.escape("input 'q' has dtype int32, expected int64")):
        kernel(q=values.astype(np.int32), m=mask)
    with pytest.raises(DTypeError, match=re.escape("input 'm' has dtype float32, expected bool")):
        kernel(q=values, m=mask.astype(np.float32))
    with pytest.raises(
        InexactInputError, match=re.escape("input 'q' (int64) holds a value beyond")
    ):
        kernel(q=np.array([1, 2**53 + 1, 0, 0]), m=mask)
    assert "q: (4,) int64" in repr(kernel) and "-> (4,) int64" in repr(kernel)
    assert (
        "converted at the call from and to float64: m bool, q int64, out0 int64" in kernel.explain()
    )


def test_jit_traces_each_arrays_dtype_and_python_floats_weakly() -> None:
    @eqsat.jit(limits=LIMITS, progress=False, cache=False)
    def masked_scale(x: np.ndarray, mask: np.ndarray, scale: float) -> Any:
        return np.where(mask, x * scale, 0)

    rng = np.random.default_rng(5)
    mask = rng.random(SHAPE) < 0.5
    for dtype in (np.float16, np.float32, np.float64):
        x = rng.standard_normal(SHAPE).astype(dtype)
        got = masked_scale(x, mask, 0.1)
        want = np.where(mask, x * 0.1, 0)
        assert got.dtype == want.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=1e-3 if dtype == np.float16 else 1e-6)
        assert masked_scale(x, mask, 0.3).dtype == dtype  # the same kernel, another scale
    assert len(masked_scale.kernels) == 3


def test_the_compile_cache_keeps_outputs_of_other_dtypes_apart(fresh_cache: Any) -> None:
    d = eqsat.tensor("d", (5,), "float64")
    values = np.arange(5.0) / 3
    as_float64 = eqsat.compile(d * 1, limits=LIMITS, progress=False)
    as_float32 = eqsat.compile((d * 1).astype(np.float32), limits=LIMITS, progress=False)
    assert as_float64(values).dtype == np.float64
    assert as_float32(values).dtype == np.float32
    np.testing.assert_array_equal(as_float32(values), values.astype(np.float32))


def test_a_tensor_refuses_dtypes_numpy_has_and_eqsat_does_not() -> None:
    for dtype in ("complex64", "datetime64[s]", "U3", object):
        with pytest.raises(DTypeError, match="unsupported dtype"):
            eqsat.tensor("z", (2,), dtype)


def _masked_softmax(scores: Any, mask: Any) -> Any:
    masked = np.where(mask, scores, -np.inf)
    e = np.exp(masked - masked.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _cross_entropy(logits: Any, labels: Any) -> Any:
    onehot = labels[:, None] == np.arange(logits.shape[1])  # np.arange: eqsat's arange
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -np.where(onehot, log_p, 0).sum(axis=1).mean()


def _causal_scores(scores: Any) -> Any:
    rows, columns = scores.shape
    arange = eqsat.arange if isinstance(scores, eqsat.Tensor) else np.arange
    causal = arange(rows)[:, None] >= arange(columns)
    return _masked_softmax(scores, causal)


# everyday code with masks, labels and half floats, through @eqsat.jit: name -> (function,
# its arguments' dtypes); every array is SHAPE but labels, one per row
EVERYDAY: dict[str, tuple[Callable[..., Any], list[str]]] = {
    "masked softmax": (_masked_softmax, ["float32", "bool"]),
    "accuracy": (
        lambda logits, labels: (np.argmax(logits, axis=1) == labels).mean(),
        ["float32", "int64"],
    ),
    "dropout with a keep mask": (lambda x, keep: np.where(keep, x / 0.9, 0), ["float32", "bool"]),
    "relu gradient": (lambda x, g: (x > 0).astype(np.float32) * g, ["float32", "float32"]),
    "zero the non-finite": (lambda g: np.where(np.isfinite(g), g, 0), ["float32"]),
    "nonzeros per row": (lambda x: (x != 0).sum(axis=1), ["float32"]),
    "true positives": (lambda p, t: ((p > 0.5) & t).sum(), ["float32", "bool"]),
    "half-precision layer": (lambda x, w: np.maximum(x @ w.T, 0), ["float16", "float16"]),
    "int8 features scaled": (lambda q, s: q.astype(np.float32) * s, ["int8", "float32"]),
    "one-hot cross-entropy": (_cross_entropy, ["float32", "int64"]),
    "causal softmax": (_causal_scores, ["float32"]),
    "upper triangle": (lambda x: np.triu(x, 2) - np.tril(x, -1), ["float32"]),
}


@pytest.mark.parametrize("name", sorted(EVERYDAY))
def test_everyday_code_with_masks_labels_and_half_floats(name: str) -> None:
    function, kinds = EVERYDAY[name]
    rng = np.random.default_rng(sorted(EVERYDAY).index(name))
    arrays = []
    for kind in kinds:
        if kind == "int64":  # class labels
            arrays.append(rng.integers(0, SHAPE[1], SHAPE[0]))
        elif kind == "bool":
            arrays.append(rng.random(SHAPE) < 0.7)
        elif kind == "int8":
            arrays.append(rng.integers(-128, 128, SHAPE).astype(np.int8))
        else:
            arrays.append(with_specials(rng, SHAPE, 0.05).astype(kind))
    got = np.asarray(eqsat.jit(function, limits=LIMITS, progress=False)(*arrays))
    with np.errstate(all="ignore"):
        want = np.asarray(function(*arrays))
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    elif want.dtype == np.float16:
        np.testing.assert_allclose(
            got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2
        )
    else:
        assert_specials_agree(got, want, want.astype(np.float64))


def test_arange_and_triangles_follow_numpy() -> None:
    x = eqsat.tensor("x", (2, 4, 6), "int16")
    values = np.random.default_rng(6).integers(-99, 99, (2, 4, 6)).astype(np.int16)
    programs = {
        "arange": (eqsat.arange(3, 20, 4), np.arange(3, 20, 4)),
        "arange down": (eqsat.arange(5, -4, -3) * 2, np.arange(5, -4, -3) * 2),
        "tril": (np.tril(x, 1), np.tril(values, 1)),
        "triu": (np.triu(x, -2), np.triu(values, -2)),
        "np.arange as an operand": (x * np.arange(6), values * np.arange(6)),
    }
    for name, (program, want) in programs.items():
        kernel = eqsat.compile(program, limits=LIMITS, progress=False, cache=False)
        got = kernel(values) if kernel.input_names else kernel()
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_an_array_that_is_no_function_of_its_indices_is_refused_naming_what_is_captured() -> None:
    x = eqsat.tensor("x", (4, 4))
    with pytest.raises(UnsupportedError, match=re.escape("np.arange(n)[:, None] >= np.arange(n)")):
        np.where(np.random.default_rng(0).random((4, 4)) > 0.5, x, 0)
    for bad in ((2.5,), (3, 3), (0, 5, 0)):
        with pytest.raises((eqsat.ArgumentError, eqsat.ShapeError)):
            eqsat.arange(*bad)
