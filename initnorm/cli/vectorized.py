"""The work of ``hydra/launcher=vectorized``: group a sweep's jobs, train each group as one stacked model.

1. Take every job's checked config from the preflight (``sweeper.plan()``; a job it did not check,
   a search's trial, is composed here) and what its folder holds (``resume``): a finished job, and a
   folder the resume refuses, run alone through the ordinary task function, exactly as under the basic
   launcher. A job's full sweep config is made when its unit runs (``cli/composer.py``), not held for
   every job of the sweep.
2. The others are grouped by ``training/grouping.py``'s policy (the shapes, the step they start from,
   ``hydra.launcher.max_group`` and ``max_params``); a group of one runs alone.
3. Units of work (a group, or a job alone) run one after another (``engine: sequential``), in
   worker processes of this machine (``engine: processes``, pebble's pool: ``pool.py``; one per core, started as
   the command line is read: ``workers.py``; with N GPUs, unit k on GPU k mod N), or as the tasks of one SLURM array
   through submitit (``engine: submitit``, with the keys of ``hydra/launcher=slurm`` under
   ``hydra.launcher.slurm``).
   Every member gets the folder Hydra's ``run_job`` would give it (``.hydra/``, ``train.log``) from
   ``member_setup.py``, in milliseconds (through ``run_job`` itself where a Hydra callback asks for each
   job's start or end), then ``training/fit.fit`` trains the group, as it trains a job alone, and writes
   each member's metrics.json, events and HPARAMS.
"""

from __future__ import annotations

import logging
import math
import os
import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, env_override, filter_overrides, run_job, setup_globals
from omegaconf import DictConfig, OmegaConf, open_dict

from initnorm import schema
from initnorm.cli import console, devices, disk, forks, launchers, parallel, sweeper, workers
from initnorm.cli.composer import Composer
from initnorm.cli.pool import Lost
from initnorm.errors import ConfigError
from initnorm.training import failure, signals
from initnorm.training.compiling import use_cache
from initnorm.training.group import parameter_count
from initnorm.training.grouping import place, units_of
from initnorm.training.resume import inspect_folder

log = logging.getLogger(__name__)
ENGINES = tuple(e for e in schema.LAUNCHER_RULES["engine"].choices if e not in launchers.ENGINE_ALIASES)
# submitit's own resource keys; every other key of hydra.launcher.slurm is an sbatch option (slurm_<key>)
SUBMITIT_KEYS = {"timeout_min", "cpus_per_task", "gpus_per_node", "tasks_per_node", "mem_gb", "nodes", "name", "stderr_to_stdout"}


@dataclass
class PlannedJob:
    num: int
    overrides: list[str]
    alone: str | None  # why it runs alone (None: it can be a member)
    key: tuple = ()
    composer: Composer | None = None  # makes its sweep config when it runs: no sweep holds every job's config
    checked: dict[str, Any] | None = None  # the config the preflight checked (its nested values shared: read them only)


def _job_config(composer: Composer, overrides: Sequence[str], num: int) -> DictConfig:
    """The job's sweep config, as Hydra's launchers compose it (cli/composer.py: from its group choices' composition)."""
    sweep_config = composer.job_config(overrides)
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = f"{sweep_config.hydra.job.name}_{num}"
        sweep_config.hydra.job.num = num
    HydraConfig.instance().set_config(sweep_config)
    return sweep_config


def _config_of(job: PlannedJob, hydra_context, config: DictConfig) -> DictConfig:
    """The job's sweep config, set as Hydra's current one."""
    return _job_config(job.composer or Composer(hydra_context.config_loader, config), job.overrides, job.num)


def _abandoned_check(config: DictConfig):
    """In a worker process of this machine: whether the sweep's process has gone since this unit started. None elsewhere.
    Asked of the process itself: a fork server's workers hold its "alive" pipe open, so the server
    outlives the sweep's process as long as they do, and their parent does not change."""
    launcher = os.environ.get(workers.LAUNCHER_PID_ENV)
    if not _in_worker(config) or launcher is None or int(launcher) == os.getpid():
        return None
    pid = int(launcher)
    return lambda: not workers.alive(pid)


