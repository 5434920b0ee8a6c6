"""Whole sweeps, whole commands (imports included): plain PyTorch loops in one process against
initnorm's launchers, side by side, interleaved when repeated (issue 14's "Speed").

Each sweep is the command ``make reproduce`` runs (``initnorm/repro/reproduce.py``) or, for the
canonical one, the default Decoder's ``norm x warmup x seed`` grid with the per-layer statistics on.
``--steps`` and ``--set KEY=VALUES`` shrink them for a smoke run; the report prints the command
each row ran, so a shrunk run cannot pass for a full one.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from initnorm.cli.compose import CONF_DIR, compose_train
from initnorm.config import to_plain
from initnorm.repro.bench_measure import bench_command, plain_run, run_command, timed

PLAIN = "plain loops, one process"
VECTORIZED = "initnorm, `hydra/launcher=vectorized` (worker processes)"
PARALLEL = "initnorm, `hydra/launcher=local_parallel` (worker processes)"
SEQUENTIAL = "initnorm, sequential (Hydra's basic launcher)"
SUBMITIT = "initnorm, `hydra/launcher=submitit_local`"
# The compiled stacked step on a compiler cache that an untimed run of the same command filled first: what a
# researcher's second sweep of the same shapes costs (issue 45's "the compiler on a warm cache for a stacked group").
COMPILED = "initnorm, `hydra/launcher=vectorized compile=true`, compiler cache warm (worker processes)"
LAUNCHERS = {
    VECTORIZED: ["hydra/launcher=vectorized"],
    PARALLEL: ["hydra/launcher=local_parallel"],
    SEQUENTIAL: [],
    # submitit's local executor starts every job at once, each in a new process
    SUBMITIT: ["hydra/launcher=submitit_local", "hydra.launcher.cpus_per_task=1"],
    COMPILED: ["hydra/launcher=vectorized", "compile=true"],
}
ROWS = {"plain": PLAIN, "vectorized": VECTORIZED, "local_parallel": PARALLEL, "sequential": SEQUENTIAL, "submitit": SUBMITIT,
        "vectorized_compiled": COMPILED}  # --launchers
WARMED = (COMPILED,)  # rows run once untimed before their repeats (their wall then is "cold" in the report)
TARGET = 0.35  # issue 14: a vectorised sweep in at most 0.35x the wall time of its yardstick


@dataclass(frozen=True)
class Sweep:
    key: str
    title: str
    fixed: tuple[str, ...]  # the overrides every job shares
    grid: tuple[str, ...] = ()  # swept keys as typed on the command line; () = the preset's own grid
    plain: str = ""  # "" = plain loops run too; otherwise why they do not
    note: str = ""  # one more sentence under the table


SWEEPS = {
    "canonical": Sweep("canonical", "the canonical sweep: the default Decoder (2 blocks), per-layer statistics on (`callbacks=default`)",
                       (), ("norm=pre,post", "warmup=0,200", "seed=1,2,3")),
    "7b": Sweep("7b", "deck §7b: pre-LN vs post-LN, warmup, 6 blocks (as `make reproduce`)",
                ("experiment=norm_warmup", "callbacks=none"), ("norm=pre,post", "warmup=0,200", "seed=1,2,3")),
    "7e": Sweep("7e", "deck §7e: width x lr x SP/µP (as `make reproduce`)",
                ("experiment=mup_sweep", "callbacks=none"), ("width=16,64", "lr=0.01,0.03,0.1", "param=sp,mup", "seed=1,2,3"),
                note="The plain loops train µP with initnorm's own build (init and forward multipliers) and the optimiser groups of its "
                     "parameterisation table (per-role learning rates), not a second copy of µP; issue 14 calls this a 54-job sweep, "
                     "`make reproduce` runs these 36."),
    "muon": Sweep("muon", "12 Muon jobs (`optim=muon`: torch.optim.Muon on hidden matrices + AdamW): width x lr x seed",
                  ("optim=muon", "callbacks=none"), ("width=16,32", "lr=0.003,0.01,0.03", "seed=1,2"),
                  note="The plain loops step torch.optim.Muon + AdamW over initnorm's groups; a vectorised group's Muon matrices step "
                       "at once (training/muon_group.py)."),
    "mup_mlp": Sweep("mup_mlp", "chapter step 4: the wide MLP, widths 64/256/1024 x 9 lrs x SP/µP, seed 0 (the preset's grid)",
                     ("experiment=mup_mlp_sweep", "callbacks=none"),
                     plain="the plain loop is the Decoder's language-model loop; this MLP classifier is compared against `local_parallel` "
                           "(issue 14)"),
}


def preset_grid(fixed: tuple[str, ...]) -> list[str]:
    """A preset's own swept keys (``hydra.sweeper.params``) as ``key=v1,v2`` in its order."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="train", overrides=list(fixed), return_hydra_config=True)
    return [f"{k}={v}" for k, v in (cfg.hydra.sweeper.params or {}).items()]


