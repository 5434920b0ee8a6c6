"""What initnorm costs over a plain PyTorch loop: per step, per job's memory, and for a whole sweep.

    python -m initnorm.bench                          # about 10 minutes on 2 cores; writes bench/RESULTS.md
    python -m initnorm.bench --steps 300 --repeats 1 --no-sequential --out /tmp/bench.md   # a quick look

Side by side on the default Decoder, the same batches, optimiser, schedule and validations:

1. ``plain``: the loop in ``plain_run`` below, PyTorch only (no Lightning, no Hydra run);
2. ``initnorm``: ``train(cfg)`` with ``callbacks=none``: TensorBoard logging, the progress bar and
   checkpoints at their defaults, no per-layer statistics;
3. ``initnorm + stats``: ``callbacks=default``: the per-layer statistics at their default interval.

(1)-(3) run in this process, interleaved, ``--repeats`` times each (medians reported); each also
runs once as a process of its own for its peak RSS and its wall time with imports. The sweep is the
12-job ``norm x warmup x seed`` grid: the plain loop for each job, one after the other in one
process, against initnorm's ``local_parallel`` launcher (and the sequential one), whole wall time
of the command, imports included. All of them must end on the same validation losses, bit for bit:
the benchmark says so, or says where they differ.

The machine is shared and timings are noisy: CPU time (which leaves out the time spent waiting for
a core) is reported beside wall time, and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

from initnorm.cli.compose import comma_list, compose_train
from initnorm.config import to_plain
from initnorm.data.corpus import load_corpus
from initnorm.models.build import build_model
from initnorm.training.module import validation_interval
from initnorm.training.optim import make_optimizer, schedule_factor

SWEEP = ["norm=pre,post", "warmup=0,200", "seed=1,2,3"]
WORKERS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()  # local_parallel's n_jobs=-1
TARGETS = {"initnorm": 1.10, "initnorm + stats": 1.25, "sweep": 0.5, "rss_mb": 600, "vectorized": 0.35, "group_rss_mb": 1000}
VECTORIZED = "initnorm, `hydra/launcher=vectorized` (joblib)"
VARIANTS = {"plain": None, "initnorm": ["callbacks=none"], "initnorm + stats": ["callbacks=default"]}


# ---------------------------------------------------------------- the reference: a plain loop


def plain_run(c: dict[str, Any]) -> dict[str, Any]:
    """One job as a plain PyTorch loop: what ``train`` computes, without Lightning or logging."""
    torch.set_num_threads(c["threads"])
    torch.manual_seed(c["seed"])
    corpus = load_corpus(c["data"]["name"], c["data"].get("path"))
    built = build_model(c["model"], c["init"], c["param"], corpus.vocab_size)
    model = built.model
    opt = make_optimizer(model, built.roles, built.table, c["lr"], c["optim"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: schedule_factor(s, c["steps"], c["warmup"], c["schedule"]))
    context, batch = c["data"]["context"], c["batch_size"]
    every = validation_interval(c["steps"], c["trainer"]["val_check_interval"])
    windows = corpus.train.unfold(0, context + 1, 1)
    n_val = (len(corpus.val) - 1) // context
    val_x, val_y = corpus.val[: n_val * context].view(n_val, context), corpus.val[1 : n_val * context + 1].view(n_val, context)

    def loss_of(x, y, reduction="mean"):
        logits = model(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction=reduction)

    def validate() -> float:
        size = c["data"]["val_batch_size"]
        model.eval()
        with torch.no_grad():
            total = sum(loss_of(val_x[i : i + size], val_y[i : i + size], "sum").item() for i in range(0, n_val, size))
        model.train()
        return total / val_y.numel()

    history = [(0, validate())]  # as train(): validated before the first step
    for step in range(c["steps"]):
        # The data module's stream: batch s is drawn by a generator seeded from (seed, s).
        w = windows[torch.randint(len(windows), (batch,), generator=torch.Generator().manual_seed(c["seed"] * 1_000_003 + step))]
        loss = loss_of(w[:, :-1], w[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if (step + 1) % every == 0 or step + 1 == c["steps"]:
            history.append((step + 1, validate()))
    return {"final_val_loss": history[-1][1], "val_history": history}


def sweep_configs(steps: int) -> list[tuple[str, dict[str, Any]]]:
    """The sweep's jobs in Hydra's order (last key fastest), each as (folder name, resolved config)."""
    jobs = [[]]
    for arg in SWEEP:
        key, values = arg.split("=")
        jobs = [j + [f"{key}={v}"] for j in jobs for v in values.split(",")]
    return [(f"{j[0]},{j[1]}/{j[2]}", to_plain(compose_train([*j, f"steps={steps}"]))) for j in jobs]


# ---------------------------------------------------------------- measuring


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def tree_peaks(root: int) -> dict[int, int]:
    """Peak RSS (VmHWM, kB) of ``root`` and every process below it, read from /proc (Linux)."""
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parents[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += [p for p, pp in parents.items() if pp == pid]
    peaks = {}
    for pid in tree:
        try:
            line = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("VmHWM:"))
            peaks[pid] = int(line.split()[1])
        except (OSError, StopIteration):
            continue
    return peaks


def run_command(cmd: list[str], cwd: Path) -> dict[str, Any]:
    """Run ``cmd``; its wall time, exit status, output, and the peak RSS in MB of each of its processes."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PYTHONWARNINGS": "ignore"}
    peaks: dict[int, int] = {}
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    done = threading.Event()

    def watch():
        while not done.wait(0.1):
            for pid, kb in tree_peaks(proc.pid).items():
                peaks[pid] = max(kb, peaks.get(pid, 0))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    out, _ = proc.communicate()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # every process below it, once reaped
    cpu_s = after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime
    done.set()
    watcher.join()
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out[-3000:]}")
    root = peaks.pop(proc.pid, 0)
    return {"wall_s": wall, "cpu_s": cpu_s, "output": out, "root_mb": root / 1024, "children_mb": sorted((kb / 1024 for kb in peaks.values()), reverse=True)}


