"""The optimizer, top to bottom: algebra -> lowering -> loops -> extract -> after extraction.

best = eqsat.optimize(y)   # -> Optimized: the chosen form and loop nest, and why (`report()`)

It builds no C (`eqsat.api.compile` and `eqsat.api.build` do). It loads egglog and every rule
set, so `eqsat.api.compile` imports it only when the compile cache does not answer.
"""

from __future__ import annotations

import math
import random
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from statistics import NormalDist

import numpy as np
from egglog import EGraph

from eqsat import compile_cache
from eqsat.backend_c.calibrate import calibrated_host
from eqsat.core import dtypes, shapes
from eqsat.core.affine import Affine
from eqsat.core.interp import evaluate
from eqsat.core.limits import Limits, SaturationReport
from eqsat.core.measure import agreement
from eqsat.core.pretty import format_loops, format_tensors
from eqsat.core.progress import Progress
from eqsat.core.saturate import saturate
from eqsat.core.term import dag_text
from eqsat.core.terms import EGGLOG_LOCK, Arg, LoopProgram, Term, owned_egraph, to_egglog, to_term
from eqsat.core.workers import parallel_map, prestart
from eqsat.extract.extractor import NodeCost, SerializedGraph
from eqsat.extract.loop_cost import CACHE_USE, Estimate, LoopCost
from eqsat.extract.machine import Machine, cpu_model
from eqsat.extract.tensor_cost import TensorCost, roofline_seconds, work_flops
from eqsat.frontend import Tensor, output_tensors
from eqsat.rewrites.algebra import IDENTITIES as ALGEBRA_IDENTITIES
from eqsat.rewrites.algebra import algebra_rules
from eqsat.rewrites.algebra_facts import algebra_facts
from eqsat.rewrites.contraction import contract_temporaries
from eqsat.rewrites.flatten import flatten, is_flattenable
from eqsat.rewrites.lowering import COPIED_TRANSPOSED_LEFT, collect_inputs, lowerings
from eqsat.rewrites.masked_blocks import skip_masked_blocks, top_masks, with_guards
from eqsat.rewrites.packing import pack_panels
from eqsat.rewrites.partition import joined, parts, with_buffers_renamed, with_canonical_buffers
from eqsat.rewrites.row_blocks import fuse_row_blocks
from eqsat.rewrites.rule import Identity
from eqsat.rewrites.schedule import ROOT, schedule
from eqsat.rewrites.tiling import tile_sizes
from eqsat.view.egraph_view import EGraphPicture, draw_egraph

# A lowering that copies transposed left operands (`lowerings`) wins unless the one reading
# them in place is predicted this much cheaper: the model prices the in-place nests' strided
# operand rows as if their cache misses overlapped the FMAs, and predicted x.T @ x 2000x300 in
# place 9% cheaper where it ran 1.9x slower. On 24 random x.T @ y shapes, a preference of
# 0.90-0.97 gave 1.152-1.155x numpy in geometric mean, none 1.143x (docs/MEASUREMENTS.md).
COPIED_LOWERING_PREFERENCE = 0.90
# Candidates kept per e-class by the stage-2 extractor: the roofline cost is not a sum, so the
# cheapest child alone is not always part of the cheapest parent. Pricing grows with
# candidates^children, so large e-graphs keep one (docs/MEASUREMENTS.md: attention's times).
CANDIDATES_PER_CLASS = 4
# Algebraic forms handed to stage 2 (one output only); a form estimated at more than
# ALGEBRA_SLACK times the cheapest one's flops + bytes is not scheduled.
ALGEBRA_CANDIDATES = 2
ALGEBRA_SLACK = 2.0
# Above this many algebra e-nodes, one form, extracted with one candidate per e-class: the
# stage-1 cost sums over the tree, so one candidate finds the cheapest form; more only find other
# forms, at 64 pricings of a binary node instead of 1. Two stacked transformer blocks (1,045
# e-nodes, their residual sums regrouped) took 3.4 s to extract, 0.5 s with one, the same form.
ALGEBRA_FORMS_UP_TO_NODES = 500
# Above this many e-nodes, one candidate per e-class: on 23 random programs' loop stages of 5k to
# 10k e-nodes, 4 candidates found the same nests as 1, in 3-5x the time (docs/MEASUREMENTS.md).
CANDIDATES_UP_TO_NODES = 5_000
# A small kernel's (SMALL_KERNEL_SECONDS) bound, where compile time weighs more: with one
# candidate, 231x457 @ 457x163, 9x522 @ 522x158 and 547x163 @ 163x176 products (1.8-2.7k
# e-nodes) got nests 1.7-1.8x slower; with 4 up to 5k, small multi-head attentions compiled
# 0.5-1.2 s slower for the same kernels (docs/MEASUREMENTS.md).
SMALL_CANDIDATES_UP_TO_NODES = 3_000


# The stage-1 forms of a program of at most this many flops are run by the interpreter on random
# inputs and dropped where they disagree with the written program (`_agreeing`): a wrong form
# (a user's unsound rule, or an e-graph misread as egglog once misread its sharing lets,
# `eqsat.core.terms.LET_BASE`) then costs speed, not a wrong answer, and the next form is
# scheduled. Of the sweep's shapes (seeds 0 and 1), 58 are this small: checked in at most 42 ms,
# none dropped. Every kernel is checked once more before it is returned (`eqsat.validation`).
CHECKED_UP_TO_FLOPS = 2e6

