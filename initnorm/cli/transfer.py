"""Take a search's best configuration elsewhere: ``initnorm-transfer SEARCH width=256,1024 [seed=1,2,3] [--grid DIR | --check]``.

Trains the best trial of ``hparams_search=...`` (its ``search.json``) at the target widths (or depths, batch sizes,
numbers of steps: ``batch_size=128``, ``steps=6000``), in
``SEARCH_FOLDER_transfer`` (beside the search, so a resumed search's summary does not count these jobs), and
prints each target's loss beside what the search measured at its own width.
``--grid FOLDER`` reads a target-width grid that already exists (a sweep folder, or a results folder that keeps
its ``runs.csv``, such as results/chapter_mup): the target's own per-lr losses for the search's param, in the
search's metric; ``--check`` trains instead a small lr grid around the transferred value at each target
(``SEARCH_FOLDER_check``: the rate x 2^-2 ... 2^2). Either way the transfer report's fit (initnorm/transfer/)
gives the target's own optimum, the shift of the transferred rate from it and its penalty, each with the
report's bootstrap interval over the grid's seeds: what µP promises is small, and SP's is not.
Every number is the experiment's own summary metric (``summary.metrics[0]``, which the search scored:
``final_loss`` for the chapter's MLPs); the report names it, and a grid scored by another is refused.
``python -m initnorm.cli.transfer`` is the module form (``initnorm.transfer`` is the transfer report's
library module). The transfer and the check run as ``python -m initnorm.train -m`` sweeps in this process, so the
preflight, the launchers, the skip of finished jobs and the sweep summary (with its transfer table) are a sweep's.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from pathlib import Path

from initnorm.cli.file_overrides import data_overrides
from initnorm.errors import ConfigError
from initnorm.results import MAX_RECORD_BYTES, read_metrics, read_sweep, write_atomic
from initnorm.safe_files import NotAFile, read_bounded
from initnorm.search_report import SUMMARY_FILE
from initnorm.transfer import LEVEL, Estimate, Seeds, cells_from_records, metric_of, swept_value, transferred

AXES = ("width", "depth", "batch_size", "steps")  # what a target names (the first given is the report's axis)
CHECK_OCTAVES = (-2, -1, 0, 1, 2)  # the --check grid: the transferred rate x 2^k (one octave apart, as results/ grids are)
SEARCH_ONLY = ("hparams_search",)  # the search's own overrides, which a transfer run does not take


def key_of(override: str) -> str:
    return override.partition("=")[0].lstrip("+~")


def load(folder: Path) -> dict:
    path = folder / SUMMARY_FILE
    try:
        summary = json.loads(read_bounded(path, MAX_RECORD_BYTES).decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path} is missing: SEARCH_FOLDER must be the sweep folder of an `initnorm-train -m hparams_search=...` "
                          "run (it writes search.json at its end); fix it with the folder that search printed") from None
    except (NotAFile, OSError, ValueError) as exc:
        what = exc if isinstance(exc, NotAFile) else f"not readable JSON ({type(exc).__name__})"
        raise ConfigError(f"{path} is {what}, not a search.json initnorm wrote; delete it (or move it away) and rerun the search "
                          "with its folder pinned (`hydra.sweep.dir=...`) to write it again") from None
    if problem := shape_problem(summary):
        raise ConfigError(f"{path}: {problem}, not what a search writes; delete it (or move it away) and rerun the search with its "
                          "folder pinned (`hydra.sweep.dir=...`) to write it again")
    if summary.get("best") is None:
        raise ConfigError(f"{folder}: no trial of the search completed (search.md lists them); rerun the search with a narrower "
                          "lr range, e.g. 'hydra.sweeper.params.lr=\"tag(log, interval(1e-4, 1e-2))\"'")
    return summary


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def shape_problem(summary) -> str | None:
    """What makes a ``search.json`` other than a search's (its fields' types), or None. Its overrides and best values are
    checked as data where they are used (``overrides_for``)."""
    if not isinstance(summary, dict):
        return f"a JSON {type(summary).__name__}"
    best = summary.get("best")
    checks = [
        ("best", best is None or (isinstance(best, dict) and isinstance(best.get("params"), dict) and _number(best.get("loss"))
                                  and all(isinstance(k, str) for k in best["params"]))),
        ("overrides", isinstance(summary.get("overrides"), list) and all(isinstance(o, str) for o in summary["overrides"])),
        ("seeds", isinstance(summary.get("seeds"), list) and bool(summary["seeds"])
         and all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**32 for s in summary["seeds"])),
        ("metric", isinstance(summary.get("metric", ""), str) and re.fullmatch(r"\w*", summary.get("metric", "")) is not None),
        ("objective", isinstance(summary.get("objective", ""), str)),
    ]
    wrong = [name for name, ok in checks if not ok]
    return f"its {', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} not of a search's types" if wrong else None


def overrides_for(summary: dict, given: list[str], check: bool, tuned_at: dict | None = None, source: str = SUMMARY_FILE) -> list[str]:
    """The train command's overrides: the search's fixed ones, the best trial's values, the seeds, the targets, and
    ``transfer.base`` at the search's own width, depth, batch and steps (``tuned_at``), so that the rules the command
    names (``transfer.batch_rule=sqrt``, ``transfer.horizon_rule=power``, ``optim.weight_decay_rule=fraction``)
    carry the best trial's numbers to each target (initnorm/transfer/rules.py); without a rule nothing moves. What comes
    from the file (``source``) is data only (``file_overrides.data_overrides``): one line where it would name code."""
    keys = {key_of(o) for o in given}
    if not keys & set(AXES):
        raise ConfigError("name the targets to transfer to: width=256,1024 (or depth=4,8, batch_size=128, steps=6000)")
    best = summary["best"]["params"]
    out = [o for o in summary["overrides"] if key_of(o) not in keys and key_of(o) not in SEARCH_ONLY and key_of(o) not in best]
    values = {k: v for k, v in best.items() if k not in keys or (k == "lr" and check)}
    data_overrides(out + [f"{k}={v!r}" for k, v in values.items()], source)
    for k, v in values.items():
        out.append("lr=" + ",".join(repr(v * 2.0**k) for k in CHECK_OCTAVES) if k == "lr" and check else f"{k}={v!r}")
    if "seed" not in keys:
        out.append("seed=" + ",".join(str(s) for s in summary["seeds"]))
    out += [f"transfer.base.{k}={v}" for k, v in (tuned_at or {}).items() if f"transfer.base.{k}" not in keys]
    return out + given


def tuned_at(folder: Path) -> dict[str, int]:
    """The width, depth, batch size and steps the search's jobs trained at (from their records)."""
    from initnorm.transfer.rules import POINT

    config = next((r["config"] for r in read_metrics(folder) if isinstance(r.get("config"), dict)), {})
    return {k: config[k] for k in POINT if isinstance(config.get(k), int) and not isinstance(config[k], bool)}


