"""The classifier LightningModule of chapter 003's MLPs: one label per example.

Gaussian clusters (the deep MLP) and character windows (the char and wide MLPs) are both
"inputs -> one class": cross-entropy on the logits, and top-1 accuracy on each evaluation set the
data module names (``eval_names``: ``val``, and ``train`` for a fixed training sample). What the
chapter prints comes from a member's history (``engine.History``): its first training loss, the
mean of its last ``summary.tail_steps``, and each set's last loss and accuracy.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

from initnorm.training.engine import Engine, History


def correct(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """How many examples have the label as their top logit (the count torchmetrics' micro accuracy divides)."""
    return (logits.argmax(-1) == y).sum()


class Classifier(Engine):
    """Cross-entropy on (x, y) with one class per example; accuracy on every evaluation set."""

    def loss(self, model: Callable, batch, reduction: str = "mean") -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(model(x), y, reduction=reduction)

    def evaluate(self, model: Callable, batch) -> dict[str, torch.Tensor]:
        x, y = batch
        logits = model(x)
        return {"loss": F.cross_entropy(logits, y, reduction="sum"), "accuracy": correct(logits, y).to(logits.dtype)}

    def extra_metrics(self, c: Mapping[str, Any], history: History) -> dict[str, Any]:
        diverged = history.diverged_step is not None
        tail = int(c["summary"]["tail_steps"])
        losses = history.train_losses
        evals = {name: [(step, m["loss"], m["accuracy"]) for step, m in hist] for name, hist in history.evals.items()}
        out: dict[str, Any] = {
            "first_loss": losses[0] if losses else math.nan,
            "final_loss": math.nan if diverged or not losses else statistics.fmean(losses[-tail:]),
            "train_losses": losses,
            "eval_history": evals,
        }
        last = {name: hist[-1] for name, hist in evals.items() if hist}
        if "val" in last:
            out["val_acc"] = math.nan if diverged else last["val"][2]
        if "train" in last:
            out["final_train_loss"] = math.nan if diverged else last["train"][1]
            if "val" in last:
                out["gap"] = math.nan if diverged else last["val"][1] - last["train"][1]
        return out
