"""A picture of an e-graph as self-contained SVG: no JavaScript, no graphviz, standard library only.

    picture = eqsat.draw_egraph(egraph, chosen=term)   # an EGraph or a SerializedGraph
    picture                                            # Jupyter renders it (`_repr_svg_`)
    picture.save("egraph.svg"); print(picture.summary)

Each e-class is a dashed, rounded box holding its e-nodes; an edge runs from an e-node to each
child e-class, leaving the node's bottom edge in argument order. Literal e-classes (ints, floats,
strings) and Vecs of them hold exactly one value, so they are drawn inline, on the second line of
the label of the node that uses them (`Axis.named` / `"i0" 256`); they are neither boxes nor
counted in the totals.

Only the part reachable from the roots is laid out: e-classes are taken breadth-first up to
`max_classes` (the chosen term's e-classes first, so that the picked program is shown whole when
it fits), so a picture of a 300k-node e-graph costs what its 40 classes cost, plus one counting
pass for the title. Edges into classes that did not fit end in one "… N more e-classes" marker
per parent class. Layers are the depths at which classes were reached (roots on top); barycentre
sweeps order each layer to reduce crossings, and a layer wider than MAX_ROW_WIDTH wraps onto
several rows. The output depends only on the graph: the same e-graph gives a byte-identical SVG.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from egglog import EGraph

from eqsat.core.term import Arg, Term
from eqsat.extract.extractor import SerializedGraph
from eqsat.view.svg import FONT_SIZE, SvgPicture, escape, px, svg_document, svg_text, text_width

# ---------------------------------------------------------------- geometry (pixels) and colours

MAX_LABEL_CHARS = 26  # per line of a node label; longer text ends in "…"
NODES_PER_ROW = 4  # inside an e-class box
NODE_HEIGHT = 32  # two lines: the op, then its literal arguments
NODE_PAD = 6
NODE_GAP = 8
CLASS_PAD = 8
CLASS_HEADER = 16
CLASS_GAP = 24
MAX_ROW_WIDTH = 1600  # a wider layer of e-classes wraps onto several rows
LAYER_GAP = 64
MARGIN = 16
TITLE_HEIGHT = 28
BACK_EDGE_DIP = 36  # how far an edge to a class above or beside dips before turning up
ARROW = 6
SWEEPS = 4  # barycentre sweeps, alternately downwards and upwards

NODE_FILL, CHOSEN_FILL = "#ffffff", "#ffcc66"
EDGE_COLOUR, CHOSEN_EDGE_COLOUR = "#8a8a8a", "#d2691e"
PRIMITIVE_OPS = ("literal", "Vec")  # the ops SerializedGraph gives to primitive e-nodes
MORE = "more:"  # key prefix of a truncation marker's box


@dataclass(frozen=True)
class EGraphPicture(SvgPicture):
    """An SVG picture of (part of) an e-graph (`svg`, `_repr_svg_`, `save`), and how much of it
    is shown.

    The totals count the e-graph's term e-classes and e-nodes (literal classes are drawn inline
    and not counted)."""

    shown_classes: int
    total_classes: int
    shown_nodes: int
    total_nodes: int

    @property
    def summary(self) -> str:
        return _summary(self.shown_classes, self.total_classes, self.shown_nodes, self.total_nodes)


def draw_egraph(
    graph: EGraph | SerializedGraph,
    roots: str | Sequence[str] | None = None,
    *,
    max_classes: int = 40,
    chosen: Term | Sequence[Term] | None = None,
) -> EGraphPicture:
    """Draw the e-classes reachable from `roots`, breadth-first, at most `max_classes` of them.

    It requires:
    1. `roots`: let-names (`"kernel"`, `"root0"`) or e-class ids of `graph`, each naming an
       e-class that holds term nodes; default: every let-name except egglog's own (`__expr*`).
    2. `max_classes` >= 1.
    3. `chosen`: a term (or several, e.g. `Optimized.chosen`) read back from this e-graph under
       one of the roots; the e-nodes spelling it are filled in colour. A term changed after
       extraction (e.g. by `contract_temporaries`) is not in the e-graph.
    Raises ValueError when a root or a chosen term is not found.
    """
    if isinstance(graph, EGraph):
        graph = SerializedGraph(graph)
    if max_classes < 1:
        raise ValueError(f"max_classes must be at least 1, got {max_classes}")
    values = _Values(graph)
    root_ids = _root_ids(graph, roots)
    terms = [chosen] if isinstance(chosen, Term) else list(chosen or ())
    highlighted = _chosen_nodes(graph, root_ids, terms)
    shown, hidden = _breadth_first(graph, values, root_ids, max_classes, highlighted)
    value_classes = values.count()
    total_classes = len(graph.classes) - value_classes
    total_nodes = graph.size - value_classes  # a value class holds one node
    shown_nodes = [node for cid in shown for node in graph.classes[cid]]
    counts = (len(shown), total_classes, len(shown_nodes), total_nodes)
    title = "e-graph: " + _summary(*counts)
    if terms:
        chosen_count = sum(node.key in highlighted for node in shown_nodes)
        title += f"; {chosen_count:,} e-nodes of the chosen term highlighted"
    svg = _svg(_Layout(graph, values, shown, hidden, highlighted), title)
    return EGraphPicture(svg, *counts)


def _summary(shown_classes: int, total_classes: int, shown_nodes: int, total_nodes: int) -> str:
    return (
        f"{shown_classes:,} of {total_classes:,} e-classes, "
        f"{shown_nodes:,} of {total_nodes:,} e-nodes shown"
    )


# ---------------------------------------------------------------- what is shown


class _Values:
    """The inline text of value e-classes (a literal, or a Vec of values); None for the rest."""

    def __init__(self, graph: SerializedGraph) -> None:
        self._graph = graph
        self._texts: dict[str, str | None] = {}

    def text(self, cid: str) -> str | None:
        if cid not in self._texts:
            self._texts[cid] = self._compute(cid)
        return self._texts[cid]

    def count(self) -> int:
        """How many e-classes of the graph are value classes (one pass over its classes)."""
        return sum(
            1
            for cid, nodes in self._graph.classes.items()
            if nodes[0].op in PRIMITIVE_OPS and self.text(cid) is not None
        )

    def _compute(self, cid: str) -> str | None:
        nodes = self._graph.classes[cid]
        if len(nodes) != 1:  # a primitive e-class holds exactly its one value
            return None
        node = nodes[0]
        if node.op == "literal":
            return _literal_text(node.literal)
        if node.op == "Vec":
            items = [self.text(child) for child in node.children]
            if all(item is not None for item in items):
                return "[" + ", ".join(items) + "]"  # type: ignore[arg-type]
        return None


def _literal_text(literal: object) -> str:
    return json.dumps(literal, ensure_ascii=False) if isinstance(literal, str) else str(literal)


def _root_ids(graph: SerializedGraph, roots: str | Sequence[str] | None) -> list[str]:
    """E-class ids of `roots` (let-names or ids), in order, without repeats."""
    if roots is None:
        ids = [cid for name, cid in _user_lets(graph).items() if cid in graph.classes]
        if not ids:
            raise ValueError("the e-graph has no let-bound term to start from; pass `roots`")
    else:
        ids = [_root_id(graph, root) for root in ([roots] if isinstance(roots, str) else roots)]
    return list(dict.fromkeys(ids))


def _root_id(graph: SerializedGraph, root: str) -> str:
    cid = graph.lets.get(root, root)
    if cid not in graph.classes:
        known = ", ".join(repr(name) for name in _user_lets(graph)) or "none"
        raise ValueError(
            f"unknown root {root!r}: neither a let-name nor an e-class with term nodes "
            f"(let-names of this e-graph: {known})"
        )
    return cid


def _user_lets(graph: SerializedGraph) -> dict[str, str]:
    """Let-names bound by eqsat, without egglog's own (`__expr_3`)."""
    return {name: cid for name, cid in graph.lets.items() if not name.startswith("__")}


