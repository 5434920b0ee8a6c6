"""A callback that ends the fit after a given step as a user's callback may (``trainer.should_stop``): the engine keeps
its checkpoint there, and a rerun completes the run (``tests/test_ddp.py``: a run of 2 processes resumed in 1)."""

import lightning as L


class StopAfter(L.Callback):
    def __init__(self, step: int):
        self.step = int(step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step >= self.step:
            trainer.should_stop = True