# A kernel whose roofline time (`roofline_seconds`) is under this is small: its loop stage stops
# at `Limits.small_kernel_nodes`, since a longer search can save microseconds a call and costs
# up to a second and a half of compile time. At 1 ms, two sweep shapes of 0.3-0.9 ms ran
# 1.4-1.9x slower (docs/MEASUREMENTS.md).
SMALL_KERNEL_SECONDS = 1e-4

# Spreads (sigma of the log) of the random factors of perturbed extractions (`candidates`).
PERTURBATION_SPREADS = (0.3, 1.0, 3.0)


@dataclass(frozen=True)
class Candidate:
    """One loop program the kernel e-graph holds, the cost model's predicted cycles, and how it
    was drawn ("best", "sampled" or "perturbed": `Optimized.candidates`)."""

    program: LoopProgram
    predicted: float
    source: str


@dataclass(frozen=True, kw_only=True, repr=False)
class Optimized:
    """What the optimizer chose, and why (`report()`). Constructed by keyword only."""

    original: tuple[Term, ...]  # tensor terms as written
    chosen: tuple[Term, ...]  # after algebra + stage-1 extraction (flattened, if `flattened`)
    canonical: LoopProgram  # the lowering of `chosen`
    program: LoopProgram  # the loop nest extracted from stage 2, after `after_extraction`
    estimate: Estimate  # the cost model's prediction for `program`, and what it is made of
    canonical_cost: float
    stages: tuple[SaturationReport, SaturationReport]
    machine: Machine
    forms: tuple[tuple[str, float], ...]  # each algebraic form scheduled, predicted cycles
    extracted: Term  # the nest extraction chose from the stage-2 e-graph
    scheduled: Term  # `extracted` after row-block fusion: `program.body` before `after_extraction`
    assume_finite: bool = False  # finite-only identities were allowed (`optimize`)
    finite_only_fired: tuple[str, ...] = ()  # ... and these of them fired
    # the user's array shape when the program runs over 1-D buffers (`eqsat.rewrites.flatten`)
    flattened: tuple[int, ...] | None = None
    algebra_graph: SerializedGraph = field(compare=False, repr=False)
    # the loop stage's kernel e-graph of each part of the program (`eqsat.rewrites.partition`),
    # with the nest extraction chose from it, in program order
    loop_parts: tuple[tuple[PartGraph, Term], ...] = field(compare=False, repr=False)
    # what callers pass and get: each input's and output's value dtype (`eqsat.core.dtypes`),
    # converted from and to `program.dtype` at the kernel's boundary
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]
    # the loop stage's node budget when it was `Limits.small_kernel_nodes` (a small kernel)
    small_kernel_nodes: int | None = None
    # stage-1 forms dropped because they disagreed with the written program (`_agreeing`)
    disagreeing_forms: int = 0

    @property
    def cost(self) -> float:
        """Predicted cycles of `program`."""
        return self.estimate.cycles

    @property
    def inputs(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """The kernel's inputs (name, shape) as written: `program.inputs`, but with the user's
        shapes where the program was flattened."""
        return tuple((name, shape) for name, shape, _ in collect_inputs(self.original))

    @property
    def outputs(self) -> tuple[tuple[int, ...], ...]:
        """The kernel's output shapes as written (`program.outputs`, unless flattened)."""
        return tuple(shapes.infer(root) for root in self.original)

    def draw(self, stage: str = "loops", max_classes: int = 40) -> EGraphPicture:
        """A picture of the e-graph of `stage` ("algebra" or "loops": the chosen form's kernel
        e-graph, of its largest part where the program has several), the chosen term
        highlighted (`eqsat.draw_egraph`)."""
        if stage == "algebra":
            graph, chosen = self.algebra_graph, list(self.chosen)
        elif stage == "loops":
            largest = self._largest_part()
            part_graph, extracted = self.loop_parts[largest]
            graph = part_graph.graph
            _, names = self._part_as_searched(largest)
            chosen = [with_buffers_renamed(extracted, {old: new for new, old in names.items()})]
        else:
            raise ValueError(f"unknown stage {stage!r}; expected 'algebra' or 'loops'")
        return draw_egraph(graph, max_classes=max_classes, chosen=chosen)

    def candidates(
        self, best: int, *, sampled: int = 0, perturbed: int = 0, seed: int = 0
    ) -> list[Candidate]:
        """Distinct loop programs of the chosen form's kernel e-graph with their predicted
        cycles, each passed through `after_extraction` like `program`, which comes first:
        - up to `best` the cheapest under the cost model (source "best");
        - then random extractions (`extract_random`, "sampled"), which reach the slow corners,
          up to `best + sampled` programs in all;
        - then extractions under the cost times a random log-normal factor per e-node
          ("perturbed"), which land in between, up to `best + sampled + perturbed`.
        Random draws repeat, so each source gets a bounded number of tries and may fall short.
        Where the program has several parts, the candidates vary its largest part, the others
        keeping their chosen nests."""
        varied = self._largest_part()
        graph = self.loop_parts[varied][0].graph
        searched, names = self._part_as_searched(varied)
        root = graph.root(ROOT)
        cost = LoopCost(self.machine, self.program.dtype)
        rng = random.Random(seed)
        found = {self.program: Candidate(self.program, self.cost, "best")}

        def add(source: str, goal: int, part_bodies: Iterable[Term]) -> None:
            for part_body in part_bodies:
                if len(found) >= goal:
                    return
                nests = [nest for _, nest in self.loop_parts]
                nests[varied] = with_buffers_renamed(part_body, names)
                body = joined(self.canonical.body, nests)
                program = after_extraction(self.program, body)
                found.setdefault(program, Candidate(program, cost.estimate(body).cycles, source))

        top = graph.extract_top(root, cost, max(best, CANDIDATES_PER_CLASS), written=[searched])
        add("best", best, (body for body, _ in top))
        draws = (graph.extract_random(root, rng) for _ in range(4 * sampled))
        add("sampled", best + sampled, draws)
        add(
            "perturbed",
            best + sampled + perturbed,
            (graph.extract(root, _perturbed(cost, rng))[0] for _ in range(3 * perturbed)),
        )
        return list(found.values())

    def _part_as_searched(self, position: int) -> tuple[Term, dict[str, str]]:
        """Part `position` of the program as its e-graph holds it (its buffers renamed,
        `with_canonical_buffers`), and the map from those names back to the program's."""
        return with_canonical_buffers(parts(self.canonical.body)[position])

    def _largest_part(self) -> int:
        """The position of the part whose loop e-graph has the most e-nodes."""
        return max(range(len(self.loop_parts)), key=lambda i: self.loop_parts[i][0].size)

    @property
    def expr(self) -> str:
        return format_tensors(self.chosen)

    def __repr__(self) -> str:
        """One line: the signature, the chosen expression and the prediction (`report()` has
        the rest)."""
        inputs = ", ".join(f"{name}{shape}" for name, shape in self.inputs)
        outputs = ", ".join(str(shape) for shape in self.outputs)
        chosen = self.expr if len(self.expr) <= 120 else self.expr[:117] + "..."
        return (
            f"Optimized({inputs} -> {outputs}, {self.program.dtype}: {chosen}; "
            f"{self.cost:,.0f} cycles predicted)"
        )

    def _conversions(self) -> list[str]:
        """A line naming the inputs and outputs converted to or from the compute dtype."""
        compute = self.program.dtype
        names = [name for name, _ in self.inputs] + [f"out{k}" for k in range(len(self.outputs))]
        converted = [
            f"{name} {dtype}"
            for name, dtype in zip(names, self.input_dtypes + self.output_dtypes, strict=True)
            if dtype != compute
        ]
        if not converted:
            return []
        return [f"converted at the call from and to {compute}: {', '.join(converted)}"]

    def report(self) -> str:
        inputs = ", ".join(f"{name} {shape}" for name, shape in self.inputs)
        lines = [
            f"inputs: {inputs}  ({self.program.dtype}, isa {self.machine.isa}, "
            f"{self.machine.cores} cores)",
            *self._flattening(),
            *self._conversions(),
            "written: " + format_tensors(self.original),
            "chosen:  " + self.expr,
            self._numerics(),
            *(stage.summary() for stage in self.stages),
            *(
                [
                    f"  {self.disagreeing_forms} extracted form(s) disagreed with the written "
                    "program on random inputs and were dropped (a wrong merge in the e-graph)"
                ]
                if self.disagreeing_forms
                else []
            ),
            *self._parts_line(),
            *(
                [
                    f"  loop stage budget: {self.small_kernel_nodes:,} e-nodes (a small kernel: "
                    f"its roofline time is under {SMALL_KERNEL_SECONDS * 1e3:g} ms)"
                ]
                if self.small_kernel_nodes is not None
                else []
            ),
            *(
                f"  form scheduled: {form}  -> {cycles:,.0f} cycles"
                for form, cycles in self.forms
                if len(self.forms) > 1
            ),
            *self._prediction(),
            "loop nest:",
            format_loops(self.program.body, 1),
        ]
        return "\n".join(lines)

    def _parts_line(self) -> list[str]:
        """How the loop stage searched a program of several parts (`eqsat.rewrites.partition`),
        and which parts it answered from the part cache."""
        graphs = list({id(graph): graph for graph, _ in self.loop_parts}.values())
        lines = []
        if len(self.loop_parts) > 1:
            identical = len(self.loop_parts) - len(graphs)
            lines.append(
                f"  loop stage: {len(self.loop_parts)} parts (rewrites/partition.py), each "
                "searched in its own e-graph with the whole budget"
                + (
                    f", {identical} of them identical to another but for the names of their "
                    "buffers and searched once with it"
                    if identical
                    else ""
                )
                + "; e-nodes and seconds are the sums of the searches"
            )
        cached = sum(graph.from_cache for graph in graphs)
        if cached:
            lines.append(
                f"  loop stage: {cached} of {len(graphs)} searches answered from the part cache "
                "(eqsat/compile_cache.py: searched by an earlier compile for this machine, limits "
                "and eqsat; its e-nodes and seconds are that search's)"
            )
        return lines

    def _flattening(self) -> list[str]:
        """Whether the program runs over 1-D buffers (`eqsat.rewrites.flatten`)."""
        if self.flattened is None:
            return []
        return [
            f"flattened: elementwise over whole {self.flattened} arrays, compiled as one loop "
            f"of {math.prod(self.flattened)}"
        ]

    def _numerics(self) -> str:
        """Whether identities exact only for finite inputs were allowed (ARCHITECTURE §4)."""
        if not self.assume_finite:
            return "numerics: NaN, ±inf and -0.0 as numpy (finite-only identities off)"
        fired = ", ".join(self.finite_only_fired) or "none"
        return (
            "numerics: assume_finite=True: identities exact only for finite inputs allowed "
            f"(fired: {fired}); NaN or ±inf inputs may give other results than numpy"
        )

    def _prediction(self) -> list[str]:
        """The predicted time, and what it is made of."""
        clock = self.machine.clock_hz()
        estimate = self.estimate
        fetched = ", ".join(
            f"{level} {_bytes(amount)}"
            for level, amount in zip(("L1", "L2", "L3"), estimate.traffic, strict=True)
        )
        gflop = work_flops(self.chosen) / 1e9
        lines = [
            f"predicted: {self.cost:,.0f} cycles = {self.cost / clock * 1e3:.3g} ms at "
            f"{clock / 1e9:.2f} GHz (canonical nest: {self.canonical_cost:,.0f} cycles)",
            f"  work {gflop:.3g} Gflop; compute {estimate.compute:,.0f} cycles "
            f"a core; bytes fetched into {fetched}; overheads {estimate.overhead:,.0f} cycles "
            f"(parallel starts) + {estimate.first_touch:,.0f} (page faults of temporaries)",
        ]
        if self.scheduled != self.extracted:
            extracted = LoopCost(self.machine, self.program.dtype).estimate(self.extracted)
            lines.append(
                "  row blocks fused after extraction (rewrites/row_blocks.py): the nest "
                f"extracted from the e-graph was predicted at {extracted.cycles:,.0f} cycles"
            )
        return lines


def after_extraction(program: LoopProgram, body: Term) -> LoopProgram:
    """`program` running the extracted nest `body` after the passes that follow extraction:
    temporaries contracted into their row loops, reused operand panels packed, then blocks a
    mask discards skipped."""
    packed = pack_panels(program.with_body(contract_temporaries(body)))
    return packed.with_body(skip_masked_blocks(packed.body))


def _perturbed(cost: NodeCost, rng: random.Random) -> NodeCost:
    """`cost` times a log-normal factor of a spread drawn from PERTURBATION_SPREADS. A node's
    factor follows from its content (op and children's terms) and a seed drawn from `rng`, not
    from the order nodes are priced in, which follows the e-graph's numbering (it differs from
    run to run): the same program and `rng` give the same extraction on every compile."""
    spread = rng.choice(PERTURBATION_SPREADS)
    seed = rng.getrandbits(32).to_bytes(4, "little")
    normal = NormalDist(0.0, spread)
    digests: dict[int, tuple[object, int]] = {}  # by id; the object keeps its id from reuse

    def digest(x: object) -> int:
        known = digests.get(id(x))
        if known is not None and known[0] is x:
            return known[1]
        op = getattr(x, "op", None)
        if op is not None:  # a Term, or the extractor's term not built yet
            value = parts_digest((op, *x.args))  # type: ignore[attr-defined]
        elif isinstance(x, tuple):
            value = parts_digest(x)
        else:
            return zlib.crc32(repr(x).encode())
        digests[id(x)] = (x, value)
        return value

    def parts_digest(parts: Iterable[object]) -> int:
        return zlib.crc32(b"".join(digest(part).to_bytes(4, "little") for part in parts))

    def noisy(op: str, children: Sequence[Arg], child_costs: Sequence[float]) -> float:
        node = parts_digest((op, *children)).to_bytes(4, "little")
        uniform = (zlib.crc32(seed + node) + 0.5) / 2**32
        return math.exp(normal.inv_cdf(uniform)) * cost(op, children, child_costs)

    return noisy


def _bytes(amount: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if amount >= size:
            return f"{amount / size:.3g} {unit}"
    return f"{amount:.0f} B"


def _optimize_algebra(
    roots: list[Term],
    limits: Limits,
    progress: Progress,
    extra_rules: Sequence[Identity],
    assume_finite: bool,
) -> tuple[list[list[Term]], int, SaturationReport, SerializedGraph]:
    """The algebraic forms worth scheduling, cheapest first, how many extracted forms were
    dropped for disagreeing with `roots` (`_agreeing`), and the stage's report.

    With one output and an e-graph of at most ALGEBRA_FORMS_UP_TO_NODES e-nodes, up to
    ALGEBRA_CANDIDATES forms of different flop + byte estimates are kept, each within
    ALGEBRA_SLACK of the cheapest (forms of equal estimate, like a + b and b + a, lower to the same
    loops); stage 2 schedules each and keeps the fastest. Several outputs, or a larger e-graph,
    keep only the cheapest form of each."""
    with owned_egraph(EGraph()) as egraph:
        for k, root in enumerate(roots):
            egraph.let(f"root{k}", to_egglog(root))
        report = saturate(
            egraph,
            algebra_rules(extra_rules, assume_finite=assume_finite),
            limits,
            "algebra",
            facts=algebra_facts,
            progress=progress.iteration,
        )
        graph = SerializedGraph(egraph)
    cost = TensorCost()
    start = time.monotonic()
    deadline = start + limits.extraction_seconds
    if len(roots) > 1:
        extractions = [
            graph.extract_top(graph.root(f"root{k}"), cost, 1, deadline, written=roots)
            for k in range(len(roots))
        ]
        report.extracted(all(e.complete for e in extractions), time.monotonic() - start)
        forms = [[extraction[0][0] for extraction in extractions]]
    else:
        candidates = 4 * ALGEBRA_CANDIDATES if graph.size <= ALGEBRA_FORMS_UP_TO_NODES else 1
        ranked = graph.extract_top(graph.root("root0"), cost, candidates, deadline, written=roots)
        report.extracted(ranked.complete, time.monotonic() - start)
        best_cost = ranked[0][1]
        by_estimate: dict[float, Term] = {}
        for term, estimate in ranked:
            if len(by_estimate) < ALGEBRA_CANDIDATES and estimate <= ALGEBRA_SLACK * best_cost:
                by_estimate.setdefault(estimate, term)
        forms = [[term] for term in by_estimate.values()]
    agreeing = _agreeing(forms, roots, assume_finite)
    return agreeing or [roots], len(forms) - len(agreeing), report, graph


def _agreeing(forms: list[list[Term]], roots: list[Term], assume_finite: bool) -> list[list[Term]]:
    """The forms that compute what `roots` compute, when the program has at most
    CHECKED_UP_TO_FLOPS (else all of them): the interpreter runs both on seeded standard-normal
    inputs in float64, and they must agree within ARCHITECTURE §9's tolerance, NaN and ±inf at the
    same places; under `assume_finite`, only where the written program's values are finite."""
    if work_flops(roots) > CHECKED_UP_TO_FLOPS:
        return forms
    rng = np.random.default_rng(0)
    inputs = {name: rng.standard_normal(shape) for name, shape, _ in collect_inputs(roots)}
    with np.errstate(all="ignore"):
        wanted = [np.asarray(evaluate(root, inputs), dtype=np.float64) for root in roots]

        def agrees(form: list[Term]) -> bool:
            for term, want in zip(form, wanted, strict=True):
                got = np.asarray(evaluate(term, inputs), dtype=np.float64)
                if got.shape != want.shape:
                    return False
                finite = np.isfinite(want)
                specials_agree = assume_finite or (
                    np.array_equal(finite, np.isfinite(got))
                    and np.array_equal(want[~finite], got[~finite], equal_nan=True)
                )
                if not specials_agree or not agreement(got[finite], want[finite], "float64").ok:
                    return False
            return True

        return [form for form in forms if agrees(form)]


@dataclass(frozen=True, kw_only=True)
class _Scheduled:
    """One algebraic form through stage 2."""

    form: list[Term]
    canonical: LoopProgram
    lowering_note: str  # how `canonical` differs from the form's canonical lowering ("": not)
    small_kernel_nodes: int | None  # the loop stage's budget, when reduced for a small kernel
    extracted: Term  # the nest extraction chose
    body: Term  # `extracted` after row-block fusion, before `after_extraction`
    estimate: Estimate  # of `body`
    canonical_cost: float
    report: SaturationReport
    parts: tuple[tuple[PartGraph, Term], ...]  # each part's e-graph and chosen nest

    @property
    def described(self) -> str:
        """The form as the report lists it, with its lowering's note."""
        form = format_tensors(self.form)
        return f"{form} ({self.lowering_note})" if self.lowering_note else form


def _ranked_cycles(scheduled: _Scheduled) -> float:
    """The predicted cycles the scheduled forms and lowerings compete on: a copying lowering's
    times COPIED_LOWERING_PREFERENCE."""
    copied = scheduled.lowering_note == COPIED_TRANSPOSED_LEFT
    preference = COPIED_LOWERING_PREFERENCE if copied else 1.0
    return scheduled.estimate.cycles * preference


def _small_kernel_nodes(
    form: list[Term], machine: Machine, dtype: str, limits: Limits
) -> int | None:
    """The loop stage's node budget for `form` when it is a small kernel (`SMALL_KERNEL_SECONDS`)
    and `limits.small_kernel_nodes` is below `limits.nodes`; else None."""
    small = limits.small_kernel_nodes
    if small is None or small >= limits.nodes:
        return None
    roofline = roofline_seconds(form, machine, 4 if dtype == "float32" else 8)
    return small if roofline < SMALL_KERNEL_SECONDS else None


def _schedule_lowerings(
    form: list[Term],
    lowered: Sequence[tuple[str, LoopProgram]],
    machine: Machine,
    limits: Limits,
    progress: Progress,
    cache: bool,
) -> list[_Scheduled]:
    """`form` through stage 2 once per lowering in `lowered` (`lowerings`' (note, program)
    pairs): the parts (`eqsat.rewrites.partition`) of every lowering scheduled at once, each in
    an e-graph of its own with the whole budget, in worker processes too (what each gets does
    not depend on where it ran: x.T @ y's two lowerings compile side by side on two cores), and
    parts equal but for their buffers' names (`with_canonical_buffers`: stacked layers) once,
    and with `cache` those searched before answered from the part cache (`_scheduled_parts`);
    then each lowering's nests joined and fused by row blocks."""
    dtype = lowered[0][1].dtype
    small = _small_kernel_nodes(form, machine, dtype, limits)
    if small is not None:
        limits = replace(limits, nodes=small)
    tasks: dict[_PartTask, int] = {}  # each distinct part once
    # per lowering: each part's task, and the map back to its buffers' names
    placed: list[list[tuple[int, dict[str, str]]]] = []
    for _, canonical in lowered:
        masks = top_masks(canonical.body)
        placed.append([])
        for piece in parts(canonical.body):
            renamed, names = with_canonical_buffers(piece)
            own_masks = frozenset((new, masks[old]) for new, old in names.items() if old in masks)
            task = _PartTask(renamed, machine, dtype, limits, small is not None, own_masks)
            placed[-1].append((tasks.setdefault(task, len(tasks)), names))
    results = _scheduled_parts(list(tasks), cache, progress)
    scheduled = []
    for (note, canonical), lowering_parts in zip(lowered, placed, strict=True):
        own = [results[task].with_buffers(names) for task, names in lowering_parts]
        scheduled.append(_joined_and_fused(form, note, canonical, small, own, machine))
    return scheduled


def _joined_and_fused(
    form: list[Term],
    lowering_note: str,
    canonical: LoopProgram,
    small: int | None,
    scheduled: Sequence[_Part],
    machine: Machine,
) -> _Scheduled:
    """`form`, lowered to `canonical`, with the nests its parts got (`scheduled`, in order)
    joined and fused by row blocks."""
    cost = LoopCost(machine, canonical.dtype)
    extracted = joined(canonical.body, [part.extracted for part in scheduled])
    canonical_cost = cost.estimate(canonical.body).cycles
    body = fuse_row_blocks(
        extracted,
        lambda option: cost.estimate(option).cycles,
        block_elements=CACHE_USE * machine.l2_bytes / cost.item_bytes,
        # Inside a loop over heads, only where a head's temporaries spill one core's share of
        # L3: the model prices the softmax passes as overlapped with the products, so it
        # predicts 0.1-3% gains either way, and fused blocks pack the keys and values again
        # each. Multi-head attention fused whose heads' scores fit ran 0.92-0.99x as fast (seq
        # 512, 1024); with scores that go to DRAM, 1.12-1.85x faster (seq 2048, 4096;
        # docs/MEASUREMENTS.md).
        iteration_elements=machine.l3_bytes / machine.cores / cost.item_bytes,
    )
    return _Scheduled(
        form=form,
        canonical=canonical,
        lowering_note=lowering_note,
        small_kernel_nodes=small,
        extracted=extracted,
        body=body,
        # priced with the blocks a mask discards skipped (`skip_masked_blocks`): a mirrored
        # symmetric product competes on half its blocks
        estimate=cost.estimate(skip_masked_blocks(body)),
        canonical_cost=canonical_cost,
        # a part searched for several identical ones counts once
        report=_combined(list({id(part.report): part.report for part in scheduled}.values())),
        parts=tuple((part.graph, part.extracted) for part in scheduled),
    )


class PartGraph:
    """The loop stage's e-graph of one part of a program (`eqsat.rewrites.partition`): the
    search's own, or, for a part answered from the part cache (`eqsat.compile_cache`), the same
    search run again the first time `graph` is read (a part whose stage stopped on its clock is
    never cached, so the search gives the e-graph the cached nest was extracted from)."""

    def __init__(
        self,
        size: int,
        graph: SerializedGraph | None = None,
        search: Callable[[], SerializedGraph] | None = None,
    ) -> None:
        """`size`: its e-nodes; `graph`, or else `search`, which builds it."""
        assert graph is not None or search is not None
        self.size = size
        self._graph = graph
        self._search = search

    @property
    def from_cache(self) -> bool:
        """Whether the part was answered from the part cache, not searched by its compile."""
        return self._search is not None

    @property
    def graph(self) -> SerializedGraph:
        with EGGLOG_LOCK:  # one search, whichever thread asks first
            if self._graph is None:
                assert self._search is not None
                self._graph = self._search()
            return self._graph


@dataclass
class _Part:
    """One part of a program through the loop stage."""

    extracted: Term  # the part's nest extraction chose (its own canonical nest if cheaper)
    report: SaturationReport
    graph: PartGraph

    def with_buffers(self, names: Mapping[str, str]) -> _Part:
        """This part with the buffers of its nest renamed by `names` (its e-graph and report,
        shared with every part it stands for, are its own)."""
        return _Part(with_buffers_renamed(self.extracted, names), self.report, self.graph)


@dataclass(frozen=True)
class _PartTask:
    """What the loop stage's search of one part depends on, all of it (`_schedule_part`): a
    part's search gives the same nest wherever and whenever it runs with these, unless its
    clock stops it, so it is the part cache's key too (`part_key`)."""

    piece: Term  # the part, its buffers renamed (`with_canonical_buffers`)
    machine: Machine
    dtype: str
    limits: Limits
    small: bool  # a small kernel's: its tiles and bound on candidates per e-class
    masks: frozenset[tuple[str, Affine]]  # the program's temporaries' masks (`top_masks`)

    def part_key(self) -> str:
        """This part's part-cache key (`compile_cache.entry_key`)."""
        return compile_cache.entry_key(
            [
                "loop-stage part",
                dag_text([self.piece]),
                self.dtype,
                asdict(self.machine),
                cpu_model(),
                asdict(self.limits),
                self.small,
                sorted((name, repr(mask)) for name, mask in self.masks),
            ]
        )


def _scheduled_parts(tasks: Sequence[_PartTask], cache: bool, progress: Progress) -> list[_Part]:
    """Each of `tasks` (at least one, all with the same limits) through the loop stage
    (`_schedule_part`), in worker processes too; with `cache`, a task the part cache holds is
    answered from it, and one searched is stored there unless a clock stopped it."""
    keys = [task.part_key() for task in tasks] if cache else []
    known = [compile_cache.lookup_part(key) for key in keys] if cache else [None] * len(tasks)
    missing = [i for i, record in enumerate(known) if record is None]
    limits = tasks[0].limits  # (one program's parts share them)
    searched = parallel_map(
        _schedule_part,
        [(tasks[i], progress) for i in missing],
        timeout=limits.seconds + limits.extraction_seconds,
    )
    found: dict[int, _Part] = {}
    for i, known_record in enumerate(known):
        if known_record is not None:
            graph = PartGraph(known_record.graph_size, search=partial(_searched_graph, tasks[i]))
            found[i] = _Part(known_record.extracted, known_record.report, graph)
    for i, part in zip(missing, searched, strict=True):
        found[i] = part
        if cache and not part.report.on_clock:
            record = compile_cache.PartRecord(part.extracted, part.report, part.graph.size)
            compile_cache.store_part(keys[i], record)
    return [found[i] for i in range(len(tasks))]


def _searched(
    task: _PartTask, progress: Progress | None = None
) -> tuple[SerializedGraph, SaturationReport]:
    """The kernel e-graph of `task`'s search and its report, without its extraction
    (`_schedule_part`)."""
    tiles = tile_sizes(task.machine, task.dtype, small_kernel=task.small)
    egraph, report = schedule(
        task.piece,
        task.machine,
        task.dtype,
        task.limits,
        tiles,
        progress=progress.iteration if progress else None,
    )
    with owned_egraph(egraph):
        return SerializedGraph(egraph), report


def _searched_graph(task: _PartTask) -> SerializedGraph:
    """The kernel e-graph of `task`'s search (`_searched`), for a part answered from the cache."""
    return _searched(task)[0]


def _schedule_part(task: _PartTask, progress: Progress) -> _Part:
    """The cheapest nest of `task`'s part found in its own kernel e-graph (a small kernel's,
    with its tiles, `tile_sizes`, and its bound on the e-graphs that keep several candidates
    per e-class in extraction), each candidate priced with the guards that skip the blocks of
    the program's temporaries `task.masks` discards (`top_masks`: a mirrored symmetric product
    is then tiled for its triangle). It runs in a worker process as well
    (`eqsat.core.workers`): it depends on its arguments alone."""
    masks = dict(task.masks)
    guarded = partial(with_guards, masks=masks) if masks else None
    cost = LoopCost(task.machine, task.dtype, guarded)
    graph, report = _searched(task, progress)
    progress.extracting(report.stage, graph.size)
    up_to = SMALL_CANDIDATES_UP_TO_NODES if task.small else CANDIDATES_UP_TO_NODES
    keep = CANDIDATES_PER_CLASS if graph.size <= up_to else 1
    start = time.monotonic()
    extraction = graph.extract_top(
        graph.root(ROOT),
        cost,
        keep,
        deadline=start + task.limits.extraction_seconds,
        written=[task.piece],
    )
    report.extracted(extraction.complete, time.monotonic() - start)
    (extracted, predicted), *_ = extraction
    if predicted > cost.estimate(task.piece).cycles:  # a deadline's best-so-far can be worse
        extracted = task.piece
    return _Part(extracted, report, PartGraph(graph.size, graph))


def _combined(reports: Sequence[SaturationReport]) -> SaturationReport:
    """One loop-stage report for the parts' `reports`: e-nodes, seconds and matches added up,
    the most iterations, the first stop that was not saturation, the extraction complete only if
    every part's was. One report is itself."""
    if len(reports) == 1:
        return reports[0]
    stops = [r for r in reports if r.stop_reason != "saturated"]
    combined = SaturationReport(
        "loops",
        stop_reason=stops[0].stop_reason if stops else "saturated",
        stop_predicted=bool(stops) and stops[0].stop_predicted,
        iterations=max(r.iterations for r in reports),
        nodes=sum(r.nodes for r in reports),
        seconds=sum(r.seconds for r in reports),
        matches=sum((r.matches for r in reports), Counter()),
    )
    deadline = any(r.extraction == "deadline" for r in reports)
    combined.extracted(not deadline, sum(r.extraction_seconds for r in reports))
    return combined


def optimize(
    outputs: Tensor | Sequence[Tensor],
    *,
    limits: Limits | None = None,
    machine: Machine | None = None,
    progress: bool = True,
    extra_rules: Sequence[Identity] = (),
    assume_finite: bool = False,
    cache: bool = False,
) -> Optimized:
    """Choose the algebraic form and the loop nest of `outputs` (no C is built).

    `extra_rules` are identities of your own (`eqsat.rewrites.rule.Identity`; check them first with
    `eqsat.rewrites.soundness.check_identity`) that stage 1 runs with the built-in ones.
    `assume_finite=True` promises that no input or intermediate is NaN or ±inf, like a C
    compiler's -ffinite-math-only: identities marked `finite_only` (x - x -> 0, x * 0 -> 0,
    factoring, matrix-chain order, ...) may then fire, and `report()` says so.
    With `progress`, a stage that runs for seconds reports each round on stderr
    (`eqsat.core.progress`). With `cache` (`eqsat.compile`'s default), a part of the program
    (`eqsat.rewrites.partition`) searched before for this machine, limits and eqsat is answered
    from the part cache (`eqsat.compile_cache`) instead of searched again; its e-graph is searched
    again only if `draw` or `candidates` reads it.

    An elementwise program over whole arrays of one shape (`eqsat.rewrites.flatten`) is
    optimized over 1-D arrays: `chosen`, `canonical` and `program` are then flat, `flattened`
    holds the user's shape, and `inputs`, `outputs` and `report()` keep the user's shapes.

    Any thread may call it: one optimization runs at a time in a process (`EGGLOG_LOCK`), and
    its e-graphs are released in the calling thread before it returns (ARCHITECTURE §5e)."""
    with EGGLOG_LOCK:
        return _optimize(outputs, limits, machine, progress, extra_rules, assume_finite, cache)


def _optimize(
    outputs: Tensor | Sequence[Tensor],
    limits: Limits | None,
    machine: Machine | None,
    progress: bool,
    extra_rules: Sequence[Identity],
    assume_finite: bool,
    cache: bool,
) -> Optimized:
    tensors, _ = output_tensors(outputs)
    limits = limits or Limits()
    reporter = Progress(enabled=progress)
    machine = machine or calibrated_host(announce=reporter.say)
    prestart(__name__)  # the loop stage's workers import this module during the algebra stage
    as_written = [to_term(t.expr) for t in tensors]
    assert all(isinstance(t, Term) for t in as_written)
    compute = dtypes.compute_dtype(any(t.needs_float64 for t in tensors))
    original = [dtypes.with_compute_dtype(t, compute) for t in as_written]  # type: ignore[arg-type]
    # what is optimized: the terms as written or, for a flattenable program, their flattening
    terms: list[Term] = original  # type: ignore[assignment]
    flattened = shapes.infer(terms[0]) if is_flattenable(terms) else None
    if flattened is not None:
        terms = flatten(terms)
    forms, disagreeing, algebra_report, algebra_graph = _optimize_algebra(
        terms, limits, reporter, extra_rules, assume_finite
    )
    finite_only = {i.name for i in (*ALGEBRA_IDENTITIES, *extra_rules) if i.finite_only}
    fired = {name for name, count in algebra_report.matches.items() if count}
    scheduled: list[_Scheduled] = []
    for form in forms:
        # the loops of a form scheduled already are skipped (forms differing in transposes)
        lowered = [
            (note, canonical)
            for note, canonical in lowerings(form, terms)
            if all(earlier.canonical != canonical for earlier in scheduled)
        ]
        if not lowered:
            continue
        scheduled += _schedule_lowerings(form, lowered, machine, limits, reporter, cache)
        if any(s.report.stop_reason != "saturated" for s in scheduled[-len(lowered) :]):
            break  # a stage that hit its limits leaves no budget for another form
    best = min(scheduled, key=_ranked_cycles)
    return Optimized(
        original=tuple(original),  # type: ignore[arg-type]
        chosen=tuple(best.form),
        canonical=best.canonical,
        program=after_extraction(best.canonical, best.body),
        estimate=best.estimate,
        canonical_cost=best.canonical_cost,
        stages=(algebra_report, best.report),
        small_kernel_nodes=best.small_kernel_nodes,
        machine=machine,
        forms=tuple((c.described, c.estimate.cycles) for c in scheduled),
        extracted=best.extracted,
        scheduled=best.body,
        assume_finite=assume_finite,
        finite_only_fired=tuple(sorted(finite_only & fired)),
        flattened=flattened,
        disagreeing_forms=disagreeing,
        algebra_graph=algebra_graph,
        loop_parts=best.parts,
        input_dtypes=tuple(
            dtypes.boundary_dtype(dtype, compute)
            for _, _, dtype in collect_inputs(as_written)  # type: ignore[arg-type]
        ),
        output_dtypes=tuple(t.dtype for t in tensors),
    )
