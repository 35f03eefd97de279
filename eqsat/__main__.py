"""`python -m eqsat demo` (compile, check and time an MLP layer and a row softmax),
`python -m eqsat bench [options]` (the benchmark of eqsat/tools/bench.py; `--help` lists the
options) and `python -m eqsat rules` (every rewrite rule with its identity and guard).

numpy is timed with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (this machine's environment sets
them, which halves OpenBLAS's sgemm): the comparison is against the best numpy. `bench --isa L`
measures a host of ISA level L on this one: eqsat is capped at L (EQSAT_MAX_ISA), numpy runs
the OpenBLAS kernel such a host would pick (`OPENBLAS_KERNELS`) and jax.jit's XLA emits no
instruction above L (`XLA_MAX_ISA`), so an AVX2 laptop's ratios against numpy can be read on an
AVX-512 server. Not against jax: its matrix products run YNNPACK or Eigen kernels chosen from
the CPU's flags, which XLA's cap does not reach (the bench's header says so under `--isa`).
OpenBLAS keeps its default thread timeout (idle threads yield for a while after each call,
which makes its back-to-back calls fastest); the timing lets them settle before it times
anything else (`eqsat.tools.workloads.SETTLE_SECONDS`).
"""

from __future__ import annotations

import os
import sys

_OPENBLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
# An ISA level below the host's -> the OpenBLAS core type whose kernels a host of that level
# runs (Haswell: AVX2 and FMA; Nehalem: SSE only). The host's own level runs OpenBLAS's choice.
OPENBLAS_KERNELS = {"avx2": "Haswell", "scalar": "Nehalem"}
# ... and the instruction set XLA may emit for jax.jit there (`--xla_cpu_max_isa`): without it,
# jax's column of `bench --isa avx2` ran AVX-512 code against eqsat's AVX2. Its products still
# do: a 1024-cubed one ran 262-304 GFLOP/s under the AVX2 cap on 2 AVX-512 cores whose AVX2
# peak is 231 (with or without YNNPACK's fusions), so the cap reaches XLA's own code only.
XLA_MAX_ISA = {"avx2": "AVX2", "scalar": "SSE4_2"}


def _isa_option(argv: list[str]) -> str | None:
    """The value of `--isa L` or `--isa=L` in `argv`, if any (the bench checks it)."""
    for position, arg in enumerate(argv):
        if arg == "--isa" and position + 1 < len(argv):
            return argv[position + 1]
        if arg.startswith("--isa="):
            return arg.split("=", 1)[1]
    return None


def numpy_environment(environ: dict[str, str], isa: str | None) -> dict[str, str]:
    """`environ` for a bench run at ISA level `isa` (None: the host's): no OpenBLAS override
    but the core type of `isa` (OPENBLAS_KERNELS), XLA capped at `isa` (XLA_MAX_ISA, in place
    of any cap among XLA_FLAGS), and EQSAT_MAX_ISA=isa (module doc). Applied to its own result
    it changes nothing: the process re-executes itself until its environment is this one."""
    env = {k: v for k, v in environ.items() if k not in _OPENBLAS_VARS}
    if isa is not None:
        env["EQSAT_MAX_ISA"] = isa
        if isa in OPENBLAS_KERNELS:
            env["OPENBLAS_CORETYPE"] = OPENBLAS_KERNELS[isa]
        if isa in XLA_MAX_ISA:
            flags = environ.get("XLA_FLAGS", "").split()
            others = [flag for flag in flags if not flag.startswith("--xla_cpu_max_isa=")]
            env["XLA_FLAGS"] = " ".join([*others, f"--xla_cpu_max_isa={XLA_MAX_ISA[isa]}"])
    return env


def _reexec_with_fair_openblas(isa: str | None) -> None:
    """numpy reads OpenBLAS's variables when it is first imported: restart the process with
    `numpy_environment` unless it already has it (module doc)."""
    env = numpy_environment(dict(os.environ), isa)
    if env != dict(os.environ):
        os.execve(sys.executable, [sys.executable, "-m", "eqsat", *sys.argv[1:]], env)


def main(argv: list[str]) -> int:
    commands = {
        "demo": "compile and time an MLP layer and a softmax",
        "bench": "time eqsat against numpy on the benchmark workloads (see --help)",
        "rules": "list every rewrite rule: name, identity, guard",
    }
    usage = "usage:\n" + "\n".join(
        f"  python -m eqsat {name:6} {text}" for name, text in commands.items()
    )
    if argv in (["-h"], ["--help"]):
        print(usage)
        return 0
    if not argv or argv[0] not in commands or (argv[0] != "bench" and len(argv) > 1):
        if argv and argv[0] not in commands:
            print(f"python -m eqsat: unknown command {argv[0]!r}", file=sys.stderr)
        print(usage, file=sys.stderr)
        return 2
    if argv[0] == "rules":
        from eqsat.tools.catalog import print_rules

        print_rules()
        return 0
    _reexec_with_fair_openblas(_isa_option(argv) if argv[0] == "bench" else None)
    if argv[0] == "bench":
        from eqsat.tools.bench import main as run_bench

        return run_bench(argv[1:])
    from eqsat.tools.demo import run_demo

    return 0 if run_demo() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