def plan(sweep: Sweep, steps: int | None, sets: list[str]) -> dict[str, Any]:
    """The sweep's grid and command-line overrides after ``--steps`` and ``--set``.

    ``--set KEY=VALUES`` replaces a swept key's values; for a key the sweep does not sweep it adds
    a fixed override (one value) or a swept key (several). With ``--steps`` shorter than a warmup, the warmup is cut to half the
    steps so the shrunk run still composes (the report shows the command)."""
    grid = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in (sweep.grid or preset_grid(sweep.fixed))}
    typed = set(grid) if sweep.grid else set()  # a preset's grid stays in the preset (Hydra's order of its jobs)
    extra: dict[str, str] = {}
    for s in sets:
        key, value = s.split("=", 1)
        if key in grid or "," in value:
            grid[key] = value
            typed.add(key)
        else:
            extra[key] = value
    if steps is not None:
        extra["steps"] = str(steps)
        if "warmup" in grid:
            cut = ",".join(dict.fromkeys(str(min(int(v), steps // 2)) for v in grid["warmup"].split(",")))
            typed |= {"warmup"} if cut != grid["warmup"] else set()
            grid["warmup"] = cut
    overrides = [*sweep.fixed, *(f"{k}={v}" for k, v in grid.items() if k in typed), *(f"{k}={v}" for k, v in extra.items())]
    jobs = [dict(zip(grid, values)) for values in itertools.product(*(v.split(",") for v in grid.values()))]
    return {"grid": grid, "overrides": overrides, "fixed": [*sweep.fixed, *(f"{k}={v}" for k, v in extra.items())], "jobs": jobs}


def job_key(settings: dict[str, Any], keys) -> str:
    return " ".join(f"{k}={settings[k]}" for k in keys)


def plain_jobs(sweep: Sweep, steps: int | None, sets: list[str], limit: int = 0) -> dict[str, list]:
    """Every job of the sweep as a plain loop, one after the other in this process (Hydra's order):
    job -> [final val loss, training seconds, diverged step]."""
    p = plan(sweep, steps, sets)
    jobs = p["jobs"][:limit] if limit else p["jobs"]
    out = {}
    for job in jobs:
        c = to_plain(compose_train([*p["fixed"], *(f"{k}={v}" for k, v in job.items())]))
        r, wall, _ = timed(functools.partial(plain_run, c))
        out[job_key(job, p["grid"])] = [r["final_val_loss"], wall, r["diverged_step"]]
    return out


def read_sweep(folder: Path, keys) -> dict[str, dict[str, Any]]:
    """Every finished job of a sweep folder: job key -> its metrics.json."""
    out = {}
    for f in folder.rglob("metrics.json"):
        m = json.loads(f.read_text())
        out[job_key(m["overrides"], keys)] = m  # the job's task overrides, {key: value as typed}
    return out


def run_row(sweep: Sweep, how: str, p: dict[str, Any], argv_tail: list[str], workdir: Path) -> dict[str, Any]:
    """One row of one repeat: the whole command, then what its jobs recorded."""
    if how == PLAIN:
        r = run_command(bench_command("--plain-sweep", sweep.key, *argv_tail), workdir)
        done = json.loads(r["output"].strip().splitlines()[-1])
        return r | {"losses": {k: v[0] for k, v in done.items()}, "train_s": sum(v[1] for v in done.values()),
                    "per_job_s": {k: v[1] for k, v in done.items()},
                    "command": "python -m initnorm.bench --plain-sweep " + " ".join([sweep.key, *argv_tail])}
    folder = Path(tempfile.mkdtemp(dir=workdir))
    cmd = [sys.executable, "-m", "initnorm.train", "-m", *p["overrides"], *LAUNCHERS[how]]
    r = run_command([*cmd, f"hydra.sweep.dir={folder}"], workdir)
    jobs = read_sweep(folder, p["grid"])
    if len(jobs) != len(p["jobs"]):
        raise RuntimeError(f"{how}: {len(jobs)} of the sweep's {len(p['jobs'])} jobs wrote metrics.json in {folder}")
    # A vectorised group's wall time is each member's wall_s: count it once per group, not per member.
    share = {k: m["wall_s"] / m["group"]["size"] for k, m in jobs.items()}
    return r | {"losses": {k: m["final_val_loss"] for k, m in jobs.items()}, "train_s": sum(share.values()), "per_job_s": share,
                "command": "python -m initnorm.train " + " ".join(cmd[3:])}


def measure(sweep: Sweep, steps: int | None, sets: list[str], repeats: int, rows: list[str], workdir: Path) -> dict[str, Any]:
    """Every row of the sweep ``repeats`` times, interleaved (repeat r starts at row r, so no row always goes first)."""
    p = plan(sweep, steps, sets)
    tail = [*(["--steps", str(steps)] if steps is not None else []), *(a for s in sets for a in ("--set", s))]
    rows = [r for r in rows if r != PLAIN or not sweep.plain]
    runs: dict[str, list] = {r: [] for r in rows}
    cold = {how: run_row(sweep, how, p, tail, workdir)["wall_s"] for how in rows if how in WARMED and repeats}
    for how, wall in cold.items():
        print(f"  [{sweep.key}] untimed warm-up {how}: {wall:.1f} s wall (compiler cache cold)", file=sys.stderr, flush=True)
    for rep in range(repeats if rows else 0):
        for how in rows[rep % len(rows):] + rows[: rep % len(rows)]:
            runs[how].append(run_row(sweep, how, p, tail, workdir))
            r = runs[how][-1]
            print(f"  [{sweep.key}] repeat {rep + 1}/{repeats} {how}: {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU, "
                  f"load {r['load'][0]:.2f} -> {r['load'][1]:.2f}", file=sys.stderr, flush=True)
    return {"sweep": sweep, "plan": p, "runs": runs, "repeats": repeats, "cold": cold}


def _spread(walls: list[float], cpus: list[float]) -> str:
    return f"{min(walls):.1f}–{max(walls):.1f} s; {min(cpus):.1f}–{max(cpus):.1f} s" if len(walls) > 1 else "–"


def summary(res: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per row: medians over the repeats, and the spread."""
    out = {}
    for how, rs in res["runs"].items():
        walls = [r["wall_s"] for r in rs]
        out[how] = {"wall_s": statistics.median(walls), "walls": walls, "cpu_s": statistics.median(r["cpu_s"] for r in rs),
                    "cpus": [r["cpu_s"] for r in rs], "train_s": statistics.median(r["train_s"] for r in rs),
                    "root_mb": max(r["root_mb"] for r in rs), "child_mb": max(max(r["children_mb"], default=0.0) for r in rs),
                    "children": max(len(r["children_mb"]) for r in rs), "loads": [r["load"] for r in rs],
                    "losses": rs[0]["losses"], "command": rs[0]["command"],
                    "per_job_s": {k: statistics.median(r["per_job_s"][k] for r in rs) for k in rs[0]["per_job_s"]}}
    return out


def report(res: dict[str, Any], workers: int) -> list[str]:
    sweep, p, n = res["sweep"], res["plan"], len(res["plan"]["jobs"])
    rows = summary(res)
    if not rows:
        return ["", f"## Sweep `{sweep.key}`: no row ran (of the launchers asked for, only plain loops, and {sweep.plain})"]
    base_name = next((r for r in (PLAIN, PARALLEL) if r in rows), next(iter(rows)))
    base = rows[base_name]
    label = {PLAIN: "plain loops", PARALLEL: "local_parallel"}.get(base_name, base_name)
    lines = ["", f"## Sweep `{sweep.key}`: {sweep.title}; {n} jobs, whole command, imports included", "",
             (f"Swept: {' '.join(f'{k}={v}' for k, v in p['grid'].items())}. Each row ran {res['repeats']} time(s), "
              "interleaved (the order rotates with each repeat); medians, with the spread (lowest–highest) of the wall and CPU times. "
              "\"the jobs' training, summed\": each job's own `wall_s` (a vectorised group's counted once); "
              "load: the 1-minute load average before → after each run."), "",
             (f"| how | wall | spread (wall; CPU) | ratio to {label} | CPU, all processes | CPU ratio | the jobs' training, summed | "
              "largest process RSS | load before → after |"),
             "|---|---|---|---|---|---|---|---|---|"]
    for how, r in rows.items():
        rss = max(r["root_mb"], r["child_mb"])
        loads = "; ".join(f"{a:.2f} → {b:.2f}" for a, b in r["loads"])
        lines.append(f"| {how} | {r['wall_s']:.1f} s | {_spread(r['walls'], r['cpus'])} | {r['wall_s'] / base['wall_s']:.3f} | "
                     f"{r['cpu_s']:.1f} s | {r['cpu_s'] / base['cpu_s']:.3f} | {r['train_s']:.1f} s | {rss:.0f} MB | {loads} |")
    lines += ["", "Commands:", ""] + [f"- {how}: `{r['command']}`" for how, r in rows.items()]
    if sweep.plain:
        lines += ["", f"No plain-loop row: {sweep.plain}."]
    if sweep.note:
        lines += ["", sweep.note]
    lines.append("")
    vec, par, comp = rows.get(VECTORIZED), rows.get(PARALLEL), rows.get(COMPILED)
    for name, row in (("vectorised", vec), ("vectorised, compiled on a warm cache", comp)):
        if row and base_name not in (VECTORIZED, COMPILED):
            ratio = row["wall_s"] / base["wall_s"]
            lines.append(f"- {name} / {label}, wall: {ratio:.3f} (issue 14's target ≤ {TARGET}: {'met' if ratio <= TARGET else 'missed'})")
    if vec and par and base_name == PLAIN:
        lines.append(f"- vectorised / local_parallel, wall: {vec['wall_s'] / par['wall_s']:.3f}; CPU: "
                     f"{vec['cpu_s'] / par['cpu_s']:.3f}")
    for how, wall in res.get("cold", {}).items():
        lines.append(f"- {how}: the untimed run before the repeats, on a cold compiler cache, took {wall:.1f} s")
    if par and workers:
        lines.append(f"- local_parallel: with {workers} workers its jobs' training alone takes at least {par['train_s'] / workers:.1f} s; "
                     f"the other {par['wall_s'] - par['train_s'] / workers:.1f} s are start-up (imports, composing and checking {n} jobs), "
                     "uneven ends and the summary.")
    lines += agreement(rows, base_name)
    return lines


def _rel(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):  # a diverged job agrees with a diverged job only
        return 0.0 if math.isnan(a) == math.isnan(b) else float("inf")
    return abs(a - b) / abs(b)


def agreement(rows: dict[str, dict[str, Any]], base: str) -> list[str]:
    """How far each row's final validation losses are from the ``base`` row's (bit for bit where the arithmetic is the same)."""
    ref = rows[base]["losses"]
    lines = []
    for how in (n for n in rows if n != base):
        losses = rows[how]["losses"]
        same = all(losses[k] == v or (math.isnan(v) and math.isnan(losses[k])) for k, v in ref.items())
        worst = max(_rel(losses[k], v) for k, v in ref.items())
        apart = "the same, bit for bit" if same else f"at most {worst:.1e} relative apart"
        lines.append(f"- final validation losses, {how} against {base}: {apart}")
    diverged = sorted(k for k, v in ref.items() if math.isnan(v))
    if diverged:
        lines.append(f"- diverged (NaN final loss) in {base}: {', '.join(diverged)}")
    return lines
