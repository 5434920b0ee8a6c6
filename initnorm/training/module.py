"""The language model's LightningModule (the Decoder's task, and a model of one's own on text): next-token
cross-entropy at every position of a window. Everything else (step, validation, logging, optimiser,
schedule, divergence, checkpoints, records) is the engine's (``training/engine.py``), for E >= 1 members."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from initnorm.training.engine import Engine


class LanguageModel(Engine):
    """Next-token cross-entropy at every position of a window."""

    def loss(self, model: Callable, batch, reduction: str = "mean") -> torch.Tensor:
        x, y = batch
        logits = model(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction=reduction)
