"""Does the learning rate transfer? The optimum, its uncertainty and the cost of transferring it.

For a sweep over lr x (width or depth) x setting (the parameterisation, ...) x seed, per
(setting, width):

- the optimal log2 lr: a parabola in log2 lr through the seed-mean losses at the grid's argmin
  and its neighbours (``HALF_WIDTH`` each side), its vertex; the grid argmin itself where the fit
  is ill-posed (the minimum on the grid's edge, too few finite points, no upward curvature), said
  in the note;
- its interval: a percentile bootstrap over seeds (``LEVEL``), with a fixed RNG seed so the
  report is the same on every run. Seeds are resampled once per replicate for every width
  (the same seed numbers everywhere), so the shift and the penalty get paired intervals;
- the transfer error: the optimum's shift from the base (smallest) width's, in log2 units
  (octaves); negative = the optimum falls as the model grows;
- the transfer penalty: the loss at this width when trained at the base width's optimal lr,
  read on this width's fitted curve (the parabola inside its window, straight lines between the
  seed means outside it), minus this width's best fitted loss. Infinite where that lr diverged;
- the verdict: the largest shift against ``SHIFT_TOL`` and the largest penalty against
  ``PENALTY_TOL``, read together (``verdict_class``: transfers / borderline / does not transfer,
  undetermined where an optimum on the grid's edge leaves one open; docs/transfer.md).

Everything here is a pure function of the job records (their metrics.json), as the plots are.
"""

from __future__ import annotations

import csv
import io
import math
import random
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from initnorm.nn.param import PARAMS, stable_across
from initnorm.results import csv_cell

PARAM_KEYS = ("param", "param.name")  # a swept parameterisation: a conf/param option, or a table's name or dotted path

HALF_WIDTH = 1  # grid points each side of the argmin in the fit (3 points: the parabola through them)
LEVEL = 0.95  # bootstrap interval
N_BOOT = 1000
BOOT_SEED = 0
# The verdict's two thresholds (docs/transfer.md, "The verdict"). A shift within ±0.5 octave is within
# half the grid step of every sweep here (one octave; deck §7e 1.6): the rate tuned at the base size is
# still the grid point nearest the larger size's optimum. A penalty under 0.01 nats is below the seed-to-seed spread of the
# loss at the best grid rate in both lr x width sweeps in results/ (sd 0.006-0.109): no single run sees it.
SHIFT_TOL = 0.5  # octaves
PENALTY_TOL = 0.01  # nats (the metric's unit)
AXES = ("width", "depth")
HEADING = "## Learning-rate transfer"  # summary.md's section; the terminal summary prints its verdict lines

Curve = Mapping[float, float]  # log2 lr -> loss (nan: diverged or missing)
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
        finite = [y for y in self.ys if _finite(y)]
        return min(finite) if finite else math.nan

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