def _breadth_first(
    graph: SerializedGraph,
    values: _Values,
    root_ids: list[str],
    max_classes: int,
    first: set[str],
) -> tuple[dict[str, int], dict[str, int]]:
    """The shown e-classes with their depths, in discovery order, and for each shown class with
    children that did not fit, how many (distinct) there are.

    Two breadth-first passes share the budget: the first follows only the e-nodes in `first`
    (the chosen term's, so that the picked program is shown whole when it fits), the second
    every e-node; a class keeps the depth at which it was first reached."""
    shown = {cid: 0 for cid in root_ids[:max_classes]}
    for follow_all in (False, True):
        queue = list(shown)
        for cid in queue:  # the queue grows while it is read
            for node in graph.classes[cid]:
                if not (follow_all or node.key in first):
                    continue
                for child in node.children:
                    if len(shown) == max_classes:
                        break
                    if child not in shown and values.text(child) is None:
                        shown[child] = shown[cid] + 1
                        queue.append(child)
    hidden = {}
    for cid in shown:
        children = {
            child
            for node in graph.classes[cid]
            for child in node.children
            if child not in shown and values.text(child) is None
        }
        if children:
            hidden[cid] = len(children)
    return shown, hidden


def _chosen_nodes(graph: SerializedGraph, root_ids: list[str], terms: list[Term]) -> set[str]:
    """Keys of the e-nodes that spell `terms`, each matched under the first root holding it: in
    an e-class, a node of the term's op whose children (recursively) match its arguments."""
    found: dict[tuple[str, Arg], tuple[str, tuple[str, ...]] | None] = {}  # -> (key, children)

    def match(cid: str, arg: Arg) -> bool:
        if (cid, arg) not in found:
            found[cid, arg] = next(
                (
                    (node.key, node.children)
                    for node in graph.classes[cid]
                    if _fits(node.op, len(node.children), node.literal, arg)
                    and all(map(match, node.children, _arguments(arg)))
                ),
                None,
            )
        return found[cid, arg] is not None

    keys: set[str] = set()
    for term in terms:
        root = next((cid for cid in root_ids if match(cid, term)), None)
        if root is None:
            raise ValueError(f"chosen term {_shorten(str(term), 80)} is not under any root")
        pending: list[tuple[str, Arg]] = [(root, term)]
        while pending:
            cid, arg = pending.pop()
            node = found[cid, arg]
            assert node is not None  # matched above
            key, children = node
            if isinstance(arg, Term) and key not in keys:
                keys.add(key)
                pending.extend(zip(children, arg.args, strict=True))
    return keys


