"""The public pipeline, top to bottom: frontend -> algebra -> lowering -> loops -> extract -> C.

kernel = eqsat.compile(eqsat.relu(x @ W + b))   # -> eqsat.Kernel
best = eqsat.optimize(y)                         # the same stages without building C

The stages from algebra to extraction are `eqsat.optimizer`'s; this module builds C from their
result. A compile answered from the compile cache (`eqsat.compile_cache`) needs neither the
optimizer nor egglog, so `compile` imports the optimizer only when the cache does not answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any, TypedDict

from eqsat import compile_cache
from eqsat.autotune import DEFAULT_CANDIDATES, fastest
from eqsat.backend_c.abi import prototype
from eqsat.backend_c.build import build_library
from eqsat.backend_c.calibrate import calibrated_host
from eqsat.backend_c.emit import emit
from eqsat.backend_c.isa import GCC_FLAGS
from eqsat.backend_c.kernel import Kernel, TensorSpec, kernel_entry
from eqsat.core.errors import ArgumentError
from eqsat.core.limits import Limits
from eqsat.core.progress import Progress
from eqsat.core.term import LoopProgram, dag_text
from eqsat.core.workers import prestart
from eqsat.extract.machine import Machine, cpu_model, runs_on_host
from eqsat.frontend import Tensor, output_tensors
from eqsat.rewrites.lowering import lower
from eqsat.validation import Check, check_kernel, prepared_in_background

if TYPE_CHECKING:
    from eqsat.optimizer import Optimized
    from eqsat.rewrites.rule import Identity

SYMBOL = "eqsat_kernel"


class CompileOptions(TypedDict, total=False):
    """The keyword options of `compile`, by name: what `@eqsat.jit(...)` passes on to it."""

    limits: Limits | None
    machine: Machine | None
    isa: str | None
    threads: int | None
    autotune: bool | int
    progress: bool
    extra_rules: Sequence[Identity]
    cache: bool
    assume_finite: bool
    check: bool


def compile(  # noqa: A001 - the public name is part of the stable API (ARCHITECTURE §8)
    outputs: Tensor | Sequence[Tensor],
    *,
    limits: Limits | None = None,
    machine: Machine | None = None,
    isa: str | None = None,
    threads: int | None = None,
    autotune: bool | int = False,
    progress: bool = True,
    extra_rules: Sequence[Identity] = (),
    cache: bool = True,
    assume_finite: bool = False,
    check: bool = True,
) -> Kernel:
    """Optimize `outputs` and build a C kernel for them.

    `isa` forces "avx512", "avx2" or "scalar" (default: the best this machine runs); `threads`
    the number of threads its parallel loops run on, which the cost model assumes too (default:
    the machine's cores, `eqsat.extract.machine.host`). A list of
    outputs gives a kernel that returns a tuple. `autotune=True` (or a number of candidates)
    compiles and times the cost model's best candidates and keeps the fastest, remembered in the
    compile cache (`eqsat.autotune`); `progress`, `extra_rules` and `assume_finite` as in
    `optimize`. A compile that was done before (same program, options, machine and eqsat)
    answers from the compile cache (`eqsat.compile_cache`) without optimizing again;
    `cache=False` neither reads nor writes it, nor the part cache: with it, a compile that
    misses searches only the parts of the program (`eqsat.rewrites.partition`) that no earlier
    compile searched for this machine, limits and eqsat (an edited layer, a model whose layers
    were compiled before). With `check` (the default), the kernel is run on
    seeded inputs and compared with the program as written (`eqsat.validation`) before it is
    returned or cached; one that disagrees, or whose optimized nest fails to build, is replaced by
    the written program's plain loop nest, not cached, and `explain()` says so. Raises
    CompileError if the C compiler fails on the plain nest too."""
    tensors, returns_tuple = output_tensors(outputs)
    limits = limits or Limits()
    machine = machine or calibrated_host(announce=Progress(enabled=progress).say)
    if isa is not None:
        machine = machine.with_isa(isa)
    if threads is not None:
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise ArgumentError(f"compile: threads must be an int >= 1, got {threads!r}")
        machine = replace(machine, cores=threads)
    candidates = DEFAULT_CANDIDATES if autotune is True else int(autotune)  # False: none

    def optimized_kernel() -> tuple[Kernel, bool]:
        """The kernel, and whether it may be cached (it was checked, if asked, and agreed)."""
        prestart("eqsat.optimizer")  # the loop stage's workers load it while this thread does
        from eqsat import optimizer  # loads egglog and the rule sets: only on a cache miss

        best = optimizer.optimize(
            tensors,
            limits=limits,
            machine=machine,
            progress=progress,
            extra_rules=extra_rules,
            assume_finite=assume_finite,
            cache=cache,
        )

        def optimized() -> Kernel:
            if candidates:
                return fastest(
                    best,
                    candidates,
                    lambda program: build(program, best, returns_tuple=returns_tuple),
                    progress=progress,
                )
            return build(best.program, best, returns_tuple=returns_tuple)

        if not check:
            return optimized(), True
        # the check's reference is worked out while gcc runs, not while autotune times kernels
        return _checked(optimized, best, returns_tuple, overlapped=not candidates)

    if not cache:
        return optimized_kernel()[0]
    key = compile_cache.entry_key(
        [
            dag_text([t.expr for t in tensors]),  # the written terms, each subterm once
            [t.dtype for t in tensors],
            returns_tuple,
            asdict(limits),
            asdict(machine),
            cpu_model(),
            _rule_texts(extra_rules),
            candidates,
            assume_finite,
            check,
        ]
    )
    with compile_cache.locked(key) as path:
        record = compile_cache.lookup(path)
        if record is not None:
            return load_kernel(record).with_note(f"(answered from the compile cache: {path})")
        kernel, trusted = optimized_kernel()
        if not trusted:
            return kernel.with_note("(not kept in the compile cache: it is not the optimized one)")
        if any(stage.on_clock for stage in kernel.stages):
            return kernel.with_note(
                "(not kept in the compile cache: a stage stopped on its clock safety net, so "
                "another compile may choose otherwise)"
            )
        compile_cache.store(path, _record(kernel, machine.isa))
        return kernel


def _rule_texts(extra_rules: Sequence[Identity]) -> list[tuple[str, bool]]:
    """Each rule's egglog text and whether it is finite-only (for the compile-cache key), built
    under `EGGLOG_LOCK` (ARCHITECTURE §5e); egglog is imported only if there are rules (they
    were built with it)."""
    if not extra_rules:
        return []
    from eqsat.core.terms import EGGLOG_LOCK

    with EGGLOG_LOCK:
        return [(str(rule.egglog_rule()), rule.finite_only) for rule in extra_rules]


def _checked(
    optimized: Callable[[], Kernel], best: Optimized, returns_tuple: bool, overlapped: bool
) -> tuple[Kernel, bool]:
    """The kernel `optimized` builds, if it builds and agrees with the program as written
    (`check_kernel`); else the written program's plain loop nest (`lower(best.original)`). The
    flag is False for the plain nest: it is not the optimizer's answer, and is not cached.
    `overlapped`: the check's `Reference` is worked out in a thread while `optimized` runs."""
    waiting = None
    if overlapped and runs_on_host(best.machine.isa):
        inputs = [
            (name, shape, dtype)
            for (name, shape), dtype in zip(best.inputs, best.input_dtypes, strict=True)
        ]
        waiting = prepared_in_background(best.original, inputs, best.assume_finite)

    def check(kernel: Kernel) -> Check:
        reference = None if waiting is None else waiting()
        return check_kernel(kernel, best.original, best.assume_finite, reference)

    try:
        kernel = optimized()
    except Exception as failure:  # an optimized nest that cannot be emitted or compiled is a bug
        problem = f"its optimized nest failed to build ({type(failure).__name__}: {failure})"
    else:
        if not runs_on_host(kernel.isa):
            return kernel.with_note(
                f"not checked against the written program: this host does not run {kernel.isa}"
            ), True
        verdict = check(kernel)
        if verdict.ok:
            return kernel.with_note(
                f"checked against the written program on seeded {verdict.detail}: agrees "
                f"({verdict.seconds * 1e3:.0f} ms)"
            ), True
        problem = f"the optimized kernel disagreed with the written program ({verdict.detail})"
    plain = build(lower(best.original), best, returns_tuple=returns_tuple)
    if not runs_on_host(plain.isa):
        agrees = f"not checked: this host does not run {plain.isa}"
    else:
        verdict = check(plain)
        agrees = "agrees" if verdict.ok else f"disagrees too: {verdict.detail}"
    return plain.with_note(
        f"{problem}; this kernel runs the written program's plain loop nest instead ({agrees})"
    ), False


def build(program: LoopProgram, optimized: Optimized, *, returns_tuple: bool = False) -> Kernel:
    """Emit, compile and load `program`, one of `optimized`'s candidates (its `program`, or one
    of `candidates()`), for `optimized.machine`'s ISA; the kernel takes and returns arrays of
    `optimized.inputs` and `optimized.outputs`' shapes. Raises CompileError if gcc fails."""
    isa = optimized.machine.isa
    record = compile_cache.KernelRecord(
        c_source=emit(program, isa, SYMBOL, threads=optimized.machine.cores),
        isa=isa,
        inputs=optimized.inputs,
        outputs=optimized.outputs,
        dtype=program.dtype,
        input_dtypes=optimized.input_dtypes,
        output_dtypes=optimized.output_dtypes,
        returns_tuple=returns_tuple or len(program.outputs) > 1,
        explanation=optimized.report(),
        stages=optimized.stages,
    )
    return load_kernel(record)


def load_kernel(record: compile_cache.KernelRecord) -> Kernel:
    """Compile (or find in the library cache) and load the kernel `record` describes.
    Raises CompileError if gcc fails."""
    cdef = prototype(SYMBOL, len(record.inputs), len(record.outputs), record.dtype, for_cdef=True)
    signature: dict[str, Any] = {
        "symbol": SYMBOL,
        "inputs": [
            TensorSpec(name, shape, dtype)
            for (name, shape), dtype in zip(record.inputs, record.input_dtypes, strict=True)
        ],
        "outputs": [
            TensorSpec(f"out{k}", shape, dtype)
            for k, (shape, dtype) in enumerate(
                zip(record.outputs, record.output_dtypes, strict=True)
            )
        ],
        "dtype": record.dtype,
        "returns_tuple": record.returns_tuple,
    }
    library = build_library(
        record.c_source, cdef + ";", GCC_FLAGS[record.isa], extension=kernel_entry(**signature)
    )
    return Kernel(
        library=library,
        **signature,
        isa=record.isa,
        c_source=record.c_source,
        explanation=record.explanation,
        stages=record.stages,
    )


def _record(kernel: Kernel, isa: str) -> compile_cache.KernelRecord:
    """What rebuilds `kernel`, compiled for `isa`."""
    return compile_cache.KernelRecord(
        c_source=kernel.c_source,
        isa=isa,
        inputs=tuple((spec.name, spec.shape) for spec in kernel.inputs),
        outputs=tuple(spec.shape for spec in kernel.outputs),
        dtype=kernel.dtype,
        input_dtypes=tuple(spec.dtype for spec in kernel.inputs),
        output_dtypes=tuple(spec.dtype for spec in kernel.outputs),
        returns_tuple=kernel.returns_tuple,
        explanation=kernel.explanation,
        stages=kernel.stages,
    )
