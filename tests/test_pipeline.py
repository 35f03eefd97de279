"""End to end: random programs compiled to C agree with a float64 numpy reference."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import eqsat
from eqsat import optimizer
from eqsat.core.saturate import Limits
from eqsat.core.terms import TExpr
from eqsat.extract.machine import host
from eqsat.rewrites.rule import Identity
from eqsat.tools.whole_programs import cosine_similarity
from tests.isas import ISAS, VECTOR_ISAS, skip_unless_runs
from tests.machines import PINNED
from tests.programs import Program, assert_close, assert_matches_program, programs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_match_numpy(program: Program) -> None:
    kernel = eqsat.compile(program.outputs[0])
    got = kernel(**program.inputs)
    assert got.shape == program.outputs[0].shape
    assert got.dtype == np.dtype(program.dtype)
    assert_matches_program(got, program)


@pytest.mark.parametrize("isa", ISAS)
@settings(max_examples=8, deadline=None)
@given(programs(max_ops=3))
def test_every_isa_level_matches_numpy(isa: str, program: Program) -> None:
    """Each level is built on any host, and run where the host runs it (it used to fail on a
    host without AVX-512, as if the suite required one)."""
    kernel = eqsat.compile(program.outputs[0], isa=isa)
    skip_unless_runs(isa)
    assert_matches_program(kernel(**program.inputs), program)


@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_mlp_layer_matches_numpy_and_is_fused(isa: str) -> None:
    """On PINNED (at either vector level) the fused nest is predicted faster than the best
    unfused one; on a real host, whether the epilogue fuses depends on its calibration. The
    nest is checked before the kernel runs, so a host without `isa` checks it too."""
    rng = np.random.default_rng(1)
    x, W, b = eqsat.tensor("x", (37, 70)), eqsat.tensor("W", (70, 45)), eqsat.tensor("b", (45,))
    kernel = eqsat.compile(eqsat.relu(x @ W + b), machine=PINNED, isa=isa)
    assert kernel.input_names == ("x", "W", "b")
    nest = kernel.explain().split("loop nest:")[1]
    # the epilogue runs inside the matmul's row loop: one outermost loop
    loops = [line for line in nest.splitlines() if line.lstrip().startswith("for ")]
    outermost = min(len(line) - len(line.lstrip()) for line in loops)
    assert sum(len(line) - len(line.lstrip()) == outermost for line in loops) == 1, nest
    xa, Wa, ba = (rng.standard_normal(s).astype(np.float32) for s in [(37, 70), (70, 45), (45,)])
    assert_close(kernel(xa, Wa, ba), np.maximum(xa.astype(np.float64) @ Wa + ba, 0), "float32")


def test_several_outputs_return_a_tuple() -> None:
    x = eqsat.tensor("x", (4, 6), "float64")
    kernel = eqsat.compile([eqsat.exp(x), x.sum(axis=1)])
    xa = np.linspace(-1, 1, 24).reshape(4, 6)
    first, second = kernel(x=xa)
    np.testing.assert_allclose(first, np.exp(xa), rtol=1e-12)
    np.testing.assert_allclose(second, xa.sum(axis=1), rtol=1e-12)
    single = eqsat.compile([x * 2.0])(xa)
    assert isinstance(single, tuple) and len(single) == 1


def test_scalar_output_and_input() -> None:
    x = eqsat.tensor("x", (5, 3))
    s = eqsat.tensor("s", ())
    kernel = eqsat.compile((x * s).sum())
    xa = np.arange(15, dtype=np.float32).reshape(5, 3)
    got = kernel(x=xa, s=np.array(2.0, dtype=np.float32))
    assert got.shape == ()
    assert float(got) == pytest.approx(2 * xa.sum())


def test_compile_refuses_non_tensors_and_one_name_with_two_shapes() -> None:
    with pytest.raises(TypeError, match="Tensor"):
        eqsat.compile(3.0)  # type: ignore[arg-type]
    a, b = eqsat.tensor("x", (2, 3)), eqsat.tensor("x", (3, 2))
    with pytest.raises(eqsat.ShapeError, match="'x'.*\\(2, 3\\).*\\(3, 2\\)"):
        eqsat.compile(a.sum() + b.sum())


def test_compile_error_names_command_stderr_and_kept_file(monkeypatch) -> None:
    import eqsat.api

    monkeypatch.setattr(eqsat.api, "emit", lambda *args, **kwargs: "this is not C;\n")
    with pytest.raises(eqsat.CompileError) as caught:
        eqsat.compile(eqsat.tensor("x", (3,)) * 2.0, cache=False)
    error = caught.value
    assert "gcc" in error.command[0]
    assert "error" in error.stderr
    with open(error.c_path) as kept:
        assert kept.read() == "this is not C;\n"


def test_signature_is_the_written_one_after_algebra() -> None:
    """Algebra may cancel an input (a - a + b) or swap operands ((a.T @ b.T).T = b @ a): the
    kernel still takes the inputs as written, in that order, with their dtype."""
    a, b = eqsat.tensor("a", (3, 3), "float64"), eqsat.tensor("b", (3, 3), "float64")
    av, bv = np.arange(9.0).reshape(3, 3), np.eye(3) * 2
    cancelled = eqsat.compile(a - a + b)
    assert cancelled.input_names == ("a", "b") and cancelled.dtype == "float64"
    np.testing.assert_allclose(cancelled(av, bv), bv)
    swapped = eqsat.compile((a.T @ b.T).T)
    assert swapped.input_names == ("a", "b")
    np.testing.assert_allclose(swapped(av, bv), av @ bv)


@pytest.mark.parametrize("n", [16, 17, 64])
def test_column_sum_times_matrix(n: int) -> None:
    """A reduction over an unrolled axis must not become a register tile: its copies would all
    accumulate into one element (a miscompile found by the algebra tests)."""
    a, b = eqsat.tensor("a", (n, n)), eqsat.tensor("b", (n, n))
    rng = np.random.default_rng(n)
    av, bv = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    got = eqsat.compile(a.sum(axis=0) @ b)(av, bv)
    assert_close(got, av.astype(np.float64).sum(axis=0) @ bv, "float32")  # type: ignore[arg-type]


def test_a_form_lowering_to_loops_scheduled_already_is_not_scheduled_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Cosine similarity's two forms differ in where a transpose stands, which lowering turns
    into the same index map: one loop stage, not two of the same."""
    a, b = eqsat.tensor("a", (64, 32)), eqsat.tensor("b", (48, 32))
    forms_found = []
    algebra = optimizer._optimize_algebra

    def counted(*arguments: Any) -> Any:
        result = algebra(*arguments)
        forms_found.append(len(result[0]))
        return result

    monkeypatch.setattr(optimizer, "_optimize_algebra", counted)
    best = eqsat.optimize(cosine_similarity(a, b, xp=np), progress=False)
    assert forms_found == [2] and len(best.forms) == 1


