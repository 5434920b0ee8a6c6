"""LightningModules: the language model (the Decoder's task) with its optimiser and schedule.

Logging is deliberately sparse (every ``log_every`` steps, written straight to the TensorBoard
writer): with models of a few thousand parameters, Python overhead per step is the cost.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F

from initnorm.errors import ConfigError
from initnorm.nn.param import Table
from initnorm.tb import LEARNING_RATE, TRAIN_LOSS, VAL_LOSS
from initnorm.training import trackers
from initnorm.training.compiling import hooked
from initnorm.training.divergence import Divergence
from initnorm.training.optim import make_optimizer, overwritten_rate, schedule_factor
from initnorm.training.validation import at_start, validate_now


class Trainable(L.LightningModule):
    """What every family shares: optimiser groups from the table, the schedule, divergence stop,
    sparse logging, validation loss bookkeeping. Subclasses define ``loss(batch)``."""

    def __init__(self, model: torch.nn.Module, roles, table: Table, *, lr: float, steps: int, warmup: int, optim: Mapping[str, Any],
                 schedule: str, log_every: int,
                 compile: bool = False):
        super().__init__()
        self.model, self.roles, self.table = model, roles, table
        self.lr, self.steps, self.warmup, self.optim_cfg, self.schedule = lr, steps, warmup, dict(optim), schedule
        self.log_every = log_every
        self.divergence = Divergence(1)
        self.val_history: list[tuple[int, float]] = []
        self._val_sum = self._val_count = 0.0
        # training_step steps the optimiser and the schedule itself: Lightning's automatic loop wraps
        # each step in a closure and a dozen more hooks, several % of these models' steps
        # (bench/RESULTS.md), for the same numbers bit for bit. Lightning then refuses
        # trainer.gradient_clip_val / accumulate_grad_batches (clip here with self.clip_gradients).
        self.automatic_optimization = False
        # compile=True: the training loss (forward and its backward) goes through torch.compile; a
        # function, not a module, so the state dict and checkpoints stay those of an eager run.
        # Validation and the steps whose forward carries hooks (the per-layer statistics) stay eager.
        self.compiled = compile
        self._fast = torch.compile(self.loss) if compile else None

    def loss(self, batch) -> torch.Tensor:
        raise NotImplementedError

    @property
    def diverged_step(self) -> int | None:
        return self.divergence.steps[0]

    @diverged_step.setter
    def diverged_step(self, step: int | None) -> None:
        self.divergence.restore(0, step)

    def on_train_start(self):
        """Validation at step 0 of a fresh run, so every curve starts where training starts."""
        if at_start(self, [self.val_history]):
            validate_now(self, self.device)

    def write_scalar(self, tag: str, value: float, step: int) -> None:
        for writer in trackers.writers(self.loggers):  # every tracker the job writes to (training/trackers.py)
            writer.add_scalar(tag, value, step)

    def training_step(self, batch, batch_idx):
        loss = self._fast(batch) if self._fast is not None and not hooked(self.model) else self.loss(batch)
        step = self.global_step
        if self.divergence.check(loss.detach().reshape(1), step):  # recorded at this step; the fit stops
            self.trainer.should_stop = True
            return None
        opt = self.optimizers()
        opt.zero_grad(set_to_none=True)
        self.manual_backward(loss)
        if step % self.log_every == 0:  # before the step: the rates it is taken with
            factor = schedule_factor(step, self.steps, self.warmup, self.schedule)
            wrong = overwritten_rate(opt.optimizer.param_groups, self.lr, factor, step, self.table.name)
            if wrong:
                raise ConfigError(wrong)
        opt.step()
        self.lr_schedulers().step()
        if step % self.log_every == 0:
            value = loss.item()
            self.write_scalar(TRAIN_LOSS, value, step)
            self.write_scalar(LEARNING_RATE, self.lr * factor, step)
            self.log("loss", value, prog_bar=True, logger=False)
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx: int = 0):
        loss = self.loss(batch, reduction="sum")
        self._val_sum += loss.item()
        self._val_count += batch[1].numel()

    def on_validation_epoch_end(self):
        value = self._val_sum / max(1.0, self._val_count)
        self._val_sum = self._val_count = 0.0
        if self.trainer.sanity_checking:
            return
        self.val_history.append((self.global_step, value))
        self.write_scalar(VAL_LOSS, value, self.global_step)
        if self.trainer.validating:  # Lightning's own loop: step 0 (validate_now, in a training hook) would stay in the bar to the end
            self.log("val_loss", value, prog_bar=True, logger=False)

    def configure_optimizers(self):
        opt = make_optimizer(self.model, self.roles, self.table, self.lr, self.optim_cfg)
        factor = lambda step: schedule_factor(step, self.steps, self.warmup, self.schedule)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    @property
    def final_val_loss(self) -> float:
        return self.val_history[-1][1] if self.val_history else math.nan

    def extra_metrics(self, cfg: Mapping[str, Any]) -> dict[str, Any]:
        """A family's own metrics after training (``cfg`` is the resolved config); train.py merges
        them into metrics.json and numbers among them into the HPARAMS tab as ``hp/<name>``."""
        return {}


class LanguageModel(Trainable):
    """Next-token cross-entropy at every position of a window."""

    def loss(self, batch, reduction: str = "mean"):
        x, y = batch
        logits = self.model(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction=reduction)
