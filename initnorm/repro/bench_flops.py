"""The floor under compute-bound work: a job's matmul FLOPs against this machine's matmul throughput.

The wide MLPs of ``experiment=mup_mlp_sweep`` at width 1,024 spend their time in matmuls, so no
launcher can make them much cheaper than (FLOPs / throughput). Both numbers come from here:

- the FLOPs from the job's own model (``models.build``) and batch: one forward with a hook on every
  ``nn.Linear`` reads the rows each layer sees; a training step costs 2·rows·in·out for the
  forward, as much again for the weight's gradient and for the input's gradient (where the input
  needs one: the embedding below the first layer is trained), and every evaluation one forward
  over the held-out set;
- the throughput from ``torch.mm`` at exactly those shapes, one thread, in one process and in two
  processes at once (both cores busy, as in a parallel sweep).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from initnorm.cli.compose import compose_train
from initnorm.config import to_plain
from initnorm.models.build import build_model
from initnorm.repro.bench_measure import ROOT, bench_command
from initnorm.repro.bench_sweeps import SWEEPS, plan, summary
from initnorm.training.tasks import TASKS
from initnorm.training.validation import validation_interval

SWEEP = SWEEPS["mup_mlp"]


def job_shapes(c: dict[str, Any]) -> dict[str, Any]:
    """The matmuls of one job of config ``c``: per training step and per evaluation, as
    (rows, in, out, input needs a gradient), with how many steps and evaluations the job makes."""
    data = TASKS.get(c["data"]["kind"]).make_data(c)
    data.setup("fit")
    model = build_model(c["model"], c["init"], c["param"], data.vocab_size).model
    seen: list[tuple[int, int, int, bool]] = []

    def hook(layer, args, out):
        x = args[0]
        seen.append((x.numel() // layer.in_features, layer.in_features, layer.out_features, x.requires_grad))

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, nn.Linear)]
    x = next(iter(data.train_dataloader()))[0]
    model(x)
    for h in handles:
        h.remove()
    batch = x.shape[0]
    eval_examples = sum(len(b[0]) for loader in data.val_dataloader() for b in loader)
    every = validation_interval(c["steps"], c["trainer"]["val_check_interval"])
    evals = 1 + c["steps"] // every + (1 if c["steps"] % every else 0)  # step 0, every interval, the last step
    return {"train": seen, "eval": [(rows * eval_examples // batch, i, o, False) for rows, i, o, _ in seen],
            "steps": c["steps"], "evals": evals, "params": sum(p.numel() for p in model.parameters())}


def step_flops(mms: list[tuple[int, int, int, bool]], backward: bool) -> int:
    """2·rows·in·out per matmul: the forward; with ``backward``, the weight's gradient and the input's where needed."""
    return sum(2 * r * i * o * (1 + (1 + g if backward else 0)) for r, i, o, g in mms)


def job_flops(shapes: dict[str, Any]) -> dict[str, int]:
    train = shapes["steps"] * step_flops(shapes["train"], True)
    evals = shapes["evals"] * step_flops(shapes["eval"], False)
    return {"train": train, "eval": evals, "total": train + evals}


def time_matmuls(mms: list[tuple[int, int, int, bool]], backward: bool, seconds: float) -> float:
    """Seconds for the ``torch.mm`` calls of one step at these shapes (one thread; median of rounds of at least ``seconds`` / 5)."""
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    calls = []
    for r, i, o, g in mms:
        x, w, dy = torch.randn(r, i, generator=gen), torch.randn(i, o, generator=gen), torch.randn(r, o, generator=gen)
        calls.append((x, w, torch.empty(r, o)))  # forward: x @ W
        if backward:
            calls.append((x.t(), dy, torch.empty(i, o)))  # the weight's gradient: x^T @ dy
            if g:
                calls.append((dy, w.t(), torch.empty(r, i)))  # the input's gradient: dy @ W^T

    def once():
        for a, b, out in calls:
            torch.mm(a, b, out=out)

    once()
    rounds = []
    for _ in range(5):
        n, start = 0, time.perf_counter()
        while n < 2 or time.perf_counter() - start < seconds / 5:
            once()
            n += 1
        rounds.append((time.perf_counter() - start) / n)
    return statistics.median(rounds)


def throughput(shapes: dict[str, Any], seconds: float) -> dict[str, float]:
    """The job's matmuls timed at its shapes: seconds per training step and per evaluation, and GFLOP/s over the job."""
    step_s = time_matmuls(shapes["train"], True, seconds)
    eval_s = time_matmuls(shapes["eval"], False, seconds / 4)
    job_s = shapes["steps"] * step_s + shapes["evals"] * eval_s
    return {"step_s": step_s, "eval_s": eval_s, "job_s": job_s, "gflops": job_flops(shapes)["total"] / job_s / 1e9}


def width_config(width: str, steps: int | None, sets: list[str]) -> dict[str, Any]:
    p = plan(SWEEP, steps, sets)
    return to_plain(compose_train([*p["fixed"], f"width={width}"]))