def _in_worker(config: DictConfig) -> bool:
    """Whether units run in this machine's worker processes (local_parallel's node has no engine: it always does)."""
    return launchers.engine_name(config.hydra.launcher.get("engine", "processes"), quiet=True) == "processes"


def classify(hydra_context, config: DictConfig, job_overrides,
             initial_job_idx: int) -> tuple[list[PlannedJob], dict[tuple, dict[str, Any]]]:
    """Each job's group key, or why it runs alone (``training/grouping.place``); and one resolved config per group key
    (its parameter count). A job the preflight checked (``sweeper.plan()``) brings its config and what its folder held;
    any other (a search's trial) is composed here, from its group choices' composition."""
    composer = Composer(hydra_context.config_loader, config)
    checked = sweeper.plan()
    sweep_dir = Path(str(config.hydra.sweep.dir))
    plan = forks.read(sweep_dir)
    jobs, examples = [], {}
    for idx, overrides in enumerate(job_overrides):
        num = initial_job_idx + idx
        known = checked.get(tuple(overrides))
        if known is not None and known.folder is None:  # a folder the sweep made just now: it holds nothing
            c, folder = known.config, None
        else:
            c = known.config if known is not None else composer.task(overrides)[0]
            folder = sweep_dir / composer.subdir(overrides, c)

        def resume_step(known=known, folder=folder, c=c) -> int:  # a member's checkpoint or a job alone's
            return known.prior.step if known is not None else inspect_folder(folder, c).step

        def fork_step(c=c, folder=folder, overrides=overrides) -> int:  # a horizon fork's branch stacks at its step
            if not plan["families"]:
                return 0
            fork = forks.fork_of(c, folder or sweep_dir / composer.subdir(overrides, c), sweep_dir)
            return fork.branch if fork is not None and fork.branch else 0

        alone, key = place(c, folder, resume_step, fork_step)
        examples.setdefault(key, c)
        jobs.append(PlannedJob(num, list(overrides), alone, key, composer, known.config if known is not None else None))
    return jobs, examples


def _device(config: DictConfig, unit_index: int):
    """The unit's placement, as ``cli/devices.choose`` decides it for every job: unit k on GPU k mod N where GPUs are asked for."""
    t = config.trainer
    trainer = {"accelerator": t.accelerator, "devices": t.devices, "strategy": t.get("strategy")}
    return devices.choose(trainer, unit_index, True, devices.gpu_count(), devices.has_mps())


Stop = tuple  # (signum, folder, step, hard) of a unit stopped by a signal (``signals.Interrupted``'s fields)


def run_unit(unit: list[PlannedJob], unit_index: int, hydra_context, config: DictConfig, task_function, singleton_state,
             env: dict[str, str] | None = None) -> tuple[list[JobReturn], Stop | None]:
    """One unit of work, in this process or a worker: a job alone, or a group as one stacked model; and
    whether a stop signal ended it (its checkpoints taken: ``checkpoints.CheckpointOnSignal``) or kept it from starting.
    ``env``: what the launching process set in its environment after this worker started."""
    os.environ.update(env or {})
    console.quiet()  # a worker has not the parent's filters: no accelerator banners or tips from each group's Trainer
    signals.install()  # a worker records SIGTERM/SIGINT from its first unit on (the parent passes its own on: launch)
    if signals.requested() is not None:
        return [], (signals.requested(), None, None, False)  # stopped before this unit began: it starts nothing
    setup_globals()
    Singleton.set_state(singleton_state)
    use_cache(str(config.hydra.runtime.cwd))  # here too: a SLURM task (--export=NONE) does not inherit the launcher's environment
    if _in_worker(config):
        # One worker per core: the compiler's own pool of compile processes would only share this
        # core, and, killed with the worker, leave the resource tracker warning of leaked semaphores.
        from torch._inductor import config as inductor_config

        inductor_config.compile_threads = 1
    try:
        return _run(unit, unit_index, hydra_context, config, task_function, singleton_state, env), None
    except signals.Interrupted as stop:
        return [], (stop.signum, stop.folder, stop.step, stop.hard)


