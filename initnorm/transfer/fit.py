"""The optimum of one loss-against-log2-rate curve: a parabola through the grid's best point and its neighbours.

A curve is ``log2 rate -> loss`` (nan: diverged or missing), one per seed; ``seed_mean`` averages the
seeds a bootstrap draw names, ``fit_optimum`` finds the vertex (the grid argmin where the fit is
ill-posed, saying why) and ``Fit.at`` reads the fitted loss at any rate on the grid.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

HALF_WIDTH = 1  # grid points each side of the argmin in the fit (3 points: the parabola through them)

Curve = Mapping[float, float]  # log2 rate -> loss (nan: diverged or missing)
Seeds = Mapping[Any, Curve]  # seed -> curve


@dataclass(frozen=True)
class Fit:
    """The optimum of one loss-against-log2-lr curve."""

    log2_lr: float  # nan when no point is finite
    loss: float
    method: str  # "parabola" | "grid argmin" | "none"
    note: str  # why the grid argmin (empty for a parabola)
    xs: tuple[float, ...]  # the curve fitted (log2 lr, seed-mean loss)
    ys: tuple[float, ...]
    coef: tuple[float, float, float] | None = None  # a, b, c of a x^2 + b x + c
    window: tuple[float, float] | None = None  # the x range the parabola was fitted on
    edge: str = ""  # "lowest" | "highest": the minimum is on that end of the grid, the optimum may lie beyond it

    @property
    def measured(self) -> float:
        """The lowest seed-mean loss on the grid: the best loss a report shows. The parabola's vertex
        (``loss``) lies below it, by little on an even grid, but on an uneven one a far neighbour lets
        the vertex fall deep into the unmeasured gap (2.601 against a lowest mean of 2.780)."""
        ys = [y for y in self.ys if finite(y)]
        return min(ys) if ys else math.nan

    def at(self, x: float) -> float:
        """The fitted loss at log2 lr ``x``: the parabola inside its window, straight lines between
        the grid's means outside it; inf next to a diverged point, nan off the grid."""
        if self.coef is not None and self.window[0] <= x <= self.window[1]:
            a, b, c = self.coef
            return a * x * x + b * x + c
        return interpolate(self.xs, self.ys, x)


def interpolate(xs: tuple[float, ...], ys: tuple[float, ...], x: float) -> float:
    if not xs or x < xs[0] - 1e-9 or x > xs[-1] + 1e-9:
        return math.nan
    for i in range(len(xs)):
        if abs(xs[i] - x) <= 1e-9:
            return ys[i] if math.isfinite(ys[i]) else math.inf
        if i + 1 < len(xs) and xs[i] < x < xs[i + 1]:
            y0, y1 = ys[i], ys[i + 1]
            if not (math.isfinite(y0) and math.isfinite(y1)):
                return math.inf
            t = (x - xs[i]) / (xs[i + 1] - xs[i])
            return y0 + t * (y1 - y0)
    return math.nan


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _polyfit2(xs: list[float], ys: list[float]) -> tuple[float, float, float] | None:
    """Least-squares a x^2 + b x + c (exact through three points); None when singular."""
    n, xm = len(xs), statistics.fmean(xs)
    us = [x - xm for x in xs]  # centred, for a well-conditioned system
    s = [sum(u**k for u in us) for k in range(5)]
    t = [sum(y * u**k for u, y in zip(us, ys)) for k in range(3)]
    m = [[s[4], s[3], s[2], t[2]], [s[3], s[2], s[1], t[1]], [s[2], s[1], float(n), t[0]]]
    for col in range(3):  # Gaussian elimination with partial pivoting
        piv = max(range(col, 3), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-12:
            return None
        m[col], m[piv] = m[piv], m[col]
        for r in range(3):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [a - f * b for a, b in zip(m[r], m[col])]
    a, b, c = m[0][3] / m[0][0], m[1][3] / m[1][1], m[2][3] / m[2][2]
    return a, b - 2 * a * xm, a * xm * xm - b * xm + c


def fit_optimum(xs: Iterable[float], ys: Iterable[float], half_width: int = HALF_WIDTH) -> Fit:
    """The optimum of the curve ``ys`` over the sorted grid ``xs`` (log2 lr; nan = diverged)."""
    xs, ys = tuple(xs), tuple(ys)
    ok = [i for i, y in enumerate(ys) if finite(y)]
    if not ok:
        return Fit(math.nan, math.nan, "none", "no finite loss at any lr", xs, ys)
    i = min(ok, key=lambda j: ys[j])
    argmin = {"log2_lr": xs[i], "loss": ys[i], "method": "grid argmin", "xs": xs, "ys": ys}
    if i == 0 or i == len(xs) - 1:
        side = "lowest" if i == 0 else "highest"
        return Fit(**argmin, note=f"minimum at the grid's {side} lr (2^{xs[i]:g})", edge=side)
    if not (finite(ys[i - 1]) and finite(ys[i + 1])):
        return Fit(**argmin, note="a neighbour of the minimum diverged")
    lo, hi = i, i  # the contiguous finite points around the argmin, up to half_width each side
    while lo > 0 and i - lo < half_width and finite(ys[lo - 1]):
        lo -= 1
    while hi < len(xs) - 1 and hi - i < half_width and finite(ys[hi + 1]):
        hi += 1
    wx, wy = list(xs[lo : hi + 1]), list(ys[lo : hi + 1])
    coef = _polyfit2(wx, wy)
    if coef is None or coef[0] <= 0:
        return Fit(**argmin, note="no upward curvature around the minimum")
    a, b, c = coef
    x0 = -b / (2 * a)
    if not wx[0] <= x0 <= wx[-1]:
        return Fit(**argmin, note="the parabola's vertex falls outside the points fitted")
    return Fit(x0, c - b * b / (4 * a), "parabola", "", xs, ys, coef, (wx[0], wx[-1]))


def seed_mean(seeds: Seeds, draw: Iterable[Any] | None = None) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The grid and the mean over the seeds ``draw`` (default: all; a seed drawn twice counts twice) of the losses at
    each lr; nan (diverged: the worst loss, never the optimum) where any seed that ran there diverged, as the search
    prunes a trial one of whose seeds diverged: a diverged run is evidence against its rate, not a missing point.
    A seed that did not run at an lr is left out of that lr's mean."""
    xs = tuple(sorted({x for c in seeds.values() for x in c}))
    draw = list(seeds) if draw is None else [s for s in draw if s in seeds]
    ys = []
    for x in xs:
        v = [y for s in draw if (y := seeds[s].get(x)) is not None]
        ys.append(statistics.fmean(v) if v and all(finite(y) for y in v) else math.nan)
    return xs, tuple(ys)
