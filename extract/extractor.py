"""Deterministic bottom-up extraction over egglog's e-graph.

egglog's Python `cost_model=` callback is far slower than reading the e-graph once and choosing in
Python (docs/MEASUREMENTS.md). The graph is read from egglog's tables, as its JSON serialization has
it (`_read`); only term constructors are kept: analysis functions that egglog stores in the same
e-classes are skipped. A node's cost is a function of its op and its children's chosen terms and
costs (`NodeCost`); a cost that builds the node's term anyway (`LoopCost`, whose memo is keyed by
terms) may offer `term_cost(term, child_costs)` instead, and then shares the extractor's term.

`SerializedGraph.extract_top` is a worklist over e-classes in the order of their content (each
one's smallest term, `_canonical_order`), not egglog's numbering: each keeps its
`n` cheapest candidates, ties broken by comparing the terms (`_Candidate.order`), not by egglog's
node ids, which follow the order in which a round's rules happened to add nodes: the same e-graph
always gives the same program, however egglog numbered it. An e-class is revisited when a child's
candidates change, and then only the nodes above that child are priced, each only for the
combinations of its children's candidates it has not priced before: a candidate once pushed out of
an e-class's best can never come back, so this chooses exactly what pricing every combination on
every visit did (tests/test_extractor.py holds that definition). What that definition spent time on
and did not need is skipped: e-classes the root does not reach (`_Index`; a large kernel e-graph has
more analysis `Footprint` terms than statements), nodes while a child e-class has no candidate
(`_Worklist.waiting`), and, for a plain `NodeCost`, the terms of candidates that are dropped
(`_Candidate.built`). A deadline stops the refinement early; the result is still a term of the root
e-class, marked incomplete.
"""

from __future__ import annotations

import gc
import hashlib
import heapq
import itertools
import math
import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from operator import attrgetter
from time import monotonic
from typing import Any, NamedTuple, overload

from egglog import EGraph

from eqsat.core.term import post_order
from eqsat.core.terms import CONSTRUCTORS, Arg, Term

NodeCost = Callable[[str, Sequence[Arg], Sequence[float]], float]


class _Node(NamedTuple):
    key: str
    op: str
    children: tuple[str, ...]  # e-class ids
    literal: Any  # parsed value of a primitive node, else None


class _Candidate(NamedTuple):
    """A term of an e-class. Tuples order by cost, then by `order`, which compares the terms
    themselves: the program as written first, then the smaller (so a cycle of equal cost never
    wins), then the ops as strings, then the children's orders in turn; then by `serial`, the order
    in which candidates were made. Two terms of equal cost thus rank the same in every process,
    however egglog numbered their nodes, and a parent's equal-cost combinations rank like the
    children's candidates: of two equal terms of one e-class, every parent prefers the one that
    e-class ranks first, so one sub-program is not extracted in two spellings (which would compute
    it twice)."""

    cost: float
    # 0 if the term is written (`extract_top`) else 1, its size, op and children's orders (a
    # literal: its repr)
    order: tuple[Any, ...]
    serial: int
    term: Arg | _Unbuilt

    def built(self) -> _Candidate:
        """This candidate with its term built (most candidates are priced and dropped: their
        terms are built only when they are kept)."""
        if isinstance(self.term, _Unbuilt):
            return _Candidate(self.cost, self.order, self.serial, Term(*self.term))
        return self


class _Unbuilt(NamedTuple):
    """The op and arguments of a term not built yet (`_Candidate.built`)."""

    op: str
    args: tuple[Arg, ...]


_cost, _serial, _term = attrgetter("cost"), attrgetter("serial"), attrgetter("term")
_orders = attrgetter("order")


