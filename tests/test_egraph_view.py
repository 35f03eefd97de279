"""The SVG picture of an e-graph: what it shows, where it cuts, what it highlights, and that it
is well-formed XML whatever the tensors are called."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from egglog import EGraph

import eqsat
from eqsat.core.saturate import Limits, saturate
from eqsat.core.terms import Term, subterms, to_egglog, to_term
from eqsat.extract.extractor import SerializedGraph
from eqsat.extract.loop_cost import LoopCost
from eqsat.extract.machine import Machine
from eqsat.extract.tensor_cost import TensorCost
from eqsat.rewrites.algebra import algebra_rules
from eqsat.rewrites.algebra_facts import algebra_facts
from eqsat.rewrites.lowering import lower
from eqsat.rewrites.schedule import ROOT, schedule
from eqsat.view.egraph_view import MAX_LABEL_CHARS, _sweep, draw_egraph

AVX512 = Machine("avx512", cores=2, l1_bytes=48 * 1024, l2_bytes=2 << 20, l3_bytes=32 << 20)


def algebra_egraph(*outputs: eqsat.Tensor) -> EGraph:
    """The saturated stage-1 e-graph of `outputs`, let-bound as root0, root1, ..."""
    egraph = EGraph()
    for k, output in enumerate(outputs):
        egraph.let(f"root{k}", to_egglog(to_term(output.expr)))
    saturate(egraph, algebra_rules(), Limits(), "algebra", facts=algebra_facts)
    return egraph


def mlp() -> eqsat.Tensor:
    x, w, b = eqsat.tensor("x", (16, 24)), eqsat.tensor("w", (24, 32)), eqsat.tensor("b", (32,))
    return eqsat.relu(x @ w + b)


@cache
def loop_graph() -> tuple[SerializedGraph, Term]:
    """The saturated stage-2 e-graph of a small MLP layer, and the program extracted from it."""
    program = lower([to_term(mlp().expr)])  # type: ignore[list-item]
    egraph, report = schedule(program.body, AVX512, "float32", Limits())
    assert report.stop_reason == "saturated"
    graph = SerializedGraph(egraph)
    return graph, graph.extract(graph.root(ROOT), LoopCost(AVX512, "float32"))[0]


def elements(svg: str, kind: str) -> list[ET.Element]:
    """The elements of the (parsed) SVG whose class attribute includes `kind`."""
    return [e for e in ET.fromstring(svg).iter() if kind in e.get("class", "").split()]


def attribute(svg: str, kind: str, name: str) -> list[str]:
    """Attribute `name` of every element of class `kind`."""
    return [e.get(name, "") for e in elements(svg, kind)]


def texts(svg: str) -> Iterator[str]:
    return (e.text or "" for e in ET.fromstring(svg).iter() if e.tag.endswith("text"))


def box_top(group: ET.Element) -> float:
    """The y of the first rectangle in a group: the e-class box."""
    return float(next(e for e in group.iter() if e.tag.endswith("rect")).get("y", "nan"))


def is_value(graph: SerializedGraph, cid: str) -> bool:
    """A literal or a Vec of literals: drawn inline, not as a box."""
    return graph.classes[cid][0].op in ("literal", "Vec")


def reachable(graph: SerializedGraph, roots: list[str]) -> list[str]:
    seen = list(roots)
    for cid in seen:
        for node in graph.classes[cid]:
            seen += [c for c in node.children if c not in seen and not is_value(graph, c)]
    return seen


def distinct_subterms(term: Term) -> set[Term]:
    return {t for t in subterms([term]) if isinstance(t, Term)}


# ---------------------------------------------------------------- what is shown


def test_whole_algebra_egraph_shows_every_eclass_and_enode_once() -> None:
    graph = SerializedGraph(algebra_egraph(mlp()))
    picture = draw_egraph(graph)
    classes = reachable(graph, [graph.root("root0")])
    assert sorted(attribute(picture.svg, "eclass", "data-eclass")) == sorted(classes)
    nodes = [node.key for cid in classes for node in graph.classes[cid]]
    assert sorted(attribute(picture.svg, "enode", "data-enode")) == sorted(nodes)
    assert not elements(picture.svg, "more")
    assert (picture.shown_classes, picture.shown_nodes) == (len(classes), len(nodes))
    assert picture.summary in picture.svg  # the title


def test_literals_are_drawn_inline_and_long_labels_are_cut() -> None:
    long_name = "activations_of_the_first_layer_of_the_network"
    picture = draw_egraph(algebra_egraph(eqsat.tensor(long_name, (4, 8)) * 2.0))
    labels = list(texts(picture.svg))
    assert any(label.startswith('"activations') and label.endswith("…") for label in labels)
    assert all(len(label) <= MAX_LABEL_CHARS for label in labels if label.startswith('"'))
    assert "2.0" in labels and '"mul"' in labels  # TExpr.const(2.0), binary "mul"
    assert not any(
        e.get("data-eclass", "").startswith(("i64", "String", "f64"))
        for e in elements(picture.svg, "eclass")
    )


def test_roots_are_on_top_and_default_to_every_let_bound_term() -> None:
    x, y = eqsat.tensor("x", (4, 8)), eqsat.tensor("y", (8,))
    graph = SerializedGraph(algebra_egraph(eqsat.exp(x + y), eqsat.relu(x).sum(axis=1)))
    picture = draw_egraph(graph)
    tops = {e.get("data-eclass", ""): box_top(e) for e in elements(picture.svg, "eclass")}
    roots = [graph.root("root0"), graph.root("root1")]
    assert all(tops[root] == min(tops.values()) for root in roots)
    assert draw_egraph(graph, "root1").shown_classes < picture.shown_classes


def test_loop_egraph_is_cut_after_max_classes_with_counted_markers() -> None:
    graph, _ = loop_graph()
    picture = draw_egraph(graph, ROOT, max_classes=12)
    shown = attribute(picture.svg, "eclass", "data-eclass")
    assert len(shown) == picture.shown_classes == 12
    markers = elements(picture.svg, "more")
    assert markers
    for marker in markers:
        hidden = {
            child
            for node in graph.classes[marker.get("data-parent", "")]
            for child in node.children
            if child not in shown and not is_value(graph, child)
        }
        assert int(marker.get("data-hidden", "0")) == len(hidden) > 0
        assert f"{len(hidden)} more e-class" in "".join(marker.itertext())
    cut = set(attribute(picture.svg, "more", "data-parent"))
    with_hidden_children = {  # every shown class with a child that is not shown has a marker
        cid
        for cid in shown
        for node in graph.classes[cid]
        for child in node.children
        if child not in shown and not is_value(graph, child)
    }
    assert cut == with_hidden_children
    total_classes = sum(not is_value(graph, cid) for cid in graph.classes)
    assert f"12 of {total_classes:,} e-classes" in picture.svg


def test_wide_layers_wrap_onto_rows() -> None:
    """Unwrapped, this picture's widest layer is ~4,600 px; a notebook shows ~1,700."""
    graph, _ = loop_graph()
    picture = draw_egraph(graph, ROOT, max_classes=40)
    assert float(ET.fromstring(picture.svg).get("width", "inf")) <= 1700


