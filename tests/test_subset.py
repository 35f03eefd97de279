"""A program over a subset of one output axis's indices (eqsat.core.subset), as the translation
validation evaluates large programs: the subset program's value is the whole program's value at
those indices, or `along` refuses (an op mixes positions along the axis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eqsat
from eqsat.core.interp import evaluate
from eqsat.core.subset import INDICES, Subset, along
from eqsat.core.term import Term
from eqsat.core.terms import to_term
from tests.programs import Program, programs


def terms(*outputs: eqsat.Tensor) -> list[Term]:
    found = [to_term(output.expr) for output in outputs]
    assert all(isinstance(term, Term) for term in found)
    return found  # type: ignore[return-value]


def subset_values(
    subset: Subset, inputs: dict[str, np.ndarray], indices: np.ndarray
) -> list[np.ndarray]:
    """The subset program evaluated on `inputs` taken at `indices` as `subset.taken` says."""
    given_inputs = {name: inputs[name] for name in subset.whole}
    if subset.reads_indices:
        given_inputs[INDICES] = indices.astype(np.float64)
    for name, (source, axis) in subset.taken.items():
        given_inputs[name] = np.take(inputs[source], indices, axis)
    return [evaluate(root, given_inputs) for root in subset.roots]


@settings(max_examples=150, deadline=None)
@given(programs(max_ops=5), st.data())
def test_a_subset_program_computes_the_whole_programs_values_at_its_indices(
    program: Program, data: st.DataObject
) -> None:
    roots = terms(*program.outputs)
    inputs = {name: value.astype(np.float64) for name, value in program.inputs.items()}
    whole = evaluate(roots[0], inputs)
    for axis, extent in enumerate(whole.shape):
        kept = data.draw(st.integers(1, extent), label=f"kept along axis {axis}")
        subset = along(roots, axis, kept)
        if subset is None:
            continue  # an op mixes positions along this axis
        chosen = data.draw(st.permutations(range(extent)), label="indices")[:kept]
        indices = np.sort(np.array(chosen, dtype=np.int64))
        (got,) = subset_values(subset, inputs, indices)
        np.testing.assert_allclose(got, np.take(whole, indices, axis), rtol=1e-12, atol=1e-12)


def test_row_wise_programs_contractions_and_attention_follow_their_rows() -> None:
    """The rows of a softmax, a layernorm, `x @ W` (and its columns), attention's query rows
    and a head-split attention are all followed; the other operands are used whole, as x is
    by a softmax down the columns (its maximum and sum over every row); a causal mask's row
    index reads the kept indices."""
    x = eqsat.tensor("x", (64, 32))
    W = eqsat.tensor("W", (32, 48))
    q, k, v = (eqsat.tensor(name, (64, 32)) for name in "qkv")
    weight, bias = eqsat.tensor("weight", (32,)), eqsat.tensor("bias", (32,))
    causal = eqsat.arange(64).reshape(64, 1) >= eqsat.arange(64).reshape(1, 64)
    heads = (x.reshape(64, 4, 8).transpose(1, 0, 2) * 2.0).transpose(1, 0, 2).reshape(64, 32)
    cases = {
        "softmax": (eqsat.softmax(x, axis=-1), 0, {"x"}),
        "softmax down the columns": (eqsat.softmax(x, axis=0), 0, {"x"}),
        "layernorm": (eqsat.layernorm(x, weight, bias), 0, {"x"}),
        "x @ W rows": (x @ W, 0, {"x"}),
        "x @ W columns": (x @ W, 1, {"W"}),
        "attention": (eqsat.softmax(q @ k.T * 0.125, axis=-1) @ v, 0, {"q"}),
        "head split and merge": (heads, 0, {"x"}),
        "causal attention": (eqsat.softmax(eqsat.where(causal, q @ k.T, -np.inf)) @ v, 0, {"q"}),
    }
    for label, (program, axis, taken) in cases.items():
        subset = along(terms(program), axis, 5)
        assert subset is not None, label
        assert {source for source, _ in subset.taken.values()} == taken, label
        names = {f"{name}#{source_axis}" for name, source_axis in subset.taken.values()}
        assert names == set(subset.taken), label
        inputs = {
            name: np.random.default_rng(0).standard_normal(tensor.shape)
            for name, tensor in {"x": x, "W": W, "q": q, "k": k, "v": v}.items()
        } | {"weight": np.ones(32), "bias": np.zeros(32)}
        indices = np.array([0, 3, 7, 20, 31])
        (got,) = subset_values(subset, inputs, indices)
        want = evaluate(terms(program)[0], inputs)
        np.testing.assert_allclose(got, np.take(want, indices, axis), rtol=1e-12, err_msg=label)


@pytest.mark.parametrize(
    "label",
    ["rows merged by a reshape", "slice", "concatenation"],
)
def test_an_op_that_mixes_positions_along_the_axis_is_refused(label: str) -> None:
    x = eqsat.tensor("x", (16, 8))
    program = {
        "rows merged by a reshape": x.reshape(8, 16),
        "concatenation": eqsat.concatenate([x[:8], x[8:] * 2.0], 0),
        "slice": x[2:] * 1.0,
    }[label]
    assert along(terms(program), 0, 4) is None
