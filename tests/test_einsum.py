"""einsum on tensors (`eqsat.einsum`, `np.einsum`): the terms it builds, its values through the
compiled C against numpy's einsum (random specifications, and NaN, ±inf and -0.0), and its
errors, which agree with numpy's on random subscripts."""

from __future__ import annotations

import collections
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import eqsat
from eqsat.core.errors import ShapeError, UnsupportedError
from eqsat.core.saturate import Limits
from eqsat.core.terms import Term, to_term
from tests.programs import assert_close
from tests.test_numerics import assert_specials_agree, with_specials

Shape = tuple[int, ...]
# Small schedules: these tests are about values, not speed.
LIMITS = Limits(nodes=20_000, seconds=0.5, iterations=8, extraction_seconds=0.5)


def term(t: eqsat.Tensor) -> Term:
    result = to_term(t.expr)
    assert isinstance(result, Term)
    return result


def tensors(*shapes: Shape, dtype: str = "float32") -> list[eqsat.Tensor]:
    return [eqsat.tensor(f"x{i}", shape, dtype) for i, shape in enumerate(shapes)]


# ------------------------------------------------------------------ the terms einsum builds


@pytest.mark.parametrize(
    ("subscripts", "shapes", "same_as"),
    [
        ("ij,jk->ik", [(2, 3), (3, 4)], lambda a, b: a @ b),
        ("ij,jk", [(2, 3), (3, 4)], lambda a, b: a @ b),
        ("ij,kj->ik", [(2, 3), (4, 3)], lambda a, b: a @ b.T),
        ("bsd,de->bse", [(5, 2, 3), (3, 4)], lambda a, b: a @ b),
        ("bij,bjk->bik", [(5, 2, 3), (5, 3, 4)], lambda a, b: a @ b),
        ("j,jk->k", [(3,), (3, 4)], lambda a, b: a @ b),
        ("ij,j->i", [(2, 3), (3,)], lambda a, b: a @ b),
        ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)], lambda q, k: q @ k.transpose(0, 1, 3, 2)),
        ("ij,jk,k->i", [(2, 3), (3, 4), (4,)], lambda a, b, v: (a @ b) @ v),
        ("ij->ji", [(2, 3)], lambda a: a.T),
        ("ij->i", [(2, 3)], lambda a: a.sum(axis=1)),
        ("ij->", [(2, 3)], lambda a: a.sum()),
        ("ij", [(2, 3)], lambda a: a),
        ("i,j->ij", [(2,), (3,)], lambda a, b: a.reshape(2, 1) * b),
        ("ii->i", [(3, 3)], lambda a: a.reshape(9)[::4]),
        ("ii", [(3, 3)], lambda a: a.reshape(9)[::4].sum()),
        ("iji->j", [(3, 2, 3)], lambda a: a.transpose(1, 0, 2).reshape(2, 9)[:, ::4].sum(1)),
        ("ij,ij->", [(2, 3), (2, 3)], lambda a, b: (a * b).sum()),
    ],
)
def test_einsum_builds_the_term_numpy_code_would(
    subscripts: str, shapes: list[Shape], same_as: Callable[..., eqsat.Tensor]
) -> None:
    """A matrix product is the matmul term of `@` (so the matmul rules tile and vectorize it);
    a transpose, a sum or an outer product is the term of the numpy code a user would write,
    and a diagonal a strided view."""
    operands = tensors(*shapes)
    assert term(np.einsum(subscripts, *operands)) == term(same_as(*operands))
    assert term(eqsat.einsum(subscripts, *operands)) == term(same_as(*operands))


@pytest.mark.parametrize(
    ("subscripts", "shapes", "matmuls"),
    [
        ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)], 1),  # attention scores: q @ k^T
        ("bij,bj->bi", [(2, 3, 4), (2, 4)], 1),  # batched matrix-vector
        ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], 2),  # a chain, left to right
        ("i,ij,j->", [(2,), (2, 3), (3,)], 1),  # bilinear form: (u @ A), then a dot product
        ("ij,ij->i", [(2, 3), (2, 3)], 0),  # row-wise dot products: multiply and sum
        ("ijk,jkl->il", [(2, 3, 4), (3, 4, 5)], 0),  # two labels summed: multiply and sum
        ("ij,jk->k", [(2, 3), (3, 4)], 0),  # i summed in the same product: multiply and sum
    ],
)
def test_pairs_are_matmuls_exactly_when_one_shared_label_is_summed(
    subscripts: str, shapes: list[Shape], matmuls: int
) -> None:
    def count(t: Term) -> int:
        return (t.op == "TExpr.matmul") + sum(count(a) for a in t.args if isinstance(a, Term))

    assert count(term(eqsat.einsum(subscripts, *tensors(*shapes)))) == matmuls


