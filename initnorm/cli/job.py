"""One job inside Hydra's run of it: its config checked, its record's fields from Hydra, then ``cli/unit.fit_unit`` of
it alone (``training/fit.py``'s ``fit([member])``), the one path every launcher's jobs take.

``cli/train.py`` imports this module at the first job, so that ``--help`` and a bad value (one line,
before anything trains) never import Lightning; a vectorised sweep's workers import it before their first
group (``launch/workers.py``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from initnorm import schema
from initnorm.cli import console, unit
from initnorm.cli.jobinfo import JobInfo, hparams_of, hparams_writer, job_meta, job_overrides, launch_folder, run_label
from initnorm.cli.sweep import swept_keys
from initnorm.config import to_plain
from initnorm.launch import forks
from initnorm.training.compiling import should_compile, use_cache
from initnorm.training.devices import placement
from initnorm.training.distributed import Placement
from initnorm.training.fit import Member

# Lightning sets its loggers to INFO when it is first imported, which may be just now, after the command quieted
# them (cli/train.main): the accelerator banners and tips would then come back with the first job.
console.quiet()


def checked(cfg: DictConfig | dict[str, Any]) -> dict[str, Any]:
    """The job's resolved config (composed, or as plain values), checked (``data.path`` absolute against the folder the
    command started in)."""
    c = schema.check(to_plain(cfg) if isinstance(cfg, DictConfig) else cfg, base=launch_folder())
    schema.check_text(c)
    return c


def preflight_checked() -> dict[str, Any] | None:
    """This Hydra job's config as the preflight checked it (``checked_plan.plan()``: ``schema.check``, the transfer rules'
    ``lr`` among it, run once a job), a copy of its own; None where the preflight did not check it (a search's trial, a
    worker process of this machine, a SLURM task, a test calling ``train``)."""
    from hydra.core.hydra_config import HydraConfig

    from initnorm.cli.checked_plan import plan

    known = plan().get(tuple(HydraConfig.get().overrides.task)) if HydraConfig.initialized() else None
    return None if known is None else copy.deepcopy(known.config)


def as_member(c: dict[str, Any], out_dir: str | Path, job: JobInfo | None = None, sweep_dir: str | Path | None = None) -> Member:
    """This job (inside Hydra's run of it, or ``job``: its overrides, number and choices) as a member to fit: its config,
    folder, label, record fields, HPARAMS and its place in a horizon fork of its sweep (``sweep_dir``, default Hydra's
    sweep folder in a multirun: ``launch/forks.py``)."""
    overrides = (job or job_overrides())[0]
    if sweep_dir is None and console.in_sweep():
        from hydra.core.hydra_config import HydraConfig

        sweep_dir = HydraConfig.get().sweep.dir
    return Member(c, Path(out_dir), label=run_label(overrides, swept_keys(), c["seed"]), base=launch_folder(),
                  meta=job_meta(job), hparams=hparams_of(c, overrides), write_hparams=hparams_writer(c, job),
                  fork=forks.fork_of(c, Path(out_dir).absolute(), None if sweep_dir is None else launch_folder() / str(sweep_dir)))


def device_of(c: dict[str, Any]) -> Placement:
    """Where the job trains, as ``training/devices.placement`` decides it for every launcher: job k of a sweep on GPU k mod N where
    GPUs are asked for; ``trainer.devices=N`` with a strategy: one run in N processes (``batch_size`` the global batch)."""
    return placement(c["trainer"], job_overrides()[1], console.in_sweep(), c["batch_size"])


def train(cfg: DictConfig, out_dir: str | Path = ".") -> dict[str, Any]:
    """Run one job in ``out_dir`` and return its metrics (also written to ``metrics.json`` there; its end line said); its
    error is raised, for its task function (``cli/train.hydra_main``) to record."""
    c = preflight_checked() or checked(cfg)
    if should_compile(c["compile"], c["steps"]):
        use_cache(launch_folder())  # one cache for every job of the sweep and the next sweep
    bar = bool(c["trainer"]["enable_progress_bar"]) and not console.in_sweep()  # a sweep prints one line per job instead
    sweep_dir = None
    if console.in_sweep():  # its progress lines end with the sweep's done/total, as a group's do
        from hydra.core.hydra_config import HydraConfig

        sweep_dir = HydraConfig.get().sweep.dir
    return unit.fit_unit([as_member(c, out_dir)], device_of(c), sweep_dir, alone=True, progress_bar=bar)[0]