def _fits(op: str, arity: int, literal: object, arg: Arg) -> bool:
    """Whether an e-node (its op, number of children, literal value) can stand for `arg`."""
    if isinstance(arg, Term):
        return op == arg.op and arity == len(arg.args)
    if isinstance(arg, tuple):
        return op == "Vec" and arity == len(arg)
    return op == "literal" and type(literal) is type(arg) and literal == arg


def _arguments(arg: Arg) -> tuple[Arg, ...]:
    if isinstance(arg, Term):
        return arg.args
    return arg if isinstance(arg, tuple) else ()


# ---------------------------------------------------------------- layout


@dataclass
class _Box:
    """One item of a layer: an e-class box, or the marker standing for a class's `more`
    children that did not fit."""

    key: str  # the e-class id, or MORE + the parent's id
    layer: int
    width: float
    height: float
    more: int = 0
    x: float = 0.0
    y: float = 0.0


@dataclass(frozen=True)
class _Edge:
    source: str  # the e-class holding the node the edge leaves
    node: int  # that node's index in its class
    port: int  # which of the node's e-class arguments, in order, of `ports`
    ports: int
    target: str  # a box key
    chosen: bool


class _Layout:
    """The shown e-classes and markers placed in layers, and the edges between them: where
    everything goes, in pixels. Drawing it is `_svg`'s."""

    def __init__(
        self,
        graph: SerializedGraph,
        values: _Values,
        shown: dict[str, int],
        hidden: dict[str, int],
        highlighted: set[str],
    ) -> None:
        self.graph, self.highlighted = graph, highlighted
        self.names = {cid: name for name, cid in _user_lets(graph).items()}
        self.labels = {
            cid: [_node_label(node.op, node.literal, node.children, values) for node in nodes]
            for cid, nodes in ((cid, graph.classes[cid]) for cid in shown)
        }
        self.rows = {  # the widths of each class's nodes, NODES_PER_ROW to a row
            cid: _rows([_label_width(label) for label in labels])
            for cid, labels in self.labels.items()
        }
        self.boxes = {cid: self._class_box(cid, depth) for cid, depth in shown.items()}
        for cid, count in hidden.items():
            width = text_width(_more_text(count)) + 2 * NODE_PAD
            self.boxes[MORE + cid] = _Box(MORE + cid, shown[cid] + 1, width, NODE_HEIGHT, count)
        self.edges = self._edges(shown, values)
        self._place(self._order())
        self.origins = {cid: self._node_origins(cid) for cid in shown}

    def _class_box(self, cid: str, depth: int) -> _Box:
        rows = self.rows[cid]
        inner = max([_row_width(row) for row in rows] + [text_width(self.header(cid))])
        height = CLASS_HEADER + len(rows) * (NODE_HEIGHT + NODE_GAP) - NODE_GAP + CLASS_PAD
        return _Box(cid, depth, inner + 2 * CLASS_PAD, height)

    def header(self, cid: str) -> str:
        """`kernel · Stmt-34`: the let-name, if any, and the id without module paths."""
        short = re.sub(r"[\w.]*\.", "", cid)
        return f"{self.names[cid]} · {short}" if cid in self.names else short

    def _edges(self, shown: dict[str, int], values: _Values) -> list[_Edge]:
        edges = []
        for cid in shown:
            for index, node in enumerate(self.graph.classes[cid]):
                children = [child for child in node.children if values.text(child) is None]
                chosen = node.key in self.highlighted
                for port, child in enumerate(children):
                    target = child if child in shown else MORE + cid
                    edges.append(_Edge(cid, index, port, len(children), target, chosen))
        return edges

    def _order(self) -> list[list[str]]:
        """Box keys per layer, ordered by alternating barycentre sweeps."""
        layers: list[list[str]] = [[] for _ in range(max(b.layer for b in self.boxes.values()) + 1)]
        for box in self.boxes.values():
            layers[box.layer].append(box.key)
        links = [  # (upper box, position of the node inside it in [0, 1), lower box)
            (edge.source, (edge.node + 0.5) / len(self.labels[edge.source]), edge.target)
            for edge in self.edges
            if self.boxes[edge.target].layer == self.boxes[edge.source].layer + 1
        ]
        for sweep in range(SWEEPS):
            _sweep(layers, links, downwards=sweep % 2 == 0)
        return layers

    def _place(self, layers: list[list[str]]) -> None:
        """Layers top to bottom; a layer wider than MAX_ROW_WIDTH wraps onto several rows; each
        row is packed left to right and centred."""
        rows = [row for layer in layers for row in self._wrap(layer)]
        widths = [_row_width([self.boxes[key].width for key in row], CLASS_GAP) for row in rows]
        self.width = max(widths) + 2 * MARGIN
        y: float = MARGIN + TITLE_HEIGHT
        for row, row_width in zip(rows, widths, strict=True):
            x = (self.width - row_width) / 2
            for key in row:
                box = self.boxes[key]
                box.x, box.y = x, y
                x += box.width + CLASS_GAP
            y += max(self.boxes[key].height for key in row) + LAYER_GAP
        self.height = y - LAYER_GAP + BACK_EDGE_DIP + MARGIN

    def _wrap(self, layer: list[str]) -> list[list[str]]:
        rows: list[list[str]] = [[]]
        width = 0.0
        for key in layer:
            box_width = self.boxes[key].width
            if rows[-1] and width + CLASS_GAP + box_width > MAX_ROW_WIDTH:
                rows.append([])
                width = 0.0
            width += box_width + (CLASS_GAP if rows[-1] else 0.0)
            rows[-1].append(key)
        return rows

    def _node_origins(self, cid: str) -> list[tuple[float, float]]:
        """Top-left corners of the nodes of e-class `cid`, rows centred in its box."""
        box = self.boxes[cid]
        origins = []
        for number, row in enumerate(self.rows[cid]):
            x = box.x + (box.width - _row_width(row)) / 2
            y = box.y + CLASS_HEADER + number * (NODE_HEIGHT + NODE_GAP)
            for width in row:
                origins.append((x, y))
                x += width + NODE_GAP
        return origins


