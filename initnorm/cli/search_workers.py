"""``hydra.sweeper.workers=N`` from the command line: the search's workers made from Hydra's sweeper and run by
``search/workers.supervise`` (local processes, or SLURM tasks under ``hydra/launcher=slurm``); docs/search.md.

What is Hydra's stays here: the space read from the command line's sweep syntax, the launcher's settings, and how a
worker trains a trial's job (``HydraJobs``: ``run.run`` of it in the worker's process, as every launcher's job alone).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from initnorm.cli import launchers
from initnorm.cli.search_plan import distributions
from initnorm.search import study as search_study
from initnorm.search.worker import Worker
from initnorm.search.workers import LocalStart, SlurmStart, supervise


@dataclass
class HydraJobs:
    """How a search worker trains a trial's job (``search/worker.Jobs``), pickled with it: Hydra's context and state, to
    run jobs as the launcher does."""

    hydra_context: Any
    task_function: Any
    config: Any
    singletons: dict[str, Any] = field(default_factory=dict)  # Hydra's Singleton state (its plugins, its config store)
    _composer: Any = None  # its jobs' configs, composed in its process (cli/composer.py)

    def setup(self) -> None:
        from hydra.core.singleton import Singleton
        from hydra.core.utils import setup_globals

        Singleton.set_state(self.singletons)
        setup_globals()

    def __call__(self, overrides: Sequence[str], num: int) -> str | None:
        """One job, a unit alone, through ``cli/run.run`` in this process; its folder."""
        from initnorm.cli import run
        from initnorm.cli.composer import Composer
        from initnorm.launch.executors import InProcess

        if self._composer is None:  # one per worker: each composition of group choices made once
            self._composer = Composer(self.hydra_context.config_loader, self.config)
        job = run.PlannedJob(num, list(overrides), "a search trial's job", composer=self._composer)
        (ret,) = run.run([[job]], InProcess(), self.hydra_context, self.config, self.task_function)
        return ret.working_dir


def run_workers(sweeper, study, folder: Path, fixed: list[str], space: dict[str, str], metric: str) -> list:
    """Start ``sweeper.workers`` workers on ``folder``'s study and wait for them; a dead one's trial asked again."""
    from hydra.core.singleton import Singleton

    from initnorm.cli.workers import WORKER_MODULES

    space = distributions(space)
    # checked: the file is data
    for number, _ in search_study.resumed_trials(study, space, folder / search_study.STUDY_FILE):
        search_study.retry(study, number, sweeper.retries)
    slurm = launchers.kind(sweeper.config.hydra.launcher) == "slurm"
    jobs = HydraJobs(sweeper.hydra_context, sweeper.task_function, sweeper.config, Singleton.get_state())
    base = {"folder": str(folder.absolute()), "space": space, "fixed": fixed, "seeds": sweeper.seeds, "metric": metric,
            "n_trials": sweeper.n_trials, "seed": sweeper.seed, "workers": int(sweeper.workers), "direction": sweeper.direction,
            "pruner": sweeper.pruner, "startup_trials": sweeper.startup_trials, "jobs": jobs,
            "parent": None if slurm else os.getpid()}
    start = SlurmStart(sweeper.launcher.params) if slurm else LocalStart(WORKER_MODULES)
    supervise(study, folder, int(sweeper.workers), sweeper.hang_timeout_s, sweeper.retries,
              lambda k, token: Worker(index=k, token=token, **base), start)
    return []
