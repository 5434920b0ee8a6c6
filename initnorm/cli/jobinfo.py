"""What Hydra knows of the job in progress: its overrides and number, the folder the command started in,
its label, and the fields its record and its TensorBoard HPARAMS entry carry.

Light on purpose (Hydra only): the command's own process reads these before any job trains, a job alone
(``cli/job.py``) reads them while it trains; a stacked group's members are given theirs (``cli/member_setup.py``: no
Hydra job is set up for a member).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig

from initnorm import tb
from initnorm.cli import sweep
from initnorm.cli.sweep import swept_keys

HPARAM_KEYS = ("norm", "warmup", "seed", "lr", "width", "depth", "steps", "batch_size")


JobInfo = tuple[dict[str, str], int, dict[str, str]]  # a job's task overrides as a dict, its number, its group choices


def job_overrides() -> JobInfo:
    """The task overrides of this Hydra job as a dict, its number, and the group choices."""
    if not HydraConfig.initialized():
        return {}, 0, {}
    hc = HydraConfig.get()
    num = hc.job.num if hc.mode is not None and hc.mode.name == "MULTIRUN" else 0
    return overrides_dict(hc.overrides.task), int(num or 0), dict(hc.runtime.choices)


def overrides_dict(task: Sequence[str]) -> dict[str, str]:
    """``["seed=3", "+x=1"]`` -> ``{"seed": "3", "x": "1"}``."""
    overrides = dict(o.split("=", 1) for o in task if "=" in o)
    return {k.lstrip("+~"): v for k, v in overrides.items()}


def hparams_of(c: dict[str, Any], overrides: dict[str, str]) -> dict[str, Any]:
    """The HPARAMS entry: the top-level keys, the registered names, the optimiser's resolved numbers (``lr`` and these
    are what the job trained with, after the transfer rules; a swept ``lr`` the rules moved is kept as ``lr_given``) and
    every other override."""
    hp = {k: c[k] for k in HPARAM_KEYS if k in c}
    hp |= {"init": c["init"]["name"], "param": c["param"]["name"], "norm_type": c["norm_type"]["name"], "model": c["model"]["family"]}
    optim = c["optim"]
    hp |= {k: optim[k] for k in ("weight_decay", "eps") if k in optim}
    if "betas" in optim:
        hp |= {f"beta{i + 1}": b for i, b in enumerate(optim["betas"])}
    if "lr" in overrides and "applied" in c["transfer"]:
        hp["lr_given"] = overrides["lr"]
    return hp | {k: v for k, v in overrides.items() if k not in hp and k != "lr"}


def launch_folder() -> Path:
    """The folder the command started in (a job runs in its own folder)."""
    return Path(HydraConfig.get().runtime.cwd) if HydraConfig.initialized() else Path.cwd()


def job_meta(job: JobInfo | None = None) -> dict[str, Any]:
    """What Hydra knows of this job (or ``job``), for its record: its number, overrides, swept keys and group choices."""
    overrides, num, choices = job or job_overrides()
    return {"job_num": num, "overrides": overrides, "swept": swept_keys(), "choices": choices}


def hparams_writer(c: dict[str, Any], job: JobInfo | None = None):
    """``(writer, hp metrics, step)`` -> this job's (or ``job``'s) HPARAMS entry: what varies first (the swept keys; a single
    run's overrides), the trial named by it, the metrics at the last step."""
    overrides, _, _ = job or job_overrides()
    swept = swept_keys()
    varying = [k for k in (swept if swept is not None else sweep.what_sets_apart(overrides)) if not k.startswith("hydra.")]
    hparams, label = hparams_of(c, overrides), run_label(overrides, swept, c["seed"])
    return functools.partial(_write_hparams, hparams, varying, label)  # a function of the module: it pickles (ddp_spawn)


def _write_hparams(hparams: dict[str, Any], varying: list[str], label: str, writer, metrics: dict[str, Any], step: int) -> None:
    tb.write_hparams(writer, hparams, metrics, varying, label, step)


def run_label(overrides: dict[str, str], swept: list[str] | None, seed) -> str:
    """``norm=post warmup=200 seed=3``: a sweep's swept values, or what a single run's command line set (watch-only keys left out)."""
    return tb.run_label(overrides if swept is not None else {k: v for k, v in overrides.items() if k in sweep.what_sets_apart(overrides)},
                        swept, seed)
