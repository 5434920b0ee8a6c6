"""``run(units, executor)``: the one way a sweep's jobs are trained, whichever launcher made them.

A **unit** is a list of ``PlannedJob``: a job alone, or a group that trains as one stacked model. An **executor**
(``launch/executors.py``: ``InProcess``, ``Processes``, ``Submitit``) runs ``run_unit`` once per unit, here, in this
machine's worker processes or as SLURM tasks; what it cannot run (a unit whose worker died) it hands back to
``record_failed``.

What a unit does is the same in each: a job alone runs as Hydra's launchers run a job (``run_job`` with the command's
task function, ``cli/train.hydra_main``, which calls ``fit_unit``); a group's members get their folders
(``member_setup.py``) and ``fit_unit`` trains them (``cli/unit.py``: what every launcher's jobs share around ``training/fit``: the device,
the progress status, the failure record and the console's end lines). A stop signal is never a failure: each unit returns the
stop with its checkpoint, and ``run`` raises it once (``signals.Interrupted``) for ``cli/signals.report``.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, env_override, run_job, setup_globals
from omegaconf import DictConfig, OmegaConf, open_dict

from initnorm.cli import console, disk
from initnorm.cli.composer import Composer
from initnorm.cli.sweep import swept_keys
from initnorm.cli.unit import failed, fit_unit, full_error
from initnorm.launch import executors, workers
from initnorm.training import signals
from initnorm.training.compiling import use_cache
from initnorm.training.devices import placement

Stop = tuple  # (signum, folder, step, hard) of a unit stopped by a signal (``signals.Interrupted``'s fields)


@dataclass
class PlannedJob:
    num: int
    overrides: list[str]
    alone: str | None  # why it runs alone (None: it can be a member)
    key: tuple = ()
    composer: Composer | None = None  # makes its sweep config when it runs: no sweep holds every job's config
    checked: dict[str, Any] | None = None  # the config the preflight checked (its nested values shared: read them only)


@dataclass
class Context:
    """What every unit needs from the launching process: Hydra's context and the sweep's config, the task function
    a job alone runs, Hydra's global state, and what the launching process set in its environment (``shared_env``)."""

    hydra_context: Any
    config: DictConfig
    task_function: Callable[[DictConfig], Any]
    singleton_state: dict[str, Any]
    env: dict[str, str]
    in_worker: bool  # the units run in this machine's worker processes (``Processes``)
    job_id: Callable[[str, int], Any]  # ``hydra.job.id`` from the job's name and number, as the launcher's Hydra plugin sets it


def pool_job_id(name: str, num: int) -> str:
    """``hydra.job.id`` as Hydra's joblib launcher sets it (local_parallel, vectorized)."""
    return f"{name}_{num}"


def basic_job_id(name: str, num: int) -> int:
    """``hydra.job.id`` as Hydra's basic launcher sets it: the job's number."""
    return num


# --- a unit, wherever an executor runs it ------------------------------------------------------------------------------


def _job_config(composer: Composer, overrides: Sequence[str], num: int, job_id: Callable[[str, int], Any]) -> DictConfig:
    """The job's sweep config, as Hydra's launchers compose it (cli/composer.py: from its group choices' composition),
    set as Hydra's current one."""
    sweep_config = composer.job_config(overrides)
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = job_id(str(sweep_config.hydra.job.name), num)
        sweep_config.hydra.job.num = num
    HydraConfig.instance().set_config(sweep_config)
    return sweep_config


def _config_of(job: PlannedJob, ctx: Context) -> DictConfig:
    return _job_config(job.composer or Composer(ctx.hydra_context.config_loader, ctx.config), job.overrides, job.num, ctx.job_id)


def _abandoned_check(ctx: Context):
    """In a worker process of this machine: whether the sweep's process has gone since this unit started. None elsewhere.
    Asked of the process itself: a fork server's workers hold its "alive" pipe open, so the server
    outlives the sweep's process as long as they do, and their parent does not change."""
    launcher = os.environ.get(workers.LAUNCHER_PID_ENV)
    if not ctx.in_worker or launcher is None or int(launcher) == os.getpid():
        return None
    pid = int(launcher)
    return lambda: not workers.alive(pid)


