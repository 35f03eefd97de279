"""Translation validation (eqsat.validation): every kernel `eqsat.compile` returns was run on
seeded inputs and agreed with the program as written; one that disagrees, or whose optimized
nest fails to build, is replaced by the written program's plain nest, said so, and not cached."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import eqsat
import eqsat.api
from eqsat.core.interp import evaluate
from eqsat.core.terms import to_term
from eqsat.validation import check_kernel, disagreement, prepared_in_background
from tests.test_pipeline import rewrite_of_x_plus_x

SHAPE = (1500, 1500)  # 4.5e6 flops of x + x and relu: above the stage-1 check's bound


@pytest.fixture(autouse=True)
def cache(fresh_cache: Path) -> Path:
    return fresh_cache


def cached_kernels(directory: Path) -> list[Path]:
    return sorted(directory.glob("compile-*.json"))


def test_a_kernel_that_agrees_is_returned_cached_and_says_it_was_checked(cache: Path) -> None:
    x = eqsat.tensor("x", (300, 70))
    kernel = eqsat.compile(eqsat.softmax(x), progress=False)
    assert "checked against the written program on seeded normal values and NaN/" in (
        kernel.explain()
    )
    assert len(cached_kernels(cache)) == 1


def test_a_kernel_that_disagrees_is_replaced_by_the_written_programs_plain_nest(
    cache: Path,
) -> None:
    """A user's unsound rule (x + x -> x) in a program too large for the stage-1 check: the
    optimized kernel computes relu(x), the check catches it, the plain nest computes relu(2x)."""
    x = eqsat.tensor("x", SHAPE)
    unsound = rewrite_of_x_plus_x("mine-drop-sum", "x + x -> x", lambda x: x)
    program = eqsat.relu(x + x)
    optimized = eqsat.optimize(program, extra_rules=[unsound], progress=False)
    assert optimized.expr == "relu(x)"  # the stage-1 check did not look: too many flops
    kernel = eqsat.compile(program, extra_rules=[unsound], progress=False)
    explanation = kernel.explain()
    assert "the optimized kernel disagreed with the written program (output 0 on normal" in (
        explanation
    )
    assert "runs the written program's plain loop nest instead (agrees)" in explanation
    assert "not kept in the compile cache" in explanation and not cached_kernels(cache)
    values = np.random.default_rng(0).standard_normal(SHAPE, dtype=np.float32)
    np.testing.assert_array_equal(kernel(values), np.maximum(values + values, 0))


def test_an_optimized_nest_that_fails_to_build_is_replaced(
    monkeypatch: pytest.MonkeyPatch, cache: Path
) -> None:
    """The wrong merges once gave a nest the emitter could not spell (KeyError: 'mul'): the
    user gets the plain nest, and the failure is named."""
    emit = eqsat.api.emit
    calls: list[int] = []

    def failing_once(*args: Any, **kwargs: Any) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("mul")
        return emit(*args, **kwargs)

    monkeypatch.setattr(eqsat.api, "emit", failing_once)
    x = eqsat.tensor("x", (40, 30))
    kernel = eqsat.compile(eqsat.exp(x) * 2.0, progress=False)
    assert "its optimized nest failed to build (KeyError: 'mul')" in kernel.explain()
    assert not cached_kernels(cache)
    values = np.linspace(-3, 3, 1200, dtype=np.float32).reshape(40, 30)
    np.testing.assert_allclose(kernel(values), np.exp(values) * 2, rtol=1e-6)


def test_check_false_skips_the_check_and_keys_the_cache_apart(cache: Path) -> None:
    x = eqsat.tensor("x", (40, 30))
    unchecked = eqsat.compile(eqsat.exp(x), progress=False, check=False)
    assert "checked against the written program" not in unchecked.explain()
    checked = eqsat.compile(eqsat.exp(x), progress=False)
    assert "checked against the written program" in checked.explain()
    assert len(cached_kernels(cache)) == 2


def test_the_check_sees_a_wrong_nan_and_a_wrong_value() -> None:
    """check_kernel against terms the kernel does not compute: a value off by more than the
    tolerance, and a NaN where numpy has none (max(x, 0) is not relu's NaN-free twin)."""
    x = eqsat.tensor("x", (64,))
    kernel = eqsat.compile(x * 2.0, progress=False, cache=False)
    assert check_kernel(kernel, [to_term((x * 2.0).expr)], assume_finite=False).ok
    verdict = check_kernel(kernel, [to_term((x * 2.001).expr)], assume_finite=False)
    assert not verdict.ok and "where numpy gives" in verdict.detail
    nan_free = to_term(eqsat.where(x == x, x * 2.0, 0.0).expr)  # NaN inputs give 0
    verdict = check_kernel(kernel, [nan_free], assume_finite=False)
    assert not verdict.ok and "NaN differs from numpy's" in verdict.detail
    assert check_kernel(kernel, [nan_free], assume_finite=True).ok  # finite inputs only


def test_integer_and_half_precision_kernels_agree() -> None:
    i, j = eqsat.tensor("i", (50,), "int32"), eqsat.tensor("j", (50,), "int32")
    h = eqsat.tensor("h", (50,), "float16")
    for outputs in ([i * j, i // 3, i > j], [eqsat.exp(h) * 3.0]):
        kernel = eqsat.compile(outputs, progress=False, cache=False)
        assert ": agrees" in kernel.explain(), kernel.explain()


def test_a_large_program_is_checked_at_sampled_indices_the_first_and_last_among_them() -> None:
    """Past SAMPLE output elements, the written program is evaluated at seeded indices of one
    output axis (the first and the last among them): a wrong value, or a NaN where numpy has
    none, is still seen, in an elementwise program as in a row softmax."""
    from eqsat.validation import MIN_KEPT, SAMPLE, _sample

    x = eqsat.tensor("x", (SAMPLE // 100, 300))  # 3 x SAMPLE elements
    sample = _sample([to_term(eqsat.softmax(x).expr)], np.random.default_rng(0))
    assert sample is not None and sample.axis == 0
    assert MIN_KEPT <= len(sample.indices) < x.shape[0]
    assert sample.indices[0] == 0 and sample.indices[-1] == x.shape[0] - 1
    assert len(set(sample.indices.tolist())) == len(sample.indices)
    for program, wrong in ((x * 2.0, x * 2.001), (eqsat.softmax(x), eqsat.softmax(x * 1.01))):
        kernel = eqsat.compile(program, progress=False, cache=False, check=False)
        verdict = check_kernel(kernel, [to_term(program.expr)], assume_finite=False)
        assert verdict.ok and f"of the {x.shape[0]} indices of output axis 0" in verdict.detail
        verdict = check_kernel(kernel, [to_term(wrong.expr)], assume_finite=False)
        assert not verdict.ok and "where numpy gives" in verdict.detail
    nan_free = to_term(eqsat.where(x == x, x * 2.0, 0.0).expr)
    kernel = eqsat.compile(x * 2.0, progress=False, cache=False, check=False)
    assert "NaN differs" in check_kernel(kernel, [nan_free], assume_finite=False).detail


def test_a_result_rounded_in_another_order_is_accepted_where_the_program_is_ill_conditioned() -> (
    None
):
    """Attention on large scores (near ties in the softmax): float32 products summed in the
    other order land farther from float64 than SLACK times numpy's own error at some element,
    but within the error a float32 evaluation may have there (`validation._compute_error`); the
    same result with its rows shifted is still refused."""
    n, depth = 64, 256
    q, k, v = (eqsat.tensor(name, (n, depth)) for name in "qkv")
    term = to_term((eqsat.softmax(q @ k.T) @ v).expr)
    rng = np.random.default_rng(34)
    inputs = {name: (rng.standard_normal((n, depth)) * 30).astype(np.float32) for name in "qkv"}
    reversed_sums = {
        "q": inputs["q"][:, ::-1].copy(),
        "k": inputs["k"][:, ::-1].copy(),
        "v": inputs["v"],
    }
    got = evaluate(term, reversed_sums)  # float32, each product summed from its other end
    wide = evaluate(term, {name: value.astype(np.float64) for name, value in inputs.items()})
    numpy_error = np.abs(evaluate(term, inputs) - wide)
    allowed = 1e-4 * (np.abs(wide) + max(1.0, np.abs(wide).max()))  # RTOL, as `disagreement`
    assert (np.abs(got - wide) > allowed + 4 * numpy_error).any()  # beyond SLACK x numpy's error
    assert disagreement(got, term, inputs, "float32", False) == ""
    assert disagreement(np.roll(got, 1, axis=0), term, inputs, "float32", False)


def test_a_reference_worked_out_in_the_background_checks_as_the_inline_one() -> None:
    """`eqsat.compile` works out the check's reference while gcc runs: the same seeded inputs
    and values as the check's own, so the verdicts are the same, to the index they name; an
    error in the thread reaches the caller that waits for it."""
    x, y = eqsat.tensor("x", (SHAPE[0] // 10, 300)), eqsat.tensor("y", (300,))
    kernel = eqsat.compile(eqsat.softmax(x) * y, progress=False, cache=False, check=False)
    specs = [(spec.name, spec.shape, spec.dtype or kernel.dtype) for spec in kernel.inputs]
    for wrong in (eqsat.softmax(x) * y, eqsat.softmax(x * 1.01) * y, eqsat.relu(x) * y):
        written = [to_term(wrong.expr)]
        waiting = prepared_in_background(written, specs, assume_finite=False)
        inline = check_kernel(kernel, written, assume_finite=False)
        prepared = check_kernel(kernel, written, assume_finite=False, reference=waiting())
        assert (prepared.ok, prepared.detail) == (inline.ok, inline.detail)
    assert check_kernel(kernel, [to_term((eqsat.softmax(x) * y).expr)], False).ok
    missing = prepared_in_background(
        [to_term((eqsat.softmax(x) * y).expr)], specs[:1], assume_finite=False
    )
    with pytest.raises(KeyError):
        missing()


def test_the_reference_overlaps_the_build_but_not_autotunes_timing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[int] = []
    background = eqsat.api.prepared_in_background

    def counted(*args: Any, **kwargs: Any) -> Any:
        started.append(1)
        return background(*args, **kwargs)

    monkeypatch.setattr(eqsat.api, "prepared_in_background", counted)
    x = eqsat.tensor("x", (40, 30))
    kernel = eqsat.compile(eqsat.exp(x) * 3.0, progress=False, cache=False)
    assert ": agrees" in kernel.explain() and started == [1]
    tuned = eqsat.compile(eqsat.exp(x) * 3.0, progress=False, cache=False, autotune=2)
    assert ": agrees" in tuned.explain() and started == [1]