def _finite(x: Any) -> bool:
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
    finite = [i for i, y in enumerate(ys) if _finite(y)]
    if not finite:
        return Fit(math.nan, math.nan, "none", "no finite loss at any lr", xs, ys)
    i = min(finite, key=lambda j: ys[j])
    argmin = {"log2_lr": xs[i], "loss": ys[i], "method": "grid argmin", "xs": xs, "ys": ys}
    if i == 0 or i == len(xs) - 1:
        side = "lowest" if i == 0 else "highest"
        return Fit(**argmin, note=f"minimum at the grid's {side} lr (2^{xs[i]:g})", edge=side)
    if not (_finite(ys[i - 1]) and _finite(ys[i + 1])):
        return Fit(**argmin, note="a neighbour of the minimum diverged")
    lo, hi = i, i  # the contiguous finite points around the argmin, up to half_width each side
    while lo > 0 and i - lo < half_width and _finite(ys[lo - 1]):
        lo -= 1
    while hi < len(xs) - 1 and hi - i < half_width and _finite(ys[hi + 1]):
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
    """The grid and the mean over the seeds ``draw`` (default: all; a seed drawn twice counts
    twice) of the finite losses at each lr; nan where none is finite."""
    xs = tuple(sorted({x for c in seeds.values() for x in c}))
    draw = list(seeds) if draw is None else [s for s in draw if s in seeds]
    ys = []
    for x in xs:
        v = [seeds[s].get(x, math.nan) for s in draw]
        v = [y for y in v if _finite(y)]
        ys.append(statistics.fmean(v) if v else math.nan)
    return xs, tuple(ys)


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile of the non-nan values; an infinite neighbour wins."""
    v = sorted(x for x in values if not math.isnan(x))
    if not v:
        return math.nan
    pos = q * (len(v) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    if lo == hi or not (math.isfinite(v[lo]) and math.isfinite(v[hi])):
        return v[lo] if pos - lo < 0.5 or not math.isfinite(v[lo]) else v[hi]
    return v[lo] + (pos - lo) * (v[hi] - v[lo])


@dataclass(frozen=True)
class Estimate:
    value: float
    lo: float
    hi: float


@dataclass(frozen=True)
class Row:
    """One (setting, width) of the transfer table."""

    setting: tuple[tuple[str, str], ...]  # e.g. (("param", "sp"),)
    axis: str  # width | depth
    size: int
    seeds: int
    fit: Fit
    optimum: Estimate  # log2 lr; lo and hi nan when one seed gives no interval
    shift: Estimate  # log2 units from the base size's optimum
    penalty: Estimate  # loss at the base's optimal lr minus best loss
    base: bool = False  # the base size: shift and penalty are 0 by construction
    bound: str = ""  # "" (measured) | "+" | "-" | "?": where an optimum on the grid's edge may move the shift

    @property
    def edge(self) -> str:
        return self.fit.edge


def transfer_rows(
    cells: Mapping[tuple, Mapping[int, Seeds]], axis: str = "width", n_boot: int = N_BOOT, level: float = LEVEL, rng_seed: int = BOOT_SEED
) -> list[Row]:
    """``cells``: setting -> size -> seed -> log2 lr -> loss. Rows in setting order, then size.
    The base of each setting is its smallest size."""
    rows = []
    for setting, by_size in cells.items():
        sizes = sorted(by_size)
        base = sizes[0]
        fits = {n: fit_optimum(*seed_mean(by_size[n])) for n in sizes}
        all_seeds = sorted({s for n in sizes for s in by_size[n]}, key=str)
        boot: dict[int, dict[str, list[float]]] = {n: {"opt": [], "shift": [], "pen": []} for n in sizes}
        memo: dict[tuple, dict[int, Fit]] = {}  # few seeds have few distinct resamples (3 seeds: 10)
        for draw in resamples(all_seeds, n_boot, rng_seed):
            bf = memo.get(tuple(draw))
            if bf is None:
                bf = memo[tuple(draw)] = {n: fit_optimum(*seed_mean(by_size[n], draw)) for n in sizes}
            for n in sizes:
                boot[n]["opt"].append(bf[n].log2_lr)
                boot[n]["shift"].append(bf[n].log2_lr - bf[base].log2_lr)
                boot[n]["pen"].append(_penalty(bf[n], bf[base].log2_lr))
        for n in sizes:
            f = fits[n]
            point = {"opt": f.log2_lr, "shift": f.log2_lr - fits[base].log2_lr, "pen": _penalty(f, fits[base].log2_lr)}
            est = {k: estimate(v, boot[n][k], level) for k, v in point.items()}
            n_seeds = len(by_size[n])
            rows.append(Row(setting, axis, n, n_seeds, f, est["opt"], est["shift"], est["pen"], n == base,
                            "" if n == base else shift_bound(fits[base], f)))
    return rows


def resamples(seeds: list[Any], n_boot: int, rng_seed: int) -> Iterable[list[Any]]:
    """The bootstrap's draws of ``seeds`` with replacement (sorted, so equal draws share a fit); none for one seed."""
    rng = random.Random(rng_seed)
    for _ in range(n_boot if len(seeds) > 1 else 0):
        yield sorted((rng.choice(seeds) for _ in seeds), key=str)