def _run(unit: list[PlannedJob], unit_index: int, hydra_context, config: DictConfig, task_function, singleton_state,
         env) -> list[JobReturn]:
    if len(unit) == 1:
        sc = _config_of(unit[0], hydra_context, config)
        return [run_job(hydra_context=hydra_context, config=sc, task_function=task_function, job_dir_key="hydra.sweep.dir",
                        job_subdir_key="hydra.sweep.subdir")]

    from initnorm.cli.member_setup import MemberSetup  # (Lightning's import: a worker's, at its first group)
    from initnorm.training.fit import Abandoned, fit

    members, rets, failed, kept = [], [], [], []
    # Hydra's run_job only where a Hydra callback of the user's asks for each job's start or end (it takes the job's config)
    setup = None if _job_callbacks(hydra_context) else MemberSetup(unit[0].composer or Composer(hydra_context.config_loader, config),
                                                                   config)
    for job in unit:
        try:
            member, ret = setup.member(job) if setup is not None else _by_run_job(job, hydra_context, config)
        except Exception as exc:  # this member alone (a search trial's config its check refuses ...): the others go on
            if err := disk.disk_error(exc):
                raise err from exc
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            failed += parallel.record_failed([job], exc, Path(str(config.hydra.sweep.dir)))
            continue
        members.append(member)
        rets.append(ret)
        kept.append(job)
    if not members:
        return failed
    labels = [m.label for m in members]
    device = _device(config, unit_index)
    try:
        sweep_dir = str(config.hydra.sweep.dir)
        # callbacks=None: one set for the group, from the first member's config; each sees every member (members_of)
        with _as_run_job(config, members[0].out_dir):
            results = fit(members, device, abandoned=_abandoned_check(config), label=f"{labels[0]} .. {labels[-1]}",
                          status=lambda left: console.sweep_progress(sweep_dir, at_least=left))  # the sweep's done/total
    except Abandoned:
        # A worker whose sweep process was killed (kill -9 of it alone): nothing to report to,
        # and a rerun of the command would write the same folders. Its checkpoints stay to resume from.
        logging.shutdown()
        os._exit(1)
    except Exception as exc:  # a member left alone whose fit raised (fit records a group's members itself, each its own)
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        if err := disk.disk_error(exc):  # a full disk: the next group would fail the same way; one line, the sweep stops
            raise err from exc
        try:
            results = [failure.job_failed(m.out_dir, exc, {"seed": m.cfg["seed"], **m.meta}) for m in members]
        except OSError as write_exc:
            raise (disk.disk_error(write_exc) or write_exc) from exc
    for m, label, ret, r in zip(members, labels, rets, results):
        if r["status"] == "failed":  # this member alone (recorded and said by failure.job_failed; the others went on)
            ret.return_value = math.nan
            continue
        ret.return_value = r.get("final_val_loss", math.nan)
        console.job_finished(label, r, m.out_dir, str(config.hydra.sweep.dir))  # ms/step: per member-step of the group
    return failed + rets


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


