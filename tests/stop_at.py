"""A callback that sends a real stop signal at a known step, once: to this process, the sweep's process or its whole process group."""

import os
from pathlib import Path

import lightning as L

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