def test_optimize_is_accepted_and_ignored() -> None:
    a, b = tensors((2, 3), (3, 4))
    for optimize in (True, "greedy", ["einsum_path", (0, 1)]):
        assert term(np.einsum("ij,jk", a, b, optimize=optimize)) == term(a @ b)


def test_scalar_operands_are_constants_and_spaces_are_ignored() -> None:
    (a,) = tensors((2, 3))
    assert term(np.einsum(" , i j -> j i ", 2.0, a)) == term((2.0 * a).T)


# ------------------------------------------------------------------ values through the C


@st.composite
def einsum_problems(draw: st.DrawFn) -> tuple[str, list[Shape]]:
    """A valid einsum: 1-3 operands over up to 4 letters (upper and lower case; a letter twice
    in one operand is a diagonal), small extents, a size-1 dim now and then (numpy broadcasts
    it), `...` with up to 2 dims of broadcast shape in some problems, an implicit or explicit
    output."""
    letters = draw(st.lists(st.sampled_from("abijkXY"), min_size=1, max_size=4, unique=True))
    extents = {letter: draw(st.integers(1, 5)) for letter in letters}
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2))) if draw(st.booleans()) else None
    terms, shapes = [], []
    for _ in range(draw(st.integers(1, 3))):
        labels = draw(st.lists(st.sampled_from(letters), max_size=3))
        own = {label: 1 if draw(st.integers(0, 7)) == 0 else extents[label] for label in labels}
        dims = [own[label] for label in labels]
        if batch is not None and draw(st.booleans()):
            ellipsis_dims = batch[draw(st.integers(0, len(batch))) :]
            at = draw(st.integers(0, len(labels)))
            labels[at:at] = ["..."]
            dims[at:at] = [1 if draw(st.integers(0, 3)) == 0 else d for d in ellipsis_dims]
        terms.append("".join(labels))
        shapes.append(tuple(dims))
    subscripts = ",".join(terms)
    if draw(st.booleans()):
        used = sorted({char for t in terms for char in t if char.isalpha()})
        output = draw(st.permutations(used))[: draw(st.integers(0, len(used)))]
        ellipsis_rank = max(
            len(s) - sum(c.isalpha() for c in t) for t, s in zip(terms, shapes, strict=True)
        )
        if ellipsis_rank or draw(st.booleans()):
            output.insert(draw(st.integers(0, len(output))), "...")
        subscripts += "->" + "".join(output)
    return subscripts, shapes


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(einsum_problems(), st.integers(0, 2**32 - 1))
def test_random_einsums_compile_and_agree_with_numpy(
    problem: tuple[str, list[Shape]], seed: int
) -> None:
    subscripts, shapes = problem
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(shape) for shape in shapes]
    want = np.einsum(subscripts, *inputs)
    expr = np.einsum(subscripts, *tensors(*shapes, dtype="float64"))
    got = eqsat.compile(expr, limits=LIMITS, progress=False)(*inputs)
    assert np.shape(got) == want.shape
    assert_close(np.asarray(got), want, "float64")


def interleaved(subscripts: str, operands: list[Any]) -> list[Any]:
    """numpy's interleaved arguments for `subscripts` (letters become their numpy numbers)."""
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

    def sublist(term: str) -> list[Any]:
        parts = term.replace("...", ".")
        return [Ellipsis if part == "." else letters.index(part) for part in parts]

    inputs, _, output = subscripts.partition("->")
    pairs = zip(operands, map(sublist, inputs.split(",")), strict=True)
    return [*(x for pair in pairs for x in pair), sublist(output)]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(einsum_problems())
def test_the_interleaved_form_builds_what_the_subscripts_build(
    problem: tuple[str, list[Shape]],
) -> None:
    """np.einsum(a, [0, 1], b, [1, 2], [0, 2]) is np.einsum("ab,bc->ac", a, b); without the
    output's list, numpy's own implicit output (its order follows the numbers, not the
    letters: 'B' is 27, after 'b')."""
    subscripts, shapes = problem
    symbols = tensors(*shapes, dtype="float64")
    arrays = [np.arange(np.prod(shape), dtype=np.float64).reshape(shape) for shape in shapes]
    explicit = interleaved(numpy_explicit(subscripts), symbols)
    assert term(np.einsum(*explicit)) == term(np.einsum(subscripts, *symbols))
    implicit = interleaved(subscripts.partition("->")[0], symbols)[:-1]
    want = np.einsum(*interleaved(subscripts.partition("->")[0], arrays)[:-1])
    assert np.einsum(*implicit).shape == want.shape
    got = eqsat.compile(np.einsum(*implicit), limits=LIMITS, progress=False)(*arrays)
    assert_close(np.asarray(got), want, "float64")


