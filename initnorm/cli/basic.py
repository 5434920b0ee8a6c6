"""``hydra/launcher=basic``, Hydra's default launcher, through ``run.run``: its jobs one after another in this process
(``launch/executors.InProcess``), each job a unit, as every launcher's jobs run.

Hydra keeps its part: argv -> overrides, the sweep folder, multirun.yaml, each job's folder and ``.hydra/`` files (Hydra's
public ``run_job`` inside ``run.run_unit``), and the returns its sweeper reads. Hydra's config keeps naming its own
launcher (``hydra.launcher._target_`` in ``.hydra/hydra.yaml``, what ``hydra/launcher=basic`` selects); initnorm's
sweepers (``sweeper.py``, ``search.py``) take the instance Hydra set up and launch its batches here (``adopt``).

Why not a launcher config of initnorm's own: one named ``basic`` in conf/ replaces Hydra's (a structured config in its
ConfigStore) only through Hydra's automatic schema matching, deprecated since Hydra 1.1 and warned of at every
composition; under another name, ``hydra/launcher=basic`` would still select Hydra's class. Under Hydra's own
``hydra/sweeper=basic`` the jobs go through Hydra's launcher (each still trains through ``cli/unit.fit_unit``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher

from initnorm.cli.hydra_adapter import BASIC_LAUNCHER


class InProcessLauncher(Launcher):
    """Hydra's basic launcher's jobs through ``run.run`` with ``executors.InProcess``, set up as Hydra set that launcher up."""

    def __init__(self, basic: Any) -> None:
        self.params = {"engine": "sequential"}
        self.config, self.hydra_context, self.task_function = basic.config, basic.hydra_context, basic.task_function

    def setup(self, *, hydra_context, task_function, config) -> None:  # set up already, as Hydra's
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from initnorm.cli import run, vectorized

        return vectorized.launch(self, job_overrides, initial_job_idx, grouped=False, job_id=run.basic_job_id)


def adopt(launcher: Any) -> Any:
    """``launcher`` as a sweeper launches through it: Hydra's basic launcher itself (set up) as ``InProcessLauncher``; any
    other, a class of one's own extending Hydra's included (its own ``launch``), as it is."""
    cls = type(launcher)
    return InProcessLauncher(launcher) if f"{cls.__module__}.{cls.__qualname__}" == BASIC_LAUNCHER else launcher
