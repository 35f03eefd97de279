"""A program that reuses its values (a model's layers read their input several times) is a DAG
whose tree unfolds exponentially in its depth: its text, its compile-cache key and its report
grow with its distinct subterms instead (`eqsat.core.term.dag_text`,
`eqsat.core.pretty.format_tensors`). Two stacked transformer blocks spent 75 s writing their
written form as a tree and 71 s building a 557 MB cache key; a third block would not finish.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import eqsat
from eqsat import compile_cache
from eqsat.core.pretty import SHARED_TEXT_MIN_CHARS, format_tensor, format_tensors
from eqsat.core.term import Term, dag_text, post_order, subterms

DEPTH = 16  # a chain whose tree holds 2**16 copies of its input


def doubling_chain(depth: int = DEPTH, last: float = 1.0) -> eqsat.Tensor:
    """y <- tanh(y * y - y) `depth` times: each level reads the one below twice."""
    y = eqsat.tensor("x", (4, 8))
    for _ in range(depth - 1):
        y = eqsat.tanh(y * y - y)
    return eqsat.tanh(y * y - last)


def test_a_long_subterm_used_twice_is_written_once_and_named() -> None:
    x, w, b = eqsat.tensor("x", (4, 8)), eqsat.tensor("W", (8, 8)), eqsat.tensor("b", (8,))
    hidden = eqsat.exp(eqsat.tanh(x @ w + b) * 2.0 + 1.0) - 3.0
    alone = format_tensor(hidden.expr)
    assert len(alone) > SHARED_TEXT_MIN_CHARS
    assert format_tensor((hidden * hidden).expr) == f"%1 = {alone}; (%1 * %1)"
    assert "%" not in alone  # used once: inline


def test_a_short_subterm_used_twice_stays_inline() -> None:
    x, y = eqsat.tensor("x", (4,)), eqsat.tensor("y", (4,))
    assert format_tensor(((x + y) * (x + y)).expr) == "((x + y) * (x + y))"


def test_outputs_share_one_set_of_names() -> None:
    x, w = eqsat.tensor("x", (4, 8)), eqsat.tensor("W", (8, 8))
    hidden = eqsat.exp(eqsat.tanh(x @ w + 1.0) * 2.0 + 1.0) - 3.0
    text = format_tensors([(hidden * 2.0).expr, (hidden + 1.0).expr])
    assert text == f"%1 = {format_tensor(hidden.expr)}; (%1 * 2); (%1 + 1)"


def test_the_text_of_a_deep_chain_grows_with_its_depth() -> None:
    text = format_tensor(doubling_chain().expr)
    assert text.count(" = ") == (DEPTH - 1) // 2  # every other level is long enough to name
    assert len(text) < 60 * DEPTH, text[:200]


def test_dag_text_tells_terms_apart_as_equality_does() -> None:
    first, again, other = (
        doubling_chain().expr,
        doubling_chain().expr,
        doubling_chain(last=2.0).expr,
    )
    assert first == again and dag_text([first]) == dag_text([again])
    assert first != other and dag_text([first]) != dag_text([other])
    assert dag_text([first, other]) != dag_text([other, first])
    assert len(dag_text([first])) < 100 * DEPTH


def test_post_order_lists_each_subterm_once_after_its_arguments() -> None:
    term = doubling_chain().expr
    order = post_order([term])
    assert set(order) == {t for t in subterms([term]) if isinstance(t, Term)}
    assert len(order) == len(set(order))
    seen: set[Any] = set()
    for t in order:
        assert all(c in seen for c in t.args if isinstance(c, eqsat.core.term.Term))
        seen.add(t)


def test_a_deep_chain_compiles_with_a_short_key_and_report(
    fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_sizes: list[int] = []
    entry_key = compile_cache.entry_key

    def measured(parts: Any) -> str:
        key_sizes.append(len(json.dumps(parts, default=repr)))
        return entry_key(parts)

    monkeypatch.setattr(compile_cache, "entry_key", measured)
    kernel = eqsat.compile(doubling_chain(), progress=False)
    assert key_sizes and max(key_sizes) < 10_000
    assert len(kernel.explain()) < 20_000
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    want = x.astype(np.float64)
    for _ in range(DEPTH - 1):
        want = np.tanh(want * want - want)
    np.testing.assert_allclose(kernel(x), np.tanh(want * want - 1.0), rtol=1e-4, atol=1e-5)
    again = eqsat.compile(doubling_chain(), progress=False)
    assert "answered from the compile cache" in again.explain()


def _chain(depth: int, leaf: float) -> Term:
    """A term built apart each call (no hash-consing): each level reads the one below twice."""
    term = Term("TExpr.const", (leaf,))
    for _ in range(depth):
        term = Term("TExpr.binary", ("mul", term, term))
    return term


def test_terms_built_apart_compare_in_time_linear_in_their_depth() -> None:
    """A memo table's key and an equal term built again share no objects: equality compares each
    pair of subterms once, where comparing path by path visits 2**64 of them here (the bench's
    check of two stacked blocks, which looks its program up in `shapes.infer`'s table, took
    507 s that way). An alarm turns a hang into a failure."""

    def hung(*_: object) -> None:
        raise TimeoutError("comparing two equal DAGs did not finish in 30 s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    try:
        assert _chain(64, 1.0) == _chain(64, 1.0)
        assert _chain(64, 1.0) != _chain(64, 2.0)
        assert _chain(64, 0.0) == _chain(64, -0.0)  # as float equality has it
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
