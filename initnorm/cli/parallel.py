"""Units of a sweep in this machine's worker processes (``hydra/launcher=local_parallel``: a job a unit;
``hydra/launcher=vectorized``: a group or a job a unit), and what a lost unit costs: its own jobs, recorded failed.

A unit is lost when its worker dies before it answers (``os._exit``, SIGKILL from the out-of-memory killer) or when
it raises what no job catches (a ``KeyboardInterrupt`` of user code's where Lightning's handling left none inside):
``pool.Pool`` (pebble's pool) says which, with the reason. Each of its jobs' folders then records ``status: failed``
with that reason as its ``error`` line and the sweep prints the usual ``error: job N failed`` line
(``training/failure.job_failed``: a finished record is kept, and not called failed); the units of the other workers
go on, the summary lists the failed jobs and a rerun of the command trains them again.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import open_dict

from initnorm.cli import workers
from initnorm.cli.pool import Lost
from initnorm.cli.sweep import swept_keys
from initnorm.training import failure, signals


class UnitLost(RuntimeError):
    """A unit's jobs never answered: the pool's reason (``Lost``) as the jobs' error."""


def run_units(fn: Callable[..., Any], args: Sequence[tuple], n_jobs: int) -> list[Any]:
    """``fn(*args[k])`` for every unit in the sweep's workers, longest units (``len(args[k][0])``) first; result k, a
    ``Lost``, or None for a unit a stop signal kept from starting. A stop signal to this process alone is passed on to
    the workers (as SIGTERM: one sent to the whole group reached them already, and a second SIGINT would mean "at once");
    the workers and their fork server are ended whatever happens."""
    order = sorted(range(len(args)), key=lambda k: -len(args[k][0]))
    pool = workers.pool(n_jobs, len(args))

    def stopped_there(result: Any) -> None:  # a stop signal sent to one worker alone stops the sweep as one to this process
        if isinstance(result, tuple) and result[1] is not None and signals.requested() is None:
            signals.record(result[1][0])

    try:
        with signals.passed_on(lambda signum: pool.send(signal.SIGTERM)):
            out = pool.run(fn, [args[k] for k in order], stopping=lambda: signals.requested() is not None,
                           on_result=stopped_there)
    finally:
        workers.end()  # nothing outlives the command, stopped or not
    results: list[Any] = [None] * len(args)
    for k, r in zip(order, out):
        results[k] = r
    return results


def record_lost(jobs: Sequence[Any], lost: Lost, sweep_dir: Path) -> list[JobReturn]:
    """Each job of a lost unit recorded failed with ``lost.reason`` in its folder; its ``JobReturn`` (a loss of nan, as
    a failed job's) so that the sweeper sees every job it launched. ``jobs``: the launcher's ``PlannedJob`` records."""
    return record_failed(jobs, UnitLost(lost.reason), sweep_dir)


def record_failed(jobs: Sequence[Any], exc: BaseException, sweep_dir: Path) -> list[JobReturn]:
    """Each of ``jobs`` recorded failed with ``exc`` in its folder, with its ``JobReturn`` (a loss of nan)."""
    rets = []
    for job in jobs:
        cfg = job.composer.job_config(job.overrides)
        with open_dict(cfg):
            cfg.hydra.job.num = job.num
        task, _ = job.composer.task(job.overrides)
        folder = sweep_dir / job.composer.subdir(job.overrides, task)
        folder.mkdir(parents=True, exist_ok=True)
        overrides = {o.partition("=")[0].lstrip("+~"): o.partition("=")[2] for o in job.overrides if "=" in o}
        fields = {"seed": task.get("seed"), "job_num": job.num, "overrides": overrides, "swept": swept_keys(),
                  "choices": dict(cfg.hydra.runtime.choices)}
        failure.job_failed(folder, exc, fields)
        ret = JobReturn(overrides=list(job.overrides), cfg=None, hydra_cfg=cfg, working_dir=str(folder),
                        task_name=str(cfg.hydra.job.name), status=JobStatus.COMPLETED)
        ret.return_value = math.nan
        rets.append(ret)
    return rets
