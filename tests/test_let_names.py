"""egglog-python's sharing lets must not be misread by egglog (the wrong-merge flake).

egglog-python binds shared subexpressions to globals `$__expr_0`, `$__expr_1`, ... Egglog turns
each use of a global inside a command into a fresh variable named global + per-name count
(`$__expr_1` used the 21st time: `@$__expr_120`; `$__expr_12` used the first time: `@$__expr_120`
too), so one command that uses both reads one global's value for the other: the registered
`input("x", (2, 3))` became `input("x", (3, 3))`. `eqsat.core.terms` numbers the lets from
LET_BASE, where every name has as many digits and none is another followed by digits.

Which subexpressions egglog-python finds shared follows set order (hashes of types), so this test
makes the two lets itself, through the method the workaround wraps, in the order that collides.
"""

from typing import Any

from egglog import EGraph, i64

from eqsat.core.terms import Term, to_egglog, to_term


def _input(name: str, shape: tuple[int, ...]) -> Term:
    return Term("TExpr.input", (name, shape, "float64"))


def test_a_term_using_two_sharing_lets_reads_back_as_registered() -> None:
    egraph = EGraph()

    def share(value: int) -> None:
        literal: Any = i64(value)
        egraph._add_decls(literal)
        egraph._state._transform_let(literal.__egg_typed_expr__)

    share(99)  # $__expr_0 without the workaround
    share(2)  # $__expr_1
    for filler in range(100, 110):  # $__expr_2 .. $__expr_11
        share(filler)
    share(3)  # $__expr_12
    terms = [_input(f"v{k}", (2,)) for k in range(20)]  # 20 uses of $__expr_1
    terms.append(_input("x", (2, 3)))  # its 21st use, and the 1st of $__expr_12
    for term in terms:  # one command each, in this order
        egraph.register(to_egglog(term))
    read_back = [to_term(egraph.extract(to_egglog(term))) for term in terms]
    assert read_back == terms
