"""Train one job: ``python -m initnorm.train [overrides]``, or a sweep with ``-m``.

``train(cfg)`` is a plain function (tests call it with a composed config); ``main`` is the
Hydra entry point around it: every job of the command line checked first (``cli/preflight.py``),
then each job run by ``cli/job.py`` (validate -> data -> model -> LightningModule -> Trainer ->
metrics.json + HPARAMS in the job folder), a failed one recorded without stopping the sweep.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from initnorm import collector
from initnorm.cli import checked_plan, console, disk, launchers, plan, sweep
from initnorm.cli import signals as cli_signals
from initnorm.cli.argv import CommandLine, parse
from initnorm.cli.compose import CONF_DIR
from initnorm.cli.jobinfo import job_overrides, run_label
from initnorm.cli.preflight import check_command_line
from initnorm.cli.sweep import register_resolvers, swept_keys
from initnorm.errors import ConfigError
from initnorm.training import signals


def train(cfg: DictConfig, out_dir: str | Path = ".") -> dict[str, Any]:
    """Run one job in ``out_dir`` and return its metrics (also written to ``metrics.json`` there): ``cli/job.py``,
    imported here at the first job so that ``--help`` and a bad value never wait for Lightning's import (made with the
    garbage collector paused: ``initnorm/collector.py``)."""
    with collector.paused():
        from initnorm.cli import job

    return job.train(cfg, out_dir)


register_resolvers()
disk.hydra_saves_atomically()  # here too, not only in main(): a parallel launcher's workers import this module, not main()


def job_failed(cfg: DictConfig, exc: Exception) -> float:
    """Record a failed job (status, error line, traceback) in its metrics.json (``cli/unit.failed``: a full disk is one
    line that stops the sweep); the sweep goes on."""
    from initnorm.cli import unit

    overrides, num, choices = job_overrides()
    job = {"seed": cfg.get("seed"), "job_num": num, "overrides": overrides, "swept": swept_keys(), "choices": choices}
    unit.failed([(os.getcwd(), job)], exc)
    return math.nan


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="train")
def hydra_main(cfg: DictConfig) -> float:
    console.quiet()  # here, not at import: a joblib worker or a SLURM job runs this function, not this module's top level
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    cli_signals.job_started()  # a stop signal between two jobs stops here
    overrides, num, _ = job_overrides()
    label = run_label(overrides, swept_keys(), cfg.get("seed"))
    if multirun:
        console.job_started(label, num)
    try:
        metrics = train(cfg, os.getcwd())
    except ConfigError as exc:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        if multirun:
            return job_failed(cfg, exc)
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except Exception as exc:  # a crash in one job of a sweep must not cost the others
        result = job_failed(cfg, exc)
        if multirun and os.environ.get("HYDRA_FULL_ERROR") != "1":
            return result
        raise
    loss = metrics.get("final_val_loss")  # a finished record of an older version may lack keys
    return loss if isinstance(loss, float) else math.nan


def main(cmd: CommandLine | None = None) -> None:
    """``python -m initnorm.train``: check every job of the command line first (cli/preflight.py),
    then let Hydra run them. Exit 2: a bad value (one line, nothing trained); 1: a job of a sweep failed, or a
    cluster stopped it before it finished (the summary lists it and the command that resumes it)."""
    console.quiet()
    cmd = cmd or parse(sys.argv[1:])
    # One handler from here to the end (cli/signals.py): a stop signal during the checks, the workers' start, training or
    # the summary ends the command the same way (128 + signal, the resume line), never in a traceback.
    with cli_signals.honoured(sys.argv[1:]):
        try:
            console.check_flags(cmd)
            progress = console.CheckProgress()
            try:
                jobs = check_command_line(cmd, checked_so_far(progress))
            finally:
                progress.end()  # a line updating on the terminal ends before an error's line or a stop's
        except ConfigError as exc:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
        signals.raise_if_requested()
        said = plan.describe(jobs, jobs.launcher, jobs.sweep) if jobs else None
        if said:
            print(said, flush=True)
        if jobs and len(jobs) > 1:
            os.environ[console.TOTAL_ENV] = str(len(jobs))  # every job's progress line counts against it
        launchers.register()  # hydra/launcher=slurm and =vectorized, also from an editable install
        # full disk: one line, resume command; the checked jobs handed to the sweeper and the launcher
        with disk.reported(sys.argv[1:]), checked_plan.planned(jobs):
            hydra_main()
        signals.raise_if_requested()  # a signal during the summary: the command still says it was stopped
    if sweep.FAILED_JOBS or sweep.STOPPED_JOBS:
        sys.exit(1)


def checked_so_far(progress):
    """The preflight's progress, and a stop signal honoured between two jobs' checks (an interrupted check once
    left Hydra's state half made: "'NoneType' object has no attribute '_invalidate_flags_cache'")."""

    def tick(done: int, total: int) -> None:
        signals.raise_if_requested()
        progress(done, total)

    return tick


if __name__ == "__main__":
    main()