def estimate(value: float, samples: list[float], level: float) -> Estimate:
    """``value`` with the percentile interval of its bootstrap ``samples`` (nan ends without samples)."""
    a = (1 - level) / 2
    return Estimate(value, quantile(samples, a), quantile(samples, 1 - a)) if samples else Estimate(value, math.nan, math.nan)


def transferred(seeds: Seeds, log2_lr: float, n_boot: int = N_BOOT, level: float = LEVEL,
                rng_seed: int = BOOT_SEED) -> tuple[Fit, Estimate, Estimate, Estimate]:
    """One size's own optimum, and the shift and penalty of a rate chosen elsewhere (``log2_lr``: a search's
    best at the base size), each with the bootstrap interval over this size's seeds. The rate is held fixed:
    the interval is the grid's uncertainty, not the search's. What ``initnorm-transfer --grid`` prints."""
    fit = fit_optimum(*seed_mean(seeds))
    boot: dict[str, list[float]] = {"opt": [], "shift": [], "pen": []}
    memo: dict[tuple, Fit] = {}
    for draw in resamples(sorted(seeds, key=str), n_boot, rng_seed):
        bf = memo.get(tuple(draw)) or memo.setdefault(tuple(draw), fit_optimum(*seed_mean(seeds, draw)))
        boot["opt"].append(bf.log2_lr)
        boot["shift"].append(bf.log2_lr - log2_lr)
        boot["pen"].append(_penalty(bf, log2_lr))
    point = {"opt": fit.log2_lr, "shift": fit.log2_lr - log2_lr, "pen": _penalty(fit, log2_lr)}
    return fit, *(estimate(v, boot[k], level) for k, v in point.items())


def shift_bound(base: Fit, fit: Fit) -> str:
    """Which way the true shift may lie beyond the measured one when an optimum sits on the grid's
    edge: "-" (it may fall further), "+" (rise further), "?" (either way), "" (both optima inside)."""
    ways = {("lowest", False): "-", ("highest", False): "+", ("lowest", True): "+", ("highest", True): "-"}
    found = {ways[(f.edge, is_base)] for f, is_base in ((fit, False), (base, True)) if f.edge}
    return "" if not found else found.pop() if len(found) == 1 else "?"


def _penalty(fit: Fit, x: float) -> float:
    if not (_finite(x) and _finite(fit.loss)):
        return math.nan
    p = fit.at(x) - fit.loss
    return 0.0 if abs(p) < 1e-12 else p  # at its own optimum: exactly none


# ---------------------------------------------------------------- from job records


def sweep_axis(records: list[dict]) -> str | None:
    """``width`` or ``depth``: the one of them that takes more than one value among jobs that set lr."""
    jobs = [r.get("overrides", {}) for r in records if "lr" in r.get("overrides", {})]
    varying = [a for a in AXES if len({str(ov.get(a)) for ov in jobs if a in ov}) > 1]
    return varying[0] if varying else None


def swept_value(record: dict, key: str) -> str:
    """A job's value of a setting key: its override, else for ``param`` the table its config
    composed (``sp`` in conf/train.yaml, the one default a record without its config can have)."""
    overrides = record.get("overrides", {})
    if key in overrides:
        return str(overrides[key])
    if key == "param":
        return str(((record.get("config") or {}).get("param") or {}).get("name", "sp"))
    return ""


def metric_of(records: list[dict]) -> str:
    return (records[0].get("summary_metrics") or ["final_loss"])[0] if records else "final_loss"


