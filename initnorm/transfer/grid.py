"""initnorm-transfer's report (``cli/transfer.py`` parses and calls it): a search's best configuration trained at target
sizes, each target's loss beside the search's own, and, with a grid of the target's own per-lr losses (an existing sweep,
or the ``--check`` grid), its own optimum, the shift of the transferred rate from it and the penalty, each with the
transfer report's bootstrap interval over the grid's seeds (``transferred``). ``summary`` is a search's ``search.json``,
checked where it is read; ``where`` names the grid in every refusal (``--grid FOLDER``)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from initnorm.errors import ConfigError
from initnorm.results import read_metrics
from initnorm.transfer.bootstrap import LEVEL, Estimate
from initnorm.transfer.fit import Seeds
from initnorm.transfer.records import cells_from_records, metric_of, swept_value
from initnorm.transfer.rows import transferred


def metric_of_search(summary: dict) -> str:
    return summary.get("metric", "final_val_loss")  # a search.json written before it named its metric scored that


def grid_curves(records: list[dict], where: str, axis: str, param: str, metric: str, targets: list[int]) -> dict[int, Seeds]:
    """size -> seed -> log2 lr -> loss of ``param``'s jobs in a grid's records, scored by ``metric``; one line where the
    grid is another experiment's (another summary metric), lacks the param or a target, or varies something else."""
    if not records:
        raise ConfigError(f"{where}: no metrics.json below it and no runs.csv in it; fix it with a sweep folder "
                          "over lr x width (or a results folder keeping its runs.csv, e.g. results/chapter_mup)")
    if (theirs := metric_of(records)) != metric:
        raise ConfigError(f"{where} scores {theirs} (its summary.metrics) but the search scored {metric}: the two are "
                          "not the same experiment; fix it with the grid of the search's experiment")
    mine = [r for r in records if swept_value(r, "param") == param]
    _, cells = cells_from_records(mine, axis, metric)
    if not cells:
        found = ", ".join(sorted({swept_value(r, "param") for r in records}))
        raise ConfigError(f"{where} holds no lr x {axis} sweep for param={param} (its params: {found}; a runs.csv names "
                          f"only the keys its sweep varied); fix it with a sweep over lr and {axis} of param={param}")
    if len(cells) > 1:
        raise ConfigError(f"{where} varies more than lr and {axis} for param={param} ({[dict(k) for k in cells]}); "
                          "fix it with a grid that varies only those (one folder per setting)")
    curves = next(iter(cells.values()))
    if missing := [t for t in targets if t not in curves]:
        raise ConfigError(f"{where} has no {axis} {', '.join(map(str, missing))} for param={param} "
                          f"(it has {', '.join(map(str, sorted(curves)))}); fix it with `{axis}={','.join(map(str, sorted(curves)[1:]))}`")
    return curves


def given(record: dict) -> float | None:
    """The lr a job was given: its override (the search's, which a rule may have carried to another number, ``resolved``
    in its record), else its config's."""
    overrides = record.get("overrides") or {}
    return float(overrides["lr"]) if "lr" in overrides else (record.get("config") or {}).get("lr")


def means(records: list[dict], axis: str, metric: str) -> dict[tuple[float, float], float]:
    """(target, lr ``given``) -> mean ``metric`` over seeds (nan where a seed diverged), over a folder's ``records``."""
    cells: dict[tuple[float, float], list[float]] = {}
    for r in records:
        c = r.get("config") or {}
        loss = math.nan if r.get("diverged") else r.get(metric, math.nan)
        cells.setdefault((c.get(axis), given(r)), []).append(loss)
    return {k: (statistics.fmean(v) if all(math.isfinite(x) for x in v) else math.nan) for k, v in cells.items()}


def span(e: Estimate, show) -> str:
    return "—" if math.isnan(e.lo) or math.isnan(e.hi) else f"[{show(e.lo)}, {show(e.hi)}]"


