"""The coordinate check in exponents: per parameterisation and probe point, the slope of log(change) on log(width)
(or log(depth)) at one step, with a bootstrap interval over seeds, beside the exponent its registration expects.

A point's change at one axis value is the geometric mean over seeds (the mean of log change), so a seed that moved
ten times more counts as much as one that moved ten times less. The interval resamples seeds as the transfer
report does (``initnorm.transfer.bootstrap``: every distinct resample, weighted by its multiplicity, when they are
few; with 2 seeds there are 3, and the interval says so); one seed gives no interval. The expected exponent is
the registration's (``nn.param.expected_exponent``: 0 along an axis its kind is stable across, else what it
declares), never read from its name.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

from initnorm.errors import ConfigError
from initnorm.nn.param import PARAMS, expected_exponent
from initnorm.transfer.bootstrap import BOOT_SEED, LEVEL, N_BOOT, Estimate, estimate, is_exact, resamples


@dataclass(frozen=True)
class Exponent:
    """One point's fitted exponent (``fit``: value, interval and what it rests on), its ``expected`` one (None: not
    declared), the axis values it spans and the seeds it averages."""

    fit: Estimate
    expected: float | None
    xs: tuple[int, ...]
    seeds: int


def changes(rows: list[dict], axis: str, step: int) -> dict[str, dict[str, dict[object, dict[int, float]]]]:
    """param -> "layer/role" -> seed -> axis value -> change at ``step``."""
    out: dict[str, dict[str, dict[object, dict[int, float]]]] = {}
    for r in rows:
        if r["step"] == step:
            out.setdefault(r["param"], {}).setdefault(f"{r['layer']}/{r['role']}", {}).setdefault(r["seed"], {})[r[axis]] = r["value"]
    return out


def seed_mean(by_seed: dict[object, dict[int, float]], draw=None) -> dict[int, float]:
    """Axis value -> the geometric mean of the change over the seeds of ``draw`` (default all; a seed drawn twice
    counts twice); a change of 0 or less has no logarithm, and its axis value is left out."""
    seeds = list(by_seed) if draw is None else list(draw)
    if not seeds:
        return {}
    xs = set.intersection(*(set(by_seed[s]) for s in seeds))
    out = {}
    for x in xs:
        values = [by_seed[s][x] for s in seeds]
        if all(v > 0 and math.isfinite(v) for v in values):
            out[x] = math.exp(sum(math.log(v) for v in values) / len(values))
    return out


def log_slope(values: dict[int, float]) -> float:
    """The least-squares slope of log(value) on log(axis value); nan with fewer than two axis values."""
    pts = [(math.log(x), math.log(v)) for x, v in values.items() if x > 0]
    if len({x for x, _ in pts}) < 2:
        return math.nan
    mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def fit(by_seed: dict[object, dict[int, float]], n_boot: int = N_BOOT, level: float = LEVEL) -> Estimate:
    """The exponent of the seeds' geometric mean on the axis, with the percentile bootstrap interval over seeds."""
    seeds = sorted(by_seed, key=str)
    memo: dict[tuple, float] = {}  # random draws repeat: equal draws share a fit
    samples = []
    for draw, w in resamples(seeds, n_boot, BOOT_SEED):
        if draw not in memo:
            memo[draw] = log_slope(seed_mean(by_seed, draw))
        samples.append((memo[draw], w))
    return estimate(log_slope(seed_mean(by_seed)), samples, level, len(memo), is_exact(seeds, n_boot))


def exponents(rows: list[dict], axis: str, step: int, optimizer: str = "adamw",
              extra: dict[str, dict[str, dict[object, dict[int, float]]]] | None = None) -> dict[str, dict[str, Exponent]]:
    """param -> "layer/role" -> its ``Exponent`` at ``step``, for points measured at every axis value by every seed;
    ``extra``: derived points (param -> point -> seed -> axis value -> change) fitted alongside."""
    data = changes(rows, axis, step)
    for param, points in (extra or {}).items():
        data.setdefault(param, {}).update(points)
    out: dict[str, dict[str, Exponent]] = {}
    family = optimiser_family(optimizer)
    for param, points in data.items():
        about = PARAMS.about(param, strict=False)
        xs = {x for by_seed in points.values() for v in by_seed.values() for x in v}
        for point, by_seed in points.items():
            if any(set(v) != xs for v in by_seed.values()):
                continue
            expected = expected_exponent(about, axis, family, point.split("/", 1)[1])
            out.setdefault(param, {})[point] = Exponent(fit(by_seed), expected, tuple(sorted(xs)), len(by_seed))
    return out


def optimiser_family(name: str) -> str:
    """The registered optimiser ``name``'s family (adam, sgd, orthogonal); an unregistered name stands for itself."""
    from initnorm.training.optimizers import OPTIMIZERS

    try:
        return OPTIMIZERS.get(name).family
    except ConfigError:
        return name


def rests_on(exps: dict[str, dict[str, Exponent]]) -> str:
    """What the intervals rest on, in words: with fewer than 3 seeds, how many distinct resamples."""
    found = {e.seeds: e.fit for points in exps.values() for e in points.values()}
    if not found or max(found) < 2:
        return "one seed: no interval (--seeds 1,2,3 gives one)"
    words = []
    for n, f in sorted(found.items()):
        if n < 2:
            words.append("1 seed: none")
        elif f.exact:
            words.append(f"{n} seeds: every one of their {f.resamples} distinct resamples")
        else:
            words.append(f"{n} seeds: {N_BOOT} random resamples (RNG seed {BOOT_SEED}; {f.resamples} distinct)")
    return f"{LEVEL:.0%} percentile bootstrap over seeds ({'; '.join(words)})"


def signed(v: float | None) -> str:
    return "—" if v is None or not math.isfinite(v) else f"{v:+.2f}"


def interval_text(f: Estimate) -> str:
    return "—" if not f.resamples else f"[{f.lo:+.2f}, {f.hi:+.2f}]"


def exponent_rows(exps: dict[str, dict[str, Exponent]], order: list[str], key_layers: tuple[str, ...], display) -> list[list[str]]:
    """One row per (param, point): display name, point, exponent, interval, expected; the key points first."""
    rows = []
    for param in order:
        for point, e in sorted(exps.get(param, {}).items(), key=lambda kv: (kv[0] not in key_layers, kv[0])):
            rows.append([display(param), point, signed(e.fit.value), interval_text(e.fit), signed(e.expected)])
    return rows


def exponent_table(exps, axis: str, step: int, optimizer: str, order: list[str], key_layers: tuple[str, ...], display,
                   markdown: bool = False) -> str:
    """The exponents as the console (or, ``markdown``, a document) shows them."""
    head = ["param", "point", "exponent", f"{LEVEL:.0%} interval", f"expected ({optimizer})"]
    rows = exponent_rows(exps, order, key_layers, display)
    title = f"Exponent of the RMS change from step 0 on {axis} after step {step}: change ~ {axis}^exponent; {rests_on(exps)}\n"
    out = io.StringIO()
    if markdown:
        out.write(title + "\n| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
        out.writelines("| " + " | ".join(r) + " |\n" for r in rows)
        return out.getvalue()
    out.write(title)
    out.write(f"{head[0]:9s} {head[1]:22s} {head[2]:>8s}  {head[3]:16s} {head[4]}\n")
    out.writelines(f"{r[0]:9s} {r[1]:22s} {r[2]:>8s}  {r[3]:16s} {r[4]}\n" for r in rows)
    return out.getvalue()
