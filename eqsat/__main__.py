"""`python -m eqsat demo` (compile, check and time an MLP layer and a row softmax),
`python -m eqsat bench [options]` (the benchmark of eqsat/tools/bench.py; `--help` lists the
options) and `python -m eqsat rules` (every rewrite rule with its identity and guard).

numpy is timed with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (this machine's environment sets
them, which halves OpenBLAS's sgemm): the comparison is against the best numpy. OpenBLAS keeps
its default thread timeout (idle threads yield for a while after each call, which makes its
back-to-back calls fastest); the timing lets them settle before it times anything else
(`eqsat.tools.workloads.SETTLE_SECONDS`).
"""

from __future__ import annotations

import os
import sys

_OPENBLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def _reexec_with_fair_openblas() -> None:
    """numpy reads these when it is first imported; restart the process without the overrides
    (module doc)."""
    if any(var in os.environ for var in _OPENBLAS_VARS):
        env = {k: v for k, v in os.environ.items() if k not in _OPENBLAS_VARS}
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
    _reexec_with_fair_openblas()
    if argv[0] == "bench":
        from eqsat.tools.bench import main as run_bench

        return run_bench(argv[1:])
    from eqsat.tools.demo import run_demo

    return 0 if run_demo() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
