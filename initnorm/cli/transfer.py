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
import sys
from pathlib import Path

from initnorm.cli.file_overrides import data_overrides
from initnorm.errors import ConfigError
from initnorm.results import MAX_RECORD_BYTES, read_metrics, read_sweep, write_atomic
from initnorm.safe_files import NotAFile, read_bounded
from initnorm.search_report import SUMMARY_FILE
from initnorm.transfer import swept_value
from initnorm.transfer.grid import grid_curves, metric_of_search, report

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
    if clash := [o for o in given if key_of(o) in best]:  # trained at the user's value, reported as the search's
        k = key_of(clash[0])
        raise ConfigError(f"{k} is what the search found ({best[k]!r}), the value initnorm-transfer carries to each target; "
                          f"drop `{clash[0]}` (another value is a sweep of its own: initnorm-train -m)")
    out = [o for o in summary["overrides"] if key_of(o) not in keys and key_of(o) not in SEARCH_ONLY and key_of(o) not in best]
    data_overrides(out + [f"{k}={v!r}" for k, v in best.items()], source)
    for k, v in best.items():
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
        curves = grid_curves(read_sweep(a.grid)[0], f"--grid {a.grid}", axis, param, metric, targets) if a.grid else None
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
            curves = grid_curves(read_metrics(out), f"--check's grid {out}", axis, param, metric, targets)
        except ConfigError as exc:  # the check's own jobs failed to make a grid (the sweep printed why)
            print(f"error: {exc}", file=sys.stderr)
            return 1
    text = report(summary, out, axis, base, curves, where)
    write_atomic(out / "transfer_report.md", text)
    print(f"\n{text}(also in {out / 'transfer_report.md'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