def cells_from_records(records: list[dict], axis: str | None = None, metric: str | None = None) -> tuple[str | None, dict]:
    """(axis, setting -> size -> seed -> log2 lr -> loss) from finished jobs; a diverged job is nan.
    The setting is every other swept key (``param``, ...) than lr, the axis and the seed."""
    axis = axis or sweep_axis(records)
    metric = metric or metric_of(records)
    if axis is None:
        return None, {}
    keys: list[str] = ["param"] if any("param" in r.get("overrides", {}) for r in records) else []
    for r in records:
        for k in r.get("swept") or r.get("overrides", {}):
            if k not in ("lr", "seed", axis) and k not in keys:
                keys.append(k)
    varying = [k for k in keys if k == "param" or len({str(r.get("overrides", {}).get(k)) for r in records}) > 1]
    cells: dict[tuple, dict[int, dict[Any, dict[float, float]]]] = {}
    for r in records:
        ov = r.get("overrides", {})
        if r.get("status") != "finished" or "lr" not in ov or axis not in ov:
            continue
        setting = tuple((k, swept_value(r, k)) for k in varying)
        loss = math.nan if r.get("diverged") else r.get(metric, math.nan)
        loss = loss if _finite(loss) else math.nan
        cells.setdefault(setting, {}).setdefault(int(ov[axis]), {}).setdefault(r.get("seed"), {})[math.log2(float(ov["lr"]))] = loss
    if axis == "depth":  # at the base depth a depth variant is its width-only table exactly: one run may serve them all
        share_base_depth(cells)
    return axis, cells


def share_base_depth(cells: dict) -> None:
    """A width-stable table's runs at the smallest depth (µP's) stand for the depth-stable ones'
    (depth-µP's, CompleteP's) where those lack it: at the base depth they are the same table, so
    one run may serve them all. The tables' declared kinds say which is which; a table with no base
    depth (``About.absolute``: u-µP) is not µP at any depth and keeps only its own runs."""
    abouts = {setting: PARAMS.about(setting[0][1], strict=False) for setting in cells if len(setting) == 1 and setting[0][0] in PARAM_KEYS}
    width_only = [cells[s] for s, a in abouts.items() if a.kind == "width"]
    if len(width_only) != 1:
        return
    source = width_only[0]
    base = min(source)
    for setting, about in abouts.items():
        by_size = cells[setting]
        if stable_across(about.kind, "depth") and not about.absolute and base < min(by_size):
            by_size[base] = source[base]


def transfer_table(records: list[dict], **kw) -> list[Row]:
    """The transfer rows of a sweep's records; empty when it is not an lr x width/depth sweep."""
    axis, cells = cells_from_records(records)
    if axis is None or not cells:
        return []
    if len({x for by in cells.values() for s in by.values() for c in s.values() for x in c}) < 2:
        return []
    return transfer_rows(cells, axis, **kw)


# ---------------------------------------------------------------- rendering

def setting_label(setting: tuple[tuple[str, str], ...]) -> str:
    """``SP``, ``µP, norm=post``: a parameterisation by its display name, any other key as set."""
    if not setting:
        return "all"
    return ", ".join(PARAMS.display(v) if k in PARAM_KEYS else f"{k}={v}" for k, v in setting)


def base_word(setting: tuple[tuple[str, str], ...]) -> str:
    """What the smallest size is to a setting: its table's ``base``, or the ``reference`` of a table
    with no base size (``About.absolute``: u-µP), which the sweep's smallest size only stands for."""
    absolute = any(PARAMS.about(v, strict=False).absolute for k, v in setting if k in PARAM_KEYS)
    return "reference" if absolute else "base"


def _g(x: float, digits: int = 2) -> str:
    if math.isnan(x):
        return "—"
    if math.isinf(x):
        return "diverges" if x > 0 else "-∞"
    return f"{x:+.{digits}f}" if digits else f"{x:.0f}"


