"""``make gpu-check``: what a GPU machine must show, in one command of at most 10 minutes on one GPU, appended to
bench/RESULTS.md (docs/devices.md):

1. the default job on CUDA, in fp32 and in bf16-mixed (``+trainer.precision=bf16-mixed``);
2. the canonical sweep (``initnorm.bench --sweeps canonical``) under the vectorised launcher on the GPU, against plain
   loops in one process (``repro/bench_measure.plain_run``: on the CPU, which it alone knows);
3. the chapter's wide µP sweep (``experiment=mup_sweep_wide``, 72 jobs) vectorised, against one job of it alone;
4. one run across 2 processes (``trainer.devices=2 +trainer.strategy=ddp``, then ``ddp_spawn``) where two GPUs are visible.

Without a CUDA device it says so in one line and exits 2. ``--cpu`` runs every part once on the CPU with tiny settings
(a few steps, a slice of each grid) to check that the commands work, and times nothing worth reading.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from initnorm.provenance import git_revision
from initnorm.repro.bench_measure import bench_command, run_command

# Steps of the two sweeps on the GPU: what fits the 10 minutes with the default job's two runs (the sweeps' own 1,500
# steps are a `--steps 1500` away; the report names the steps each row ran).
SWEEP_STEPS = 300
PART_TIMEOUT_S = 240  # a part that runs longer is stopped and reported as such; the next part runs
BUDGET_S = 570  # the whole check's: each part gets what is left of it, at most PART_TIMEOUT_S


def train_command(*overrides: str) -> list[str]:
    return [sys.executable, "-m", "initnorm.train", *overrides, "trainer.enable_progress_bar=false"]


def records(folder: Path) -> list[dict[str, Any]]:
    """Every metrics.json below ``folder``."""
    return [json.loads(p.read_text()) for p in sorted(folder.rglob("metrics.json"))]


def run(cmd: list[str], workdir: Path, timeout: int) -> dict[str, Any]:
    """``cmd`` run to its end, or stopped after ``timeout`` seconds (its row then says so)."""
    start = time.perf_counter()
    try:
        return run_command(["timeout", str(timeout), *cmd], workdir) | {"returncode": 0, "command": " ".join(cmd[3:])}
    except RuntimeError as exc:  # run_command's failure: "<command> failed (<status>):\n<output>"
        code = re.search(r" failed \((-?\d+)\):", str(exc))
        return {"returncode": int(code.group(1)) if code else -1, "output": str(exc), "wall_s": time.perf_counter() - start,
                "command": " ".join(cmd[3:])}


def row(name: str, r: dict[str, Any], folder: Path | None) -> str:
    ok = r.get("returncode") == 0
    recs = records(folder) if folder is not None and folder.exists() else []
    done = [m for m in recs if m.get("status") == "finished"]
    dev = done[0].get("device", {}) if done else {}
    losses = [m["final_val_loss"] for m in done]
    loss = f"{losses[0]:.4f}" if len(losses) == 1 else (f"{min(losses):.4f}–{max(losses):.4f}" if losses else "–")
    ms = f"{done[0]['ms_per_step']:.2f}" if len(done) == 1 else "–"
    ran = f"{dev.get('accelerator', '?')} x{dev.get('devices', '?')} (world {dev.get('world_size', '?')}), {dev.get('precision', '?')}"
    status = "ok" if ok else ("stopped at the part's time limit" if r.get("returncode") == 124 else f"exit {r.get('returncode')}")
    return (f"| {name} | {status} | {r.get('wall_s', float('nan')):.1f} s | {len(done)} | {ms} | {loss} | {ran if done else '–'} | "
            f"`{r['command']}` |")


def parts(cpu: bool, steps: int, n_gpus: int) -> list[tuple[str, list[str], bool]]:
    """(name, overrides or bench arguments, whether a train sweep) of each part; tiny ones with ``cpu``."""
    acc = "trainer.accelerator=cpu" if cpu else "trainer.accelerator=gpu"
    job_steps = ["steps=4", "trainer.val_check_interval=2"] if cpu else []
    wide = ["experiment=mup_sweep_wide", f"steps={steps}", "callbacks=none", acc.replace("=gpu", "=auto")]
    wide_grid = ["width=128,256", "lr=0.01", "param=mup", "seed=1"] if cpu else []
    out = [
        ("default job, fp32", [acc, *job_steps], False),
        ("default job, bf16-mixed", [acc, *job_steps, "+trainer.precision=bf16-mixed"], False),
        ("wide µP sweep, vectorised", ["-m", *wide, *wide_grid, "hydra/launcher=vectorized"], True),
        ("one job of it alone (width 1,024, µP)", [*wide, "width=128" if cpu else "width=1024", "lr=0.01", "param=mup", "seed=1"], False),
    ]
    if cpu or n_gpus >= 2:
        out.append(("2 processes, DDP", [acc, *job_steps, "trainer.devices=2", "+trainer.strategy=ddp"], False))
        out.append(("2 processes, DDP spawned", [acc, *job_steps, "trainer.devices=2", "+trainer.strategy=ddp_spawn"], False))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m initnorm.repro.gpu_check", description=__doc__.splitlines()[0])
    p.add_argument("--cpu", action="store_true", help="every part once on the CPU, tiny: checks the commands, times nothing")
    p.add_argument("--steps", type=int, default=None, help=f"steps of the sweeps' jobs (default {SWEEP_STEPS}; --cpu: 2)")
    p.add_argument("--out", default=None, help="where the report is appended (default bench/RESULTS.md; --cpu: printed only)")
    args = p.parse_args(argv)
    import torch

    n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not args.cpu and n_gpus == 0:
        build = "a CPU build of torch" if torch.version.cuda is None else f"torch for CUDA {torch.version.cuda}"
        print(f"gpu-check: no CUDA device is visible to this process ({build}); run it on a GPU machine with a CUDA build of "
              "torch, or check its parts here with `python -m initnorm.repro.gpu_check --cpu`", file=sys.stderr)
        return 2
    steps = args.steps or (2 if args.cpu else SWEEP_STEPS)
    workdir = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    device = "CPU (--cpu: a check of the commands, not a timing)" if args.cpu else (
        f"{torch.cuda.get_device_name(0)} x{n_gpus}, torch {torch.__version__} (CUDA {torch.version.cuda})")
    lines = [f"# GPU check: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {device}, git {git_revision()}", "",
             "`python -m initnorm.repro.gpu_check " + " ".join(sys.argv[1:] if argv is None else argv) + "`; each row one command "
             f"(wall: the whole command, imports included; ms/step and loss from its metrics.json; sweeps at steps={steps}).", "",
             "| part | status | wall | jobs done | ms/step | final val loss | what ran | command |",
             "|---|---|---|---|---|---|---|---|"]
    deadline = time.monotonic() + BUDGET_S
    left = lambda: int(min(PART_TIMEOUT_S, deadline - time.monotonic()))
    for i, (name, overrides, sweep) in enumerate(parts(args.cpu, steps, n_gpus)):
        folder = workdir / f"part{i + 1}"
        where = f"hydra.sweep.dir={folder}" if sweep else f"hydra.run.dir={folder}"
        if left() < 10:
            lines.append(f"| {name} | not run: the check's {BUDGET_S} s were spent | | | | | | |")
            continue
        r = run(train_command(*overrides, where), workdir, left())
        lines.append(row(name, r, folder))
        print(lines[-1], flush=True)
        if r.get("returncode") not in (0, 124):
            print(r.get("output", "")[-2000:], file=sys.stderr)
    if not args.cpu and n_gpus < 2:
        lines += [f"| 2 processes, {how} | not run: one GPU visible | | | | | | |" for how in ("DDP", "DDP spawned")]
    # The canonical sweep through the benchmark's own rows (plain loops against the vectorised launcher).
    bench_out = workdir / "bench.md"
    bench_args = ["--sweeps", "canonical", "--launchers", "plain,vectorized", "--steps", str(steps),
                  "--set", f"trainer.accelerator={'cpu' if args.cpu else 'auto'}", "--out", str(bench_out)]
    if args.cpu:
        bench_args += ["--set", "seed=1", "--set", "warmup=0"]
    r = run(bench_command(*bench_args), workdir, max(10, left()))
    status = "ok" if r.get("returncode") == 0 else f"exit {r.get('returncode')}"
    lines += ["", (f"The canonical sweep, vectorised on the device against plain loops (`python -m initnorm.bench {' '.join(bench_args)}`, "
                   f"{status}, {r.get('wall_s', float('nan')):.1f} s):"), ""]
    lines += bench_out.read_text().splitlines() if bench_out.is_file() else [r.get("output", "")[-1500:]]
    report = "\n".join(lines) + "\n"
    print(report)
    out = args.out or (None if args.cpu else "bench/RESULTS.md")
    if out:
        with open(out, "a", encoding="utf-8") as f:
            f.write("\n" + report)
        print(f"appended to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