@dataclass(frozen=True)
class Extraction(Sequence[tuple[Term, float]]):
    """The terms `extract_top` found, cheapest first, as (term, cost) pairs.

    `complete` is False when the deadline stopped the worklist before it settled: the terms are
    the best found by then (the first may come from the fallback of `extract_top`)."""

    ranked: tuple[tuple[Term, float], ...]
    complete: bool

    @overload
    def __getitem__(self, index: int) -> tuple[Term, float]: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[tuple[Term, float]]: ...

    def __getitem__(self, index: int | slice) -> Any:
        return self.ranked[index]

    def __len__(self) -> int:
        return len(self.ranked)

    def __iter__(self) -> Iterator[tuple[Term, float]]:
        return iter(self.ranked)


class SerializedGraph:
    """The constructor nodes of an e-graph, grouped by e-class, and its let names.

    `classes` maps e-class ids to their nodes, both in the order of egglog's serialization (see
    `_read`); extraction works on the same graph numbered densely (e-class i, node v)."""

    def __init__(self, egraph: EGraph) -> None:
        with _collector_paused():
            self.classes, self.lets = _read(egraph)

    @cached_property
    def size(self) -> int:
        """Constructor nodes in the graph (`classes` is never changed after reading)."""
        return sum(len(nodes) for nodes in self.classes.values())

    def root(self, let_name: str) -> str:
        return self.lets[let_name]

    def extract(
        self, root: str, node_cost: NodeCost, written: Iterable[Term] = ()
    ) -> tuple[Term, float]:
        """Cheapest term of e-class `root` under `node_cost` (must grow with child costs); ties
        as in `extract_top`."""
        return self.extract_top(root, node_cost, 1, written=written)[0]

    def extract_top(
        self,
        root: str,
        node_cost: NodeCost,
        n: int,
        deadline: float | None = None,
        written: Iterable[Term] = (),
    ) -> Extraction:
        """Up to `n` distinct cheapest terms of e-class `root`, cheapest first.

        Every e-class keeps its `n` best candidates and a node is priced for every combination
        of its children's candidates, so a child that is not the cheapest on its own but makes
        its parent cheaper (a cost that is not a sum, like a roofline) is still found. For such
        a cost the first of `n` is usually, not always, at most the cheapest with n = 1: e-classes
        keep the first `n` of equal-cost candidates, and equal children can price a parent
        differently.

        Of candidates of equal cost, one made of the terms `written` and their subterms (the
        program as the user or the lowering wrote it) ranks first (`_Candidate.order`).

        It requires: `root` is an e-class of this graph with a finite term. `deadline`, a
        `time.monotonic()` value, stops the worklist once passed (checked before each e-class
        is visited, so one e-class's pricing may overrun it): the result then holds the root's
        candidates found so far, or, if there are none yet, one term completed from the best
        candidates of the e-classes below it (`_Worklist.completed`), and `complete` is False.
        """
        with _collector_paused():
            index = self._index(root)
            run = _Worklist(index, node_cost, n, _WrittenKeys(written))
            complete = run.settle(deadline)
            position = index.position[root]
            ranked = run.best[position]
            if not ranked:
                if complete:
                    raise ValueError(f"e-class {root} has no finite term")
                ranked = [run.completed(position)]
            del run  # before the collector is back: it would walk the worklist's state
        return Extraction(tuple((c.term, c.cost) for c in ranked), complete)  # type: ignore[misc]

    def extract_random(self, root: str, rng: random.Random) -> Term:
        """Some term of e-class `root`, chosen by random node weights (for soundness tests)."""
        weights: dict[tuple[str, tuple[Arg, ...]], float] = {}

        def cost(op: str, children: Sequence[Arg], child_costs: Sequence[float]) -> float:
            # Terms hash once and compare by identity first: no printing of shared sub-terms.
            weight = weights.setdefault((op, tuple(children)), rng.uniform(1.0, 2.0))
            return weight + sum(child_costs)

        return self.extract(root, cost)[0]

    def _index(self, root: str) -> _Index:
        """The index of the e-classes below `root` (built once per root)."""
        index = self._indexes.get(root)
        if index is None:
            index = self._indexes[root] = _Index(self.classes, root)
        return index

    @cached_property
    def _indexes(self) -> dict[str, _Index]:
        return {}