def test_stage_two_schedules_the_best_algebraic_forms_and_keeps_the_fastest() -> None:
    a, b, c = (eqsat.tensor(n, (32, 32), "float64") for n in "abc")
    best = eqsat.optimize(a @ b + a @ c, assume_finite=True)  # factoring is finite-only
    assert len(best.forms) == 2  # factored and unfactored: estimates within ALGEBRA_SLACK
    assert best.cost == min(cycles for _, cycles in best.forms)
    assert best.expr == "(a @ (b + c))"
    rng = np.random.default_rng(5)
    av, bv, cv = (rng.standard_normal((32, 32)) for _ in range(3))
    got = eqsat.compile(a @ b + a @ c, assume_finite=True)(av, bv, cv)
    np.testing.assert_allclose(got, av @ bv + av @ cv, rtol=1e-9, atol=1e-9)


def test_report_breaks_the_prediction_down() -> None:
    from eqsat.extract.loop_cost import LoopCost

    x, W = eqsat.tensor("x", (64, 128)), eqsat.tensor("W", (128, 32))
    best = eqsat.optimize(x @ W)
    report = best.report()
    assert f"work {2 * 64 * 128 * 32 / 1e9:.3g} Gflop" in report
    assert "bytes fetched into L1" in report and f"{best.cost:,.0f} cycles" in report
    fresh = LoopCost(best.machine, "float32").estimate(best.scheduled)
    assert fresh.cycles == pytest.approx(best.cost)  # the breakdown is of the chosen nest
    assert f"{fresh.first_touch:,.0f} (page faults of temporaries)" in report


