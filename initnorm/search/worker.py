"""One worker of ``hydra.sweeper.workers=N``: ask a trial, train its jobs, tell it, ask the next; no batch to wait for.

A worker runs in a process of its own (a local process, or a SLURM task: ``workers.py`` starts it) and shares the
study with the others through its journal file (``study.py``). Each of a trial's jobs (one per seed of
``hydra.sweeper.seeds``) is trained by ``Worker.jobs``, which the command line gives it (``cli/search_workers.HydraJobs``:
as every launcher's job alone runs, ``cli/run.run`` of it in the worker's process, Hydra's ``run_job`` with the
command's own task function: the job's folder, its checks, ``fit``, its record). A job folder that holds a finished
result is skipped and one with a checkpoint resumes, as in any sweep: a trial asked again after its worker died goes
on from its last checkpoint.

The worker asks until the study holds ``n_trials`` trials (those asked again after a worker's death counted
once) and none waits to be asked again; a local worker also stops, between two trials, once the sweep's process is gone
(that process stops its workers when it ends, by a signal too; killed outright, it cannot).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from initnorm.search import hang
from initnorm.search import study as search_study


class Jobs(Protocol):
    """How a worker trains a trial's job (``cli/search_workers.HydraJobs``): pickled with the worker to its process."""

    def setup(self) -> None:
        """In the worker's process, before its first trial (Hydra's state, as the launcher had it)."""

    def __call__(self, overrides: Sequence[str], num: int) -> str | None:
        """Job ``num`` with ``overrides``, trained in this process; its folder."""


@dataclass
class Worker:
    """What a worker needs, pickled to its process: the search, and how to train a trial's jobs (``jobs``)."""

    folder: str  # the sweep folder: the journal and every job folder
    index: int  # its slot, 0 .. workers - 1
    token: str  # this start of the slot, written on each trial it asks: the sweep's process knows whose trial a death leaves
    space: dict[str, Any]  # key -> its Optuna distribution (the command line's sweep syntax, read by cli/search_plan.py)
    fixed: list[str]  # the command line's overrides, every job's
    seeds: list[int]
    metric: str
    n_trials: int
    seed: int
    workers: int
    direction: str
    pruner: str
    startup_trials: int
    jobs: Jobs
    parent: int | None = None  # a local worker's sweep process: the worker stops asking once it is gone

    def __call__(self) -> int:
        """The worker's loop, in its own process; the number of trials it told."""
        import signal

        from initnorm.search import pruning
        from initnorm.training import signals

        # A stop signal (the sweep's process stopping its workers, Ctrl-C, SLURM's scancel) is recorded: the job in
        # training checkpoints at its next step and stops, and no trial is asked after it.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, signals.install())
        hang.start_beating(self.folder, self.token)  # how the sweep's process tells a hung or stopped worker
        self.jobs.setup()
        study = search_study.open_study(Path(self.folder), self.direction, pruning.make(self.pruner, self.startup_trials))
        told = 0
        while signals.requested() is None and self.parent_alive() and (trial := self.next_trial(study, self.space)) is not None:
            self.run_trial(study, trial)
            told += 1
        return told

    def parent_alive(self) -> bool:
        from initnorm.launch.workers import alive

        return self.parent is None or alive(self.parent)

    def next_trial(self, study, space: dict[str, Any]):
        """A trial asked again (WAITING: its worker died) first, else a new one while the study holds fewer than
        ``n_trials``; None once neither is left."""
        from optuna.storages.journal import JournalFileSymlinkLock
        from optuna.trial import TrialState

        # The count and the ask under one lock: two workers that both saw n_trials - 1 asked one trial too many.
        # Optuna's own kind of lock, a link made beside the journal: atomic on a network file system too; one held
        # by a worker that died is broken after its grace period.
        lock = JournalFileSymlinkLock(str(Path(self.folder) / search_study.ASK_LOCK))
        lock.acquire()
        try:
            trials = study.get_trials(deepcopy=False)
            if not any(t.state == TrialState.WAITING for t in trials) and search_study.counted(trials) >= self.n_trials:
                return None
            trial = search_study.ask(study, space, self.seed, self.index, self.workers)
        finally:
            lock.release()
        trial.set_user_attr("worker", {"token": self.token, "host": socket.gethostname(), "pid": os.getpid(),
                                       "slurm_job": os.environ.get("SLURM_JOB_ID")})  # whose trial: for a person, and a test
        return trial

    def run_trial(self, study, trial) -> None:
        """The trial's jobs, one per seed, then its objective told; a pruned job ends the trial (its other seeds untrained)."""
        from initnorm.search import pruning

        values = [f"{k}={v!r}" for k, v in trial.params.items()]
        states = []
        for i, seed in enumerate(self.seeds):
            overrides = [*self.fixed, *values, f"seed={seed}"]
            if self.pruner != "none":
                overrides.append(f"+callbacks.search_pruner._target_={pruning.TARGET}")
            pruning.CURRENT.clear()
            pruning.CURRENT.update(trial=trial, index=i, pruner=self.pruner)
            states.append(search_study.job_state(self.jobs(overrides, trial.number * len(self.seeds) + i), self.metric))
            pruning.CURRENT.clear()
            if states[-1][1] == "pruned":
                break
        search_study.tell(study, trial.number, states)


def local_main(blob: bytes) -> None:
    """A local worker's process (``multiprocessing`` starts it: ``workers.LocalStart``): the worker, unpickled."""
    import cloudpickle

    cloudpickle.loads(blob)()
