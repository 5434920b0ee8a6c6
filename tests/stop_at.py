"""Callbacks that send a real stop signal at a known point, once: to this process, the sweep's process or its whole process
group; at a training step (Lightning) or once the sweep's summary is written (Hydra)."""

import os
from pathlib import Path

import lightning as L
from hydra.experimental.callback import Callback

from initnorm.cli.workers import LAUNCHER_PID_ENV


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
        if self.target == "group":
            os.killpg(os.getpgid(0), self.signum)
        else:
            os.kill(int(os.environ.get(LAUNCHER_PID_ENV, os.getpid())) if self.target == "parent" else os.getpid(), self.signum)


class StopAtSummary(Callback):
    """A Hydra callback after the sweep's own (its summary written): ``signum`` to this process or its whole group."""

    def __init__(self, signum: int, target: str = "self"):
        self.signum, self.target = signum, target

    def on_multirun_end(self, config, **kwargs) -> None:
        if self.target == "group":
            os.killpg(os.getpgid(0), self.signum)
        else:
            os.kill(os.getpid(), self.signum)
