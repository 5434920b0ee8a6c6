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

# The activations a model config may name (``model.activation``), one home for the MLP families, the
# probe and the schema; the Decoder's MLP is GELU (its ``activation`` key only picks the init gain).
ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU}


def is_one(c) -> bool:
    """A multiplier with nothing to apply. A stacked ensemble puts a per-member tensor in place of a float that
    differs between members (training/stack.py), which must take the multiplied path even where its values are 1."""
    return isinstance(c, float) and c == 1.0


class _Multiplied:
    """What both layers share: the multiplier (1.0 until the build sets it) and where it goes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.forward_mult = 1.0
        self.scale_input = False

    def unit(self) -> bool:
        """No multiplier to apply (``is_one``)."""
        return is_one(self.forward_mult)

    def extra_repr(self) -> str:
        c = self.forward_mult
        mult = "" if self.unit() else f", forward_mult={c:g}" if isinstance(c, float) else ", forward_mult=<per member>"
        return super().extra_repr() + mult


class Linear(_Multiplied, nn.Linear):
    """``nn.Linear`` with a forward multiplier."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.forward_mult
        if self.unit():
            return F.linear(x, self.weight, self.bias)
        if self.scale_input:
            return F.linear(x * c, self.weight, self.bias)
        return F.linear(x, self.weight, self.bias) * c


class Embedding(_Multiplied, nn.Embedding):
    """``nn.Embedding`` with a multiplier on the looked-up vectors."""

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        out = super().forward(idx)
        return out if self.unit() else out * self.forward_mult