def run_unit(unit: list[PlannedJob], unit_index: int, ctx: Context) -> tuple[list[JobReturn], Stop | None]:
    """One unit of work, in this process or a worker: a job alone, or a group as one stacked model; and
    whether a stop signal ended it (its checkpoints taken: ``checkpoints.CheckpointOnSignal``) or kept it from starting."""
    os.environ.update(ctx.env or {})
    console.quiet()  # a worker has not the parent's filters: no accelerator banners or tips from each group's Trainer
    signals.install()  # a worker records SIGTERM/SIGINT from its first unit on (the parent passes its own on: run)
    if signals.requested() is not None:
        return [], (signals.requested(), None, None, False)  # stopped before this unit began: it starts nothing
    setup_globals()
    Singleton.set_state(ctx.singleton_state)
    use_cache(str(ctx.config.hydra.runtime.cwd))  # here too: a SLURM task (--export=NONE) does not inherit the launcher's environment
    if ctx.in_worker:
        # One worker per core: the compiler's own pool of compile processes would only share this
        # core, and, killed with the worker, leave the resource tracker warning of leaked semaphores.
        from torch._inductor import config as inductor_config

        inductor_config.compile_threads = 1
    try:
        if len(unit) == 1:
            return [run_job(hydra_context=ctx.hydra_context, config=_config_of(unit[0], ctx), task_function=ctx.task_function,
                            job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")], None
        return _run_group(unit, unit_index, ctx), None
    except signals.Interrupted as stop:
        return [], (stop.signum, stop.folder, stop.step, stop.hard)


def _run_group(unit: list[PlannedJob], unit_index: int, ctx: Context) -> list[JobReturn]:
    from initnorm.cli.member_setup import MemberSetup  # (Lightning's import: a worker's, at its first group)
    from initnorm.training.fit import Abandoned

    config = ctx.config
    # absolute: the group's fit and its end lines run in the first member's folder under hydra.job.chdir
    sweep_dir = os.path.abspath(str(config.hydra.sweep.dir))
    members, rets, lost = [], [], []
    # Hydra's run_job only where a Hydra callback of the user's asks for each job's start or end (it takes the job's config)
    composer = unit[0].composer or Composer(ctx.hydra_context.config_loader, config)
    setup = None if _job_callbacks(ctx.hydra_context) else MemberSetup(composer, config)
    for job in unit:
        try:
            member, ret = setup.member(job) if setup is not None else _by_run_job(job, ctx)
        except Exception as exc:  # this member alone (a search trial's config its check refuses ...): the others go on
            if full_error() and not disk.disk_error(exc):
                raise
            lost += record_failed([job], exc, Path(sweep_dir))
            continue
        members.append(member)
        rets.append(ret)
    if not members:
        return lost
    try:
        # one set of callbacks for the group, from the first member's config; each sees every member (members_of)
        with _as_run_job(config, members[0].out_dir):
            results = fit_unit(members, placement(config.trainer, unit_index, True), sweep_dir,
                               label=f"{members[0].label} .. {members[-1].label}", abandoned=_abandoned_check(ctx))
    except Abandoned:
        # A worker whose sweep process was killed (kill -9 of it alone): nothing to report to,
        # and a rerun of the command would write the same folders. Its checkpoints stay to resume from.
        logging.shutdown()
        os._exit(1)
    for ret, r in zip(rets, results):
        ret.return_value = math.nan if r["status"] == "failed" else r.get("final_val_loss", math.nan)
    return lost + rets


@contextmanager
def _as_run_job(config: DictConfig, folder) -> Iterator[None]:
    """What Hydra's ``run_job`` gives a job while it runs, given a group's fit: ``hydra.job.env_set`` in the environment
    (a sweep's one setting: Hydra sweeps no ``hydra.*`` key) and, with ``hydra.job.chdir``, a job folder as the working
    folder: the first member's (a process has one; the group's one set of callbacks runs there). Both restored after."""
    env = OmegaConf.to_container(config.hydra.job.env_set, resolve=True) or {}
    back = os.getcwd()
    with env_override({str(k): str(v) for k, v in env.items()}):
        if config.hydra.job.get("chdir"):
            os.chdir(folder)
        try:
            yield
        finally:
            os.chdir(back)


def _job_callbacks(hydra_context) -> bool:
    """Whether a Hydra callback of the config's answers a job's start or end (``hydra.callbacks``)."""
    from hydra.experimental.callback import Callback

    return any(type(cb).on_job_start is not Callback.on_job_start or type(cb).on_job_end is not Callback.on_job_end
               for cb in hydra_context.callbacks.callbacks)


def _by_run_job(job: PlannedJob, ctx: Context) -> tuple[Any, JobReturn]:
    """A member set up inside Hydra's ``run_job`` (its folder, ``.hydra/``, its logging), its callbacks told."""
    from initnorm.cli.job import as_member, checked

    made: list = []

    def prepare(cfg: DictConfig) -> None:
        member = as_member(checked(cfg), os.getcwd())  # the same record fields a job alone writes
        console.job_started(member.label, member.meta["job_num"])  # the same start line as the other launchers' jobs
        made.append(member)

    ret = run_job(hydra_context=ctx.hydra_context, config=_config_of(job, ctx), task_function=prepare,
                  job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    if ret.status != JobStatus.COMPLETED:
        raise ret._return_value  # its check refused it: recorded failed, as a member whose set-up failed
    return made[0], ret


# --- a failure outside any job's own process: a lost unit, a member's set-up ----------------------------------------


class UnitLost(RuntimeError):
    """A unit's jobs never answered: the pool's reason (``Lost``) as the jobs' error."""


def describe(job: PlannedJob, sweep_dir: Path | None = None) -> tuple[Path, dict[str, Any], JobReturn]:
    """Where ``job``'s record goes (its folder under ``sweep_dir``, default its config's, made), the record's fields
    (seed, number, overrides, choices), and the ``JobReturn`` of a job that gave no loss (nan, as a failed job's) for
    the sweeper, which sees every job it launched."""
    cfg = job.composer.job_config(job.overrides)
    with open_dict(cfg):
        cfg.hydra.job.num = job.num
    task, _ = job.composer.task(job.overrides)
    folder = (Path(sweep_dir or str(cfg.hydra.sweep.dir)) / job.composer.subdir(job.overrides, task)).absolute()
    folder.mkdir(parents=True, exist_ok=True)
    overrides = {o.partition("=")[0].lstrip("+~"): o.partition("=")[2] for o in job.overrides if "=" in o}
    fields = {"seed": task.get("seed"), "job_num": job.num, "overrides": overrides, "swept": swept_keys(),
              "choices": dict(cfg.hydra.runtime.choices)}
    ret = JobReturn(overrides=list(job.overrides), cfg=None, hydra_cfg=cfg, working_dir=str(folder),
                    task_name=str(cfg.hydra.job.name), status=JobStatus.COMPLETED)
    ret.return_value = math.nan
    return folder, fields, ret


def record_failed(jobs: Sequence[PlannedJob], exc: BaseException, sweep_dir: Path) -> list[JobReturn]:
    """Each of ``jobs`` recorded failed with ``exc`` in its folder (``failed``), with its ``JobReturn`` (``describe``)."""
    rets = []
    for job in jobs:
        folder, fields, ret = describe(job, sweep_dir)
        failed([(folder, fields)], exc)
        rets.append(ret)
    return rets


def run(units: Sequence[list[PlannedJob]], executor, hydra_context, config: DictConfig, task_function,
        job_id: Callable[[str, int], Any] = pool_job_id) -> list[JobReturn]:
    """Every unit through ``executor`` (``launch/executors.py``); the jobs' returns, in the jobs' order (``job_id``:
    ``hydra.job.id`` as the launcher's Hydra plugin sets it). A stop signal that ended or kept back any
    unit is raised once, as ``signals.Interrupted`` with a checkpoint a unit saved, after every unit has answered."""
    ctx = Context(hydra_context, config, task_function, Singleton.get_state(),
                  workers.shared_env() | {workers.LAUNCHER_PID_ENV: str(os.getpid())}, isinstance(executor, executors.Processes),
                  job_id)
    args = [(u, k, ctx) for k, u in enumerate(units)]
    sweep_dir = Path(str(config.hydra.sweep.dir))
    jobs = executors.Jobs(describe, lambda unit, reason: record_failed(unit, UnitLost(reason), sweep_dir))
    state = Singleton.get_state() if isinstance(executor, executors.InProcess) else None
    results = executor.map(run_unit, args, units, sweep_dir, jobs)
    if state is not None:  # the units ran here, each setting Hydra's state as a unit does
        Singleton.set_state(state)
    by_num = {ret.hydra_cfg.hydra.job.num: ret for rets in executors.answers(results) for ret in rets}
    return [by_num[num] for num in sorted(j.num for u in units for j in u) if num in by_num]