class _Index:
    """The part of `SerializedGraph.classes` below e-class `root`, numbered densely in an order
    of their content (`_canonical_order`): e-class i is the i-th of those e-classes, node v the
    v-th node met walking their nodes in that order (so a class's nodes have increasing
    numbers).

    Only what the root's terms can use is priced. Leaving out the rest changes nothing for the
    root: an e-class outside never is a child of one inside.

    With a cost that is not a sum, the worklist's result depends on the order it visits
    e-classes in. egglog numbers the e-classes of one e-graph differently from process to
    process, and in that order one loop part's extraction gave one of two nests in different
    processes (docs/MEASUREMENTS.md); in the content's order, one e-graph gives one result."""

    def __init__(self, classes: dict[str, list[_Node]], root: str) -> None:
        below = {root}
        stack = [root]
        while stack:
            for node in classes[stack.pop()]:
                for eclass in node.children:
                    if eclass not in below:
                        below.add(eclass)
                        stack.append(eclass)
        ids, class_nodes = _canonical_order({cid: classes[cid] for cid in classes if cid in below})
        self.ids = ids
        self.position = {cid: i for i, cid in enumerate(ids)}
        self.nodes = [node for cid in ids for node in class_nodes[cid]]
        self.node_class = [i for i, cid in enumerate(ids) for _ in class_nodes[cid]]
        self.class_nodes: list[range] = []
        for cid in ids:
            start = self.class_nodes[-1].stop if self.class_nodes else 0
            self.class_nodes.append(range(start, start + len(class_nodes[cid])))
        self.children = [tuple(map(self.position.__getitem__, n.children)) for n in self.nodes]
        # the nodes with e-class i among their children, in order, and how many distinct child
        # e-classes each node has
        self.parent_nodes: list[list[int]] = [[] for _ in ids]
        self.child_classes: list[int] = []
        for v, kids in enumerate(self.children):
            distinct = dict.fromkeys(kids)
            self.child_classes.append(len(distinct))
            for child in distinct:
                self.parent_nodes[child].append(v)
        # The e-classes to revisit when a child changes, in the e-classes' order.
        self.parent_classes: list[list[int]] = [[] for _ in ids]
        for owner in range(len(ids)):
            for child in {k for v in self.class_nodes[owner] for k in self.children[v]}:
                self.parent_classes[child].append(owner)


def _canonical_order(classes: dict[str, list[_Node]]) -> tuple[list[str], dict[str, list[_Node]]]:
    """The e-classes of `classes` (closed under children) in an order of their content, and
    each one's nodes in such an order, whatever egglog's ids: by the smallest term of each
    (fewest nodes, then a sha1 digest of its ops, literals and children's digests), found
    smallest first (each node is keyed once, when its last child class gets its term; a node's
    term is larger than its children's, so the first key taken for a class is its least). A
    class or node without a finite term comes last, in egglog's order."""
    keys: dict[str, tuple[int, str]] = {}  # e-class -> (size, digest) of its smallest term
    node_keys: dict[tuple[str, int], tuple[int, str]] = {}
    waiting: dict[tuple[str, int], int] = {}
    parents: dict[str, list[tuple[str, int]]] = {cid: [] for cid in classes}
    heap: list[tuple[int, str, str]] = []

    def keyed(cid: str, position: int) -> None:
        node = classes[cid][position]
        text = f"{node.op}|{node.literal!r}|" + ",".join(keys[k][1] for k in node.children)
        key = (1 + sum(keys[k][0] for k in node.children), hashlib.sha1(text.encode()).hexdigest())
        node_keys[cid, position] = key
        heapq.heappush(heap, (*key, cid))

    for cid, nodes in classes.items():
        for position, node in enumerate(nodes):
            distinct = set(node.children)
            waiting[cid, position] = len(distinct)
            for child in distinct:
                parents[child].append((cid, position))
            if not distinct:
                keyed(cid, position)
    while heap:
        size, digest, cid = heapq.heappop(heap)
        if cid in keys:
            continue
        keys[cid] = (size, digest)
        for ref in parents[cid]:
            waiting[ref] -= 1
            if waiting[ref] == 0:
                keyed(*ref)
    last = (math.inf, "")
    ids = sorted(classes, key=lambda cid: keys.get(cid, last))  # (stable: egglog's order last)
    ordered = {
        cid: [
            node
            for _, node in sorted(
                enumerate(classes[cid]), key=lambda pair: node_keys.get((cid, pair[0]), last)
            )
        ]
        for cid in ids
    }
    return ids, ordered