def _sweep(layers: list[list[str]], links: list[tuple[str, float, str]], downwards: bool) -> None:
    """One barycentre pass: each layer (after the first one in the pass's direction) is sorted by
    the mean position of its boxes' neighbours in the layer before it; ties keep their order."""
    depths = range(1, len(layers)) if downwards else range(len(layers) - 2, -1, -1)
    for depth in depths:
        fixed = {key: i for i, key in enumerate(layers[depth - 1 if downwards else depth + 1])}
        pulls: dict[str, list[float]] = {}
        for upper, offset, lower in links:  # links join adjacent layers
            if downwards and upper in fixed:
                pulls.setdefault(lower, []).append(fixed[upper] + offset)
            elif not downwards and lower in fixed:
                pulls.setdefault(upper, []).append(float(fixed[lower]))
        layers[depth] = _by_barycentre(layers[depth], pulls)


def _by_barycentre(layer: list[str], pulls: dict[str, list[float]]) -> list[str]:
    """`layer` sorted by the mean of each key's pulls; a key without pulls keeps its place."""
    keyed = [
        (sum(pulls[key]) / len(pulls[key]) if key in pulls else float(place), place, key)
        for place, key in enumerate(layer)
    ]
    return [key for _, _, key in sorted(keyed)]


# ---------------------------------------------------------------- drawing


