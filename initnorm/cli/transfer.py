"""Take a search's best configuration to larger models: ``initnorm-transfer SEARCH_FOLDER width=256,1024 [seed=1,2,3] [--check]``.

Trains the best trial of ``hparams_search=...`` (its ``search.json``) at the target widths (or depths), in
``SEARCH_FOLDER_transfer`` (beside the search, so a resumed search's summary does not count these jobs), and
prints each target's loss beside what the search measured at its own width.
``--check`` trains instead a small lr grid around the transferred value at each target (``SEARCH_FOLDER_check``:
the rate x 2^-2 ... 2^2) and reads, with the transfer report's fit (initnorm/transfer.py), the target's own
optimum and the penalty of the transferred rate against it: what µP promises is small, and SP's is not.
``python -m initnorm.cli.transfer`` is the module form (``initnorm.transfer`` is the transfer report's
library module). The transfer and the check run as ``python -m initnorm.train -m`` sweeps in this process, so the
preflight, the launchers, the skip of finished jobs and the sweep summary (with its transfer table) are a sweep's.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from initnorm.errors import ConfigError
from initnorm.results import read_metrics
from initnorm.search_report import SUMMARY_FILE
from initnorm.transfer import fit_optimum

CHECK_OCTAVES = (-2, -1, 0, 1, 2)  # the --check grid: the transferred rate x 2^k (one octave apart, as results/ grids are)
SEARCH_ONLY = ("hparams_search",)  # the search's own overrides, which a transfer run does not take


def key_of(override: str) -> str:
    return override.partition("=")[0].lstrip("+~")


def load(folder: Path) -> dict:
    path = folder / SUMMARY_FILE
    if not path.is_file():
        raise ConfigError(f"{path} is missing: SEARCH_FOLDER must be the sweep folder of an `initnorm-train -m hparams_search=...` "
                          "run (it writes search.json at its end); fix it with the folder that search printed")
    summary = json.loads(path.read_text())
    if summary.get("best") is None:
        raise ConfigError(f"{folder}: no trial of the search completed (search.md lists them); rerun the search with a narrower "
                          "lr range, e.g. 'hydra.sweeper.params.lr=\"tag(log, interval(1e-4, 1e-2))\"'")
    return summary


def overrides_for(summary: dict, given: list[str], check: bool) -> list[str]:
    """The train command's overrides: the search's fixed ones, the best trial's values, the seeds, the targets."""
    keys = {key_of(o) for o in given}
    if not keys & {"width", "depth"}:
        raise ConfigError("name the targets to transfer to: width=256,1024 (or depth=4,8)")
    best = summary["best"]["params"]
    out = [o for o in summary["overrides"] if key_of(o) not in keys and key_of(o) not in SEARCH_ONLY and key_of(o) not in best]
    for k, v in best.items():
        if k == "lr" and check:
            out.append("lr=" + ",".join(repr(v * 2.0**k) for k in CHECK_OCTAVES))
        elif k not in keys:
            out.append(f"{k}={v!r}")
    if "seed" not in keys:
        out.append("seed=" + ",".join(str(s) for s in summary["seeds"]))
    return out + given


def train_sweep(overrides: list[str], folder: Path) -> None:
    from initnorm.cli import train

    argv = sys.argv
    sys.argv = ["initnorm.train", "-m", *overrides, f"hydra.sweep.dir={folder}"]
    try:
        train.main()
    except SystemExit as exc:
        if exc.code:  # a failed job: the sweep printed it; the report still reads what finished
            print(f"warning: the transfer sweep in {folder} exited {exc.code}", file=sys.stderr)
    finally:
        sys.argv = argv


def means(folder: Path, axis: str) -> dict[tuple[float, float], float]:
    """(target, lr) -> mean final_val_loss over seeds (nan where a seed diverged)."""
    cells: dict[tuple[float, float], list[float]] = {}
    for r in read_metrics(folder):
        c = r.get("config") or {}
        cells.setdefault((c.get(axis), c.get("lr")), []).append(r.get("final_val_loss", math.nan))
    return {k: (statistics.fmean(v) if all(math.isfinite(x) for x in v) else math.nan) for k, v in cells.items()}


def report(summary: dict, folder: Path, axis: str, base: float, check: bool) -> str:
    lr, predicted = summary["best"]["params"]["lr"], summary["best"]["loss"]
    cells = means(folder, axis)
    lines = [f"Transferred lr {lr:.4g} (the search's best at {axis} {base:g}: loss {predicted:.4f}, {summary['objective']})", "",
             f"| {axis} | loss at the transferred lr | at the search's {axis} |"
             + (" own optimum lr | shift (octaves) | penalty |" if check else ""),
             "|---|---|---|" + ("---|---|---|" if check else "")]
    for target in sorted({t for t, _ in cells}):
        at = next((v for (t, x), v in cells.items() if t == target and math.isclose(x, lr, rel_tol=1e-12)), math.nan)
        row = f"| {target:g} | {at:.4f} | {predicted:.4f} |"
        if check:
            grid = sorted((x, v) for (t, x), v in cells.items() if t == target)
            fit = fit_optimum([math.log2(x) for x, _ in grid], [v for _, v in grid])
            penalty = fit.at(math.log2(lr)) - fit.loss
            edge = f" (on the grid's {fit.edge} end)" if fit.edge else ""
            row += f" {2 ** fit.log2_lr:.4g}{edge} | {fit.log2_lr - math.log2(lr):+.2f} | {penalty:.4f} |"
        lines.append(row)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m initnorm.cli.transfer", description=__doc__.split("\n\n")[0])
    p.add_argument("folder", metavar="SEARCH_FOLDER", type=Path, help="the sweep folder of an hparams_search run")
    p.add_argument("overrides", nargs="+", metavar="KEY=VALUE", help="width=256,1024 (or depth=...), seed=1,2,3, any other override")
    p.add_argument("--check", action="store_true",
                   help="an lr grid around the transferred value at each target: its own optimum, the penalty")
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        summary = load(a.folder)
        overrides = overrides_for(summary, a.overrides, a.check)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    axis = "width" if any(key_of(o) == "width" for o in a.overrides) else "depth"
    base = next((r["config"][axis] for r in read_metrics(a.folder) if axis in (r.get("config") or {})), math.nan)
    out = Path(f"{a.folder}_{'check' if a.check else 'transfer'}")
    train_sweep(overrides, out)
    text = report(summary, out, axis, base, a.check)
    (out / "transfer_report.md").write_text(text)
    print(f"\n{text}(also in {out / 'transfer_report.md'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