NOT_WRITTEN = object()  # the key of a term that is not among the written ones


@dataclass(frozen=True)
class _WrittenNumber:
    """A written subterm's number in `_WrittenKeys`, as an argument of a written term's key."""

    number: int


class _WrittenKeys:
    """The terms `extract_top` is given as written, and their subterms, each keyed by its op and
    arguments with each Term argument replaced by its number here (a tuple argument by the keys of
    its items): a candidate built of written children is then found by its op and its children's
    keys, without comparing it with a written term node by node, which walks every path of a DAG
    (a model's layer reads its input several times: exponentially many in its depth)."""

    def __init__(self, written: Iterable[Term]) -> None:
        self.numbers: dict[tuple[Any, ...], int] = {}
        self.tuples: set[tuple[Any, ...]] = set()
        of_term: dict[Term, _WrittenNumber] = {}

        def arg_key(arg: Arg) -> Any:
            if isinstance(arg, Term):
                return of_term[arg]
            if isinstance(arg, tuple):
                self.tuples.add(items := tuple(map(arg_key, arg)))
                return items
            return arg

        for term in post_order(written):
            key = (term.op, *map(arg_key, term.args))
            of_term[term] = _WrittenNumber(self.numbers.setdefault(key, len(self.numbers)))

    def key(self, op: str, children: Sequence[Any]) -> Any:
        """The key of a term of `op` whose arguments have the keys `children` ("Vec": a tuple of
        them), or NOT_WRITTEN if it is not a written term."""
        if any(child is NOT_WRITTEN for child in children):
            return NOT_WRITTEN
        if op == "Vec":
            items = tuple(children)
            return items if items in self.tuples else NOT_WRITTEN
        number = self.numbers.get((op, *children))
        return NOT_WRITTEN if number is None else _WrittenNumber(number)