def train_sweep(overrides: list[str], folder: Path, own: list[str] | None = None) -> int:
    """The sweep's exit status: 2 where its preflight refused a value (its one line printed, nothing trained or written).
    ``own``: this command's arguments, which a resume line names (a rerun skips the finished jobs and writes the report)."""
    from initnorm.cli import signals as cli_signals
    from initnorm.cli import train
    from initnorm.training import signals

    argv = sys.argv
    sys.argv = ["initnorm.train", "-m", *overrides, f"hydra.sweep.dir={folder}"]
    try:
        with cli_signals.resumed_as("initnorm.cli.transfer", own if own is not None else argv[1:]):
            train.main()
    except SystemExit as exc:
        if signals.requested() is not None:  # stopped by a signal (the sweep said so and how to resume): no report
            raise
        if exc.code == 2:  # a bad value (width=15): no job ran, so there is no report to write
            return 2
        if exc.code:  # a failed job: the sweep printed it; the report still reads what finished
            print(f"warning: the transfer sweep in {folder} exited {exc.code}", file=sys.stderr)
    finally:
        sys.argv = argv
    return 0


def metric_of_search(summary: dict) -> str:
    return summary.get("metric", "final_val_loss")  # a search.json written before it named its metric scored that


def targets_of(given: list[str], axis: str) -> list[int]:
    """The sizes ``width=256,1024`` names."""
    value = next(o.partition("=")[2] for o in given if key_of(o) == axis)
    try:
        return [int(v) for v in value.split(",")]
    except ValueError:
        raise ConfigError(f"{axis}={value!r}: initnorm-transfer takes a list of sizes; fix it with `{axis}=256,1024`") from None


def search_param(folder: Path) -> str:
    """The parameterisation the search trained (its ``param=`` override, else the table its jobs composed)."""
    records = read_metrics(folder)
    return swept_value(records[0], "param") if records else "sp"


