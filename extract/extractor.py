"""Deterministic bottom-up extraction over egglog's serialized e-graph.

egglog's Python `cost_model=` callback is ~100x slower than reading the e-graph once as JSON and
choosing in Python. A node's cost is a function of its op and its children's chosen terms and
costs (`NodeCost`); the cheapest node per e-class wins, ties broken by the node's id, so the same
e-graph always gives the same program. Only term constructors are chosen: analysis functions
that egglog stores in the same e-classes are skipped.
"""

from __future__ import annotations

import itertools
import json
import random
from collections import deque
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

        parents: dict[str, set[str]] = {}
        for eclass, nodes in self.classes.items():
            for node in nodes:
                for child in node.children:
                    parents.setdefault(child, set()).add(eclass)
        # sorted, so that the extractor visits e-classes in the same order on every run
        self.parents = {child: sorted(users) for child, users in parents.items()}

    @property
    def size(self) -> int:
        return sum(len(nodes) for nodes in self.classes.values())

    def root(self, let_name: str) -> str:
        return self.lets[let_name]

    def extract(self, root: str, node_cost: NodeCost) -> tuple[Term, float]:
        """Cheapest term of e-class `root` under `node_cost` (must grow with child costs)."""
        return self.extract_top(root, node_cost, 1)[0]

    def extract_top(self, root: str, node_cost: NodeCost, n: int) -> list[tuple[Term, float]]:
        """Up to `n` distinct cheapest terms of e-class `root`, cheapest first.

        Every e-class keeps its `n` best candidates and a node is priced for every combination
        of its children's candidates, so a child that is not the cheapest on its own but makes
        its parent cheaper (a cost that is not a sum, like a roofline) is still found."""
        best: dict[str, list[_Candidate]] = {}
        priced: dict[tuple[str, tuple[Arg, ...]], _Candidate] = {}
        pending = deque(self.classes)  # a worklist: an e-class is redone when a child improves
        queued = set(pending)
        while pending:
            eclass = pending.popleft()
            queued.discard(eclass)
            found = {c.term: c for c in best.get(eclass, [])}
            for node in self.classes[eclass]:
                for candidate in self._candidates(node, best, node_cost, priced):
                    found.setdefault(candidate.term, candidate)
            ranked = sorted(found.values(), key=lambda c: (c.cost, c.key))[:n]
            if ranked != best.get(eclass):
                best[eclass] = ranked
                for parent in self.parents.get(eclass, ()):
                    if parent not in queued:
                        queued.add(parent)
                        pending.append(parent)
        if root not in best:
            raise ValueError(f"e-class {root} has no finite term")
        return [(c.term, c.cost) for c in best[root]]  # type: ignore[misc]

    def extract_random(self, root: str, rng: random.Random) -> Term:
        """Some term of e-class `root`, chosen by random node weights (for soundness tests)."""
        weights: dict[tuple[str, tuple[Arg, ...]], float] = {}

        def cost(op: str, children: Sequence[Arg], child_costs: Sequence[float]) -> float:
            # Terms hash once and compare by identity first: no printing of shared sub-terms.
            weight = weights.setdefault((op, tuple(children)), rng.uniform(1.0, 2.0))
            return weight + sum(child_costs)

        return self.extract(root, cost)[0]

    @staticmethod
    def _candidates(
        node: _Node,
        best: dict[str, list[_Candidate]],
        node_cost: NodeCost,
        priced: dict[tuple[str, tuple[Arg, ...]], _Candidate],
    ) -> list[_Candidate]:
        """The node priced with every combination of its children's candidates (each
        combination once: `priced` remembers them across visits of the worklist)."""
        if node.op == "literal":
            return [_Candidate(0.0, node.key, node.literal)]
        if any(child not in best for child in node.children):
            return []
        result = []
        for choice in itertools.product(*(best[child] for child in node.children)):
            terms = tuple(c.term for c in choice)
            memo_key = (node.key, terms)
            if memo_key not in priced:
                costs = [c.cost for c in choice]
                if node.op == "Vec":
                    priced[memo_key] = _Candidate(sum(costs), node.key, terms)
                else:
                    term = Term(node.op, terms)
                    cost = node_cost(node.op, terms, costs)
                    priced[memo_key] = _Candidate(cost, node.key, term)
            result.append(priced[memo_key])
        return result


@dataclass(frozen=True)
class _Candidate:
    cost: float
    key: str  # the e-node's id: ties are broken by it, so extraction is deterministic
    term: Arg


def _parse_literal(op: str, type_name: str) -> Any:
    if type_name.startswith("i64"):
        return int(op)
    if type_name.startswith("f64"):
        return float(op)
    if type_name.startswith("String"):
        return json.loads(op)
    return None  # a Vec: its value is built from its children