class _Worklist:
    """One extraction's state: the best candidates per e-class so far (None: not visited yet;
    [] after a visit that found none)."""

    def __init__(self, index: _Index, node_cost: NodeCost, n: int, written: _WrittenKeys) -> None:
        self.index = index
        self.nodes, self.children = index.nodes, index.children
        self.node_cost = node_cost
        # `node_cost.term_cost`, if it has one (module doc)
        self.term_cost: Callable[[Term, Sequence[float]], float] | None = getattr(
            node_cost, "term_cost", None
        )
        self.n = n
        self.best: list[list[_Candidate] | None] = [None] * len(index.class_nodes)
        self.serial = 0  # candidates made so far
        self.written = written
        self.orders: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # `order`'s
        # by the id of an order: its term's key among the written terms (`_WrittenKeys`)
        self.written_keys: dict[int, Any] = {}
        # Per node: `serial` when its e-class last priced it (-1: never). A combination of its
        # children's candidates all made before then was priced then.
        self.priced_at = [-1] * len(index.nodes)
        # Per node: how many of its (distinct) child e-classes have no candidates yet; it has
        # nothing to price until none is left.
        self.waiting = list(index.child_classes)

    def settle(self, deadline: float | None) -> bool:
        """Visit e-classes until no candidate changes (True) or `deadline` passes (False).

        The first visit of an e-class prices all its nodes whose children all have candidates, a
        later one only the nodes marked when the candidates of one of their children changed
        (no other node has anything new to price)."""
        best, n, price_new, waiting = self.best, self.n, self.price_new, self.waiting
        class_nodes, node_class = self.index.class_nodes, self.index.node_class
        parent_classes, parent_nodes = self.index.parent_classes, self.index.parent_nodes
        pending = deque(range(len(class_nodes)))
        queued = [True] * len(pending)
        marked: dict[int, set[int]] = {}
        while pending:
            if deadline is not None and monotonic() >= deadline:
                return False
            eclass = pending.popleft()
            queued[eclass] = False
            old = best[eclass]
            if old is None:
                nodes: Iterable[int] = class_nodes[eclass]
            elif eclass in marked:
                nodes = sorted(marked.pop(eclass))
            else:
                continue  # nothing new to price
            start = self.serial
            made: list[_Candidate] = []
            for v in nodes:
                if not waiting[v]:
                    made += price_new(v, start)
            if old is not None and not made:
                continue
            pool = made if old is None else old + made
            ranked = [min(pool)] if n == 1 and pool else heapq.nsmallest(n, pool)
            if ranked == old:
                continue
            # The first visit sets it, even to no candidates.
            best[eclass] = ranked = list(map(_Candidate.built, ranked))
            for parent in parent_classes[eclass]:
                if not queued[parent]:
                    queued[parent] = True
                    pending.append(parent)
            if not ranked:
                continue  # its parents have nothing to price yet
            for v in parent_nodes[eclass]:
                if not old:
                    waiting[v] -= 1
                owner = node_class[v]
                # (an e-class's first visit prices every node)
                if not waiting[v] and best[owner] is not None:
                    if owner in marked:
                        marked[owner].add(v)
                    else:
                        marked[owner] = {v}
        return True

    def price_new(self, v: int, start: int) -> Sequence[_Candidate]:
        """Node `v` priced with each combination of its children's candidates that it has not
        priced before. It requires: every child e-class of `v` has candidates (`waiting`).
        `start`: `serial` when this visit of its e-class began, before which every candidate of
        its children was made."""
        since = self.priced_at[v]
        self.priced_at[v] = start
        node = self.nodes[v]
        if node.op == "literal":
            return () if since >= 0 else (self.literal(node),)
        # (loops, not comprehensions: this runs for every node priced, and a comprehension is a
        # call of its own in Python 3.11)
        made = []
        options = map(self.best.__getitem__, self.children[v])
        for choice in itertools.product(*options):  # type: ignore[arg-type]
            if since < 0 or max(map(_serial, choice)) >= since:
                made.append(self.price(node, choice))
        return made

    def price(self, node: _Node, choice: Sequence[_Candidate]) -> _Candidate:
        """`node` with the children's candidates `choice`."""
        terms = tuple(map(_term, choice))
        orders = tuple(map(_orders, choice))
        if node.op == "Vec":
            return self.candidate(sum(map(_cost, choice)), self.order("Vec", orders, terms), terms)
        if self.term_cost is not None:
            term = Term(node.op, terms)
            cost = self.term_cost(term, list(map(_cost, choice)))
            return self.candidate(cost, self.order(node.op, orders, term), term)
        cost = self.node_cost(node.op, terms, list(map(_cost, choice)))
        unbuilt = _Unbuilt(node.op, terms)
        return self.candidate(cost, self.order(node.op, orders, unbuilt), unbuilt)

    def literal(self, node: _Node) -> _Candidate:
        """The candidate of a literal's node (it costs nothing)."""
        # (by repr: values of different types do not compare, and NaN is not equal to itself)
        order = self.order("literal", (repr(node.literal),), node.literal)
        return self.candidate(0.0, order, node.literal)

    def order(self, op: str, parts: tuple[Any, ...], term: Arg | _Unbuilt) -> tuple[Any, ...]:
        """The `_Candidate.order` of `term`, of `op`, whose children have the orders `parts` (a
        literal: its repr), made once per term: two equal orders are then one object, so
        comparing two orders skips their shared subterms (Python compares identical items as
        equal without looking inside) instead of walking a DAG's every path. (The ids in the
        keys stay valid: each part lives on in the order made from it, which `orders` keeps.)"""
        key = (op, *map(id, parts))
        order = self.orders.get(key)
        if order is None:
            if op == "literal":
                written_key = term
            else:
                children = [self.written_keys[id(part)] for part in parts]
                written_key = self.written.key(op, children)
            rewritten = 0 if op == "literal" or written_key is not NOT_WRITTEN else 1
            size = 1 + sum(part[1] for part in parts if isinstance(part, tuple))
            order = self.orders[key] = (rewritten, size, op, *parts)
            self.written_keys[id(order)] = written_key
        return order

    def candidate(self, cost: float, order: tuple[Any, ...], term: Arg | _Unbuilt) -> _Candidate:
        self.serial += 1
        return _Candidate(cost, order, self.serial - 1, term)

    def completed(self, root: int) -> _Candidate:
        """A term of e-class `root` when the worklist stopped before reaching it: e-classes with
        candidates give their best; each other e-class below the root takes the first of its
        nodes whose children all have a term, found bottom-up (linear in that part of the
        graph, and only the returned term's nodes are priced)."""
        index, best = self.index, self.best
        missing: dict[int, None] = {}
        stack = [root]
        while stack:
            eclass = stack.pop()
            if eclass not in missing and not best[eclass]:
                missing[eclass] = None
                stack.extend(k for v in index.class_nodes[eclass] for k in index.children[v])
        waiting = {
            v: len({k for k in index.children[v] if k in missing})
            for eclass in missing
            for v in index.class_nodes[eclass]
        }
        ready = deque(v for v, count in waiting.items() if count == 0)
        chosen: dict[int, int] = {}
        while ready:
            v = ready.popleft()
            eclass = index.node_class[v]
            if eclass in chosen:
                continue
            chosen[eclass] = v
            for parent in index.parent_nodes[eclass]:
                if parent in waiting:
                    waiting[parent] -= 1
                    if waiting[parent] == 0:
                        ready.append(parent)
        if root not in chosen:
            raise ValueError(f"e-class {index.ids[root]} has no finite term")
        made: dict[int, _Candidate] = {}

        def term_of(eclass: int) -> _Candidate:
            ranked = best[eclass]
            if ranked:
                return ranked[0]
            if eclass not in made:
                v = chosen[eclass]
                node = index.nodes[v]
                if node.op == "literal":
                    made[eclass] = self.literal(node)
                else:
                    choice = [term_of(k) for k in index.children[v]]
                    made[eclass] = self.price(node, choice).built()
            return made[eclass]

        return term_of(root)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector off for the block. Reading a graph and extracting from it make
    hundreds of thousands to millions of small acyclic objects (nodes, terms, candidates,
    estimates), and each of the collector's passes would walk all of them again: with it on,
    both take markedly longer (docs/MEASUREMENTS.md)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# How to read a value of each literal sort (egglog's base sorts that terms use).