def grid_cells(seeds: Seeds, lr: float, trained: float) -> str:
    """The grid's columns of one target: its own optimum, the shift and the penalty of ``lr``, each with its interval.
    An optimum on the grid's end is a bound (≤, ≥) with no interval, as in the transfer report: every resample finds the end."""
    fit, opt, shift, penalty = transferred(seeds, math.log2(lr))
    bound = {"lowest": "≤ ", "highest": "≥ "}.get(fit.edge, "")

    def interval(e: Estimate, show) -> str:
        return "— (grid edge)" if fit.edge else span(e, show)

    off = " (off the grid)" if math.isnan(penalty.value) else ""
    return (f" {bound}{2 ** opt.value:.4g} | {interval(opt, lambda x: f'{2 ** x:.4g}')} | {bound}{shift.value:+.2f} | "
            f"{interval(shift, lambda x: f'{x:+.2f}')} | {'≥ ' if fit.edge else ''}{penalty.value:.4f}{off} | "
            f"{interval(penalty, lambda x: f'{x:.4f}')} | {trained - fit.loss:.4f} |")


def report(summary: dict, folder: Path, axis: str, base: float, curves: dict[int, Seeds] | None, grid: str) -> str:
    """The transfer table: each target's loss at the transferred lr beside the search's; with a grid, its own optimum,
    the shift and the penalty with their intervals, and the trained loss against the grid's best."""
    lr, predicted, metric = summary["best"]["params"]["lr"], summary["best"]["loss"], metric_of_search(summary)
    records = read_metrics(folder)  # once: the table's means and the rates the rules carried
    cells = means(records, axis, metric)
    pct = f"{LEVEL:.0%}"
    values = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary["best"]["params"].items())
    lines = [f"Transferred {values} (the search's best at {axis} {base:g}: {metric} {predicted:.4f}, {summary['objective']}).",
             f"Every loss here is {metric}, the experiment's summary metric, which the search scored"
             + (f"; the grid: {grid}, seeds {', '.join(map(str, sorted(next(iter(curves.values())), key=str)))}." if curves else "."),
             "", f"| {axis} | {metric} at the transferred lr | at the search's {axis} |"
             + (f" own optimum lr | {pct} interval | shift (octaves) | {pct} interval | penalty | {pct} interval | "
                "trained − grid's best |" if curves else ""),
             "|---|---|---|" + ("---|" * 7 if curves else "")]
    for target in sorted({t for t, _ in cells}):
        at = next((v for (t, x), v in cells.items() if t == target and math.isclose(x, lr, rel_tol=1e-12)), math.nan)
        lines.append(f"| {target:g} | {at:.4f} | {predicted:.4f} |" + (grid_cells(curves[int(target)], lr, at) if curves else ""))
    # the jobs that trained the search's rate (a --check grid's other rates are beside them in the folder)
    moved = {(r.get("config") or {}).get(axis): (r.get("resolved") or {}).get("lr") for r in records
             if (r.get("resolved") or {}).get("applied") and math.isclose(given(r) or math.nan, lr, rel_tol=1e-12)}
    if moved:  # a rule carried the search's rate: what each target trained at
        lines += ["", "The rules carried the lr to " + ", ".join(f"{x:.4g} at {axis} {t:g}" for t, x in sorted(moved.items()))
                  + " (each job's resolved numbers are in its metrics.json)."]
    if curves:
        lines += ["", (f"Own optimum: the vertex of the transfer report's parabola on the grid's seed means (initnorm/transfer/); "
                  f"shift: that optimum minus the transferred lr, in octaves; penalty: the grid's fitted {metric} at the transferred "
                  f"lr minus its best fitted; intervals: {pct} bootstrap over the grid's seeds, the transferred lr held fixed; "
                  "trained − grid's best: the transfer runs' mean minus the same best.")]
    return "\n".join(lines) + "\n"
