"""The classifier LightningModule of chapter 003's MLPs: one label per example.

Gaussian clusters (the deep MLP) and character windows (the char and wide MLPs) are both
"inputs -> one class": cross-entropy on the logits. What the chapter prints comes from three
records kept here: every training loss (first loss; mean of the last ``summary.tail_steps``),
and for each evaluation set the data module names (``eval_names``: ``val``, and ``train`` for
a fixed training sample), loss and top-1 accuracy at every evaluation, step 0 included. A stacked
group's members (``training/stacked.py``) count their correct predictions with the same ``correct``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from initnorm.training.module import Trainable

# Evaluation sets as TensorBoard tags name them: Loss/<label>, Accuracy/<label> (capitalised groups sort first).
EVAL_LABELS = {"val": "validation", "train": "train sample"}


def correct(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """How many examples have the label as their top logit (the count torchmetrics' micro accuracy divides)."""
    return (logits.argmax(-1) == y).sum()


class Classifier(Trainable):
    """Cross-entropy on (x, y) with one class per example; see the module docstring for the records."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.train_losses: list[float] = []
        self.evals: dict[str, list[tuple[int, float, float]]] = {}  # name -> [(step, loss, accuracy)]
        self._sums: dict[str, list[float]] = {}  # name -> [summed loss, examples, correct]

    def loss(self, batch, reduction: str = "mean"):
        x, y = batch
        return F.cross_entropy(self.model(x), y, reduction=reduction)

    def training_step(self, batch, batch_idx):
        out = super().training_step(batch, batch_idx)  # None: the loss was not finite and the run stops
        self.train_losses.append(out.item() if out is not None else math.nan)
        return out

    def validation_step(self, batch, batch_idx, dataloader_idx: int = 0):
        name = self.trainer.datamodule.eval_names[dataloader_idx]
        x, y = batch
        logits = self.model(x)
        sums = self._sums.setdefault(name, [0.0, 0, 0])
        sums[0] += F.cross_entropy(logits, y, reduction="sum").item()
        sums[1] += y.numel()
        sums[2] += correct(logits, y).item()

    def on_validation_epoch_end(self):
        step = self.global_step
        for name, (total, count, right) in self._sums.items():
            loss, acc = total / count, right / count
            if self.trainer.sanity_checking:
                continue
            self.evals.setdefault(name, []).append((step, loss, acc))
            label = EVAL_LABELS.get(name, name)  # Loss/validation beside the trainer's Loss/train (the batches)
            self.write_scalar(f"Loss/{label}", loss, step)
            self.write_scalar(f"Accuracy/{label}", acc, step)
            if name == "val":
                self.val_history.append((step, loss))
        self._sums.clear()

    # Resume (training/resume.py) restores the model and val_history; these records travel too.
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["classifier"] = {"train_losses": list(self.train_losses), "evals": {k: list(v) for k, v in self.evals.items()}}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("classifier", {})
        self.train_losses = list(state.get("train_losses", []))
        self.evals = {k: [tuple(e) for e in v] for k, v in state.get("evals", {}).items()}

    def extra_metrics(self, cfg: Mapping[str, Any]) -> dict[str, Any]:
        diverged = self.diverged_step is not None
        tail = int(cfg["summary"]["tail_steps"])
        losses = self.train_losses
        out: dict[str, Any] = {
            "first_loss": losses[0] if losses else math.nan,
            "final_loss": math.nan if diverged or not losses else statistics.fmean(losses[-tail:]),
            "train_losses": losses,
            "eval_history": self.evals,
        }
        last = {name: hist[-1] for name, hist in self.evals.items() if hist}
        if "val" in last:
            out["val_acc"] = math.nan if diverged else last["val"][2]
        if "train" in last:
            out["final_train_loss"] = math.nan if diverged else last["train"][1]
            if "val" in last:
                out["gap"] = math.nan if diverged else last["val"][1] - last["train"][1]
        return out