_LITERALS: dict[str, Callable[[Any, Any], Any]] = {
    "i64": lambda tables, value: tables.value_to_i64(value),
    "f64": lambda tables, value: tables.value_to_f64(value),
    "String": lambda tables, value: tables.value_to_string(value),
    "bool": lambda tables, value: tables.value_to_bool(value),
}
_CONTAINERS = ("egglog.builtins.Vec[", "egglog.builtins.Set[")


def _read(egraph: EGraph) -> tuple[dict[str, list[_Node]], dict[str, str]]:
    """The constructor nodes of `egraph` by e-class, and its let names (without "$").

    This is the graph of `egraph._serialize(split_primitive_outputs=False)` without its analysis
    nodes, read from egglog's tables (`EGraph.freeze`) instead of the JSON, which is several times
    slower (docs/MEASUREMENTS.md): a large e-graph has more analysis rows than terms. It reproduces
    the JSON's node ids (`function-{row}-{function}`), e-class ids (`{sort}-{id}`) and order, on
    which the extraction's tie-breaks and worklist order depend: functions in table order, each
    row's literal values (output, then inputs; a container's items before it) added when first met,
    then the row's node. A literal's node has op "literal" and its value in `literal`; a Vec's node
    has op "Vec" and its items as children. A literal's e-class id holds its value (`{sort}-{repr}`,
    a container's `{sort}-({item ids})`), where the JSON has egglog's number for it.
    """
    tables = egraph._egraph
    python_names = egraph._state.op_mapping()
    classes: dict[str, list[_Node]] = {}
    lets: dict[str, str] = {}

    class_ids: dict[str, _Made] = {}

    def class_id(sort: str) -> Callable[[Any], str]:
        """The e-class id of a value of `sort` (an e-class's value is its number)."""
        if sort not in class_ids:
            class_ids[sort] = _Made(lambda value: f"{sort}-{tables.value_to_i64(value)}")
        return class_ids[sort].__getitem__

    def literal_class(sort: str, value: Any) -> str:
        """The e-class of a literal value, adding its node when first met. Its id is made of
        what the value holds (a string's text, a float's repr, a container's items), not of
        `value_to_i64`: in long test processes a unary node came out with the op "mul", and a
        uint32 product's `a + b` as `a * b`, which two strings sharing one literal e-class
        would explain (not confirmed; docs/MEASUREMENTS.md)."""
        if "[" not in sort:
            sort = sort.removeprefix("egglog.builtins.")  # a container's item sort
        if sort.startswith(_CONTAINERS):
            vector = sort.startswith(_CONTAINERS[0])
            item_sort = sort[sort.index("[") + 1 : -1]
            items = (
                tables.value_to_vec(value)
                if vector
                else sorted(tables.value_to_set(value), key=tables.value_to_i64)  # JSON's order
            )
            children = tuple(literal_class(item_sort, item) for item in items)  # noqa: F821
            eclass = f"{sort}-({','.join(children if vector else sorted(children))})"
            node = _Node(f"primitive-{eclass}", "Vec" if vector else "literal", children, None)
        else:
            literal = _LITERALS[sort](tables, value)
            eclass = f"{sort}-{literal!r}"
            node = _Node(f"primitive-{eclass}", "literal", (), literal)
        if eclass not in classes:
            classes[eclass] = [node]
        return eclass

    def reader(sort: str) -> Callable[[Any], str]:
        """The e-class of a value of `sort` in a row."""
        if not _is_literal(sort):
            return class_id(sort)
        return _Made(lambda value: literal_class(sort, value)).__getitem__  # noqa: F821

    for name, table in tables.freeze().functions.items():
        if table.is_let_binding:  # not a node: its value is not serialized
            for row in table.rows:
                lets[name.lstrip("$")] = class_id(table.output_sort)(row.output)
            continue
        output, inputs = reader(table.output_sort), [reader(s) for s in table.input_sorts]
        op = python_names.get(name, name)
        if op in CONSTRUCTORS:
            for number, row in enumerate(table.rows):
                eclass = output(row.output)
                slots = zip(inputs, row.inputs, strict=True)
                children = tuple([read(value) for read, value in slots])
                node = _Node(f"function-{number}-{name}", op, children, None)
                classes.setdefault(eclass, []).append(node)
        else:  # an analysis function: only the literals among its values are serialized
            sorts = [table.output_sort, *table.input_sorts]
            literals = [(i, reader(sort)) for i, sort in enumerate(sorts) if _is_literal(sort)]
            for row in table.rows if literals else ():
                values = (row.output, *row.inputs)
                for i, read in literals:
                    read(values[i])
    # literal_class calls itself: its cell would keep `tables`, the Rust e-graph, in a cycle that
    # the collector may free on another thread (ARCHITECTURE §5e). Emptied, no cycle is left.
    del literal_class
    return classes, lets


class _Made(dict[Any, Any]):
    """`make(key)` for each key, made when first asked for (a dict: asking again is fast; values
    repeat across an e-graph's rows)."""

    def __init__(self, make: Callable[[Any], Any]) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, key: Any) -> Any:
        value = self[key] = self.make(key)
        return value


def _is_literal(sort: str) -> bool:
    return sort in _LITERALS or sort.startswith(_CONTAINERS)
