"""What the benchmark's parts share: the plain PyTorch loop (the reference) and how a command is measured."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from initnorm.data.corpus import load_corpus
from initnorm.models.build import build_model
from initnorm.training.optim import make_optimizer, schedule_factor
from initnorm.training.validation import validation_interval

ROOT = Path(__file__).resolve().parents[2]


def plain_run(c: dict[str, Any]) -> dict[str, Any]:
    """One job as a plain PyTorch loop: what ``train`` computes, without Lightning or logging.

    The model and the optimiser's groups come from initnorm's build and its parameterisation table
    (``build_model``, ``make_optimizer``), so µP jobs train here with the same per-role multipliers
    as under ``train``. A non-finite loss stops the loop, as it stops the job."""
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
        if not torch.isfinite(loss):
            return {"final_val_loss": float("nan"), "val_history": history, "diverged_step": step}
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if (step + 1) % every == 0 or step + 1 == c["steps"]:
            history.append((step + 1, validate()))
    return {"final_val_loss": history[-1][1], "val_history": history, "diverged_step": None}


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def load() -> float:
    """The 1-minute load average (the machine is shared: every timed row records it before and after)."""
    return os.getloadavg()[0]


def tree_peaks(root: int) -> dict[int, int]:
    """Peak RSS (VmHWM, kB) of ``root`` and every process below it, read from /proc (Linux)."""
    return {pid: kb for pid, (kb, _) in tree_stats(root).items()}


TICKS = os.sysconf("SC_CLK_TCK")


def tree_stats(root: int) -> dict[int, tuple[int, float]]:
    """``root`` and every process below it: (peak RSS in kB, CPU seconds it has used itself), read from /proc (Linux)."""
    stats: dict[int, list[str]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stats[int(d.name)] = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError, ValueError):
                continue
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += [p for p, fields in stats.items() if int(fields[1]) == pid]  # fields[1]: the parent's pid
    out = {}
    for pid in tree:
        try:
            line = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("VmHWM:"))
            ticks = int(stats[pid][11]) + int(stats[pid][12])  # its own utime + stime (proc(5), fields 14 and 15)
            out[pid] = (int(line.split()[1]), ticks / TICKS)
        except (OSError, StopIteration, KeyError, IndexError, ValueError):
            continue
    return out


def run_command(cmd: list[str], cwd: Path) -> dict[str, Any]:
    """Run ``cmd``; its wall time, CPU time of all its processes, exit status, output, the peak RSS in
    MB of each of its processes, and the load average before and after."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    peaks: dict[int, int] = {}
    seen_cpu: dict[int, float] = {}  # pid -> the CPU seconds it had used when last seen
    load_before = load()
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    done = threading.Event()

    def watch():
        while True:  # a first look at once: a process of milliseconds may be gone by the first tenth of a second
            for pid, (kb, cpu_s) in tree_stats(proc.pid).items():
                peaks[pid] = max(kb, peaks.get(pid, 0))
                seen_cpu[pid] = max(cpu_s, seen_cpu.get(pid, 0.0))
            if done.wait(0.1):
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    out, _ = proc.communicate()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # every process below it, once reaped
    reaped_s = after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime
    done.set()
    watcher.join()
    # A sweep's pool workers are the fork server's children, and the fork server is ended, not waited for, with its
    # workers: their CPU never reaches this process's RUSAGE_CHILDREN. What /proc showed of each process (sampled every
    # 0.1 s, so short of each one's last tenth of a second) counts them; the larger of the two is the command's CPU.
    cpu_s = max(reaped_s, sum(seen_cpu.values()))
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out[-3000:]}")
    root = peaks.pop(proc.pid, 0)
    return {"wall_s": wall, "cpu_s": cpu_s, "reaped_cpu_s": reaped_s, "output": out, "root_mb": root / 1024,
            "children_mb": sorted((kb / 1024 for kb in peaks.values()), reverse=True),
            "load": (load_before, load())}


def bench_command(*args: str) -> list[str]:
    """This benchmark as a process of its own (its internal modes: the plain loops, a group, a matmul timing)."""
    return [sys.executable, "-m", "initnorm.bench", *args]
