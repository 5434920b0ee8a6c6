"""The benchmark's ``--scale`` part: sweeps of N one-seed-each jobs (N = 100, 1,000, 10,000), set-up and training apart.

Each size runs ``initnorm.train -m seed=range(1,N+1) steps=S`` under the vectorised launcher as a command of its own
(``callbacks=none``, no progress bar), and its output lines are timed as they come: the first line, the end of the
checks (the sweep's header), the first job's start, the end. The training is what the jobs' records say their
steps took (each group's ``group_ms_per_step`` x its steps, once per group); the set-up is the rest of the
wall time: imports, composing and checking every job, grouping, each member's build, Trainer, writers and record.
The parent's peak RSS is read from /proc while it runs. The curve (time against N) is a table per ``steps``.

At N = 10,000 a size takes about an hour of a 2-core machine and writes 10,000 job folders (~40 kB each): run it on
a machine of its own (bench/RESULTS.md says which sizes ran).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from initnorm.repro.bench_measure import ROOT, load, tree_peaks

SIZES = (100, 1000, 10000)
STEPS = (1, 100)
MARKS = {"first line": lambda line: True, "checked": lambda line: line.startswith("sweep of "),
         "first job": lambda line: line.startswith("start "), "groups": lambda line: line.startswith("vectorized: ")}


def run_sweep(n: int, steps: int, work: Path, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """One sweep of ``n`` jobs of ``steps`` steps: when each mark's line came, the wall time, the parent's peak RSS, the
    training time its records account for, and the load before and after."""
    folder = work / f"scale_{n}_{steps}"
    cmd = [sys.executable, "-m", "initnorm.train", "-m", f"seed=range(1,{n + 1})", f"steps={steps}", "callbacks=none",
           "trainer.enable_progress_bar=false", f"trainer.val_check_interval={steps}", "checkpoint.every_n_steps=0",
           "hydra/launcher=vectorized", f"hydra.sweep.dir={folder}", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    before, peak, done = load(), [0], threading.Event()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def watch() -> None:  # the parent alone: its workers hold what they train
        while not done.wait(0.2):
            peak[0] = max(peak[0], tree_peaks(proc.pid).get(proc.pid, 0))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    marks: dict[str, float] = {}
    tail: list[str] = []
    for line in proc.stdout:
        now = time.perf_counter() - start
        for name, matches in MARKS.items():
            if name not in marks and matches(line):
                marks[name] = now
        tail = (tail + [line])[-20:]
    proc.wait()
    wall = time.perf_counter() - start
    done.set()
    watcher.join()
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{''.join(tail)}")
    return {"n": n, "steps": steps, "wall_s": wall, "marks": marks, "parent_mb": peak[0] / 1024,
            "train_s": training_seconds(folder, steps), "load": (before, load())}


def training_seconds(folder: Path, steps: int) -> float:
    """The fit's time as the records state it (its steps and validations): each group once, by its first member's
    record (its members share the group's number), each job alone by its own."""
    from initnorm.results import read_metrics

    total = 0.0
    for r in read_metrics(folder):
        group = r.get("group") or {}  # every fit's record (a job alone: a group of one)
        if group.get("member", 0) != 0:
            continue
        total += (group.get("ms_per_step") or 0.0) * steps / 1000
    return total


def measure(sizes: list[int], steps: list[int], work: Path) -> list[dict[str, Any]]:
    out = []
    for s in steps:
        for n in sizes:
            print(f"scale: {n:,} jobs of {s} step{'s' * (s != 1)} ...", file=sys.stderr, flush=True)
            out.append(run_sweep(n, s, work))
    return out


def report(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["", "## Sweeps of N jobs: set-up and training apart (the curve of time against N)", "",
             ("`initnorm.train -m seed=range(1,N+1) steps=S callbacks=none hydra/launcher=vectorized`, one process per row. "
              "*First line*, *checked* (the sweep's header: every job composed and checked), *first job*: seconds from the start. "
              "*Training*: the fit's time the records state (each group once); *set-up*: the wall time less the training. "
              "*Parent RSS*: the sweep's own process (its workers train)."), ""]
    for s in dict.fromkeys(r["steps"] for r in rows):
        lines += [f"steps={s}:", "",
                  "| N | wall | first line | checked | first job | training | set-up | set-up per job | parent RSS | load before / after |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in (r for r in rows if r["steps"] == s):
            at = {name: f"{r['marks'][name]:.1f} s" if name in r["marks"] else "-" for name in MARKS}
            setup = r["wall_s"] - r["train_s"]
            lines.append(f"| {r['n']:,} | {r['wall_s']:.1f} s | {at['first line']} | {at['checked']} | {at['first job']} "
                         f"| {r['train_s']:.1f} s | {setup:.1f} s | {1000 * setup / r['n']:.0f} ms | {r['parent_mb']:.0f} MB "
                         f"| {r['load'][0]:.2f} / {r['load'][1]:.2f} |")
        lines.append("")
    return lines