def test_the_repr_of_an_optimization_is_one_short_line() -> None:
    """A notebook echoes the result of `optimize`: a summary, not the whole dataclass."""
    x, W = eqsat.tensor("x", (64, 128)), eqsat.tensor("W", (128, 32))
    best = eqsat.optimize([eqsat.softmax(x @ W), x.T])
    shown = repr(best)
    assert shown.startswith("Optimized(x(64, 128), W(128, 32) -> (64, 32), (128, 64), float32: ")
    assert shown.endswith(f"; {best.cost:,.0f} cycles predicted)")
    assert "\n" not in shown and len(shown) < 300


def test_candidates_start_with_the_choice_and_all_compute_the_same() -> None:
    rng = np.random.default_rng(2)
    x, W = eqsat.tensor("x", (16, 24)), eqsat.tensor("W", (24, 8))
    best = eqsat.optimize(eqsat.exp(x @ W))
    candidates = best.candidates(3, sampled=5, seed=1)
    assert candidates[0].program == best.program and candidates[0].predicted == best.cost
    assert len({c.program for c in candidates}) == len(candidates) > 3
    xa, Wa = rng.standard_normal((16, 24)), rng.standard_normal((24, 8))
    want = np.exp(xa @ Wa)
    for candidate in candidates:
        kernel = eqsat.api.build(candidate.program, best)
        assert_close(kernel(xa.astype(np.float32), Wa.astype(np.float32)), want, "float32")


def test_progress_speaks_only_for_long_stages() -> None:
    import io

    from eqsat.core.progress import QUIET_SECONDS, Progress
    from eqsat.core.saturate import SaturationReport

    stream = io.StringIO()
    progress = Progress(stream=stream)
    progress.iteration(SaturationReport("loops", iterations=3, nodes=500, seconds=0.1))
    progress.extracting("loops", 500)
    assert stream.getvalue() == ""
    progress.iteration(SaturationReport("loops", iterations=4, nodes=9000, seconds=QUIET_SECONDS))
    progress.extracting("loops", 10**6)
    assert stream.getvalue().splitlines() == [
        f"eqsat loops: round 4, 9,000 e-nodes, {QUIET_SECONDS:.1f} s",
        "eqsat loops: extracting the best program from 1,000,000 e-nodes",
    ]
    silent = io.StringIO()
    Progress(enabled=False, stream=silent).extracting("loops", 10**6)
    assert silent.getvalue() == ""


def test_optimized_draws_both_e_graphs_with_the_choice_highlighted() -> None:
    from eqsat.view.egraph_view import CHOSEN_FILL

    x, W = eqsat.tensor("x", (16, 32)), eqsat.tensor("W", (32, 8))
    best = eqsat.optimize(eqsat.relu(x @ W))
    algebra = best.draw("algebra")
    assert algebra.shown_classes == algebra.total_classes  # 5 e-classes fit
    assert CHOSEN_FILL in algebra.svg  # the chosen form is filled
    loops = best.draw("loops", max_classes=12)
    assert loops.shown_classes == 12 < loops.total_classes
    with pytest.raises(ValueError, match="unknown stage"):
        best.draw("lowering")


