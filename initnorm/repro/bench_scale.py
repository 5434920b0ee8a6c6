"""The benchmark's ``--scale`` part: sweeps of N one-seed-each jobs (N = 100, 1,000, 10,000), set-up and training apart.

Each size runs issue 37's command, ``initnorm.train -m seed=range(1,N+1) steps=S hydra/launcher=vectorized`` (the default
Decoder, its default callbacks and loggers, the launcher's default engine), as a command of its own, and its output lines
are timed as they come: the first line, the end of the checks (the sweep's header), the first job's start, the summary,
the end. The training is what the jobs' records say their fits took (each group's ``group.ms_per_step`` x its steps, once
per group: Lightning's fit, its validations included); the building is what they say each member's build took (its
data, model and init check: ``group.build_s``, absent before it was recorded); the set-up is the rest of the wall time:
imports, composing and checking every job, grouping, each member's folder, Trainer, writers and record, the summary.
The launcher's workers (one per core) fit their groups side by side, so the records' sums are worker-seconds: the
wall time they take is their sum over the workers.
The CPU time is the command's and its workers' (they share 2 cores with other work: it moves less with the load than
the wall time). The parent's peak RSS is read from /proc while it runs. The curve (time against N) is a table per ``steps``.

At N = 10,000 a size takes about an hour of a 2-core machine and writes 10,000 job folders (~40 kB each): run it on
a machine of its own (bench/RESULTS.md says which sizes ran).
"""

from __future__ import annotations

import os
import resource
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
         "first job": lambda line: line.startswith("start "), "groups": lambda line: line.startswith("vectorized: "),
         "summary": lambda line: line.startswith("Summary of ")}


def run_sweep(n: int, steps: int, work: Path, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """One sweep of ``n`` jobs of ``steps`` steps: when each mark's line came, the wall time, the parent's peak RSS, the
    training time its records account for, and the load before and after."""
    folder = work / f"scale_{n}_{steps}"
    cmd = [sys.executable, "-m", "initnorm.train", "-m", f"seed=range(1,{n + 1})", f"steps={steps}", "hydra/launcher=vectorized",
           f"hydra.sweep.dir={folder}", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    before, peak, done = load(), [0], threading.Event()
    cpu = _children_cpu()
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
    cpu = _children_cpu() - cpu
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{''.join(tail)}")
    return {"n": n, "steps": steps, "wall_s": wall, "cpu_s": cpu, "marks": marks, "parent_mb": peak[0] / 1024, "workers": os.cpu_count(),
            "train_s": training_seconds(folder, steps), "build_s": build_seconds(folder), "load": (before, load())}


def _children_cpu() -> float:
    """User + system CPU seconds of this process's ended children (the command, and the workers it waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


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


def build_seconds(folder: Path) -> float | None:
    """The members' builds (data, model, init check) as their records state them; None where no record states one."""
    from initnorm.results import read_metrics

    builds = [(r.get("group") or {}).get("build_s") for r in read_metrics(folder)]
    return sum(b for b in builds if b is not None) if any(b is not None for b in builds) else None


def measure(sizes: list[int], steps: list[int], work: Path) -> list[dict[str, Any]]:
    out = []
    for s in steps:
        for n in sizes:
            print(f"scale: {n:,} jobs of {s} step{'s' * (s != 1)} ...", file=sys.stderr, flush=True)
            out.append(run_sweep(n, s, work))
    return out


def report(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["", "## Sweeps of N jobs: set-up and training apart (the curve of time against N)", "",
             ("`initnorm.train -m seed=range(1,N+1) steps=S hydra/launcher=vectorized` (issue 37's command), one process per "
              "row. *First line*, *checked* (the sweep's header: every job composed and checked), *first job*, *summary*: "
              "seconds from the start. *CPU*: the command's and its workers'. *Training*: the fits' time the records state "
              "(each group once; summed over the workers, which fit side by side, one per core); *building*: the members' builds "
              "they state (- where not recorded); *set-up*: the wall time less the training's share of it (its sum / the "
              "workers), per job also less the building's. *Parent RSS*: the sweep's own process (its workers train)."), ""]
    for s in dict.fromkeys(r["steps"] for r in rows):
        lines += [f"steps={s}:", "",
                  ("| N | wall | CPU | first line | checked | first job | summary | training | building | set-up | set-up per job "
                   "| less building | parent RSS | load before / after |"),
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in (r for r in rows if r["steps"] == s):
            at = {name: f"{r['marks'][name]:.1f} s" if name in r["marks"] else "-" for name in MARKS}
            workers = r.get("workers") or 1
            setup, build = r["wall_s"] - r["train_s"] / workers, r.get("build_s")
            built = "-" if build is None else f"{build:.1f} s"
            beyond = "-" if build is None else f"{1000 * (setup - build / workers) / r['n']:.0f} ms"
            cpu = f"{r['cpu_s']:.0f} s" if r.get("cpu_s") is not None else "-"
            lines.append(f"| {r['n']:,} | {r['wall_s']:.1f} s | {cpu} | {at['first line']} | {at['checked']} | {at['first job']} "
                         f"| {at['summary']} | {r['train_s']:.1f} s | {built} | {setup:.1f} s | {1000 * setup / r['n']:.0f} ms | {beyond} "
                         f"| {r['parent_mb']:.0f} MB | {r['load'][0]:.2f} / {r['load'][1]:.2f} |")
        lines.append("")
    return lines
