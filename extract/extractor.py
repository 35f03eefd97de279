"""Deterministic bottom-up extraction over egglog's serialized e-graph.

egglog's Python `cost_model=` callback is ~100x slower than reading the e-graph once as JSON and
choosing in Python. A node's cost is a function of its op and its children's chosen terms and
costs (`NodeCost`); the cheapest node per e-class wins, ties broken by the node's id, so the same
e-graph always gives the same program. Only term constructors are chosen: analysis functions
that egglog stores in the same e-classes are skipped.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from egglog import EGraph

from eqsat.terms import CONSTRUCTORS, Arg, Term

NodeCost = Callable[[str, Sequence[Arg], Sequence[float]], float]


@dataclass(frozen=True)
class _Node:
    key: str
    op: str
    children: tuple[str, ...]  # e-class ids
    literal: Any  # parsed value of a primitive node, else None


class SerializedGraph:
    """The constructor nodes of an e-graph, grouped by e-class."""

    def __init__(self, egraph: EGraph) -> None:
        data = json.loads(egraph._serialize(split_primitive_outputs=False).to_json())
        raw = data["nodes"]
        types = {cid: info.get("type", "") for cid, info in data.get("class_data", {}).items()}
        self.lets = {
            info["let"].lstrip("$"): cid
            for cid, info in data.get("class_data", {}).items()
            if "let" in info
        }
        self.classes: dict[str, list[_Node]] = {}
        for key, node in raw.items():
            op, eclass = node["op"], node["eclass"]
            children = tuple(raw[c]["eclass"] for c in node["children"])
            if key.startswith("primitive-"):
                parsed = _parse_literal(op, types.get(eclass, ""))
                entry = _Node(key, "Vec" if op == "Vec" else "literal", children, parsed)
            elif op in CONSTRUCTORS:
                entry = _Node(key, op, children, None)
            else:
                continue  # an analysis function's node
            self.classes.setdefault(eclass, []).append(entry)

    @property
    def size(self) -> int:
        return sum(len(nodes) for nodes in self.classes.values())

    def root(self, let_name: str) -> str:
        return self.lets[let_name]

    def extract(self, root: str, node_cost: NodeCost) -> tuple[Term, float]:
        """Cheapest term of e-class `root` under `node_cost` (must grow with child costs)."""
        best: dict[str, tuple[float, str, Arg]] = {}
        changed = True
        while changed:
            changed = False
            for eclass, nodes in self.classes.items():
                for node in nodes:
                    candidate = self._evaluate(node, best, node_cost)
                    if candidate is None:
                        continue
                    current = best.get(eclass)
                    if current is None or candidate[:2] < current[:2]:
                        best[eclass] = candidate
                        changed = True
        if root not in best:
            raise ValueError(f"e-class {root} has no finite term")
        cost, _, term = best[root]
        assert isinstance(term, Term)
        return term, cost

    def extract_random(self, root: str, rng: random.Random) -> Term:
        """Some term of e-class `root`, chosen by random node weights (for soundness tests)."""
        weights: dict[tuple[str, tuple[Arg, ...]], float] = {}

        def cost(op: str, children: Sequence[Arg], child_costs: Sequence[float]) -> float:
            # Terms hash once and compare by identity first: no printing of shared sub-terms.
            weight = weights.setdefault((op, tuple(children)), rng.uniform(1.0, 2.0))
            return weight + sum(child_costs)

        return self.extract(root, cost)[0]

    @staticmethod
    def _evaluate(
        node: _Node, best: dict[str, tuple[float, str, Arg]], node_cost: NodeCost
    ) -> tuple[float, str, Arg] | None:
        if node.op == "literal":
            return (0.0, node.key, node.literal)
        if any(child not in best for child in node.children):
            return None
        terms = [best[child][2] for child in node.children]
        costs = [best[child][0] for child in node.children]
        if node.op == "Vec":
            return (sum(costs), node.key, tuple(terms))
        return (node_cost(node.op, terms, costs), node.key, Term(node.op, tuple(terms)))


def _parse_literal(op: str, type_name: str) -> Any:
    if type_name.startswith("i64"):
        return int(op)
    if type_name.startswith("f64"):
        return float(op)
    if type_name.startswith("String"):
        return json.loads(op)
    return None  # a Vec: its value is built from its children