def per_step(steps: int, repeats: int, workdir: Path) -> dict[str, dict[str, Any]]:
    """(1)-(3) in this process, interleaved, after one short untimed warm-up of each."""
    from initnorm.cli.train import train

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    cfgs = {name: compose_train([*(ov or []), f"steps={steps}"]) for name, ov in VARIANTS.items()}

    def once(name: str, cfg) -> dict[str, Any]:
        if VARIANTS[name] is None:
            return plain_run(to_plain(cfg))
        return train(cfg, tempfile.mkdtemp(dir=workdir))

    for name, ov in VARIANTS.items():
        once(name, compose_train([*(ov or []), "steps=50", "trainer.val_check_interval=25"]))
    runs: dict[str, list] = {name: [] for name in VARIANTS}
    for r in range(repeats):
        for name, cfg in cfgs.items():
            out, wall, cpu = timed(lambda: once(name, cfg))
            runs[name].append((1000 * wall / steps, 1000 * cpu / steps, out["final_val_loss"]))
            print(f"  repeat {r + 1}/{repeats} {name:17s} {runs[name][-1][0]:6.3f} ms/step wall, {runs[name][-1][1]:6.3f} CPU", file=sys.stderr, flush=True)
    return {
        name: {"wall_ms": statistics.median(x[0] for x in rs), "cpu_ms": statistics.median(x[1] for x in rs),
               "walls": [x[0] for x in rs], "final_val_loss": {x[2] for x in rs}}
        for name, rs in runs.items()
    }


def one_job(name: str, steps: int, workdir: Path) -> dict[str, Any]:
    """Variant ``name`` as a process of its own: peak RSS and wall time with imports."""
    if VARIANTS[name] is None:
        cmd = [sys.executable, "-m", "initnorm.bench", "--plain-jobs", "1", "--steps", str(steps)]
    else:
        cmd = [sys.executable, "-m", "initnorm.train", *VARIANTS[name], f"steps={steps}", f"hydra.run.dir={tempfile.mkdtemp(dir=workdir)}"]
    return run_command(cmd, workdir)


