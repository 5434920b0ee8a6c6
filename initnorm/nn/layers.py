"""Layers that carry a parameterisation's forward multiplier (``nn.param``).

``models.build`` sets ``forward_mult`` once, from the table's rule for the layer's role, and
refuses a table that asks for a multiplier on a role whose layer cannot apply one. At 1.0 the
layers compute exactly what ``torch.nn`` computes, so ``param=sp`` is bit for bit the plain model.

Where the multiplier goes (``scale_input``, set by the build from ``roles.INPUT_SCALED_ROLES``):

- on the output, bias included: ``c * (x W^T + b)``; a residual branch multiplied by ``c``
  (depth-µP, CompleteP) scales everything the branch adds to the stream;
- on the input: ``(c * x) W^T + b``; the readout (microsoft/mup's ``MuReadout``, nanoGPT-mup):
  the logits' width factor scales the weight's product, not a bias the size of the vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Linear(nn.Linear):
    """``nn.Linear`` with a forward multiplier (1.0 until the build sets it)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.forward_mult = 1.0
        self.scale_input = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.forward_mult
        if isinstance(c, float) and c == 1.0:  # a stacked ensemble sets a per-member tensor here (training/ensemble.py)
            return F.linear(x, self.weight, self.bias)
        if self.scale_input:
            return F.linear(x * c, self.weight, self.bias)
        return F.linear(x, self.weight, self.bias) * c

    def extra_repr(self) -> str:
        return super().extra_repr() + ("" if self.forward_mult == 1.0 else f", forward_mult={self.forward_mult:g}")


class Embedding(nn.Embedding):
    """``nn.Embedding`` with a multiplier on the looked-up vectors (1.0 until the build sets it)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.forward_mult = 1.0
        self.scale_input = False

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        out = super().forward(idx)
        c = self.forward_mult
        return out if isinstance(c, float) and c == 1.0 else out * c