def rewrite_of_x_plus_x(name: str, text: str, rhs: Callable[[TExpr], TExpr]) -> Identity:
    """A user's identity `x + x -> rhs(x)` named `name`."""
    return Identity(name, text, {"x": TExpr}, lambda x: TExpr.binary("add", x, x), rhs)


def test_a_form_that_disagrees_with_the_written_program_is_dropped() -> None:
    """A wrong merge in the stage-1 e-graph (here a user's unsound rule, x + x -> x) costs speed,
    not a wrong answer: the extracted form disagrees with the written program on random inputs,
    so the written program is scheduled instead, and the report says so."""
    x = eqsat.tensor("x", (8,))
    unsound = rewrite_of_x_plus_x("mine-drop-sum", "x + x -> x", lambda x: x)
    optimized = eqsat.optimize(x + x, extra_rules=[unsound], progress=False)
    assert optimized.stages[0].matches["mine-drop-sum"] > 0
    assert optimized.expr == "(x + x)" and optimized.disagreeing_forms >= 1
    assert "disagreed with the written program" in optimized.report()
    kernel = eqsat.compile(x + x, extra_rules=[unsound], progress=False, cache=False)
    values = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(kernel(values), values + values)
    assert eqsat.optimize(x + x, progress=False).disagreeing_forms == 0


def test_extra_rules_reach_stage_one_and_may_not_reuse_a_built_in_name() -> None:
    from eqsat.rewrites.algebra import IDENTITIES

    x = eqsat.tensor("x", (8,))
    double = rewrite_of_x_plus_x(
        "mine-add-self", "x + x -> x * 2", lambda x: TExpr.binary("mul", x, TExpr.const(2.0))
    )
    best = eqsat.optimize(x + x, extra_rules=[double], progress=False)
    assert best.stages[0].matches["mine-add-self"] == 1
    clash = Identity(IDENTITIES[0].name, "x -> x", {"x": TExpr}, lambda x: x, lambda x: x)
    with pytest.raises(ValueError, match="already used by built-in rules"):
        eqsat.optimize(x + x, extra_rules=[clash])


def test_extraction_deadline_is_reported_and_the_kernel_stays_correct() -> None:
    rng = np.random.default_rng(3)
    x, W = eqsat.tensor("x", (16, 32)), eqsat.tensor("W", (32, 24))
    kernel = eqsat.compile(eqsat.exp(x @ W), limits=eqsat.Limits(extraction_seconds=0.0))
    assert all(stage.extraction == "deadline" for stage in kernel.stages)
    assert "extraction stopped at its deadline" in kernel.explain()
    xa, Wa = rng.standard_normal((16, 32)), rng.standard_normal((32, 24))
    got = kernel(xa.astype(np.float32), Wa.astype(np.float32))
    assert_close(got, np.exp(xa @ Wa), "float32")
    unlimited = eqsat.optimize(eqsat.exp(x @ W))
    assert all(stage.extraction == "complete" for stage in unlimited.stages)


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
# prime widths, so no split can cut the reduction loop below four vectors: four whole chains of
# 16 lanes and a tail of 3; and several rounds of chains and a tail
@pytest.mark.parametrize("width", [67, 203])
def test_long_horizontal_reductions_split_into_chains_and_match_numpy(isa: str, width: int) -> None:
    from eqsat.backend_c.emit import HORIZONTAL_CHAINS

    rng = np.random.default_rng(width)
    x = eqsat.tensor("x", (5, width))
    kernel = eqsat.compile([x.sum(axis=1), x.max(axis=1), eqsat.softmax(x)], isa=isa)
    assert f"acc{HORIZONTAL_CHAINS - 1}" in kernel.c_source
    xa = rng.standard_normal((5, width))
    sums, maxima, softmax = kernel(xa.astype(np.float32))
    assert_close(sums, xa.sum(axis=1), "float32")
    assert_close(maxima, xa.max(axis=1), "float32")
    e = np.exp(xa - xa.max(axis=1, keepdims=True))
    assert_close(softmax, e / e.sum(axis=1, keepdims=True), "float32")