def sweeps(steps: int, workdir: Path, sequential: bool, submitit: bool, parallel: bool = True) -> dict[str, dict[str, Any]]:
    out = {"plain loops, one process": run_command([sys.executable, "-m", "initnorm.bench", "--plain-jobs", "12", "--steps", str(steps)], workdir)}
    done = json.loads(out["plain loops, one process"]["output"].strip().splitlines()[-1])
    out["plain loops, one process"] |= {"losses": {k: v[0] for k, v in done.items()}, "train_s": sum(v[1] for v in done.values())}
    launchers = {"initnorm, `hydra/launcher=local_parallel` (joblib)": ["hydra/launcher=local_parallel"]} if parallel else {}
    launchers[VECTORIZED] = ["hydra/launcher=vectorized"]  # norm=pre,post: two groups of 6, one per worker
    if submitit:  # submitit's local executor starts every job at once, each in a new process
        launchers["initnorm, `hydra/launcher=submitit_local`"] = ["hydra/launcher=submitit_local", "hydra.launcher.cpus_per_task=1"]
    if sequential:
        launchers["initnorm, sequential (Hydra's basic launcher)"] = []
    for name, extra in launchers.items():
        folder = Path(tempfile.mkdtemp(dir=workdir))
        out[name] = run_command([sys.executable, "-m", "initnorm.train", "-m", *SWEEP, f"steps={steps}", *extra, f"hydra.sweep.dir={folder}"], workdir)
        metrics = [json.loads((folder / job / "metrics.json").read_text()) for job, _ in sweep_configs(steps)]
        train_s = sum(m["wall_s"] / m.get("vectorized", {}).get("group_size", 1) for m in metrics)  # a group's wall time once, not per member
        out[name] |= {"losses": {job: m["final_val_loss"] for (job, _), m in zip(sweep_configs(steps), metrics)}, "train_s": train_s}
    return out


# ---------------------------------------------------------------- vectorised groups


def group_members(size: int, steps: int, workdir: Path, extra: tuple[str, ...] = ()) -> list:
    from initnorm.training.ensemble import Member

    return [Member(to_plain(compose_train([f"seed={i + 1}", f"steps={steps}", "callbacks=none", *extra])), Path(tempfile.mkdtemp(dir=workdir))) for i in range(size)]


def group_steps(size: int, steps: int, compiled: bool, workdir: Path) -> dict[str, float]:
    """ms per member-step of a group of ``size`` default Decoders (training steps only, no validation),
    and for ``compiled`` the first step's time (compiling)."""
    from initnorm.training.ensemble import Group, _stack

    torch.set_num_threads(1)
    g = Group(group_members(size, steps, workdir, ("compile=true",) if compiled else ("compile=false",)))
    streams = [iter(d.train_dataloader().dataset) for d in g.datas]
    fn = g._fast if compiled else (lambda xs, ys: g.losses(xs, ys)[0])

    def step(s: int) -> None:
        xs, ys = _stack([next(t) for t in streams], g.device)
        losses = fn(xs, ys)
        torch.isfinite(losses.detach()).all()
        g.opt.step(g.backward(losses.sum()), g.factors(s), g.active)

    _, first, first_cpu = timed(lambda: step(0))
    for s in range(1, 6):
        step(s)
    _, wall, cpu = timed(lambda: [step(s) for s in range(6, 6 + steps)])
    return {"wall_ms": 1000 * wall / steps / size, "cpu_ms": 1000 * cpu / steps / size, "first_s": first, "first_cpu_s": first_cpu}


def plain_steps(steps: int) -> dict[str, float]:
    """ms per step of one default Decoder in a plain loop (training steps only), the groups' yardstick."""
    c = to_plain(compose_train([f"steps={steps}"]))
    torch.set_num_threads(1)
    torch.manual_seed(1)
    corpus = load_corpus(c["data"]["name"], c["data"].get("path"))
    built = build_model(c["model"], c["init"], c["param"], corpus.vocab_size)
    opt = make_optimizer(built.model, built.roles, built.table, c["lr"], c["optim"])
    windows = corpus.train.unfold(0, c["data"]["context"] + 1, 1)

    def step(s: int) -> None:
        w = windows[torch.randint(len(windows), (c["batch_size"],), generator=torch.Generator().manual_seed(s))]
        logits = built.model(w[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))
        torch.isfinite(loss)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for s in range(5):
        step(s)
    _, wall, cpu = timed(lambda: [step(s) for s in range(steps)])
    return {"wall_ms": 1000 * wall / steps, "cpu_ms": 1000 * cpu / steps}


