"""``hydra/launcher=vectorized``: the jobs of a sweep that share every shape train as one stacked model;
``hydra/launcher=local_parallel``: each job alone, in the same worker processes (initnorm/launch/pool.py: a worker's
death costs only its jobs).

Hydra instantiates launchers only from the ``hydra_plugins`` package, so this class lives here
and hands the work to ``initnorm.cli.vectorized`` (imported when a sweep starts, so that plugin
discovery stays fast).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf


class VectorizedLauncher(Launcher):
    def __init__(self, **params: Any) -> None:
        self.params = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v for k, v in params.items()}
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.task_function, self.hydra_context = config, task_function, hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from initnorm.cli.vectorized import launch

        return launch(self, job_overrides, initial_job_idx)


class ParallelLauncher(VectorizedLauncher):
    """``conf/hydra/launcher/local_parallel.yaml``: Hydra's joblib launcher's keys (``n_jobs`` is read), each job a unit
    of the vectorised launcher's worker processes."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from initnorm.cli.vectorized import launch

        return launch(self, job_overrides, initial_job_idx, grouped=False)
