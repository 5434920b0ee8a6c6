"""A callback that ends its job the hard ways, at a known step, for one seed: the process exits (``exit``), a
``KeyboardInterrupt`` raised by user code (``interrupt``), or SIGKILL of its own process, as the OOM killer sends it (``kill``)."""

import os
import signal

import lightning as L


class DieAt(L.Callback):
    def __init__(self, step: int, how: str, seed: int):
        self.step, self.how, self.seed = step, how, seed

    def on_train_batch_end(self, trainer, pl_module, *args) -> None:
        if trainer.global_step != self.step or all(c["seed"] != self.seed for c in pl_module.configs):
            return
        if self.how == "exit":
            os._exit(3)
        if self.how == "interrupt":
            raise KeyboardInterrupt
        os.kill(os.getpid(), signal.SIGKILL)