@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_matmul_of_unit_dimensions_vectorizes_nothing_it_cannot(isa: str) -> None:
    # a (1, 1, 2) @ (2, 1) product: the vector axis i2 has extent 1 and indexes the target
    v0, v1 = eqsat.tensor("v0", (1, 1, 2)), eqsat.tensor("v1", (2, 1))
    a = np.array([[[0.5, -0.9]]], dtype=np.float32)
    b = np.array([[-1.8], [-1.9]], dtype=np.float32)
    kernel = eqsat.compile(v0 @ v1, isa=isa)
    assert_close(kernel(a, b), a.astype(np.float64) @ b, "float32")


def test_a_small_kernel_searches_a_smaller_loop_e_graph() -> None:
    """Below optimizer.SMALL_KERNEL_SECONDS of work, the loop stage stops at small_kernel_nodes; a
    larger kernel, or small_kernel_nodes=None, keeps the whole budget."""
    budget = Limits(nodes=20_000, small_kernel_nodes=1_000, seconds=60, extraction_seconds=60)
    small = eqsat.softmax(eqsat.tensor("s", (16, 64)), -1)
    large = eqsat.softmax(eqsat.tensor("s", (4096, 4096)), -1)
    reduced = eqsat.optimize(small, machine=PINNED, limits=budget, progress=False)
    assert reduced.small_kernel_nodes == 1_000 and reduced.stages[1].nodes <= 1_000
    assert "loop stage budget: 1,000 e-nodes (a small kernel" in reduced.report()
    whole = eqsat.optimize(
        small, machine=PINNED, limits=replace(budget, small_kernel_nodes=None), progress=False
    )
    assert whole.small_kernel_nodes is None and whole.stages[1].nodes > 1_000
    assert "loop stage budget" not in whole.report()
    assert (
        eqsat.optimize(large, machine=PINNED, limits=budget, progress=False).small_kernel_nodes
        is None
    )


def test_a_small_kernels_nest_is_the_cheapest_its_e_graph_holds() -> None:
    """A small kernel's extraction keeps several candidates per e-class, as a larger one's below
    CANDIDATES_UP_TO_NODES does: relu(x @ w + b) at 9x522 @ 522x158 kept one and chose a nest
    priced 6% above the cheapest of its e-graph (1.8x slower on an AVX-512 host)."""
    x, w, b = eqsat.tensor("x", (9, 522)), eqsat.tensor("w", (522, 158)), eqsat.tensor("b", (158,))
    best = eqsat.optimize(eqsat.relu(x @ w + b), machine=PINNED, progress=False)
    assert best.small_kernel_nodes is not None
    assert best.cost <= min(candidate.predicted for candidate in best.candidates(4))


def test_threads_sets_the_kernels_threads_and_the_cost_models_cores(monkeypatch) -> None:
    x = eqsat.tensor("x", (1024, 1024))
    values = np.random.default_rng(1).standard_normal((1024, 1024)).astype(np.float32)
    e = np.exp(values - values.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    sources = {}
    for threads in (1, 2):
        kernel = eqsat.compile(
            eqsat.softmax(x, -1), machine=PINNED, threads=threads, progress=False, cache=False
        )
        assert_close(kernel(values), want, "float32")
        sources[threads] = kernel.c_source
    assert "omp parallel" not in sources[1]  # one core: nothing to run in parallel
    assert "#pragma omp parallel num_threads(2)" in sources[2]
    with pytest.raises(eqsat.ArgumentError, match="threads must be an int >= 1, got 0"):
        eqsat.compile(x * 2, machine=PINNED, threads=0, progress=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1,1")
    assert host.__wrapped__().cores == 1  # host() is read once per process
