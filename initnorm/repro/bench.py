"""What initnorm costs over a plain PyTorch loop: per step, per job's memory, for whole sweeps, and
the floor under compute-bound work.

    python -m initnorm.bench                  # every part (hours on 2 cores: --scale's 10,000 jobs); appends to bench/RESULTS.md
    python -m initnorm.bench --sweeps 7e      # one part alone: --per-step, --sweeps KEYS, --flops, --groups SIZES
    python -m initnorm.bench --sweeps 7e,mup_mlp --flops --steps 20 --set seed=1 --set width=64 --set lr=0.01 --out /tmp/b.md  # a smoke run

docs/bench.md has the commands of the full measurement and how long each takes.

Parts (named flags run only the parts they name; without any, all of them run):

- ``--per-step``, on the default Decoder, the same batches, optimiser, schedule and validations:
  (1) ``plain``: the loop in ``bench_measure.plain_run``, PyTorch only (no Lightning, no Hydra run);
  (2) ``initnorm``: ``train(cfg)`` with ``callbacks=none``; (3) ``initnorm + stats``:
  ``callbacks=default``. They run in this process, interleaved, ``--repeats`` times each (medians),
  and once each as a process of their own for the peak RSS and the wall time with imports.
- ``--sweeps``: whole sweeps as whole commands (``bench_sweeps``): plain loops in one process
  against ``hydra/launcher=vectorized`` and ``local_parallel``, interleaved ``--sweep-repeats`` times.
- ``--muon``: the Muon rows: per step, ``optim=muon`` against a plain loop with ``torch.optim.Muon`` + AdamW, and
  the 12-job Muon sweep (``bench_sweeps.SWEEPS["muon"]``) vectorised against plain loops.
- ``--flops``: the wide MLPs' matmul FLOPs against this machine's matmul throughput (``bench_flops``).
- ``--groups``: milliseconds per member-step of a vectorised group against its size, eager and compiled.
- ``--scale``: sweeps of N = 100, 1,000, 10,000 jobs of ``steps=1`` and ``steps=100`` under the vectorised launcher,
  set-up and training apart, and the parent's peak RSS (``bench_scale``; ``--scale-sizes``, ``--scale-steps``).

The machine is shared and timings are noisy: CPU time (which leaves out the time spent waiting for
a core) is reported beside wall time, and the load average before and after each timed row.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from initnorm.cli.compose import comma_list, compose_train
from initnorm.config import to_plain
from initnorm.data.corpus import load_corpus
from initnorm.models.build import build_model
from initnorm.repro import bench_flops, bench_scale, bench_sweeps
from initnorm.repro.bench_measure import bench_command, load, plain_run, run_command, timed
from initnorm.training.optim import make_optimizer

WORKERS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()  # local_parallel's n_jobs=-1
TARGETS = {"initnorm": 1.10, "initnorm + stats": 1.25, "rss_mb": 600, "group_rss_mb": 1000}
VARIANTS = {"plain": None, "initnorm": ["callbacks=none"], "initnorm + stats": ["callbacks=default"]}
# The Muon row (--muon): optim=muon in a plain loop (torch.optim.Muon + AdamW, bench_measure.plain_run) against train()
MUON = ["optim=muon"]
MUON_VARIANTS = {"plain": None, "initnorm": ["callbacks=none"]}
DEFAULT_STEPS = 1500  # the per-step part's run: the default Decoder's 1,500 steps


# ---------------------------------------------------------------- per step


def per_step(steps: int, repeats: int, workdir: Path, variants: dict[str, list[str] | None] = VARIANTS,
             extra: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """(1)-(3) in this process, interleaved, after one short untimed warm-up of each (``extra``: overrides of every
    variant, the plain loop's included: ``MUON``)."""
    from initnorm.cli.train import train

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    extra = extra or []
    cfgs = {name: compose_train([*(ov or []), *extra, f"steps={steps}"]) for name, ov in variants.items()}

    def once(name: str, cfg) -> dict[str, Any]:
        if variants[name] is None:
            return plain_run(to_plain(cfg))
        return train(cfg, tempfile.mkdtemp(dir=workdir))

    for name, ov in variants.items():
        once(name, compose_train([*(ov or []), *extra, "steps=50", "trainer.val_check_interval=25"]))
    runs: dict[str, list] = {name: [] for name in variants}
    for r in range(repeats):
        for name, cfg in cfgs.items():
            out, wall, cpu = timed(functools.partial(once, name, cfg))
            runs[name].append((1000 * wall / steps, 1000 * cpu / steps, out["final_val_loss"]))
            print(f"  repeat {r + 1}/{repeats} {name:17s} {runs[name][-1][0]:6.3f} ms/step wall, {runs[name][-1][1]:6.3f} CPU",
                  file=sys.stderr, flush=True)
    return {
        name: {"wall_ms": statistics.median(x[0] for x in rs), "cpu_ms": statistics.median(x[1] for x in rs),
               "walls": [x[0] for x in rs], "final_val_loss": {x[2] for x in rs}}
        for name, rs in runs.items()
    }


def one_job(name: str, steps: int, workdir: Path) -> dict[str, Any]:
    """Variant ``name`` as a process of its own: peak RSS and wall time with imports."""
    if VARIANTS[name] is None:
        cmd = bench_command("--plain-sweep", "canonical", "--plain-jobs", "1", "--steps", str(steps))
    else:
        cmd = [sys.executable, "-m", "initnorm.train", *VARIANTS[name], f"steps={steps}", f"hydra.run.dir={tempfile.mkdtemp(dir=workdir)}"]
    return run_command(cmd, workdir)


# ---------------------------------------------------------------- vectorised groups


def group_members(size: int, steps: int, workdir: Path, extra: tuple[str, ...] = ()) -> list:
    from initnorm.training.fit import Member

    return [Member(to_plain(compose_train([f"seed={i + 1}", f"steps={steps}", "callbacks=none", *extra])),
                   Path(tempfile.mkdtemp(dir=workdir))) for i in range(size)]


def group_steps(size: int, steps: int, compiled: bool, workdir: Path) -> dict[str, float]:
    """ms per member-step of a group of ``size`` default Decoders (training steps only, no validation),
    and for ``compiled`` the first step's time (compiling)."""
    from initnorm.training.batches import stack_batches
    from initnorm.training.fit import assemble

    torch.set_num_threads(1)
    g, _, _ = assemble(group_members(size, steps, workdir, ("compile=true",) if compiled else ("compile=false",)))
    streams = [iter(d.train_dataloader().dataset) for d in g.datas]
    fn = (lambda xs, ys: g._fast(xs, ys, None)) if compiled else (lambda xs, ys: g.stack.losses(g.loss, xs, ys)[0])

    def step(s: int) -> None:
        xs, ys = stack_batches([next(t) for t in streams], g.stack.flat.device)
        losses = fn(xs, ys)
        torch.isfinite(losses.detach()).all()
        g.stack.grad.zero_()
        losses.sum().backward()
        g.vec.step(g.stack.grad, g.factors(s), g.active)

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
            print(f"  repeat {r + 1}/{repeats} group of {n:2d}: {runs[n][-1]['cpu_ms']:.3f} ms CPU per member-step",
                  file=sys.stderr, flush=True)
    med = {k: {f: statistics.median(x[f] for x in v) for f in v[0]} | {"spread": (min(x["cpu_ms"] for x in v), max(x["cpu_ms"] for x in v))}
           for k, v in runs.items()}
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
    warm = bool(cache) and Path(cache).is_dir() and any(Path(cache).iterdir())
    compiled = []  # a size twice: the second compile finds the first one's cache
    for n in compile_sizes:
        compiled.append((n, group_steps(n, steps, True, workdir)))
        print(f"  compiled group of {n:2d}: {compiled[-1][1]['cpu_ms']:.3f} ms CPU per member-step, first step "
              f"{compiled[-1][1]['first_s']:.1f} s", file=sys.stderr, flush=True)
    return {"eager": med, "compiled": compiled, "cache": cache or "(torch's default)", "cache_warm": warm,
            "steps": steps, "repeats": repeats}


def group_report(scan: dict[str, Any], rss: dict[str, Any] | None) -> list[str]:
    plain = scan["eager"]["plain"]
    lines = ["", f"## Vectorised groups: ms per member-step against group size (default Decoder, {scan['steps']} training steps, 1 thread)",
             "",
             (f"Eager: medians of {scan['repeats']} interleaved repeats (CPU-time spread in brackets); compiled: one run each, after the "
              f"first step (its time is the compile time; compiler cache {scan['cache']}, {'warm' if scan['cache_warm'] else 'cold'} at "
              f"the start). Training steps only: no validation, no logging. Load average before → after: {scan['load'][0]:.2f} → "
              f"{scan['load'][1]:.2f}."), "",
             ("| group size | ms/member-step (wall) | ms/member-step (CPU) | speed-up over one plain model (CPU) | compiled: "
              "ms/member-step (CPU) | compiled: speed-up | compile (first step), wall |"),
             "|---|---|---|---|---|---|---|",
             (f"| plain loop, one model | {plain['wall_ms']:.3f} | {plain['cpu_ms']:.3f} "
              f"({plain['spread'][0]:.2f}–{plain['spread'][1]:.2f}) | 1.00 | | | |")]
    for n, r in scan["eager"].items():
        if n == "plain":
            continue
        lines.append(f"| {n} | {r['wall_ms']:.3f} | {r['cpu_ms']:.3f} ({r['spread'][0]:.2f}–{r['spread'][1]:.2f}) | "
                     f"{plain['cpu_ms'] / r['cpu_ms']:.2f} | | | |")
    for n, comp in scan["compiled"]:
        lines.append(f"| {n}, compiled | {comp['wall_ms']:.3f} | | | {comp['cpu_ms']:.3f} | {plain['cpu_ms'] / comp['cpu_ms']:.2f} | "
                     f"{comp['first_s']:.1f} s |")
    if rss:
        ok = rss["root_mb"] <= TARGETS["group_rss_mb"]
        lines += ["", (f"- peak RSS of a process training one group of 12 default Decoders ({rss['steps']} steps, `compile=false`): "
                  f"{rss['root_mb']:.0f} MB (target ≤ {TARGETS['group_rss_mb']} MB: {'met' if ok else 'missed'})")]
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

    return (f"{cpu}, {WORKERS} cores, {mem_gb:.0f} GB RAM; Linux {platform.release()}; Python {platform.python_version()}, torch "
            f"{torch.__version__}, Lightning {lightning.__version__}")


def verdict(value: float, target: float) -> str:
    return f"{value:.3f} (target ≤ {target:g}: {'met' if value <= target else 'missed'})"


def report(args, parts: dict[str, Any], loads: tuple[float, float]) -> str:
    """This run's section of bench/RESULTS.md: what ran, where, then each part that ran."""
    from initnorm.provenance import git_revision

    lines = [
        f"# Benchmark run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        f"`python -m initnorm.bench {' '.join(args.argv)}`, git {git_revision()}.",
        f"Machine: {machine()}.",
        (f"Load average (1 min) at the start / end: {loads[0]:.2f} / {loads[1]:.2f} (the machine may be shared: read the ratios, not the "
         "absolute times)."),
    ]
    if parts.get("steps"):
        lines += per_step_report(args, parts["steps"], parts["jobs"], parts["steps_load"])
    if parts.get("muon_steps"):
        lines += muon_report(args, parts["muon_steps"], parts["muon_load"])
    for res in parts.get("sweeps", {}).values():
        lines += bench_sweeps.report(res, WORKERS)
    if parts.get("flops"):
        lines += bench_flops.report(parts["flops"], parts.get("sweeps", {}).get("mup_mlp"), WORKERS)
    if parts.get("groups"):
        lines += group_report(parts["groups"], parts.get("group_rss"))
    if parts.get("scale"):
        lines += bench_scale.report(parts["scale"])
    return "\n".join(lines) + "\n"


def per_step_report(args, steps_res, jobs, loads: tuple[float, float]) -> list[str]:
    base = steps_res["plain"]
    lines = [
        "",
        f"## Per step: the default Decoder, {args.steps or DEFAULT_STEPS} steps, batch 32, 1 torch thread",
        "",
        (f"Medians of {args.repeats} interleaved repeats in one process; a run's time includes its setup and its validations. "
         "RSS and \"whole job\" come from one more run of each as a process of its own (imports included). "
         f"Load average before → after the interleaved runs: {loads[0]:.2f} → {loads[1]:.2f}; "
         f"the processes of their own: {'; '.join(f'{a:.2f} → {b:.2f}' for a, b in (j['load'] for j in jobs.values()))}."),
        "",
        "| variant | ms/step (wall) | ratio | ms/step (CPU) | ratio | final val loss | peak RSS | whole job, wall |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in steps_res.items():
        label = {"plain": "(1) plain PyTorch loop", "initnorm": "(2) initnorm, `callbacks=none`",
                 "initnorm + stats": "(3) initnorm + per-layer stats (`callbacks=default`)"}[name]
        losses = ", ".join(f"{v:.6f}" for v in sorted(r["final_val_loss"]))
        lines.append(f"| {label} | {r['wall_ms']:.3f} | {r['wall_ms'] / base['wall_ms']:.3f} | {r['cpu_ms']:.3f} | "
                     f"{r['cpu_ms'] / base['cpu_ms']:.3f} | {losses} | {jobs[name]['root_mb']:.0f} MB | {jobs[name]['wall_s']:.1f} s |")
    same = len(set().union(*(r["final_val_loss"] for r in steps_res.values()))) == 1
    lines += ["", f"Same final validation loss in all three, bit for bit: {'yes' if same else 'NO'}.", ""]
    lines.append(f"- (2)/(1): wall {verdict(steps_res['initnorm']['wall_ms'] / base['wall_ms'], TARGETS['initnorm'])}, "
                 f"CPU {verdict(steps_res['initnorm']['cpu_ms'] / base['cpu_ms'], TARGETS['initnorm'])}")
    lines.append(f"- (3)/(1): wall {verdict(steps_res['initnorm + stats']['wall_ms'] / base['wall_ms'], TARGETS['initnorm + stats'])}, "
                 f"CPU {verdict(steps_res['initnorm + stats']['cpu_ms'] / base['cpu_ms'], TARGETS['initnorm + stats'])}")
    rss = max(j["root_mb"] for j in jobs.values())
    lines.append(f"- peak RSS of a process that trains one job: {rss:.0f} MB (target ≤ {TARGETS['rss_mb']} MB: "
                 f"{'met' if rss <= TARGETS['rss_mb'] else 'missed'})")
    return lines


def muon_report(args, res: dict[str, dict[str, Any]], loads: tuple[float, float]) -> list[str]:
    """The Muon row: train() with optim=muon against a plain loop stepping torch.optim.Muon + AdamW (the same groups)."""
    base = res["plain"]
    lines = ["", f"## Per step, Muon: the default Decoder with `optim=muon`, {args.steps or DEFAULT_STEPS} steps", "",
             (f"Medians of {args.repeats} interleaved repeats in one process; the plain loop steps `torch.optim.Muon` (hidden matrices) "
              f"and `torch.optim.AdamW` (the rest) over initnorm's groups. Load average before → after: {loads[0]:.2f} → {loads[1]:.2f}."),
             "", "| variant | ms/step (wall) | ratio | ms/step (CPU) | ratio | final val loss |", "|---|---|---|---|---|---|"]
    for name, r in res.items():
        label = {"plain": "(1) plain loop, torch.optim.Muon + AdamW", "initnorm": "(2) initnorm, `optim=muon callbacks=none`"}[name]
        losses = ", ".join(f"{v:.6f}" for v in sorted(r["final_val_loss"]))
        lines.append(f"| {label} | {r['wall_ms']:.3f} | {r['wall_ms'] / base['wall_ms']:.3f} | {r['cpu_ms']:.3f} | "
                     f"{r['cpu_ms'] / base['cpu_ms']:.3f} | {losses} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m initnorm.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--per-step", action="store_true", help="the per-step part: plain loop vs train(), in one process")
    p.add_argument("--muon", action="store_true",
                   help="the Muon rows: per step against a plain loop with torch.optim.Muon + AdamW, and the 12-job Muon sweep")
    p.add_argument("--sweeps", type=comma_list(), default=None, help=f"whole sweeps, comma-separated: {','.join(bench_sweeps.SWEEPS)}")
    p.add_argument("--flops", action="store_true",
                   help="the FLOP floor of experiment=mup_mlp_sweep's MLPs (beside its sweep when that runs too)")
    p.add_argument("--groups", type=comma_list(int), default=None, help="vectorised group sizes to time (all parts: 1,2,4,8,16,32)")
    p.add_argument("--scale", action="store_true", help="sweeps of N jobs, set-up and training apart (--scale-sizes, --scale-steps)")
    p.add_argument("--scale-sizes", type=comma_list(int), default=list(bench_scale.SIZES),
                   help="the --scale part's sweep sizes (default 100,1000,10000: the last about an hour on 2 cores)")
    p.add_argument("--scale-steps", type=comma_list(int), default=list(bench_scale.STEPS), help="its steps per job (default 1,100)")
    p.add_argument("--steps", type=int, default=None, help=f"steps per job (default: each sweep's own; the per-step part {DEFAULT_STEPS})")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUES",
                   help="in every sweep (and the FLOP part): replace a swept key's values (--set seed=1), "
                        "or add an override (--set width=64)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved repeats of the per-step variants and the group sizes (default 3)")
    p.add_argument("--sweep-repeats", type=int, default=1, help="interleaved repeats of each sweep's rows (default 1)")
    p.add_argument("--out", default="bench/RESULTS.md",
                   help="the markdown file this run's section is appended to (default bench/RESULTS.md)")
    p.add_argument("--no-sweep", action="store_true", help="no sweeps")
    p.add_argument("--sequential", action="store_true", help="also each sweep with Hydra's basic launcher (= sequential in --launchers)")
    p.add_argument("--submitit", action="store_true",
                   help="also each sweep with submitit's local executor, all jobs at once (= submitit in --launchers)")
    p.add_argument("--launchers", type=comma_list(), default=["plain", "vectorized", "local_parallel"],
                   help="each sweep's rows (default plain,vectorized,local_parallel; also: sequential, submitit): "
                        f"{','.join(bench_sweeps.ROWS)}")
    p.add_argument("--vectorized-only", action="store_true",
                   help="only the canonical sweep's plain loops and vectorised runs (eager, and compiled on a warm cache), "
                        "the group sizes and a group's RSS")
    p.add_argument("--compile-sizes", type=comma_list(int), default=[1, 12], help="group sizes to time compiled too (default 1,12)")
    p.add_argument("--group-steps", type=int, default=200, help="training steps per group-size measurement (default 200)")
    p.add_argument("--flops-seconds", type=float, default=5.0, help="seconds of matmuls per throughput measurement (default 5)")
    # internal: parts of the benchmark as processes of their own
    p.add_argument("--plain-sweep", default="", help=argparse.SUPPRESS)  # a sweep's jobs as plain loops
    p.add_argument("--plain-jobs", type=int, default=0, help=argparse.SUPPRESS)  # only its first N jobs
    p.add_argument("--group-job", type=int, default=0, help=argparse.SUPPRESS)  # one vectorised group
    p.add_argument("--matmul-job", default="", help=argparse.SUPPRESS)  # the throughput at one width, started with its peers
    p.add_argument("--matmul-barrier", default="", help=argparse.SUPPRESS)
    p.add_argument("--matmul-peers", type=int, default=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    for s in args.set:
        if "=" not in s:
            p.error(f"--set {s!r} is not KEY=VALUES; write e.g. --set seed=1 or --set lr=0.01,0.03")
    wrong = [r for r in args.launchers if r not in bench_sweeps.ROWS]
    if wrong or not args.launchers:
        p.error(f"--launchers {','.join(wrong)}: not a row; known: {','.join(bench_sweeps.ROWS)} (e.g. --launchers "
                "vectorized,local_parallel)")
    unknown = [k for k in (args.sweeps or []) + ([args.plain_sweep] if args.plain_sweep else []) if k not in bench_sweeps.SWEEPS]
    if unknown:
        p.error(f"--sweeps {','.join(unknown)}: not a sweep; known: {','.join(bench_sweeps.SWEEPS)} (e.g. --sweeps 7e)")
    if args.steps is not None and args.steps < 1:
        p.error(f"--steps {args.steps}: must be at least 1; e.g. --steps 20 for a smoke run")

    if args.plain_sweep:
        print(json.dumps(bench_sweeps.plain_jobs(bench_sweeps.SWEEPS[args.plain_sweep], args.steps, args.set, args.plain_jobs)))
        return
    if args.matmul_job:
        print(json.dumps(bench_flops.matmul_job(args.matmul_job, args.steps, args.set, args.flops_seconds,
                                                args.matmul_barrier, args.matmul_peers)))
        return
    if args.group_job:
        from initnorm.training.fit import fit

        with tempfile.TemporaryDirectory(prefix="initnorm-group-") as tmp:
            results = fit(group_members(args.group_job, args.steps or args.group_steps, Path(tmp), ("compile=false",)))
        print(json.dumps([r["final_val_loss"] for r in results]))
        return

    # Named parts run alone; without any, every part runs.
    chosen = args.per_step or args.muon or args.sweeps is not None or args.flops or args.groups is not None or args.scale
    rows = [bench_sweeps.ROWS[r] for r in dict.fromkeys([*args.launchers, *["sequential"] * args.sequential,
                                                         *["submitit"] * args.submitit])]
    if args.vectorized_only:
        chosen = True  # a named part: the Muon rows and the --scale sweeps run only when asked (they ran here, an hour)
        per_step_on, sweeps, flops = False, ["canonical"], False
        groups, rows = args.groups or [1, 2, 4, 8, 16, 32], [bench_sweeps.PLAIN, bench_sweeps.VECTORIZED, bench_sweeps.COMPILED]
    elif chosen:
        per_step_on, sweeps, flops, groups = args.per_step, [*(args.sweeps or []), *["muon"] * args.muon], args.flops, args.groups or []
    else:
        per_step_on, sweeps, flops, groups = True, list(bench_sweeps.SWEEPS), True, [1, 2, 4, 8, 16, 32]
    if args.no_sweep:
        sweeps = []

    loads = [load()]
    parts: dict[str, Any] = {"sweeps": {}}
    with tempfile.TemporaryDirectory(prefix="initnorm-bench-") as tmp:
        work = Path(tmp)
        if per_step_on:
            steps = args.steps or DEFAULT_STEPS
            print("per step, interleaved ...", file=sys.stderr)
            before = load()
            parts["steps"] = per_step(steps, args.repeats, work)
            parts["steps_load"] = (before, load())
            print("one process per variant (RSS) ...", file=sys.stderr)
            parts["jobs"] = {name: one_job(name, steps, work) for name in VARIANTS}
        if args.muon or not chosen:
            print("per step, Muon, interleaved ...", file=sys.stderr)
            before = load()
            parts["muon_steps"] = per_step(args.steps or DEFAULT_STEPS, args.repeats, work, MUON_VARIANTS, MUON)
            parts["muon_load"] = (before, load())
        for key in sweeps:
            print(f"sweep {key} ...", file=sys.stderr)
            parts["sweeps"][key] = bench_sweeps.measure(bench_sweeps.SWEEPS[key], args.steps, args.set, args.sweep_repeats, rows, work)
        if flops:
            print("FLOP floor ...", file=sys.stderr)
            parts["flops"] = bench_flops.measure(args.steps, args.set, args.flops_seconds)
        if args.scale or not chosen:
            parts["scale"] = bench_scale.measure(args.scale_sizes, args.scale_steps, work)
        if groups:
            print("group sizes ...", file=sys.stderr)
            before = load()
            parts["groups"] = group_scan(groups, args.compile_sizes, args.group_steps, args.repeats, work) | {"load": (before, load())}
            rss = run_command(bench_command("--group-job", "12", "--steps", str(args.group_steps)), work)
            parts["group_rss"] = rss | {"steps": args.group_steps}
    loads.append(load())
    text = report(args, parts, (loads[0], loads[1]))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Appended: the earlier measured sections stay, each with its date, command and machine.
    with out.open("a", encoding="utf-8") as fh:
        fh.write(("\n" if out.stat().st_size else "") + text)
    print(text)


if __name__ == "__main__":
    main()