def _num(x: float, digits: int = 3) -> str:
    return "—" if math.isnan(x) else "∞" if math.isinf(x) else f"{x:.{digits}f}"


def _digits(e: Estimate, digits: int = 2, signed: bool = True) -> int:
    """At least ``digits`` decimals, more (up to two) until the interval's two ends differ as printed."""
    f = _g if signed else _num
    d = digits
    while d < digits + 2 and e.lo != e.hi and f(e.lo, d) == f(e.hi, d):
        d += 1
    return d


def _interval(e: Estimate, digits: int = 2, signed: bool = True) -> str:
    """``[+0.47, +0.58]``: to the decimals that show both ends (``_digits``), so a narrow interval
    never reads as a single number."""
    f, d = (_g if signed else _num), _digits(e, digits, signed)
    return f"[{f(e.lo, d)}, {f(e.hi, d)}]"


def _has_interval(e: Estimate) -> bool:
    return not (math.isnan(e.lo) or math.isnan(e.hi))


def _shift_state(r: Row) -> str:
    """``within`` / ``past`` ±SHIFT_TOL, or ``unknown`` where an optimum on the grid's edge may move
    the shift across it (a shift past the tolerance that the edge can only enlarge stays ``past``)."""
    past = abs(r.shift.value) > SHIFT_TOL
    if not r.bound:
        return "past" if past else "within"
    return "past" if past and r.bound == ("-" if r.shift.value < 0 else "+") else "unknown"


def _penalty_state(r: Row) -> str:
    """``within`` / ``past`` PENALTY_TOL; an optimum on the grid's edge may have a lower best loss
    beyond it, so its penalty is a lower bound: ``past`` still, ``unknown`` if within."""
    v = r.penalty.value
    if math.isnan(v):
        return "unknown"
    if v > PENALTY_TOL:
        return "past"
    return "unknown" if r.edge else "within"


def verdict_class(shift: str, penalty: str) -> str:
    """The shift and the penalty read together: both within their threshold ``transfers``, both past
    ``does not transfer``, one of each ``borderline``; an edge that leaves either open ``undetermined``."""
    if "unknown" in (shift, penalty):
        return "undetermined"
    return {("within", "within"): "transfers", ("past", "past"): "does not transfer"}.get((shift, penalty), "borderline")


REASONS = {
    ("transfers", "within"): f"both within ±{SHIFT_TOL:g} octave and {PENALTY_TOL:g} {{unit}}",
    ("does not transfer", "past"): f"both past ±{SHIFT_TOL:g} octave and {PENALTY_TOL:g} {{unit}}",
    ("borderline", "past"): f"the optimum moves past ±{SHIFT_TOL:g} octave but its base rate costs under {PENALTY_TOL:g} {{unit}}: "
                            "a flat optimum; a larger {axis} would tell",
    ("borderline", "within"): f"the optimum stays within ±{SHIFT_TOL:g} octave but the base rate costs over {PENALTY_TOL:g} {{unit}}: "
                              "the loss is steep around it",
}


