"""The work of ``hydra/launcher=vectorized``: group a sweep's jobs, train each group as one stacked model.

1. Take every job's checked config from the preflight (``checked_plan.plan()``; a job it did not check,
   a search's trial, is composed here) and what its folder holds (``resume``): a finished job, and a
   folder the resume refuses, run alone through the ordinary task function, exactly as under the basic
   launcher. A job's full sweep config is made when its unit runs (``cli/composer.py``), not held for
   every job of the sweep.
2. The others are grouped by ``training/grouping.py``'s policy (the shapes, the step they start from,
   ``hydra.launcher.max_group`` and ``max_params``); a group of one runs alone.
3. The units of work (a group, or a job alone) go to ``cli/run.run`` with the engine's executor: one after another
   in this process (``engine: sequential``), in worker processes of this machine (``engine: processes``, pebble's
   pool: ``launch/pool.py``; one per core, started as the command line is read: ``launch/workers.py``; with N GPUs, unit k on GPU
   k mod N), or as the tasks of one SLURM array through submitit (``engine: submitit``, with the keys of
   ``hydra/launcher=slurm`` under ``hydra.launcher.slurm``). Every member gets the folder Hydra's ``run_job`` would
   give it (``.hydra/``, ``train.log``) from ``member_setup.py``, in milliseconds (through ``run_job`` itself where a
   Hydra callback asks for each job's start or end), then ``unit.fit_unit`` trains the group, as it trains a job
   alone, and writes each member's metrics.json, events and HPARAMS.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, configure_log, filter_overrides, setup_globals
from omegaconf import DictConfig

from initnorm import plots, schema
from initnorm.cli import checked_plan, console, launchers, run
from initnorm.cli.composer import Composer
from initnorm.cli.run import PlannedJob
from initnorm.cli.workers import WORKER_MODULES
from initnorm.errors import ConfigError
from initnorm.launch import executors, forks, workers
from initnorm.training.compiling import use_cache
from initnorm.training.group import parameter_count
from initnorm.training.grouping import place, units_of
from initnorm.training.resume import inspect_folder

__all__ = ["PlannedJob", "classify", "launch"]

log = logging.getLogger(__name__)
ENGINES = tuple(e for e in schema.LAUNCHER_RULES["engine"].choices if e not in launchers.ENGINE_ALIASES)


def classify(hydra_context, config: DictConfig, job_overrides,
             initial_job_idx: int) -> tuple[list[PlannedJob], dict[tuple, dict[str, Any]]]:
    """Each job's group key, or why it runs alone (``training/grouping.place``); and one resolved config per group key
    (its parameter count). A job the preflight checked (``checked_plan.plan()``) brings its config and what its folder held;
    any other (a search's trial) is composed here, from its group choices' composition."""
    composer = Composer(hydra_context.config_loader, config)
    checked = checked_plan.plan()
    sweep_dir = Path(str(config.hydra.sweep.dir))
    plan = forks.read(sweep_dir)
    jobs, examples = [], {}
    for idx, overrides in enumerate(job_overrides):
        num = initial_job_idx + idx
        known = checked.get(tuple(overrides))
        if known is not None:  # the preflight's config and folder (None: one the sweep made just now, holding nothing);
            c, folder = known.config, known.folder  # naming it again here composed each group choice a second time
        else:
            c = composer.task(overrides)[0]
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


def launch(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int, grouped: bool = True,
           job_id=run.pool_job_id, params: dict[str, Any] | None = None) -> Sequence[JobReturn]:
    """Run the jobs as units (``grouped``: stacked groups and jobs alone; else one job a unit: ``hydra/launcher=local_parallel``
    in the worker processes, Hydra's basic launcher in this process, ``cli/basic.py``, and ``hydra/launcher=slurm`` a SLURM
    task each, ``launch/slurm.as_engine``'s ``params``), ``hydra.job.id`` as ``job_id`` makes it."""
    setup_globals()
    config, hydra_context = launcher.config, launcher.hydra_context
    params = dict(launcher.params if params is None else params)
    if not grouped:
        params |= {"engine": params.get("engine", "processes"), "max_group": 1, "max_params": None}
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
        workers.started_early() or workers.warm(params["n_jobs"], WORKER_MODULES)
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
    if engine == "submitit":
        executor = executors.Submitit(params["slurm"])
    elif engine == "sequential" or len(units) == 1:
        executor = executors.InProcess()
    else:
        executor = executors.Processes(params["n_jobs"], WORKER_MODULES)
    if not isinstance(executor, executors.InProcess):  # this process only waits now: the summary's figure drawn ahead
        plots.draw_ahead()
    return run.run(units, executor, hydra_context, config, launcher.task_function, job_id)
