"""Callbacks that send a real stop signal at a known point, once: to this process, the sweep's process or its whole process
group; at a training step (Lightning; ``StopWhenAll`` once every group of a parallel sweep stands there) or once the
sweep's summary is written (Hydra). And one that holds a job at a step until a signal comes (``HoldAt``), so that a test
signals or kills it mid-training without a long run to race."""

import os
import time
from pathlib import Path

import lightning as L
from hydra.experimental.callback import Callback

from initnorm.launch.workers import LAUNCHER_PID_ENV


def _send(signum: int, target: str) -> None:
    """``signum`` to this process (self), the sweep's process (parent: a launcher's worker knows it) or the process group."""
    if target == "group":
        os.killpg(os.getpgid(0), signum)
    else:
        os.kill(int(os.environ.get(LAUNCHER_PID_ENV, os.getpid())) if target == "parent" else os.getpid(), signum)


class StopAt(L.Callback):
    """After the batch of step ``step``, send ``signum`` to ``target`` (self | parent | group), once per ``marker``
    file (made atomically: of two groups training at once, one sends it)."""

    def __init__(self, step: int, signum: int, marker: str, target: str = "self"):
        self.step, self.signum, self.marker, self.target = step, signum, Path(marker), target

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step != self.step:
            return
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        _send(self.signum, self.target)


class StopWhenAll(L.Callback):
    """After the batch of step ``step``: wait until ``count`` processes (the groups of a parallel sweep, each in a worker)
    stand there, then the last to arrive sends ``signum`` to ``target`` (as ``StopAt``) once per ``marker``; each group
    waits at that step until its own process has recorded the stop. Every group is stopped at ``step`` whatever the load
    did to its workers' start: none finished, none stopped before its first step."""

    def __init__(self, step: int, signum: int, marker: str, target: str = "self", count: int = 1):
        self.step, self.signum, self.marker, self.target, self.count = step, signum, Path(marker), target, count

    def on_train_batch_end(self, trainer, *args) -> None:
        from initnorm.training import signals

        if trainer.global_step != self.step or self.marker.exists():
            return
        Path(f"{self.marker}.{os.getpid()}").touch()
        deadline = time.monotonic() + 120
        while len(list(self.marker.parent.glob(f"{self.marker.name}.*"))) < self.count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"StopWhenAll: fewer than {self.count} groups reached step {self.step} in 120 s")
            time.sleep(0.05)
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            _send(self.signum, self.target)
        except FileExistsError:
            pass
        while signals.requested() is None:  # the signal, or the parent passing it on, reaches this process
            if time.monotonic() > deadline:
                raise RuntimeError(f"StopWhenAll: no stop signal reached process {os.getpid()} in 120 s")
            time.sleep(0.05)

class StopAtSummary(Callback):
    """A Hydra callback after the sweep's own (its summary written): ``signum`` to this process or its whole group."""

    def __init__(self, signum: int, target: str = "self"):
        self.signum, self.target = signum, target

    def on_multirun_end(self, config, **kwargs) -> None:
        if self.target == "group":
            os.killpg(os.getpgid(0), self.signum)
        else:
            os.kill(os.getpid(), self.signum)


class HoldAt(L.Callback):
    """After the batch of step ``step``, once per ``marker`` file, wait there until this process is asked to stop (a
    stop signal: the job then checkpoints at its next step) or killed; in a job whose folder path holds ``where`` only.
    A test that must signal or kill a job mid-training waits for ``marker`` instead of racing a long run to its end;
    the rerun (``marker`` made) trains through. ``limit_s`` keeps a forgotten hold from hanging a test."""

    def __init__(self, step: int, marker: str, where: str = "", limit_s: float = 60.0):
        self.step, self.marker, self.where, self.limit_s = step, Path(marker), where, limit_s

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step != self.step or self.where not in os.getcwd():
            return
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        from initnorm.training import signals

        deadline = time.monotonic() + self.limit_s
        while signals.requested() is None and time.monotonic() < deadline:
            time.sleep(0.05)