def matmul_job(width: str, steps: int | None, sets: list[str], seconds: float, barrier: str, peers: int) -> dict[str, float]:
    """One process of the two-at-once measurement: wait until ``peers`` processes are ready, then time."""
    shapes = job_shapes(width_config(width, steps, sets))
    Path(barrier, str(os.getpid())).touch()
    deadline = time.time() + 300
    while len(list(Path(barrier).iterdir())) < peers and time.time() < deadline:
        time.sleep(0.01)
    return throughput(shapes, seconds)


def together(width: str, steps: int | None, sets: list[str], seconds: float, n: int = 2) -> list[dict[str, float]]:
    """``n`` processes timing the same matmuls at the same moment (each on its own core when the machine has them)."""
    tail = [*(["--steps", str(steps)] if steps is not None else []), *(a for s in sets for a in ("--set", s))]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    with tempfile.TemporaryDirectory(prefix="initnorm-mm-") as barrier:
        procs = [subprocess.Popen(bench_command("--matmul-job", width, "--flops-seconds", str(seconds), "--matmul-barrier", barrier,
                                                "--matmul-peers", str(n), *tail),
                                  env=env, stdout=subprocess.PIPE, text=True) for _ in range(n)]
        outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a matmul timing process failed: {[p.returncode for p in procs]}")
    return [json.loads(o.strip().splitlines()[-1]) for o in outs]


def measure(steps: int | None, sets: list[str], seconds: float) -> dict[str, Any]:
    """Per width of the sweep: its job's FLOPs, and the matmul throughput alone and two at once."""
    out = {}
    for width in plan(SWEEP, steps, sets)["grid"]["width"].split(","):
        shapes = job_shapes(width_config(width, steps, sets))
        alone = throughput(shapes, seconds)
        pair = together(width, steps, sets, seconds)
        out[width] = {"shapes": shapes, "flops": job_flops(shapes), "alone": alone, "pair": pair}
        print(f"  width {width}: {job_flops(shapes)['total'] / 1e9:.2f} GFLOP per job; {alone['gflops']:.1f} GFLOP/s alone, "
              f"{', '.join(format(p['gflops'], '.1f') for p in pair)} two at once", file=sys.stderr, flush=True)
    return {"widths": out, "seconds": seconds}


def secs(x: float) -> str:
    """Seconds with three significant digits: a smoke run's floor is milliseconds, a full run's minutes."""
    return f"{x:.3g} s"


def report(res: dict[str, Any], sweep_res: dict[str, Any] | None, workers: int) -> list[str]:
    rows = summary(sweep_res) if sweep_res else {}  # the mup_mlp sweep's rows, when it ran in the same command
    n_jobs = {w: 0 for w in res["widths"]}
    if sweep_res:
        for job in sweep_res["plan"]["jobs"]:
            n_jobs[job["width"]] += 1
    lines = ["", "## The FLOP floor: `experiment=mup_mlp_sweep`'s wide MLPs", "",
             ("A job's matmul FLOPs (from its model's `nn.Linear` shapes at its batch: forward, the weights' and the inputs' gradients per "
              "training step, one forward over the held-out set per evaluation) against `torch.mm` at the same shapes, 1 thread: in one "
              f"process, and in {len(next(iter(res['widths'].values()))['pair'])} processes at once (the mean of theirs). The floor is "
              "FLOPs / throughput: no launcher trains the job faster on this machine's cores. Element-wise work (ReLU, Adam, the loss) "
              "comes on top."), ""]
    head = ("| width | params | GFLOP per job (train + eval) | GFLOP/s, 1 process | floor per job, 1 process | GFLOP/s each, 2 at once | "
            "floor per job, 2 at once |")
    sep = "|---|---|---|---|---|---|---|"
    if rows:
        per_row = (f"`{name.split('`')[1]}`: the jobs' training, summed (÷ floor)" for name in rows)
        head += " jobs | floor of the jobs, summed | " + " | ".join(per_row) + " |"
        sep += "---|---|" + "---|" * len(rows)
    lines += [head, sep]
    floor_all = 0.0
    for w, r in res["widths"].items():
        pair_gflops = statistics.mean(p["gflops"] for p in r["pair"])
        flops = r["flops"]["total"]
        line = (f"| {w} | {r['shapes']['params']:,} | {flops / 1e9:.2f} ({r['flops']['train'] / 1e9:.2f} + {r['flops']['eval'] / 1e9:.2f}) "
                f"| {r['alone']['gflops']:.1f} | {secs(flops / r['alone']['gflops'] / 1e9)} | {pair_gflops:.1f} | "
                f"{secs(flops / pair_gflops / 1e9)} |")
        if rows:
            floor = n_jobs[w] * flops / pair_gflops / 1e9
            floor_all += floor
            measured = []
            for rr in rows.values():
                s = sum(v for k, v in rr["per_job_s"].items() if f"width={w}" in k.split())
                measured.append(f"{secs(s)} ({s / floor:.1f}×)")
            line += f" {n_jobs[w]} | {secs(floor)} | " + " | ".join(measured) + " |"
        lines.append(line)
    if rows and workers:
        walls = ", ".join(f"`{name.split('`')[1]}` {r['wall_s']:.1f} s" for name, r in rows.items())
        lines += ["", (f"- the whole sweep's floor on {workers} cores (every job's floor at the two-at-once throughput, summed, "
                       f"÷ {workers}): {secs(floor_all / workers)}; its whole commands took: {walls}.")]
    return lines