def verdicts(rows: list[Row], unit: str = "nats") -> list[str]:
    """One line per setting: how far the optimum moves from the base size (largest shift) and what
    training at the base size's optimal lr costs (largest penalty), read together (``verdict_class``)."""
    out = []
    for setting in dict.fromkeys(r.setting for r in rows):
        rs = [r for r in rows if r.setting == setting]
        base, axis = rs[0], rs[0].axis
        finite = [r for r in rs[1:] if _finite(r.shift.value)]
        if not finite:
            out.append(f"{setting_label(setting)}: no optimum to compare across {axis}s")
            continue
        states = [_shift_state(r) for r in finite]
        past = [r for r, st in zip(finite, states) if st == "past"]
        worst = max(past or finite, key=lambda r: abs(r.shift.value))
        shift = "past" if past else "unknown" if "unknown" in states else "within"
        pens = [r for r in rs[1:] if not math.isnan(r.penalty.value)]
        pen_rows = [r for r in pens if _penalty_state(r) == "past"] or pens
        pen_row = max(pen_rows, key=lambda r: r.penalty.value) if pen_rows else None
        pen_states = {_penalty_state(r) for r in pens} or {"unknown"}
        penalty = "past" if "past" in pen_states else "unknown" if "unknown" in pen_states else "within"
        cls = verdict_class(shift, penalty)
        edge = [str(r.size) for r in rs if r.edge]
        words = [_shift_words(base, worst)]
        if cls == "undetermined":
            words.insert(0, f"the optimum is on the lr grid's edge at {axis} {', '.join(edge)} (widen the grid)")
        words.append(_penalty_words(pen_row, unit))
        if not _has_interval(worst.shift) and not worst.bound:
            words.append("too few seeds for an interval")
        reason = REASONS.get((cls, shift), "").format(unit=unit, axis=axis)
        notes = [f"{axis} {r.size}: {r.fit.note}" for r in rs if r.fit.method != "parabola"]
        out.append(f"{setting_label(setting)} {cls}: {'; '.join(words)}" + (f" ({reason})" if reason else "")
                   + (f" (grid argmin at {'; '.join(notes)})" if notes else ""))
    return out


def _shift_words(base: Row, r: Row) -> str:
    """``optimum rises 0.52 octaves from width 64 to 1024 (95% interval [+0.47, +0.58])``."""
    v = r.shift.value
    verb = "moves" if abs(v) < 0.005 else "falls" if v < 0 else "rises"
    at_least = "at least " if r.bound and r.bound == ("-" if v < 0 else "+") else "at most " if r.bound in ("+", "-") else ""
    if r.bound:
        why = " (an optimum on the lr grid's edge: no interval)"
    else:
        why = f" ({LEVEL:.0%} interval {_interval(r.shift)})" if _has_interval(r.shift) else ""
    return f"optimum {verb} {at_least}{abs(v):.2f} octaves from {r.axis} {base.size} to {r.size}{why}"


def _penalty_words(r: Row | None, unit: str) -> str:
    if r is None:
        return "penalty —"
    v = r.penalty.value
    if math.isinf(v):
        return f"the base optimum diverges at {r.axis} {r.size}"
    if r.edge:
        return f"penalty at least {_sig(v, math.floor)} {unit} at {r.axis} {r.size} (its optimum on the lr grid's edge)"
    why = f" ({LEVEL:.0%} interval {_interval(r.penalty, 3, signed=False)})" if _has_interval(r.penalty) else ""
    return f"penalty ≤ {_ceil(v)} {unit} at {r.axis} {r.size}{why}"


def _ceil(x: float) -> str:
    """A bound for a verdict: rounded up at two significant digits (0.0123 -> 0.013)."""
    return _sig(x, math.ceil)


def _sig(x: float, rounding) -> str:
    """``x`` rounded (``math.ceil`` up, ``math.floor`` down) at two significant digits."""
    if x <= 0:
        return "0"
    e = math.floor(math.log10(x)) - 1
    return f"{rounding(x / 10**e + (-1e-9 if rounding is math.ceil else 1e-9)) * 10**e:.{max(0, -e)}f}"


