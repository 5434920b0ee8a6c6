"""From a sweep's job records (their metrics.json, or a results folder's runs.csv) to the transfer report's cells.

A sweep is read as rate x axis x setting x seed: the rate is what it tunes (``lr``, else
``optim.weight_decay`` at a fixed lr), the axis the first of ``axes.SWEPT_AXES`` that takes more
than one value, and the setting every other swept key (the parameterisation, a second axis, ...)
but the seed and the keys that follow the axis (a fixed-token batch sweep's steps, one per batch).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from initnorm.nn.param import PARAMS, stable_across
from initnorm.results import differing_keys, row_value
from initnorm.transfer.axes import RATES, SWEPT_AXES, axis_value, config_value, number, slope
from initnorm.transfer.fit import finite
from initnorm.transfer.rows import Row, transfer_rows

PARAM_KEYS = ("param", "param.name")  # a swept parameterisation: a conf/param option, or a table's name or dotted path


def _overrides(r: dict) -> dict:
    return r.get("overrides") or {}


def tuned_rate(records: list[dict]) -> str | None:
    """What the sweep tunes: ``lr`` where it takes more than one value, else ``optim.weight_decay``; None for neither."""
    for rate in RATES:
        if len({str(_overrides(r)[rate]) for r in records if rate in _overrides(r)}) > 1:
            return rate
    return None


def follows(records: list[dict], key: str, axis: str) -> bool:
    """Whether ``key`` takes one value per value of ``axis`` (a fixed-token sweep's steps per batch): part of the axis, not a setting."""
    seen: dict[Any, set[str]] = {}
    for r in records:
        if key in _overrides(r) and axis in _overrides(r):
            seen.setdefault(str(_overrides(r)[axis]), set()).add(str(_overrides(r)[key]))
    return len(seen) > 1 and all(len(v) == 1 for v in seen.values())


def sweep_axes(records: list[dict], rate: str | None = None) -> list[str]:
    """The axes that take more than one value among the jobs that set the tuned rate, in ``SWEPT_AXES`` order,
    less the ones that follow an earlier one."""
    rate = rate or tuned_rate(records) or "lr"
    jobs = [_overrides(r) for r in records if rate in _overrides(r)]
    varying = [a for a in SWEPT_AXES if a != rate and len({str(ov[a]) for ov in jobs if a in ov}) > 1]
    out: list[str] = []
    for a in varying:
        if not any(follows(records, a, b) for b in out):
            out.append(a)
    return out


def sweep_axis(records: list[dict]) -> str | None:
    """The first axis that takes more than one value among the jobs that set the tuned rate (``width`` before
    ``depth`` before ``batch_size`` ...); None for a sweep over the rate alone."""
    axes = sweep_axes(records)
    return axes[0] if axes else None


def swept_value(record: dict, key: str) -> str:
    """A job's value of a setting key: its override, else for ``param`` the table its config
    composed (``sp`` in conf/train.yaml, the one default a record without its config can have)."""
    overrides = _overrides(record)
    if key in overrides:
        return str(overrides[key])
    if key == "param":
        return str(((record.get("config") or {}).get("param") or {}).get("name", "sp"))
    return row_value(record, key)  # a key no job overrode that its config recorded differently (results.differing_keys)


def metric_of(records: list[dict]) -> str:
    return (records[0].get("summary_metrics") or ["final_loss"])[0] if records else "final_loss"


def setting_keys(records: list[dict], axis: str, rate: str) -> list[str]:
    """Every swept key but the rate, the axis, the seed and the keys that follow the axis; ``param`` always
    where a job names it (a single table's sweep still reads its name), any other only where it varies."""
    keys: list[str] = ["param"] if any("param" in _overrides(r) for r in records) else []
    for r in records:
        for k in r.get("swept") or _overrides(r):
            if k not in (rate, "seed", axis) and k not in keys and not follows(records, k, axis):
                keys.append(k)
    return [k for k in keys if k == "param" or len({str(_overrides(r).get(k)) for r in records}) > 1]


def cells_from_records(records: list[dict], axis: str | None = None, metric: str | None = None,
                       rate: str | None = None) -> tuple[str | None, dict]:
    """(axis, setting -> axis value -> seed -> log2 rate -> loss) from finished jobs; a diverged job is nan.
    A rate of 0 (no weight decay) has no place on a log2 grid and is left out."""
    rate = rate or tuned_rate(records) or "lr"
    axis = axis or sweep_axis(records)
    metric = metric or metric_of(records)
    if axis is None:
        return None, {}
    varying = setting_keys(records, axis, rate)
    varying += differing_keys(records, [*varying, axis, rate])  # never one curve of jobs whose configs differ
    cells: dict[tuple, dict[Any, dict[Any, dict[float, float]]]] = {}
    for r in records:
        ov = _overrides(r)
        value = axis_value(r, axis) if axis in ov or axis == "tokens" else None
        x = number(ov.get(rate))
        if r.get("status") != "finished" or value is None or x is None or x <= 0:
            continue
        setting = tuple((k, swept_value(r, k)) for k in varying)
        loss = math.nan if r.get("diverged") else r.get(metric, math.nan)
        loss = loss if finite(loss) else math.nan
        cells.setdefault(setting, {}).setdefault(value, {}).setdefault(r.get("seed"), {})[math.log2(x)] = loss
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


def _by_setting(records: list[dict], axis: str, rate: str) -> dict[tuple, list[dict]]:
    varying = setting_keys(records, axis, rate)
    out: dict[tuple, list[dict]] = {}
    for r in records:
        if r.get("status") == "finished" and (axis in _overrides(r) or axis == "tokens"):
            out.setdefault(tuple((k, swept_value(r, k)) for k in varying), []).append(r)
    return out


def applied_exponents(records: list[dict], axis: str, rate: str) -> dict[tuple, float]:
    """setting -> the exponent along ``axis`` that the runs' own rule applied to the rate they were given: the slope of
    log2 (resolved rate / the swept one) on log2 axis value, from each record's ``resolved`` numbers
    (training/record.py). 0 where no rule moved it or the records do not say."""
    key = "lr" if rate == "lr" else "weight_decay"
    out = {}
    for setting, rs in _by_setting(records, axis, rate).items():
        ratios: dict[float, list[float]] = {}
        for r in rs:
            given, resolved, value = number(_overrides(r).get(rate)), (r.get("resolved") or {}).get(key), axis_value(r, axis)
            if given and isinstance(resolved, (int, float)) and resolved > 0 and value and value > 0:
                ratios.setdefault(value, []).append(math.log2(resolved / given))
        if len(ratios) > 1:
            xs = sorted(ratios)
            e = slope([math.log2(x) for x in xs], [statistics.median(ratios[x]) for x in xs])
            if finite(e) and abs(e) > 1e-9:
                out[setting] = e
    return out


def base_values(records: list[dict], axis: str, rate: str) -> dict[tuple, float]:
    """setting -> the axis value its rates were tuned at, where the runs carried them from one by a rule (the
    config's ``transfer.applied.from``: initnorm/transfer/rules.py); the report's base, in place of the smallest."""
    out = {}
    for setting, rs in _by_setting(records, axis, rate).items():
        found = {number(config_value(r.get("config"), f"transfer.applied.from.{axis}")) for r in rs}
        if len(found) == 1 and None not in found:
            out[setting] = found.pop()
    return out


def token_counts(records: list[dict], axis: str, rate: str) -> dict[tuple, float]:
    """(setting, axis value) -> the tokens its steps mean, for a batch or steps axis where the configs say."""
    out = {}
    if axis not in ("batch_size", "steps"):
        return out
    for setting, rs in _by_setting(records, axis, rate).items():
        for r in rs:
            n = axis_value(r, "tokens")  # as cells_from_records reads a tokens axis: a count the sweep set, else its config's
            if n is not None:
                out[(setting, axis_value(r, axis))] = n
    return out


def transfer_table(records: list[dict], axis: str | None = None, **kw) -> list[Row]:
    """The transfer rows of a sweep's records; empty when it is not a sweep of a rate x an axis."""
    rate = tuned_rate(records)
    if rate is None:
        return []
    axis, cells = cells_from_records(records, axis=axis, rate=rate)
    if axis is None or not cells:
        return []
    if len({x for by in cells.values() for s in by.values() for c in s.values() for x in c}) < 2:
        return []
    return transfer_rows(cells, axis, rate=rate, base=base_values(records, axis, rate), applied=applied_exponents(records, axis, rate),
                         tokens=token_counts(records, axis, rate), **kw)
