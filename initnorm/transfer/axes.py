"""The axes a rate can transfer along, the rules the literature proposes for each, and a job's value on an axis.

An axis is a config key a sweep varies beside the rate it tunes: ``width`` and ``depth`` (a
parameterisation's table carries the rate), ``batch_size``, ``steps`` (and ``tokens``, what the steps
mean: steps x batch x the targets a sample has), and ``optim.weight_decay``. The rate tuned is ``lr``
or, in a sweep that holds lr and varies the weight decay, ``optim.weight_decay``.

A rule predicts how the optimal rate moves along an axis, as the exponent of a power law: the slope
of log2 rate* on log2 axis value. ``RULES[(rate, axis)]`` lists each named rule with its exponent and
source; ``transfer/rules.py`` applies the batch and horizon rules to a config (the same exponents),
and the transfer report sets the fitted exponent beside them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SWEPT_AXES = ("width", "depth", "batch_size", "steps", "optim.weight_decay")  # found in a sweep's overrides, in this order
DERIVED = ("tokens",)  # computed from a job's config, not an override: asked for by name
RATES = ("lr", "optim.weight_decay")  # what a sweep may tune: the first that varies
WORDS = {"width": "width", "depth": "depth", "batch_size": "batch size", "steps": "steps", "tokens": "tokens",
         "optim.weight_decay": "weight decay", "lr": "lr"}
SHORT = {"lr": "lr", "optim.weight_decay": "wd"}  # a tuned rate in a column's heading: optimal log2 lr, optimal log2 wd


@dataclass(frozen=True)
class Rule:
    """A named rule for the optimal rate along an axis: rate* proportional to axis^exponent."""

    name: str
    exponent: float
    source: str  # the paper, and what the rule keeps fixed


# Malladi et al. 2022 ("On the SDEs and Scaling Rules for Adaptive Gradient Algorithms"): under Adam a k-fold batch
# keeps the SDE when lr x sqrt(k), 1 - beta x k and eps / sqrt(k). Goyal et al. 2017 ("Accurate, Large Minibatch SGD"):
# lr x k under SGD. Both hold below the critical batch size (McCandlish et al. 2018), past which the optimum stops rising.
BATCH_RULES = (Rule("none", 0.0, "the rate held"), Rule("sqrt", 0.5, "Malladi et al. 2022, Adam's SDE rule"),
               Rule("linear", 1.0, "Goyal et al. 2017, SGD"))
# Bjorck et al. 2025 ("Scaling Optimal LR Across Token Horizons"): lr* falls as D^-0.32 over LLM sweeps at a fixed batch,
# where the tokens D grow as the steps.
HORIZON_EXPONENT = -0.32
HORIZON_RULES = (Rule("none", 0.0, "the rate held"), Rule("power", HORIZON_EXPONENT, "Bjorck et al. 2025"))
# Wang & Aitchison 2024 ("How to set AdamW's weight decay as you scale model and dataset size"): AdamW's weights are an
# exponential moving average over tau = 1 / (lr x wd) iterations, and the optimal tau is a fixed fraction of the run.
TIMESCALE = Rule("timescale", -1.0, "Wang & Aitchison 2024, lr x wd fixed")

RULES: dict[tuple[str, str], tuple[Rule, ...]] = {
    ("lr", "width"): (Rule("table", 0.0, "a width-stable table: µP, Yang et al. 2022"),
                      Rule("1/width", -1.0, "µP's hidden rate under Adam, which SP lacks")),
    ("lr", "depth"): (Rule("table", 0.0, "a depth-stable table: depth-µP, CompleteP"),),
    ("lr", "batch_size"): BATCH_RULES,
    ("lr", "steps"): HORIZON_RULES,
    ("lr", "tokens"): HORIZON_RULES,
    ("lr", "optim.weight_decay"): (Rule("none", 0.0, "the rate held"), TIMESCALE),
    # at a fixed lr: the timescale 1 / (lr x wd) held in iterations, or as a fraction of the run (Wang & Aitchison 2024)
    ("optim.weight_decay", "steps"): (Rule("iterations", 0.0, "tau in iterations held"),
                                      Rule("fraction", -1.0, "tau a fixed fraction of the run: Wang & Aitchison 2024")),
    ("optim.weight_decay", "tokens"): (Rule("iterations", 0.0, "tau in iterations held"),
                                       Rule("fraction", -1.0, "tau a fixed fraction of the run: Wang & Aitchison 2024")),
    ("optim.weight_decay", "batch_size"): (Rule("fraction", 0.0, "tau a fixed fraction of the run (fixed steps)"),
                                           Rule("tokens_per_param", 1.0, "tau in tokens per parameter: Bergsma et al. 2025")),
}


def rules_for(rate: str, axis: str) -> tuple[Rule, ...]:
    return RULES.get((rate, axis), ())


def word(key: str) -> str:
    """How the report names an axis or a rate: ``batch size``, ``weight decay``."""
    return WORDS.get(key, key.rsplit(".", 1)[-1].replace("_", " "))


def number(text: Any) -> float | int | None:
    """An axis value as a number (an int when whole: widths stay 64, not 64.0); None when it is not one."""
    try:
        x = float(text)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(x):
        return None
    return int(x) if x.is_integer() and "." not in str(text) and "e" not in str(text).lower() else x


def config_value(config: Mapping[str, Any] | None, key: str) -> Any:
    node: Any = config or {}
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def tokens(record: Mapping[str, Any]) -> float | None:
    """The tokens a job's steps mean (``tasks.tokens_of`` its config); a record read back from runs.csv has no config,
    and its ``tokens`` column instead. None where it has neither."""
    from initnorm.training.tasks import tokens_of

    config = record.get("config")
    return tokens_of(config) if config else number(record.get("tokens"))


def axis_value(record: Mapping[str, Any], axis: str) -> float | int | None:
    """A job's value on ``axis``: its override (a swept key), else its config's (a key set, not swept), else for
    ``tokens`` what its steps mean; None where the job has none."""
    overrides = record.get("overrides") or {}
    if axis in overrides:
        return number(overrides[axis])
    if axis == "tokens":
        return tokens(record)
    return number(config_value(record.get("config"), axis))


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The least-squares slope of ``ys`` on ``xs`` (nan with fewer than two distinct x)."""
    pts = [(x, y) for x, y in zip(xs, ys) if math.isfinite(x) and math.isfinite(y)]
    if len({x for x, _ in pts}) < 2:
        return math.nan
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
