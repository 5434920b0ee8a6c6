"""The bootstrap over seeds: its resamples (every distinct one when they are few), their weights and the interval.

Few seeds have few distinct resamples (C(2n-1, n): 3 for 2 seeds, 10 for 3, 462 for 6), so up to
``N_BOOT`` of them are enumerated, each weighted by its multiplicity (how many of the n^n ordered
draws give it); more are ``N_BOOT`` random draws with a fixed RNG seed, so a report is the same on
every run. An interval is a weighted percentile: nothing is interpolated between resamples.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

LEVEL = 0.95  # bootstrap interval
N_BOOT = 1000  # the most resamples: fewer distinct ones than this are enumerated exactly, more are drawn at random
BOOT_SEED = 0


@dataclass(frozen=True)
class Estimate:
    value: float
    lo: float
    hi: float
    resamples: int = 0  # the distinct resamples of seeds the interval rests on (0: none, one seed)
    exact: bool = False  # every distinct resample, weighted by its multiplicity (else random draws)


def is_exact(seeds: list[Any], n_boot: int) -> bool:
    """Whether the bootstrap enumerates every distinct resample of ``seeds``: there are C(2n-1, n) of them
    (n seeds: 3 for 2, 10 for 3, 35 for 4, 462 for 6), and no more than ``n_boot``."""
    n = len(seeds)
    return 1 < n and 0 < n_boot and math.comb(2 * n - 1, n) <= n_boot


def resamples(seeds: list[Any], n_boot: int, rng_seed: int) -> list[tuple[tuple[Any, ...], float]]:
    """The bootstrap's draws of ``seeds`` with replacement, each (sorted, so equal draws share a fit) with its
    probability. Every distinct draw, weighted by its multiplicity (n! / prod(count!) of the n^n ordered draws),
    when ``is_exact``: random draws miss the rare ones (of 3 seeds, the draw of one seed thrice has probability
    1/27, 3.7%, more than a 95% interval's 2.5% tail, but 1,000 draws with RNG seed 0 give it 22 times).
    Otherwise ``n_boot`` random draws of weight 1/n_boot. None for one seed or ``n_boot`` 0."""
    n = len(seeds)
    if n < 2 or n_boot <= 0:
        return []
    ordered = sorted(seeds, key=str)
    if is_exact(seeds, n_boot):
        out = []
        for draw in itertools.combinations_with_replacement(ordered, n):
            ways = math.factorial(n)
            for count in Counter(draw).values():
                ways //= math.factorial(count)
            out.append((draw, ways / n**n))
        return out
    rng = random.Random(rng_seed)
    return [(tuple(sorted((rng.choice(ordered) for _ in ordered), key=str)), 1 / n_boot) for _ in range(n_boot)]


def interval(samples: list[tuple[float, float]], level: float) -> tuple[float, float]:
    """The percentile interval of weighted samples (value, probability; nan dropped): the lowest value with at
    least (1 - level) / 2 of the weight at or below it, and the highest with at least as much at or above it,
    so that each tail outside holds less than (1 - level) / 2. Nothing is interpolated between resamples."""
    v = sorted((x, w) for x, w in samples if not math.isnan(x))
    total = sum(w for _, w in v)
    if not v or total <= 0:
        return math.nan, math.nan
    tail = (1 - level) / 2 * total * (1 - 1e-9)  # a tail of exactly (1 - level) / 2 counts in

    def first(items: list[tuple[float, float]]) -> float:
        acc = 0.0
        for x, w in items:
            acc += w
            if acc >= tail:
                return x
        return items[-1][0]

    return first(v), first(v[::-1])


def estimate(value: float, samples: list[tuple[float, float]], level: float, distinct: int = 0, exact: bool = False) -> Estimate:
    """``value`` with the percentile interval of its weighted bootstrap ``samples`` (nan ends without samples),
    resting on ``distinct`` resamples (``exact``: every one there is)."""
    if not samples:
        return Estimate(value, math.nan, math.nan)
    return Estimate(value, *interval(samples, level), distinct, exact)
