"""`python -m eqsat.tools.fit_erf`: fits the polynomials of the vector erf and prints them as the
`ERF_FITS` table of `backend_c/vmath.py` (which holds the printed copy; a test compares the two).

The vector erf computes, for a = |x| (the sign of x put back at the end):

- a < 1: erf(a) = a + a * P(a^2), P fitted to erf(a) / a - 1 with a weight that makes its error
  relative to erf (adding a exactly keeps 2/sqrt(pi)'s rounding out of the leading term);
- 1 <= a: erf(a) = 1 - exp(-a^2) * R(t - t0) with t = 2 / (2 + a), a clamped to the point beyond
  which erf rounds to 1 (`clamp`); R fitted to erfc(a) * exp(a^2), smooth and slowly varying in
  t, weighted by exp(-a^2): the fit's error is the error it adds to erf. t0 centres t's range.

Each fit is a weighted least-squares fit at Chebyshev nodes, in 60-digit arithmetic, rounded to
the dtype; its error is far below half an ulp of erf (`fit_erf()` reports it). It needs mpmath,
a development tool only: eqsat runs on the printed table.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from eqsat.backend_c.vmath import ErfFit

# Per dtype: the degrees of P and R and the clamp (a little past erfc^-1 of half an ulp of 1:
# 3.919 for float32, 5.922 for float64, so that 1 - erfc rounds to 1 there).
DEGREES = {"float32": (6, 5), "float64": (11, 12)}
CLAMP = {"float32": 3.95, "float64": 5.95}
NODES = 200
DIGITS = 60


def fit_erf(dtype: str) -> tuple[ErfFit, float, float]:
    """The fit for `dtype`, and the largest weighted error of P and R (before rounding the
    coefficients), each relative to erf's value."""
    import mpmath as mp  # a development tool only

    with mp.workdps(DIGITS):
        return _fit(dtype, mp)


def _fit(dtype: str, mp: Any) -> tuple[ErfFit, float, float]:
    small_degree, large_degree = DEGREES[dtype]
    clamp = mp.mpf(CLAMP[dtype])

    def erf_over_a(u: Any) -> Any:  # u = a^2
        return mp.erf(mp.sqrt(u)) / mp.sqrt(u) if u else 2 / mp.sqrt(mp.pi)

    small, small_error = _weighted_fit(
        lambda u: erf_over_a(u) - 1,
        lambda u: 1 / erf_over_a(u),
        mp.mpf(0),
        mp.mpf(1),
        small_degree,
        mp,
    )
    t_low, t_high = 2 / (2 + clamp), mp.mpf(2) / 3
    t0 = _round((t_low + t_high) / 2, dtype)

    def a_of(u: Any) -> Any:  # u = t - t0
        return 2 / (u + t0) - 2

    def r_target(u: Any) -> Any:
        a = a_of(u)
        return mp.erfc(a) * mp.exp(a * a)

    def r_weight(u: Any) -> Any:  # the error R adds to erf, relative to erf
        a = a_of(u)
        return mp.exp(-a * a) / mp.erf(a)

    large, large_error = _weighted_fit(
        r_target, r_weight, t_low - t0, t_high - t0, large_degree, mp
    )
    fit = ErfFit(
        small=tuple(_round(c, dtype) for c in small),
        large=tuple(_round(c, dtype) for c in large),
        t0=t0,
        clamp=CLAMP[dtype],
    )
    return fit, small_error, large_error


def _weighted_fit(
    target: Any, weight: Any, low: Any, high: Any, degree: int, mp: Any
) -> tuple[list[Any], float]:
    """Coefficients c (low to high) minimizing the sum over Chebyshev nodes of [low, high] of
    (weight * (sum c_k u^k - target))^2, and the largest weighted error on a fine grid."""
    nodes = [
        (low + high) / 2 + (high - low) / 2 * mp.cos(mp.pi * (k + mp.mpf(0.5)) / NODES)
        for k in range(NODES)
    ]
    rows = mp.matrix([[weight(u) * u**j for j in range(degree + 1)] for u in nodes])
    values = mp.matrix([weight(u) * target(u) for u in nodes])
    solution = mp.qr_solve(rows, values)[0]
    coefficients = [solution[j] for j in range(degree + 1)]
    grid = [low + (high - low) * k / (4 * NODES) for k in range(4 * NODES + 1)]
    error = max(
        abs(weight(u) * (sum(c * u**j for j, c in enumerate(coefficients)) - target(u)))
        for u in grid
    )
    return coefficients, float(error)


def _round(value: Any, dtype: str) -> float:
    """`value` rounded to `dtype`, as a Python float."""
    return float(np.float32(float(value))) if dtype == "float32" else float(value)


def main() -> None:
    print("ERF_FITS: dict[str, ErfFit] = {")
    for dtype in DEGREES:
        fit, small_error, large_error = fit_erf(dtype)
        print(f"    # fit errors relative to erf: P {small_error:.1e}, R {large_error:.1e}")
        print(f'    "{dtype}": ErfFit(')
        for name in ("small", "large"):
            values = ", ".join(repr(c) for c in getattr(fit, name))
            print(f"        {name}=({values}),")
        print(f"        t0={fit.t0!r},\n        clamp={fit.clamp!r},\n    ),")
    print("}")


if __name__ == "__main__":
    main()