def _svg(layout: _Layout, title: str) -> str:
    """The SVG of a placed layout: the title, the edges (chosen ones over the rest), then the
    e-class boxes and markers, each where the layout put it."""
    width = max(layout.width, text_width(title) * (FONT_SIZE + 1) / FONT_SIZE + 2 * MARGIN)
    parts = [
        f'<text class="caption" x="{MARGIN}" y="{MARGIN + FONT_SIZE}" '
        f'font-size="{FONT_SIZE + 1}">{escape(title)}</text>',
    ]
    parts += [_edge_svg(layout, edge) for edge in layout.edges if not edge.chosen]
    parts += [_edge_svg(layout, edge) for edge in layout.edges if edge.chosen]  # over the rest
    parts += [
        _more_svg(box) if box.more else _class_svg(layout, box) for box in layout.boxes.values()
    ]
    return svg_document(width, layout.height, title, parts)


def _class_svg(layout: _Layout, box: _Box) -> str:
    parts = [
        f'<g class="eclass" data-eclass="{escape(box.key)}">',
        f'<rect x="{px(box.x)}" y="{px(box.y)}" width="{px(box.width)}" '
        f'height="{px(box.height)}" rx="8" fill="#f4f6fa" fill-opacity="0.6" '
        f'stroke="#7a869a" stroke-dasharray="5 3"/>',
        svg_text(
            layout.header(box.key),
            box.x + CLASS_PAD,
            box.y + CLASS_HEADER - 4,
            "#5a6478",
            anchor="start",
        ),
    ]
    nodes = layout.graph.classes[box.key]
    for node, label, (x, y) in zip(
        nodes, layout.labels[box.key], layout.origins[box.key], strict=True
    ):
        chosen = node.key in layout.highlighted
        parts.append(
            f'<g class="enode{" chosen" if chosen else ""}" data-enode="{escape(node.key)}">'
            f'<rect x="{px(x)}" y="{px(y)}" width="{px(_label_width(label))}" '
            f'height="{NODE_HEIGHT}" rx="3" fill="{CHOSEN_FILL if chosen else NODE_FILL}" '
            f'stroke="#333333"/>{_label_svg(label, x, y)}</g>'
        )
    return "\n".join([*parts, "</g>"])