def group_scan(sizes: list[int], compile_sizes: list[int], steps: int, repeats: int, workdir: Path) -> dict[str, Any]:
    """Eager groups of every size and plain loops, interleaved ``repeats`` times (medians); compiled groups once each."""
    runs: dict[Any, list] = {"plain": [], **{n: [] for n in sizes}}
    for r in range(repeats):
        runs["plain"].append(plain_steps(steps))
        for n in sizes:
            runs[n].append(group_steps(n, steps, False, workdir))
            print(f"  repeat {r + 1}/{repeats} group of {n:2d}: {runs[n][-1]['cpu_ms']:.3f} ms CPU per member-step", file=sys.stderr, flush=True)
    med = {k: {f: statistics.median(x[f] for x in v) for f in v[0]} | {"spread": (min(x["cpu_ms"] for x in v), max(x["cpu_ms"] for x in v))} for k, v in runs.items()}
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
    warm = bool(cache) and Path(cache).is_dir() and any(Path(cache).iterdir())
    compiled = []  # a size twice: the second compile finds the first one's cache
    for n in compile_sizes:
        compiled.append((n, group_steps(n, steps, True, workdir)))
        print(f"  compiled group of {n:2d}: {compiled[-1][1]['cpu_ms']:.3f} ms CPU per member-step, first step {compiled[-1][1]['first_s']:.1f} s", file=sys.stderr, flush=True)
    return {"eager": med, "compiled": compiled, "cache": cache or "(torch's default)", "cache_warm": warm, "steps": steps, "repeats": repeats}


def group_report(scan: dict[str, Any], rss: dict[str, Any] | None) -> list[str]:
    plain = scan["eager"]["plain"]
    lines = ["", f"## Vectorised groups: ms per member-step against group size (default Decoder, {scan['steps']} training steps, 1 thread)", "",
             f"Eager: medians of {scan['repeats']} interleaved repeats (CPU-time spread in brackets); compiled: one run each, after the first step "
             f"(its time is the compile time; compiler cache {scan['cache']}, {'warm' if scan['cache_warm'] else 'cold'} at the start). "
             "Training steps only: no validation, no logging.", "",
             "| group size | ms/member-step (wall) | ms/member-step (CPU) | speed-up over one plain model (CPU) | compiled: ms/member-step (CPU) | compiled: speed-up | compile (first step), wall |",
             "|---|---|---|---|---|---|---|",
             f"| plain loop, one model | {plain['wall_ms']:.3f} | {plain['cpu_ms']:.3f} ({plain['spread'][0]:.2f}–{plain['spread'][1]:.2f}) | 1.00 | | | |"]
    for n, r in scan["eager"].items():
        if n == "plain":
            continue
        lines.append(f"| {n} | {r['wall_ms']:.3f} | {r['cpu_ms']:.3f} ({r['spread'][0]:.2f}–{r['spread'][1]:.2f}) | {plain['cpu_ms'] / r['cpu_ms']:.2f} | | | |")
    for n, comp in scan["compiled"]:
        lines.append(f"| {n}, compiled | {comp['wall_ms']:.3f} | | | {comp['cpu_ms']:.3f} | {plain['cpu_ms'] / comp['cpu_ms']:.2f} | {comp['first_s']:.1f} s |")
    if rss:
        ok = rss["root_mb"] <= TARGETS["group_rss_mb"]
        lines += ["", f"- peak RSS of a process training one group of 12 default Decoders ({rss['steps']} steps, `compile=false`): "
                  f"{rss['root_mb']:.0f} MB (target ≤ {TARGETS['group_rss_mb']} MB: {'met' if ok else 'missed'})"]
    return lines


# ---------------------------------------------------------------- the report


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("model name"))
        mem_gb = int(Path("/proc/meminfo").read_text().split()[1]) / 1024**2
    except (OSError, StopIteration):
        mem_gb = float("nan")
    import lightning

    return f"{cpu}, {WORKERS} cores, {mem_gb:.0f} GB RAM; Linux {platform.release()}; Python {platform.python_version()}, torch {torch.__version__}, Lightning {lightning.__version__}"


def verdict(value: float, target: float) -> str:
    return f"{value:.3f} (target ≤ {target:g}: {'met' if value <= target else 'missed'})"


def report(args, steps_res, jobs, sweep_res, loads, groups=None, group_rss=None) -> str:
    from initnorm.provenance import git_revision

    lines = [
        "# initnorm against a plain PyTorch loop",
        "",
        f"`python -m initnorm.bench {' '.join(args.argv)}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, git {git_revision()}.",
        f"Machine: {machine()}.",
        f"Load average (1 min) before / after: {loads[0]:.2f} / {loads[1]:.2f} (the machine is shared: read the ratios, not the absolute times).",
    ]
    if steps_res:
        lines += per_step_report(args, steps_res, jobs)
    if sweep_res:
        lines += sweep_report(args, sweep_res, jobs)
    if groups:
        lines += group_report(groups, group_rss)
    return "\n".join(lines) + "\n"


