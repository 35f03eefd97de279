"""Standalone reproduction (egglog 13.2.0 only, no eqsat): two globals whose names differ by
trailing digits, used in one command, read each other's value.

    python docs/repro_egglog_let_names.py

Egglog names the variable for each use of a global in a command after the global plus a count of
its uses so far, so the 21st use of `g1` and the first use of `g12` get the same name. Both parts
print a shape (3, 3) that was registered as (2, 3), and exit 1.
"""

import sys

from egglog import EGraph, Expr, StringLike, Vec, bindings, i64

# 1. egglog text, run through the bindings: 20 uses of $g1, then one command using $g1 and $g12.
PROGRAM = (
    "(sort Shape (Vec i64))\n(sort T)\n(constructor In (String Shape) T)\n"
    "(let $g1 2)\n(let $g12 3)\n"
    + "".join(f'(let $v{k} (In "v{k}" (vec-of $g1)))\n' for k in range(20))
    + '(let $x (In "x" (vec-of $g1 $g12)))\n(extract $x)\n'
)
egraph = bindings.EGraph()
text_result = str(egraph.run_program(*egraph.parse_program(PROGRAM))[-1]).strip()
print("text:  ", text_result, '(registered: (In "x" (vec-of 2 3)))')


# 2. The same through egglog-python's public API (egglog-python's own sharing lets are named
# $__expr_0, $__expr_1, ..., which is how eqsat met this: $__expr_1 and $__expr_12).
class T(Expr):
    def __init__(self, name: StringLike, shape: Vec[i64]) -> None: ...


egraph2 = EGraph()
g1 = egraph2.let("g1", i64(2))
g12 = egraph2.let("g12", i64(3))
for k in range(20):
    egraph2.register(T(f"v{k}", Vec[i64](g1)))
x = egraph2.let("x", T("x", Vec[i64](g1, g12)))
api_result = str(egraph2.extract(x))
print("python:", api_result, '(registered: T("x", Vec(2, 3)))')

sys.exit(0 if text_result == '(In "x" (vec-of 2 3))' and api_result == 'T("x", Vec(2, 3))' else 1)
