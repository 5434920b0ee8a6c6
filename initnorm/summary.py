"""A sweep's summary, rebuilt from its folder alone: ``summarize(folder)`` reads every job's
``metrics.json`` below it and writes ``summary.md``, ``summary.csv`` (one row per setting: mean ± sd
over seeds and the per-seed values, as the deck's §7b table), ``runs.csv`` (one row per job) and the
plots the jobs name (``summary.plots``), so a crashed or resumed sweep can always be summarised again.
A sweep over a rate x an axis (width, depth, batch size, steps, weight decay) also gets the transfer
table (``initnorm.transfer``): its markdown at the end of summary.md and ``transfer.csv``; over a new
axis, or two at once, the ``lr_optimum`` figure and (two axes) the table of the optimum at every pair.

A folder that keeps only ``runs.csv`` (results/ does) is summarised from it: the same summary.md,
summary.csv and transfer table; the figures need the jobs' curves and configs, so the ones there are kept.
"""

from __future__ import annotations

import logging
from pathlib import Path

from initnorm import tb, transfer
from initnorm.plots import PLOTS
from initnorm.results import (
    METRICS_FILE,
    RUNS_FILE,
    differing_keys,
    group_rows,
    read_sweep,
    render_csv,
    render_markdown,
    render_runs_csv,
    swept_keys,
    write_atomic,
)

log = logging.getLogger(__name__)


def summarize(folder: Path | str) -> str:
    """Write ``summary.md``, ``summary.csv`` and ``runs.csv`` into ``folder``; return the markdown table."""
    folder = Path(folder)
    records, from_csv = read_sweep(folder)
    if not records:
        raise FileNotFoundError(f"no readable {METRICS_FILE} below {folder} and no {RUNS_FILE} in it: is it a sweep folder?")
    keys, metrics, rows = group_rows(records)
    table = render_markdown(keys, metrics, rows) + differing_note(records) + fork_note(folder, records)
    moved = transfer.transfer_table(records)
    axes = transfer.sweep_axes(records) if moved else []
    names = [p for r in records for p in r.get("summary_plots", []) if isinstance(p, str)]
    if moved and not {"lr_transfer", "lr_transfer_depth"} & set(names):  # any transfer axis, with or without a param axis:
        names.append("lr_transfer")  # the loss against the rate, a curve per axis value (it was drawn only where a preset named it)
    if moved and (len(axes) > 1 or moved[0].axis not in ("width", "depth")):
        names.append("lr_optimum")  # the optimum against a new axis, or two, as a figure beside the table
    for name in dict.fromkeys(names):
        if name not in PLOTS.names():  # a name read from a record is data: never a path to import and call
            log.warning("no %s plot for %s: not a plot initnorm has (%s)", name, folder, ", ".join(PLOTS.names()))
            continue
        try:
            plot = PLOTS.get(name)(records)  # PNGs into the folder, markdown after the table
        except Exception as exc:  # a record from another version must not cost the table
            log.warning("no %s plot for %s (%s: %s); the table is written without it", name, folder, type(exc).__name__, exc)
            continue
        for file, png in plot.files.items() if not from_csv else ():
            write_atomic(folder / file, png)
        table += f"\n{plot.markdown}"
    if not from_csv:  # one TensorBoard run per setting: a sweep of thousands of seeds stays readable there (tb.py)
        try:
            tb.write_setting_runs(folder, records)
        except Exception as exc:  # as a plot: the table stands without it
            log.warning("no per-setting TensorBoard runs for %s (%s: %s)", folder, type(exc).__name__, exc)
    if moved:
        table += transfer.render_markdown(moved, transfer.metric_of(records))
        if len(axes) > 1:  # width x batch, width x horizon: the optimum at every pair, and the exponent along the second
            table += transfer.render_two_axes(transfer.transfer_table(records, axis=axes[1]), axes[0])
        write_atomic(folder / "transfer.csv", transfer.render_csv(moved))
    write_atomic(folder / "summary.md", f"# Summary of {folder.name}\n\n{count_line(records, missing_jobs(folder, records))}\n\n{table}")
    write_atomic(folder / "summary.csv", render_csv(keys, metrics, rows))
    write_atomic(folder / "runs.csv", render_runs_csv(records))
    return table


def differing_note(records: list[dict]) -> str:
    """The line under the table naming the keys that split its rows though nobody swept them (results.differing_keys):
    jobs of one folder whose recorded configs differ (a rerun with another lr) are never averaged as one setting."""
    differing = differing_keys(records, swept_keys(records))
    if not differing:
        return ""
    return (f"\nNot swept, yet set differently between jobs of this folder (a rerun with other values?): {', '.join(differing)}. "
            "Each value is its own row: no row averages jobs whose configs differ.\n")


def fork_note(folder: Path, records: list[dict]) -> str:
    """What a sweep's horizon forks saved (``training/forks.py``), told from its records, not from its plan: the branches
    that started from the longer run's state (their ``fork``), the steps that spared, and the ones that trained from step 0
    though the plan shared steps with them (a state planted or damaged in the store: their train.log says why)."""
    if not (folder / ".forks").exists():  # no forks (training/forks.STORE): reading a folder never imports Lightning
        return ""
    from initnorm.training import forks

    planned = sum(int(f.get("shared") or 0) for f in forks.read_plan(folder)["families"].values())
    if not planned:
        return ""
    taken = [r["fork"] for r in records if isinstance(r.get("fork"), dict) and isinstance(r["fork"].get("step"), int)]
    spared = sum(f["step"] for f in taken)
    trained = sum(int(r.get("steps") or 0) for r in records) - spared
    line = (f"\nHorizon forks: {len(taken)} branch{'es' * (len(taken) != 1)} started from the longest run's state, "
            f"{trained + spared:,} steps recorded of which {trained:,} trained")
    if spared < planned:
        line += (f"; the plan shared {planned:,} steps and {planned - spared:,} were trained again: a branch that trained "
                 "from step 0 says why in its train.log")
    return line + ".\n"


def missing_jobs(folder: Path, records: list[dict]) -> list[str]:
    """The job folders (Hydra made their ``.hydra/`` when the job started) without a readable record:
    ``default/seed=4 (no metrics.json)``, a job killed before it finished or whose record is damaged."""
    have = {r["_dir"] for r in records}
    out = []
    for hydra_dir in sorted(folder.rglob(".hydra")):
        job = str(hydra_dir.parent.relative_to(folder))
        if job != "." and job not in have:
            out.append(f"{job} ({'no' if not (hydra_dir.parent / METRICS_FILE).exists() else 'an unreadable'} {METRICS_FILE})")
    return out


def count_line(records: list[dict], missing: list[str]) -> str:
    """``12 jobs.``, or ``3 of 4 jobs finished; missing: default/seed=4 (no metrics.json).``"""
    if not missing:
        return f"{len(records)} jobs."
    finished = sum(r.get("status") == "finished" for r in records)
    log.warning("%d of %d jobs finished; missing: %s", finished, len(records) + len(missing), ", ".join(missing))
    return f"{finished} of {len(records) + len(missing)} jobs finished; missing: {', '.join(missing)}."
