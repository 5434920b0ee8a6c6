"""Which command line starts a parallel sweep's worker processes early (``launch/workers.py``), and what they import.

``initnorm/train.py`` calls ``start_early`` before anything heavy is imported: a ``local_parallel`` or ``vectorized``
sweep on this machine's processes starts its workers then, so that they import torch, Lightning and initnorm while this
process does the same and checks every job. This module imports nothing heavy: it runs first.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager

from initnorm.cli import launchers
from initnorm.cli.argv import CommandLine
from initnorm.launch import workers

DEFAULT_N_JOBS = -1  # conf/hydra/launcher/{local_parallel,vectorized}.yaml's n_jobs
# What a worker imports before its first unit: the task function's module and the job's (torch, Lightning, the library).
WORKER_MODULES = ("initnorm.cli.train", "initnorm.cli.job")


def _launcher_args(cmd: CommandLine) -> tuple[bool, int | None]:
    """(a parallel sweep on worker processes of this machine, its n_jobs) as far as the command line says."""
    if not (cmd.multirun and cmd.runs_jobs):
        return False, None
    launcher = cmd.value("hydra/launcher")
    if launcher == "vectorized":
        if launchers.engine_name(cmd.value("hydra.launcher.engine", "processes"), quiet=True) != "processes":
            return False, None
    elif launcher != "local_parallel":
        return False, None
    if importlib.util.find_spec("pebble") is None:  # an install without the launchers extra: the preflight says so, in one line
        return False, None
    try:
        return True, int(cmd.value("hydra.launcher.n_jobs", str(DEFAULT_N_JOBS)))
    except ValueError:  # a bad value: the launcher says so, in one line
        return False, None


def start_early(cmd: CommandLine) -> None:
    """Start the workers of ``cmd``'s parallel sweep now (no-op for any other command line)."""
    wanted, n_jobs = _launcher_args(cmd)
    if wanted and workers.started_early() is None:
        workers.warm(n_jobs, WORKER_MODULES)


@contextmanager
def early(cmd: CommandLine) -> Iterator[None]:
    """``cmd``'s parallel sweep's workers started now (``start_early``), and ended with the command: a command line that
    failed its checks (or a stop signal) leaves the early workers and their server idle."""
    try:
        start_early(cmd)
        yield
    finally:
        workers.end()