def _by_run_job(job: PlannedJob, hydra_context, config: DictConfig) -> tuple[Any, JobReturn]:
    """A member set up inside Hydra's ``run_job`` (its folder, ``.hydra/``, its logging), its callbacks told."""
    from initnorm.cli.job import as_member, checked

    made: list = []

    def prepare(cfg: DictConfig) -> None:
        member = as_member(checked(cfg), os.getcwd())  # the same record fields a job alone writes
        console.job_started(member.label, member.meta["job_num"])  # the same start line as the other launchers' jobs
        made.append(member)

    ret = run_job(hydra_context=hydra_context, config=_config_of(job, hydra_context, config), task_function=prepare,
                  job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    if ret.status != JobStatus.COMPLETED:
        raise ret._return_value  # its check refused it: recorded failed, as a member whose set-up failed
    return made[0], ret


def launch(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int, grouped: bool = True) -> Sequence[JobReturn]:
    """Run the jobs as units (``grouped``: stacked groups and jobs alone; else one job a unit, ``hydra/launcher=local_parallel``)."""
    setup_globals()
    config, hydra_context = launcher.config, launcher.hydra_context
    params = dict(launcher.params)
    if not grouped:
        params |= {"engine": "processes", "max_group": 1, "max_params": None}
    engine, max_group, max_params = launchers.engine_name(params["engine"]), params["max_group"], params.get("max_params")
    if engine not in ENGINES:
        raise ConfigError(f"hydra.launcher.engine={engine!r} is not known; allowed: {', '.join(ENGINES)}; fix it with "
                          "`hydra.launcher.engine=processes`")
    if not isinstance(max_group, int) or max_group < 1:
        raise ConfigError(f"hydra.launcher.max_group={max_group!r} must be a positive integer; fix it with `hydra.launcher.max_group=12`")
    if max_params is not None and (not isinstance(max_params, int) or isinstance(max_params, bool) or max_params < 1):
        raise ConfigError(f"hydra.launcher.max_params={max_params!r} must be a positive integer or null; fix it with "
                          "`hydra.launcher.max_params=2000000`")
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    # compile=true|auto: the compiler's on-disk cache where the next group and the next sweep find it
    # (set before the workers start, so they inherit it; `make clean` removes it with outputs/).
    use_cache(str(config.hydra.runtime.cwd))
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    # The workers import torch, Lightning and initnorm (~3 s each) while this process composes the
    # jobs (~0.15 s a job); started by the command line (workers.start_early) where it names this launcher.
    if engine == "processes" and len(job_overrides) > 1:
        workers.started_early() or workers.warm(params["n_jobs"])
    else:
        workers.end()
    jobs, examples = classify(hydra_context, config, job_overrides, initial_job_idx)
    sizes: dict[tuple, int] = {}

    def params_of(job: PlannedJob) -> int:  # one member's parameter count, once per group key
        if job.key not in sizes:
            try:
                sizes[job.key] = parameter_count(examples[job.key])
            except Exception as exc:  # a family that cannot be built on the meta device: stack it as before
                log.warning("could not count the parameters of %s (%s: %s); its group is not capped by hydra.launcher.max_params",
                            " ".join(job.overrides), type(exc).__name__, exc)
                sizes[job.key] = 1
        return sizes[job.key]

    units = units_of(jobs, max_group, max_params, params_of)
    stacked = [u for u in units if len(u) > 1]
    if grouped:
        print(console.groups_line(len(jobs), [len(u) for u in stacked], len(units) - len(stacked)), flush=True)
    for u in units:
        for j in u:
            log.info("\t#%d : %s%s", j.num, " ".join(filter_overrides(j.overrides)),
                     f"  (alone: {j.alone})" if j.alone and len(u) == 1 and "result" not in j.alone else "")
    state = Singleton.get_state()
    env = workers.shared_env() | {workers.LAUNCHER_PID_ENV: str(os.getpid())}
    args = [(u, k, hydra_context, config, launcher.task_function, state, env) for k, u in enumerate(units)]
    if engine == "submitit":  # one SLURM array task per unit, with hydra/launcher=slurm's keys
        import submitit

        executor = submitit.AutoExecutor(folder=str(sweep_dir / ".submitit" / "%j"), cluster="slurm")
        slurm = {k: v for k, v in dict(params["slurm"]).items() if v is not None}
        executor.update_parameters(**{k if k in SUBMITIT_KEYS else f"slurm_{k}": v for k, v in slurm.items()})
        tasks = executor.map_array(run_unit, *zip(*args))
        results = [t.results()[0] for t in tasks]
    elif engine == "sequential" or len(units) == 1:
        workers.end()  # warmed for nothing: one unit runs here
        results = []
        for a in args:
            results.append(run_unit(*a))
            if results[-1][1] is not None:
                break  # stopped by a signal: no further unit starts
        Singleton.set_state(state)
    else:
        results = parallel.run_units(run_unit, args, params["n_jobs"])
        for k, r in enumerate(results):
            if isinstance(r, Lost):  # its worker died, or it raised past every job: its jobs alone are failed
                results[k] = (parallel.record_lost(units[k], r, sweep_dir), None)
    unstarted = (signals.requested() or signal.SIGTERM, None, None, False)
    results = [r if r is not None else ([], unstarted) for r in results]  # None: a stop signal kept it from starting
    stops = [stop for _, stop in results if stop is not None]
    if stops:
        saved = next((s for s in stops if s[1] is not None), stops[0])  # a unit that checkpointed, for the report
        raise signals.Interrupted(signals.requested() or saved[0], saved[1], saved[2], any(s[3] for s in stops))
    by_num = {ret.hydra_cfg.hydra.job.num: ret for rets, _ in results for ret in rets}
    return [by_num[j.num] for j in jobs if j.num in by_num]
