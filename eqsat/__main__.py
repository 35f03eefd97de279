"""`python -m eqsat demo` (compile, check and time an MLP layer and a row softmax),
`python -m eqsat bench [options]` (the benchmark of eqsat/tools/bench.py; `--help` lists the
options) and `python -m eqsat rules` (every rewrite rule with its identity and guard).

numpy is timed with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (this machine's environment sets
them, which halves OpenBLAS's sgemm): the comparison is against the best numpy. And with
OPENBLAS_THREAD_TIMEOUT=4 unless set: OpenBLAS's idle threads otherwise keep yielding for 2^28
cycles after each call, so a kernel timed right after numpy shares the cores with them, while
numpy's own time does not change (docs/MEASUREMENTS.md).
"""

from __future__ import annotations

import os
import sys

_OPENBLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
_THREAD_TIMEOUT = ("OPENBLAS_THREAD_TIMEOUT", "4")  # 2^4 cycles of yielding once idle


def _reexec_with_fair_openblas() -> None:
    """numpy reads these when it is first imported; restart the process without the overrides
    and with OpenBLAS's idle threads going to sleep at once (module doc)."""
    variable, value = _THREAD_TIMEOUT
    if any(var in os.environ for var in _OPENBLAS_VARS) or variable not in os.environ:
        env = {k: v for k, v in os.environ.items() if k not in _OPENBLAS_VARS}
        env.setdefault(variable, value)
        os.execve(sys.executable, [sys.executable, "-m", "eqsat", *sys.argv[1:]], env)


def main(argv: list[str]) -> int:
    commands = {
        "demo": "compile and time an MLP layer and a softmax",
        "bench": "time eqsat against numpy on the benchmark workloads (see --help)",
        "rules": "list every rewrite rule: name, identity, guard",
    }
    if not argv or argv[0] not in commands or (argv[0] != "bench" and len(argv) > 1):
        usage = "\n".join(f"  python -m eqsat {name:6} {text}" for name, text in commands.items())
        print(f"usage:\n{usage}", file=sys.stderr)
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

    run_demo()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
