"""The transfer table's rows: per (setting, axis value) the optimum with its interval, its shift from the base
value's and the penalty of the base value's rate, and per setting the exponent of the optimum along the axis.

- the optimum: ``fit.fit_optimum`` on the seed means, with a percentile bootstrap over seeds
  (``bootstrap``). Seeds are resampled once per replicate for every axis value (the same seed
  numbers everywhere), so the shift, the penalty and the exponent get paired intervals;
- the shift: the optimum minus the base value's, in log2 units (octaves); negative = it falls as
  the axis grows;
- the penalty: the loss at this value when trained at the base value's optimal rate, read on this
  value's fitted curve, minus its best fitted loss; infinite where that rate diverged;
- the exponent: the least-squares slope of the optimum's log2 on the axis value's log2, over the
  values whose optimum lies inside the grid (an optimum on the grid's edge is a bound, not a point);
  its interval from the same resamples. Beside it each rule's exponent (``axes.RULES``), less the one
  the runs' own rule applied already (``applied``: a sweep of rates tuned at a base and carried by a
  rule measures what is left).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from initnorm.transfer.axes import slope
from initnorm.transfer.bootstrap import BOOT_SEED, LEVEL, N_BOOT, Estimate, estimate, is_exact, resamples
from initnorm.transfer.fit import Fit, Seeds, finite, fit_optimum, seed_mean

NONE = Estimate(math.nan, math.nan, math.nan)


@dataclass(frozen=True)
class Row:
    """One (setting, axis value) of the transfer table."""

    setting: tuple[tuple[str, str], ...]  # e.g. (("param", "sp"),)
    axis: str  # width | depth | batch_size | steps | tokens | optim.weight_decay
    size: float  # the axis value (an int for widths, depths, batches, steps)
    seeds: int
    fit: Fit
    optimum: Estimate  # log2 rate; lo and hi nan when one seed gives no interval
    shift: Estimate  # log2 units from the base value's optimum
    penalty: Estimate  # loss at the base's optimal rate minus best loss
    base: bool = False  # the base value: shift and penalty are 0 by construction
    bound: str = ""  # "" (measured) | "+" | "-" | "?": where an optimum on the grid's edge may move the shift
    rate: str = "lr"  # what was tuned: lr, or optim.weight_decay at a fixed lr
    exponent: Estimate = NONE  # the setting's: slope of log2 optimum on log2 axis value, with its interval
    fitted: tuple[float, ...] = ()  # the setting's axis values that slope rests on (inside the grid, positive)
    applied: float = 0.0  # the exponent the runs' own rule applied along the axis (its rate is the tuned one)
    tokens: float | None = None  # what this value's steps mean (steps x batch x targets a sample has)

    @property
    def edge(self) -> str:
        return self.fit.edge


def transfer_rows(cells: Mapping[tuple, Mapping[float, Seeds]], axis: str = "width", n_boot: int = N_BOOT, level: float = LEVEL,
                  rng_seed: int = BOOT_SEED, rate: str = "lr", base: Mapping[tuple, float] | None = None,
                  applied: Mapping[tuple, float] | None = None, tokens: Mapping[tuple, float] | None = None) -> list[Row]:
    """``cells``: setting -> axis value -> seed -> log2 rate -> loss. Rows in setting order, then value.
    The base of each setting is ``base[setting]`` where given and measured, else its smallest value;
    ``applied[setting]``: the exponent its runs' rule applied; ``tokens[(setting, value)]``: what the value's steps mean."""
    rows = []
    for setting, by_size in cells.items():
        sizes = sorted(by_size)
        ref = (base or {}).get(setting)
        ref = ref if ref in by_size else sizes[0]
        fits = {n: fit_optimum(*seed_mean(by_size[n])) for n in sizes}
        on = [n for n in sizes if n > 0 and finite(fits[n].log2_lr) and not fits[n].edge]  # what the exponent rests on
        all_seeds = sorted({s for n in sizes for s in by_size[n]}, key=str)
        boot: dict[Any, dict[str, list[tuple[float, float]]]] = {n: {"opt": [], "shift": [], "pen": []} for n in sizes}
        slopes: list[tuple[float, float]] = []
        memo: dict[tuple, dict[float, Fit]] = {}  # random draws repeat: equal draws share a fit
        for draw, w in resamples(all_seeds, n_boot, rng_seed):
            bf = memo.get(draw)
            if bf is None:
                bf = memo[draw] = {n: fit_optimum(*seed_mean(by_size[n], draw)) for n in sizes}
            for n in sizes:
                boot[n]["opt"].append((bf[n].log2_lr, w))
                boot[n]["shift"].append((bf[n].log2_lr - bf[ref].log2_lr, w))
                boot[n]["pen"].append((penalty(bf[n], bf[ref].log2_lr), w))
            slopes.append((slope([math.log2(n) for n in on], [bf[n].log2_lr for n in on]), w))
        exact = is_exact(all_seeds, n_boot)
        exponent = estimate(slope([math.log2(n) for n in on], [fits[n].log2_lr for n in on]), slopes, level, len(memo), exact)
        for n in sizes:
            f = fits[n]
            point = {"opt": f.log2_lr, "shift": f.log2_lr - fits[ref].log2_lr, "pen": penalty(f, fits[ref].log2_lr)}
            est = {k: estimate(v, boot[n][k], level, len(memo), exact) for k, v in point.items()}
            rows.append(Row(setting, axis, n, len(by_size[n]), f, est["opt"], est["shift"], est["pen"], n == ref,
                            "" if n == ref else shift_bound(fits[ref], f), rate, exponent, tuple(on),
                            (applied or {}).get(setting, 0.0), (tokens or {}).get((setting, n))))
    return rows


def transferred(seeds: Seeds, log2_lr: float, n_boot: int = N_BOOT, level: float = LEVEL,
                rng_seed: int = BOOT_SEED) -> tuple[Fit, Estimate, Estimate, Estimate]:
    """One size's own optimum, and the shift and penalty of a rate chosen elsewhere (``log2_lr``: a search's
    best at the base size), each with the bootstrap interval over this size's seeds. The rate is held fixed:
    the interval is the grid's uncertainty, not the search's. What ``initnorm-transfer --grid`` prints."""
    fit = fit_optimum(*seed_mean(seeds))
    boot: dict[str, list[tuple[float, float]]] = {"opt": [], "shift": [], "pen": []}
    memo: dict[tuple, Fit] = {}
    ordered = sorted(seeds, key=str)
    for draw, w in resamples(ordered, n_boot, rng_seed):
        bf = memo.get(draw) or memo.setdefault(draw, fit_optimum(*seed_mean(seeds, draw)))
        boot["opt"].append((bf.log2_lr, w))
        boot["shift"].append((bf.log2_lr - log2_lr, w))
        boot["pen"].append((penalty(bf, log2_lr), w))
    point = {"opt": fit.log2_lr, "shift": fit.log2_lr - log2_lr, "pen": penalty(fit, log2_lr)}
    return fit, *(estimate(v, boot[k], level, len(memo), is_exact(ordered, n_boot)) for k, v in point.items())


def shift_bound(base: Fit, fit: Fit) -> str:
    """Which way the true shift may lie beyond the measured one when an optimum sits on the grid's
    edge: "-" (it may fall further), "+" (rise further), "?" (either way), "" (both optima inside)."""
    ways = {("lowest", False): "-", ("highest", False): "+", ("lowest", True): "+", ("highest", True): "-"}
    found = {ways[(f.edge, is_base)] for f, is_base in ((fit, False), (base, True)) if f.edge}
    return "" if not found else found.pop() if len(found) == 1 else "?"


def penalty(fit: Fit, x: float) -> float:
    """The fitted loss of ``fit`` at log2 rate ``x`` minus its best: 0 at its own optimum, nan off the grid."""
    if not (finite(x) and finite(fit.loss)):
        return math.nan
    p = fit.at(x) - fit.loss
    return 0.0 if abs(p) < 1e-12 else p  # at its own optimum: exactly none
