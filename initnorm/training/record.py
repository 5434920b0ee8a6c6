"""A job's record, written in one place whichever engine path trained it: ``metrics.json`` and the HPARAMS entry.

Every member of a fit (``training/fit.py``; a job alone is a group of one) hands the same facts to
``job_metrics``, so ``metrics.json`` has the same keys under every launcher, and ``group``: the size
of the group it trained in, its place there, how its forward ran, the group's own step time, and how long its own
build took (`build_s`: its seed, data, model and init check); and ``device``: what ran, read from the Trainer itself
(accelerator, devices, world size, strategy, precision), not what the config asked.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from initnorm.config import comparable
from initnorm.provenance import describe
from initnorm.results import scored


def job_metrics(c: Mapping[str, Any], *, val_history: list, diverged_step: int | None, steps: int, resumed: int,
                wall: float, ms_per_step: float,
                compiled: bool, params: int, extra: Mapping[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]:
    """What ``metrics.json`` holds: the result, how long it took, what made it (``meta``: job number,
    overrides, swept keys, group choices; ``extra``: the family's own numbers)."""
    diverged = diverged_step is not None
    metrics = {
        "status": "finished",
        "final_val_loss": math.nan if diverged else (val_history[-1][1] if val_history else math.nan),
        "best_val_loss": min((v for _, v in val_history), default=math.nan),
        "val_history": val_history,
        "diverged": diverged,
        "diverged_step": diverged_step,
        "steps": steps,
        "ms_per_step": ms_per_step,
        "resumed_from_step": resumed,
        "compiled": compiled,
        "wall_s": wall,
        "params": params,
        "seed": c["seed"],
        "summary_metrics": list(c["summary"]["metrics"]),
        "summary_plots": list(c["summary"]["plots"]),
        "summary_tail_steps": c["summary"]["tail_steps"],  # the window of final_loss, named in the done line (config drops summary)
        "provenance": describe(),
        "config": comparable(c),  # what a rerun in this folder must match (training/resume.py)
        "resolved": resolved(c),
    }
    return metrics | dict(meta) | dict(extra)


def ran(trainer: Any) -> dict[str, Any]:
    """What a Lightning ``trainer`` ran on: its accelerator (``cpu``, ``cuda``, ``mps``), its devices, the world size (the
    processes of one run), its strategy and its precision."""
    accelerator = type(trainer.accelerator).__name__.removesuffix("Accelerator").lower()
    return {"accelerator": accelerator, "devices": trainer.num_devices, "world_size": trainer.world_size,
            "strategy": type(trainer.strategy).__name__, "precision": str(trainer.precision),
            "root_device": str(trainer.strategy.root_device)}


def resolved(c: Mapping[str, Any]) -> dict[str, Any]:
    """The optimiser's numbers the job trained with, after the transfer rules (``transfer/rules.py``) carried them from
    ``transfer.base``: lr, weight decay, betas, eps (those its optimiser has), and what moved them (``transfer.applied``)."""
    optim = c["optim"]
    out: dict[str, Any] = {"lr": c["lr"]} | {k: optim[k] for k in ("weight_decay", "betas", "eps", "momentum") if k in optim}
    if "weight_decay_mode" in optim and optim["weight_decay"]:  # AdamW's averaging timescale 1 / (lr x wd), in steps
        out["timescale_steps"] = 1 / ((c["lr"] if optim["weight_decay_mode"] != "independent" else 1.0) * optim["weight_decay"])
    return out | ({"applied": c["transfer"]["applied"]} if "applied" in c["transfer"] else {})


def hp_metrics(metrics: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, float | None]:
    """The HPARAMS tab's metrics: the final and best losses, divergence, and every number of the family's own."""
    out = {"hp/final_val_loss": metrics["final_val_loss"], "hp/best_val_loss": metrics["best_val_loss"],
           "hp/diverged": float(metrics["diverged"]),
           "hp/diverged_step": metrics["diverged_step"]}
    return out | {f"hp/{k}": float(v) for k, v in extra.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def status_line(metrics: Mapping[str, Any]) -> str:
    """``final validation loss 1.8157`` (the loss the sweep's table scores, named: ``results.scored``), ``diverged at
    step 412``, ``pruned: ...`` (a search's pruner: search/pruning.py) or ``early-stopped at step 60 of 200 ...:
    final validation loss 1.9021``."""
    # .get: a finished record written by an older version may lack keys
    if (status := metrics.get("status")) and status in metrics:  # a callback's own word and why (fit.py): pruned
        return f"{status}: {metrics[status]}"
    if metrics.get("diverged"):
        return f"diverged at step {metrics.get('diverged_step')}"
    return f"early-stopped ({metrics['early_stopped']}): {scored(metrics)}" if metrics.get("early_stopped") else scored(metrics)
