"""What a job and a sweep print: one line as a job starts, one as it ends (with its final loss and
the sweep's progress), nothing from the libraries.

Each job calls :func:`quiet` itself (in a joblib worker or a SLURM job the filters of the parent
process are not there), then :func:`job_started` and :func:`job_finished`. The progress of a sweep
is read from its folder (finished ``metrics.json`` files), so it is right whichever process or
machine ran the other jobs; the total and the start time come from the parent through the
environment (set in ``sweep.SummaryCallback.on_multirun_start``).
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

TOTAL_ENV = "INITNORM_SWEEP_TOTAL"  # jobs in this sweep (set by the parent before launching)
START_ENV = "INITNORM_SWEEP_START"  # time.time() when the sweep started
# Loggers whose INFO lines are noise in every job: accelerator banners, "Trainer.fit stopped", tips.
QUIET_LOGGERS = ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning", "lightning_fabric")
QUIET_WARNINGS = (
    r".*LeafSpec.*is deprecated",
    r".*does not have many workers.*",
    r".*The number of training batches.*",
    r".*`isinstance\(treespec, LeafSpec\)`.*",
)


def quiet() -> None:
    """No warnings or advertisements from libraries in this process (idempotent; every job calls it)."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    for pattern in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")  # processes this one starts


def duration(seconds: float) -> str:
    """``45s``, ``3m05s``, ``1h02m``."""
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def sweep_progress(sweep_dir: Path | str, now: float | None = None) -> str:
    """``5/12 done, about 1m20s left`` from the finished jobs in the sweep folder ('' outside a sweep)."""
    total = int(os.environ.get(TOTAL_ENV, "0") or 0)
    if not total:
        return ""
    import json

    done = 0
    for path in Path(sweep_dir).rglob("metrics.json"):
        try:
            done += json.loads(path.read_text(encoding="utf-8")).get("status") in ("finished", "failed")
        except (OSError, ValueError):
            continue
    done = min(done, total)
    start = float(os.environ.get(START_ENV, "0") or 0)
    elapsed = (now or time.time()) - start if start else 0.0
    left = f", about {duration(elapsed / done * (total - done))} left" if start and done and done < total else ""
    return f"{done}/{total} done{left}"


def job_started(label: str, job_num: int) -> None:
    total = os.environ.get(TOTAL_ENV)
    of = f" (job {job_num + 1} of {total})" if total else ""
    print(f"start {label}{of}", flush=True)


def job_finished(label: str, metrics: dict[str, Any], folder: Path | str, sweep_dir: Path | str | None) -> None:
    """``done norm=post warmup=200 seed=3: final validation loss 2.8570 (100 steps, 24.9 ms/step) [5/12 done, about 1m20s left]``."""
    if metrics.get("diverged"):
        status = f"diverged at step {metrics['diverged_step']}"
    else:
        status = f"final validation loss {metrics['final_val_loss']:.4f}"
    done = "already finished, " if metrics.get("skipped") else ""
    progress = sweep_progress(sweep_dir) if sweep_dir else ""
    where = "" if sweep_dir else f" -> {folder}"
    tail = f" [{progress}]" if progress else ""
    print(f"done  {label}: {done}{status} ({metrics['steps']} steps, {metrics['ms_per_step']:.2f} ms/step){where}{tail}", flush=True, file=sys.stdout)