def _edge_svg(layout: _Layout, edge: _Edge) -> str:
    """A curve from the node's bottom edge to the top of a box below it, or to the bottom of a
    box above or beside it (dipping under both first)."""
    x, y = layout.origins[edge.source][edge.node]
    width = _label_width(layout.labels[edge.source][edge.node])
    start = (x + width * (edge.port + 1) / (edge.ports + 1), y + NODE_HEIGHT)
    target = layout.boxes[edge.target]
    if target.layer > layout.boxes[edge.source].layer:
        end = (target.x + target.width / 2, target.y)
        bend = (end[1] - start[1]) / 2
        control1, control2 = (start[0], start[1] + bend), (end[0], end[1] - bend)
    else:
        end = (target.x + target.width / 2, target.y + target.height)
        low = max(start[1], end[1]) + BACK_EDGE_DIP
        control1, control2 = (start[0], low), (end[0], low)
    colour = CHOSEN_EDGE_COLOUR if edge.chosen else EDGE_COLOUR
    path = " ".join(_point(p) for p in (control1, control2, end))
    return (
        f'<path class="edge" d="M{_point(start)} C{path}" fill="none" stroke="{colour}" '
        f'stroke-width="{1.8 if edge.chosen else 1}"/>' + _arrowhead(control2, end, colour)
    )


def _more_svg(box: _Box) -> str:
    """The marker standing for a class's children that did not fit."""
    return (
        f'<g class="more" data-parent="{escape(box.key.removeprefix(MORE))}" '
        f'data-hidden="{box.more}"><rect x="{px(box.x)}" y="{px(box.y)}" '
        f'width="{px(box.width)}" height="{NODE_HEIGHT}" rx="8" fill="#eeeeee" '
        f'stroke="#999999" stroke-dasharray="2 2"/>'
        + svg_text(_more_text(box.more), box.x + box.width / 2, box.y + NODE_HEIGHT / 2 + 4)
        + "</g>"
    )


# ---------------------------------------------------------------- text and shapes


def _node_label(
    op: str, literal: object, children: Sequence[str], values: _Values
) -> tuple[str, str]:
    """Two lines: the op without its sort (the class header names the sort) or a literal's
    value, then the node's literal arguments."""
    if op == "literal":
        return _shorten(_literal_text(literal)), ""
    inline = [text for text in map(values.text, children) if text is not None]
    return _shorten(op.rsplit(".", 1)[-1]), _shorten(" ".join(inline))


def _label_svg(label: tuple[str, str], x: float, y: float) -> str:
    centre = x + _label_width(label) / 2
    first, second = label
    if not second:
        return svg_text(first, centre, y + NODE_HEIGHT / 2 + 4)
    return svg_text(first, centre, y + 13) + svg_text(second, centre, y + 26, "#555555")


def _arrowhead(start: tuple[float, float], tip: tuple[float, float], colour: str) -> str:
    """A small triangle at `tip`, pointing away from `start`."""
    dx, dy = tip[0] - start[0], tip[1] - start[1]
    length = math.hypot(dx, dy) or 1.0
    ux, uy = dx / length, dy / length
    bx, by = tip[0] - ARROW * ux, tip[1] - ARROW * uy
    half = ARROW / 2
    corners = (tip, (bx - half * uy, by + half * ux), (bx + half * uy, by - half * ux))
    return f'<polygon points="{" ".join(map(_point, corners))}" fill="{colour}"/>'


def _rows(widths: list[float]) -> list[list[float]]:
    return [widths[i : i + NODES_PER_ROW] for i in range(0, len(widths), NODES_PER_ROW)]


def _row_width(row: list[float], gap: float = NODE_GAP) -> float:
    return sum(row) + gap * (len(row) - 1)


def _label_width(label: tuple[str, str]) -> float:
    return max(text_width(line) for line in label) + 2 * NODE_PAD


def _more_text(count: int) -> str:
    return f"… {count} more e-class{'' if count == 1 else 'es'}"


def _shorten(text: str, limit: int = MAX_LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _point(point: tuple[float, float]) -> str:
    return f"{px(point[0])},{px(point[1])}"