def per_step_report(args, steps_res, jobs) -> list[str]:
    base = steps_res["plain"]
    lines = [
        "",
        f"## Per step: the default Decoder, {args.steps} steps, batch 32, 1 torch thread",
        "",
        f"Medians of {args.repeats} interleaved repeats in one process; a run's time includes its setup and its validations. "
        "RSS and \"whole job\" come from one more run of each as a process of its own (imports included).",
        "",
        "| variant | ms/step (wall) | ratio | ms/step (CPU) | ratio | final val loss | peak RSS | whole job, wall |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in steps_res.items():
        label = {"plain": "(1) plain PyTorch loop", "initnorm": "(2) initnorm, `callbacks=none`", "initnorm + stats": "(3) initnorm + per-layer stats (`callbacks=default`)"}[name]
        losses = ", ".join(f"{v:.6f}" for v in sorted(r["final_val_loss"]))
        lines.append(f"| {label} | {r['wall_ms']:.3f} | {r['wall_ms'] / base['wall_ms']:.3f} | {r['cpu_ms']:.3f} | {r['cpu_ms'] / base['cpu_ms']:.3f} | "
                     f"{losses} | {jobs[name]['root_mb']:.0f} MB | {jobs[name]['wall_s']:.1f} s |")
    same = len(set().union(*(r["final_val_loss"] for r in steps_res.values()))) == 1
    lines += ["", f"Same final validation loss in all three, bit for bit: {'yes' if same else 'NO'}.", ""]
    lines.append(f"- (2)/(1): wall {verdict(steps_res['initnorm']['wall_ms'] / base['wall_ms'], TARGETS['initnorm'])}, "
                 f"CPU {verdict(steps_res['initnorm']['cpu_ms'] / base['cpu_ms'], TARGETS['initnorm'])}")
    lines.append(f"- (3)/(1): wall {verdict(steps_res['initnorm + stats']['wall_ms'] / base['wall_ms'], TARGETS['initnorm + stats'])}, "
                 f"CPU {verdict(steps_res['initnorm + stats']['cpu_ms'] / base['cpu_ms'], TARGETS['initnorm + stats'])}")
    rss = max(j["root_mb"] for j in jobs.values())
    lines.append(f"- peak RSS of a process that trains one job: {rss:.0f} MB (target ≤ {TARGETS['rss_mb']} MB: {'met' if rss <= TARGETS['rss_mb'] else 'missed'})")
    return lines


def sweep_report(args, sweep_res, jobs) -> list[str]:
    lines = []
    if True:
        plain = sweep_res["plain loops, one process"]
        lines += ["", f"## The sweep: {' '.join(SWEEP)} (12 jobs of {args.steps} steps), whole command, imports included", "",
                  "| how | wall | ratio to plain | CPU time, all processes | the jobs' training, summed | peak RSS per process |", "|---|---|---|---|---|---|"]
        for name, r in sweep_res.items():
            workers = f"{r['root_mb']:.0f} MB" + (f" (parent); largest of {len(r['children_mb'])} child processes {r['children_mb'][0]:.0f} MB" if r["children_mb"] else "")
            lines.append(f"| {name} | {r['wall_s']:.1f} s | {r['wall_s'] / plain['wall_s']:.3f} | {r['cpu_s']:.1f} s | {r['train_s']:.1f} s | {workers} |")
        vec = sweep_res.get(VECTORIZED)
        if vec:
            worst = max(abs(vec["losses"][k] - v) / v for k, v in plain["losses"].items())
            lines += ["", f"- vectorised sweep / plain loops: {verdict(vec['wall_s'] / plain['wall_s'], TARGETS['vectorized'])}; its 12 final validation "
                      f"losses differ from the plain loops' by at most {worst:.1e} relative (float32 rounding of batched kernels, grown over "
                      f"{args.steps} steps; docs/vectorized.md):", "", "| job | plain loop | vectorised |", "|---|---|---|"]
            lines += [f"| {k} | {v:.6f} | {vec['losses'][k]:.6f} |" for k, v in plain["losses"].items()]
        others = {k: r for k, r in sweep_res.items() if k != VECTORIZED}
        par = others.get(next((k for k in others if "local_parallel" in k), ""), None)
        if par is None:
            return lines
        same = all(par["losses"][k] == v for k, v in plain["losses"].items()) and all(r["losses"] == par["losses"] for r in others.values())
        lines += ["", f"The 12 final validation losses are the same, bit for bit, in every row but the vectorised one: {'yes' if same else 'NO'}.", "",
                  f"- sweep ratio (local_parallel / plain): {verdict(par['wall_s'] / plain['wall_s'], TARGETS['sweep'])}. "
                  f"With {WORKERS} workers the jobs' training alone takes at least {par['train_s'] / WORKERS:.1f} s "
                  f"({par['train_s'] / WORKERS / plain['wall_s']:.2f} of the plain sweep); the other "
                  f"{par['wall_s'] - par['train_s'] / WORKERS:.1f} s are start-up (imports in the parent and in each worker, "
                  "composing and checking the 12 jobs), uneven ends and the summary."]
        rss = max(par["children_mb"], default=0.0)
        lines.append(f"- peak RSS of a worker of the parallel sweep: {rss:.0f} MB (target ≤ {TARGETS['rss_mb']} MB: {'met' if rss <= TARGETS['rss_mb'] else 'missed'})")
    return lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m initnorm.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1500, help="steps per job (default 1500, the default run)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved repeats of the per-step variants (default 3)")
    p.add_argument("--out", default="bench/RESULTS.md", help="the markdown table (default bench/RESULTS.md)")
    p.add_argument("--no-sweep", action="store_true", help="skip the 12-job sweeps")
    p.add_argument("--no-sequential", action="store_true", help="skip initnorm's sequential sweep (the slowest row)")
    p.add_argument("--submitit", action="store_true", help="also the sweep with submitit's local executor (all 12 jobs at once)")
    p.add_argument("--vectorized-only", action="store_true", help="only the plain loops, the vectorised sweep, the group-size scan and a group's RSS")
    p.add_argument("--groups", type=comma_list(int), default=[1, 2, 4, 8, 16, 32], help="group sizes to time (default 1,2,4,8,16,32; empty: none)")
    p.add_argument("--compile-sizes", type=comma_list(int), default=[1, 12], help="group sizes to time compiled too (default 1,12)")
    p.add_argument("--group-steps", type=int, default=200, help="training steps per group-size measurement (default 200)")
    p.add_argument("--plain-jobs", type=int, default=0, help=argparse.SUPPRESS)  # internal: the plain loop as a process
    p.add_argument("--group-job", type=int, default=0, help=argparse.SUPPRESS)  # internal: one vectorised group as a process
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.group_job:
        from initnorm.training.ensemble import train_group

        with tempfile.TemporaryDirectory(prefix="initnorm-group-") as tmp:
            results = train_group(group_members(args.group_job, args.steps, Path(tmp), ("compile=false",)))
        print(json.dumps([r["final_val_loss"] for r in results]))
        return
    if args.plain_jobs:
        jobs = sweep_configs(args.steps)[: args.plain_jobs]
        print(json.dumps({name: (lambda r: (r[0]["final_val_loss"], r[1]))(timed(lambda: plain_run(c))) for name, c in jobs}))
        return
    if args.steps < 200:
        p.error("--steps must be at least 200: the sweep's warmup=200 must fit in the run")

    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="initnorm-bench-") as tmp:
        work = Path(tmp)
        steps_res, jobs, sweep_res, groups, group_rss = {}, {}, {}, None, None
        if not args.vectorized_only:
            print("per step, interleaved ...", file=sys.stderr)
            steps_res = per_step(args.steps, args.repeats, work)
            print("one process per variant (RSS) ...", file=sys.stderr)
            jobs = {name: one_job(name, args.steps, work) for name in VARIANTS}
        if not args.no_sweep:
            print("sweeps ...", file=sys.stderr)
            sweep_res = sweeps(args.steps, work, sequential=not (args.no_sequential or args.vectorized_only), submitit=args.submitit, parallel=not args.vectorized_only)
        if args.groups:
            print("group sizes ...", file=sys.stderr)
            groups = group_scan(args.groups, args.compile_sizes, args.group_steps, args.repeats, work)
            group_rss = run_command([sys.executable, "-m", "initnorm.bench", "--group-job", "12", "--steps", str(args.group_steps)], work) | {"steps": args.group_steps}
    loads.append(os.getloadavg()[0])
    text = report(args, steps_res, jobs, sweep_res, loads, groups, group_rss)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