def test_no_marker_when_everything_reachable_fits() -> None:
    graph, _ = loop_graph()
    everything = reachable(graph, [graph.root(ROOT)])
    picture = draw_egraph(graph, ROOT, max_classes=len(everything))
    assert picture.shown_classes == len(everything)
    assert not elements(picture.svg, "more")
    assert elements(draw_egraph(graph, ROOT, max_classes=len(everything) - 1).svg, "more")


# ---------------------------------------------------------------- the chosen term


def test_chosen_term_highlights_exactly_its_enodes() -> None:
    graph = SerializedGraph(algebra_egraph(mlp()))
    term = graph.extract(graph.root("root0"), TensorCost())[0]
    assert isinstance(term, Term)
    picture = draw_egraph(graph, chosen=term)
    chosen = elements(picture.svg, "chosen")
    assert len(chosen) == len(distinct_subterms(term)) < picture.shown_nodes
    ops = {node.key: node.op for nodes in graph.classes.values() for node in nodes}
    chosen_ops = sorted(ops[key] for key in attribute(picture.svg, "chosen", "data-enode"))
    assert chosen_ops == sorted(t.op for t in distinct_subterms(term))
    assert len(elements(draw_egraph(graph).svg, "chosen")) == 0


def test_chosen_program_is_shown_whole_even_when_the_picture_is_cut() -> None:
    graph, body = loop_graph()
    size = len(distinct_subterms(body))
    picture = draw_egraph(graph, ROOT, max_classes=size, chosen=body)
    assert picture.shown_classes < picture.total_classes  # cut
    assert len(elements(picture.svg, "chosen")) == size


def test_chosen_term_not_in_the_egraph_is_refused() -> None:
    graph = SerializedGraph(algebra_egraph(mlp()))
    stranger = to_term(eqsat.tensor("z", (4,)).expr)
    assert isinstance(stranger, Term)
    with pytest.raises(ValueError, match="not under any root"):
        draw_egraph(graph, chosen=stranger)


# ---------------------------------------------------------------- inputs and output


def test_unknown_root_is_a_clear_error() -> None:
    graph = SerializedGraph(algebra_egraph(mlp()))
    with pytest.raises(ValueError, match=r"unknown root 'kernel'.*'root0'"):
        draw_egraph(graph, "kernel")
    with pytest.raises(ValueError, match="max_classes"):
        draw_egraph(graph, max_classes=0)


def test_hostile_names_are_escaped_and_the_svg_parses() -> None:
    name = 'a<b&"c"\'</text>'
    picture = draw_egraph(algebra_egraph(eqsat.exp(eqsat.tensor(name, (3,)))))
    root = ET.fromstring(picture.svg)  # well-formed XML
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert any('a<b&\\"c\\"' in label for label in texts(picture.svg))  # shown, unmangled
    assert "<b&" not in picture.svg


def test_egraph_and_serialized_graph_give_the_same_bytes_every_time() -> None:
    egraph = algebra_egraph(mlp())
    first = draw_egraph(egraph).svg
    assert draw_egraph(SerializedGraph(egraph)).svg == first
    assert draw_egraph(egraph).svg == first


def test_picture_renders_in_jupyter_and_saves(tmp_path: Path) -> None:
    picture = eqsat.draw_egraph(algebra_egraph(mlp()))
    assert picture._repr_svg_() == picture.svg
    path = tmp_path / "egraph.svg"
    picture.save(path)
    assert path.read_text(encoding="utf-8") == picture.svg


def test_barycentre_sweep_uncrosses_children() -> None:
    layers = [["a", "b"], ["child of b", "child of a"]]
    links = [("a", 0.5, "child of a"), ("b", 0.5, "child of b")]
    _sweep(layers, links, downwards=True)
    assert layers[1] == ["child of a", "child of b"]
    _sweep(layers, [("b", 0.5, "child of a"), ("a", 0.5, "child of b")], downwards=False)
    assert layers[0] == ["b", "a"]  # upwards: parents follow their children