def grid_curves(records: list[dict], where: str, axis: str, param: str, metric: str, targets: list[int]) -> dict[int, Seeds]:
    """size -> seed -> log2 lr -> loss of ``param``'s jobs in a grid's records, scored by ``metric``; one line where the
    grid is another experiment's (another summary metric), lacks the param or a target, or varies something else."""
    if not records:
        raise ConfigError(f"--grid {where}: no metrics.json below it and no runs.csv in it; fix it with a sweep folder "
                          "over lr x width (or a results folder keeping its runs.csv, e.g. results/chapter_mup)")
    if (theirs := metric_of(records)) != metric:
        raise ConfigError(f"--grid {where} scores {theirs} (its summary.metrics) but the search scored {metric}: the two are "
                          "not the same experiment; fix it with the grid of the search's experiment")
    mine = [r for r in records if swept_value(r, "param") == param]
    _, cells = cells_from_records(mine, axis, metric)
    if not cells:
        found = ", ".join(sorted({swept_value(r, "param") for r in records}))
        raise ConfigError(f"--grid {where} holds no lr x {axis} sweep for param={param} (its params: {found}; a runs.csv names "
                          f"only the keys its sweep varied); fix it with a sweep over lr and {axis} of param={param}")
    if len(cells) > 1:
        raise ConfigError(f"--grid {where} varies more than lr and {axis} for param={param} ({[dict(k) for k in cells]}); "
                          "fix it with a grid that varies only those (one folder per setting)")
    curves = next(iter(cells.values()))
    if missing := [t for t in targets if t not in curves]:
        raise ConfigError(f"--grid {where} has no {axis} {', '.join(map(str, missing))} for param={param} "
                          f"(it has {', '.join(map(str, sorted(curves)))}); fix it with `{axis}={','.join(map(str, sorted(curves)[1:]))}`")
    return curves


def means(folder: Path, axis: str, metric: str) -> dict[tuple[float, float], float]:
    """(target, lr given) -> mean ``metric`` over seeds (nan where a seed diverged). The lr is the one the job was given
    (its override: the search's, which a rule may have carried to another number, ``resolved`` in its record)."""
    cells: dict[tuple[float, float], list[float]] = {}
    for r in read_metrics(folder):
        c = r.get("config") or {}
        loss = math.nan if r.get("diverged") else r.get(metric, math.nan)
        given = float(r["overrides"]["lr"]) if "lr" in (r.get("overrides") or {}) else c.get("lr")
        cells.setdefault((c.get(axis), given), []).append(loss)
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
    cells = means(folder, axis, metric)
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
    moved = {(r.get("config") or {}).get(axis): (r.get("resolved") or {}).get("lr") for r in read_metrics(folder)
             if (r.get("resolved") or {}).get("applied")}
    if moved:  # a rule carried the search's rate: what each target trained at
        lines += ["", "The rules carried the lr to " + ", ".join(f"{lr:.4g} at {axis} {t:g}" for t, lr in sorted(moved.items()))
                  + " (each job's resolved numbers are in its metrics.json)."]
    if curves:
        lines += ["", (f"Own optimum: the vertex of the transfer report's parabola on the grid's seed means (initnorm/transfer/); "
                  f"shift: that optimum minus the transferred lr, in octaves; penalty: the grid's fitted {metric} at the transferred "
                  f"lr minus its best fitted; intervals: {pct} bootstrap over the grid's seeds, the transferred lr held fixed; "
                  "trained − grid's best: the transfer runs' mean minus the same best.")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m initnorm.cli.transfer", description=__doc__.split("\n\n")[0])
    p.add_argument("folder", metavar="SEARCH_FOLDER", type=Path, help="the sweep folder of an hparams_search run")
    p.add_argument("overrides", nargs="+", metavar="KEY=VALUE",
                   help="width=256,1024 (or depth=..., batch_size=..., steps=...), seed=1,2,3, any other override")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--check", action="store_true",
                     help="an lr grid around the transferred value at each target: its own optimum, the penalty")
    how.add_argument("--grid", metavar="FOLDER", type=Path,
                     help="an existing lr x width grid (a sweep folder or a folder with its runs.csv): the targets' own "
                          "optimum and the penalty, read from it")
    argv = sys.argv[1:] if argv is None else argv
    a = p.parse_args(argv)
    axis = next((k for k in AXES if any(key_of(o) == k for o in a.overrides)), "width")
    try:
        summary = load(a.folder)
        overrides = overrides_for(summary, a.overrides, a.check, tuned_at(a.folder), f"{a.folder / SUMMARY_FILE}")
        param, metric, targets = search_param(a.folder), metric_of_search(summary), targets_of(a.overrides, axis)
        curves = grid_curves(read_sweep(a.grid)[0], str(a.grid), axis, param, metric, targets) if a.grid else None
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    base = next((r["config"][axis] for r in read_metrics(a.folder) if _number(r.get("config", {}).get(axis))), math.nan)
    out = Path(f"{a.folder}_{'check' if a.check else 'transfer'}")
    if train_sweep(overrides, out, argv) == 2:
        return 2
    where = str(a.grid) if a.grid else f"{out} (--check)" if a.check else ""
    if a.check:
        try:
            curves = grid_curves(read_metrics(out), where, axis, param, metric, targets)
        except ConfigError as exc:  # the check's own jobs failed to make a grid (the sweep printed why)
            print(f"error: {exc}", file=sys.stderr)
            return 1
    text = report(summary, out, axis, base, curves, where)
    write_atomic(out / "transfer_report.md", text)
    print(f"\n{text}(also in {out / 'transfer_report.md'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