def _cells(r: Row) -> list[str]:
    """The optimum, shift and penalty columns of one row, each with its interval: ``—`` where none
    can be drawn (one seed, the base size, an optimum on the grid's edge: the resamples all find
    the edge, a zero-width interval that measures nothing)."""
    none = "— (1 seed)" if not _has_interval(r.optimum) else "— (grid edge)"
    opt = f"{'≤ ' if r.edge == 'lowest' else '≥ ' if r.edge == 'highest' else ''}{r.optimum.value:.2f}" if _finite(r.optimum.value) else "—"
    opt_int = _interval(r.optimum) if _has_interval(r.optimum) and not r.edge else none
    if r.base:
        zero = f"0 ({base_word(r.setting)})"
        return [opt, opt_int, zero, "—", zero, "—"]
    mark = {"-": "≤ ", "+": "≥ ", "?": "? "}.get(r.bound, "")
    shift_int = _interval(r.shift) if _has_interval(r.shift) and not r.bound else none
    measured = _has_interval(r.penalty) and not r.edge
    # as many decimals as its interval
    pen = ("≥ " if r.edge else "") + _num(r.penalty.value, _digits(r.penalty, 3, signed=False) if measured else 3)
    pen_int = _interval(r.penalty, 3, signed=False) if measured else none
    return [opt, opt_int, mark + _g(r.shift.value), shift_int, pen, pen_int]


def render_markdown(rows: list[Row], metric: str = "final_loss") -> str:
    if not rows:
        return ""
    axis = rows[0].axis
    unit = "nats" if "loss" in metric else metric
    pct = f"{LEVEL:.0%}"
    head = ["setting", axis, "seeds", "optimal log2 lr", f"{pct} interval", "fit", f"best {metric}",
            f"shift from {axis} {rows[0].size} (log2)", f"{pct} interval", f"penalty ({unit})", f"{pct} interval"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        fit = r.fit.method if r.fit.method == "parabola" else f"{r.fit.method}: {r.fit.note}"
        opt, opt_int, shift, shift_int, pen, pen_int = _cells(r)
        cells = [setting_label(r.setting), str(r.size), str(r.seeds), opt, opt_int, fit, _num(r.fit.measured),
                 shift, shift_int, pen, pen_int]
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    notes = (
        f"Optimal log2 lr: the vertex of a parabola through the seed-mean loss at the grid's best lr and its {HALF_WIDTH} neighbour(s) "
        "each side (the grid argmin where that is ill-posed, as the fit column says). Best: the lowest seed-mean measured (not the "
        f"vertex's loss). Intervals: {pct} percentile bootstrap over seeds ({N_BOOT} resamples, RNG seed {BOOT_SEED}; the same seeds drawn "
        f"for every {axis}). Shift: the optimum minus the {axis}-{rows[0].size} optimum (negative: the optimum falls). Penalty: this "
        f"{axis}'s fitted loss at the {axis}-{rows[0].size} optimal lr minus its best fitted loss. Verdict: the largest shift against "
        f"±{SHIFT_TOL:g} octave and the largest penalty against {PENALTY_TOL:g} {unit}: both within, transfers; both past, does not "
        "transfer; one of each, borderline; undetermined where an optimum on the lr grid's edge leaves one open (≤/≥: a bound)."
    )
    return f"\n{HEADING}\n\n" + "\n".join(f"- {v}" for v in verdicts(rows, unit)) + "\n\n" + text + "\n\n" + notes + "\n"


def render_csv(rows: list[Row]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    setting_keys = list(dict.fromkeys(k for r in rows for k, _ in r.setting))
    w.writerow([csv_cell(k) for k in setting_keys] + ["axis", "size", "seeds", "log2_lr", "log2_lr_lo", "log2_lr_hi", "lr", "method",
                                                     "note", "best_loss", "fitted_loss", "shift", "shift_lo", "shift_hi", "penalty",
                                                     "penalty_lo", "penalty_hi"])
    for r in rows:
        s = dict(r.setting)
        w.writerow([csv_cell(s.get(k, "")) for k in setting_keys] + [
            r.axis, r.size, r.seeds, r.optimum.value, r.optimum.lo, r.optimum.hi,
            2**r.optimum.value if _finite(r.optimum.value) else math.nan,
            r.fit.method, r.fit.note, r.fit.measured, r.fit.loss, r.shift.value, r.shift.lo, r.shift.hi,
            r.penalty.value, r.penalty.lo, r.penalty.hi,
        ])
    return out.getvalue()