def numpy_explicit(subscripts: str) -> str:
    """`subscripts` with numpy's output written out when it is implicit."""
    if "->" in subscripts:
        return subscripts
    counts = collections.Counter(c for c in subscripts if c.isalpha())
    once = "".join(sorted(c for c, n in counts.items() if n == 1))
    return subscripts + "->" + ("..." if "..." in subscripts else "") + once


def _pairwise_chain(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """'ij,jk,kl->il' as eqsat contracts it: the first pair, then the third operand."""
    return np.einsum("ik,kl->il", np.einsum("ij,jk->ik", a, b), c)


def _pairwise_bilinear(u: np.ndarray, a: np.ndarray, v: np.ndarray) -> np.ndarray:
    """'bi,bij,bj->b' as eqsat contracts it: u @ A for each b, then the dot products with v."""
    return np.einsum("bj,bj->b", np.einsum("bi,bij->bj", u, a), v)


@pytest.mark.parametrize(
    ("subscripts", "shapes", "reference"),
    [
        ("ij,jk->ik", [(6, 5), (5, 19)], None),
        ("bhqd,bhkd->bhqk", [(2, 2, 5, 4), (2, 2, 6, 4)], None),
        ("ij,ij->i", [(9, 6), (9, 6)], None),
        ("i,j->ij", [(9,), (17,)], None),
        ("ij->j", [(6, 17)], None),
        ("bii->bi", [(9, 4, 4)], None),  # a diagonal reads no off-diagonal NaN
        ("bii->b", [(9, 5, 5)], None),
        ("ij,jk,kl->il", [(4, 3), (3, 5), (5, 6)], _pairwise_chain),
        ("bi,bij,bj->b", [(9, 3), (9, 3, 4), (9, 4)], _pairwise_bilinear),
    ],
)
def test_special_values_follow_numpy(
    subscripts: str, shapes: list[Shape], reference: Callable[..., np.ndarray] | None
) -> None:
    """NaN, +inf and -inf where numpy's einsum has them (with 3 operands, numpy's einsum of the
    pairs eqsat contracts, left to right); the finite rest within tolerance."""
    compute = reference or (lambda *arrays: np.einsum(subscripts, *arrays))
    rng = np.random.default_rng(len(subscripts))
    inputs = [with_specials(rng, shape, 0.1) for shape in shapes]
    with np.errstate(all="ignore"):
        want = np.asarray(compute(*inputs))
        wide = np.asarray(compute(*(a.astype(np.float64) for a in inputs)))
    assert np.isfinite(want).any() and not np.isfinite(want).all()  # the seed tests both
    kernel = eqsat.compile(
        eqsat.einsum(subscripts, *tensors(*shapes)), limits=LIMITS, progress=False
    )
    assert_specials_agree(kernel(*inputs), want, wide)  # type: ignore[arg-type]


def test_a_pair_is_one_sum_of_products_as_in_numpy() -> None:
    """'ij,jk->k' sums a[i, j] * b[j, k] over i and j together, as numpy does: summing `a` over
    i first (factoring) would make inf of column 0, where numpy adds inf and -inf: NaN."""
    a = np.array([[1.0, 2.0], [-0.5, 3.0]], np.float32)
    b = np.array([[np.inf, 1.0, 0.0], [1.0, 2.0, -np.inf]], np.float32)
    want = np.einsum("ij,jk->k", a, b)
    assert np.isnan(want[0]) and want[2] == -np.inf
    kernel = eqsat.compile(eqsat.einsum("ij,jk->k", *tensors(a.shape, b.shape)), progress=False)
    wide = np.einsum("ij,jk->k", a.astype(np.float64), b.astype(np.float64))
    assert_specials_agree(kernel(a, b), want, wide)  # type: ignore[arg-type]


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("subscripts", "shapes", "error", "message"),
    [
        ("ij,jk->ik", [(2, 3)], ShapeError, "subscripts 'ij,jk->ik' name 2 operand(s), got 1"),
        ("ij", [(2, 3), (3,)], ShapeError, "subscripts 'ij' name 1 operand(s), got 2"),
        ("ijk", [(2, 3)], ShapeError, "operand 0 has shape (2, 3) (2 dims), but its subscripts"),
        ("ij,j", [(2, 3), (3, 4)], ShapeError, "operand 1 has shape (3, 4) (2 dims), but its"),
        ("ij,jk", [(2, 3), (4, 5)], ShapeError, "index 'j' has extents 3 in operand 0, 4 in"),
        ("...i,...i", [(2, 3), (4, 3)], ShapeError, "the dim ...1 of '...' has extents 2 in"),
        ("ij,jk->il", [(2, 3), (3, 4)], ShapeError, "the output ('il') has index 'l', which no"),
        ("ij,jk->ikk", [(2, 3), (3, 4)], ShapeError, "index 'k' appears twice in the output"),
        ("...i->i", [(2, 3)], ShapeError, "the output ('i') has no '...' to put them in"),
        ("i->i->i", [(2,)], ShapeError, "have more than one '->'"),
        ("i1", [(2, 3)], ShapeError, "operand 0 ('i1') has '1'; indices are letters a-z, A-Z"),
        ("i.j", [(2, 3)], ShapeError, "operand 0 ('i.j') has a '.' that is not part of one"),
        (". ..", [(2, 3)], ShapeError, "operand 0 ('. ..') has a '.' that is not part of one"),
        ("i\tj", [(2, 3)], ShapeError, "operand 0 ('i\\tj') has '\\t'; indices are letters"),
        ("i......", [(2, 3)], ShapeError, "has a '.' that is not part of one '...'"),
        ("ij->i.", [(2, 3)], ShapeError, "the output ('i.') has a '.' that is not part of"),
        ("ii", [(2, 3)], ShapeError, "index 'i' appears more than once in operand 0 ('ii'), "
         "on axes of extents 2 and 3; a diagonal needs one extent"),
    ],
)  # fmt: skip
def test_bad_subscripts_name_what_is_wrong(
    subscripts: str, shapes: list[Shape], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        eqsat.einsum(subscripts, *tensors(*shapes))


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda a: np.einsum(a, [0, 52]), ShapeError, "index 52 of operand 0 is neither an int"),
        (lambda a: np.einsum(a, "ij"), ShapeError, "the indices of operand 0 must be a list"),
        (lambda a: np.einsum("ij", a, out=np.empty((2, 3))), UnsupportedError,
         "numpy.einsum: keyword argument(s) out not supported on eqsat tensors (it takes "
         "optimize)"),
        (lambda a: np.einsum("ij", a, dtype=np.float64), UnsupportedError,
         "keyword argument(s) dtype"),
        (lambda a: np.einsum("ij,jk", a, np.array([[1.0, 2], [3, 4], [5, 7]])), UnsupportedError,
         "einsum: cannot capture a numpy array of shape (3, 2) and dtype float64 as a constant"),
        (lambda a: eqsat.einsum("ij"), TypeError, "einsum: at least one operand"),
    ],
)  # fmt: skip
def test_unsupported_einsum_calls_name_what_is_wrong(
    build: Callable[[eqsat.Tensor], Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        build(eqsat.tensor("a", (2, 3)))


@st.composite
def subscripts_and_shapes(draw: st.DrawFn) -> tuple[str, list[Shape]]:
    """Subscripts from einsum's tokens, valid or not, and operand shapes that fit them or are
    off by a dim, an extent or an operand."""
    token = st.sampled_from(["i", "j", "k", "K", "...", "i", "j", ".", ",", "->", " ", "\t"])
    subscripts = "".join(draw(st.lists(token, min_size=0, max_size=8)))
    terms = subscripts.partition("->")[0].split(",")
    extents = {letter: draw(st.integers(1, 3)) for letter in "ijkK"}
    shapes = []
    for text in terms[: len(terms) + draw(st.sampled_from([0, 0, 0, -1, 1]))] or [""]:
        dims = [extents[c] for c in text if c in extents]
        if "..." in text:
            dims += draw(st.lists(st.integers(1, 2), max_size=2))
        if draw(st.integers(0, 5)) == 0:
            dims.append(draw(st.integers(1, 3)))
        shapes.append(tuple(dims))
    return subscripts, shapes


@settings(max_examples=300, deadline=None)
@given(subscripts_and_shapes())
def test_einsum_accepts_and_refuses_what_numpy_does(problem: tuple[str, list[Shape]]) -> None:
    """Where numpy raises ValueError, einsum raises ShapeError (also a ValueError); where numpy
    computes a result, einsum builds one of its shape."""
    subscripts, shapes = problem
    try:
        want: Shape | None = np.einsum(subscripts, *(np.zeros(s) for s in shapes)).shape
    except ValueError:
        want = None
    try:
        got: Shape | None = eqsat.einsum(subscripts, *tensors(*shapes)).shape
    except ShapeError:
        got = None
    assert got == want
