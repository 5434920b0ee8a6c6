"""The MLP families of chapter 003 (initialisation): the deep MLP and the character-window MLP.

- ``DeepMLP`` (step 2): ``depth`` Linear + activation layers of ``width`` and a linear head, no
  norm and no residual, so nothing but the init keeps the signal in range through 30 layers.
- ``WindowMLP`` (Bengio et al. 2003): embed the last ``context`` characters, concatenate, pass
  them through ``depth`` ReLU layers of ``width`` units, predict the next character. Two shapes
  of it run in the chapter, each a family with its own config:

  ``char_mlp`` (step 3): context 16, embedding 24, two layers of 512, dropout, readout with bias
  (494,681 parameters for 65 symbols); ``wide_mlp`` (step 4, the µP width sweep): context 8,
  embedding 16, three layers of ``width`` (input, then two width x width), readout without bias.

Roles: the first layer's fan-in (the input, or ``context x embedding``) does not grow with
width, so it is ``INPUT`` and keeps the base learning rate under µP; width x width layers are
``HIDDEN``. Their layers are ``nn.layers``' Linear and Embedding, so they apply any forward
multiplier a table sets for the roles they have; a table that needs residual branches
(``param=depth_mup``, ``completep``) is refused by the build.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from initnorm.keyrules import Bool, Int, Num
from initnorm.nn.layers import ACTIVATIONS, Embedding, Linear
from initnorm.nn.roles import Role


def _layer_roles(depth: int) -> dict[str, Role]:
    """``layers.0`` reads the input, whose size does not grow with width; the others are width x width."""
    roles: dict[str, Role] = {}
    for i in range(depth):
        roles |= {f"layers.{i}.weight": Role.INPUT if i == 0 else Role.HIDDEN, f"layers.{i}.bias": Role.BIAS}
    return roles


def _probe_points(model: nn.Module, layers: nn.ModuleList, head: nn.Module) -> dict[str, tuple[nn.Module, str]]:
    """For the instruments (``initnorm.instruments.stats``): ``layer_NN/preact`` is layer NN's output,
    ``layer_NN/act`` what the next layer reads (after the activation, and dropout if any)."""
    points: dict[str, tuple[nn.Module, str]] = {}
    for i, (layer, reader) in enumerate(zip(layers, [*layers[1:], head]), 1):
        points |= {f"layer_{i:02d}/preact": (layer, "out"), f"layer_{i:02d}/act": (reader, "in")}
    return points | {"logits/output": (model, "out")}


class DeepMLP(nn.Module):
    """x (d_in) -> [Linear -> activation] x depth -> Linear head (n_classes logits)."""

    def __init__(self, d_in: int, n_classes: int, width: int = 128, depth: int = 30, activation: str = "tanh"):
        super().__init__()
        self.layers = nn.ModuleList(Linear(d_in if i == 0 else width, width) for i in range(depth))
        self.act = ACTIVATIONS[activation]()
        self.head = Linear(width, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = self.act(layer(x))
        return self.head(x)

    def parameter_roles(self) -> dict[str, Role]:
        return {"head.weight": Role.READOUT, "head.bias": Role.READOUT_BIAS} | _layer_roles(len(self.layers))

    def probe_points(self) -> dict[str, tuple[nn.Module, str]]:
        return _probe_points(self, self.layers, self.head)


class WindowMLP(nn.Module):
    """(B, context) ids -> embed and concatenate -> [Linear -> ReLU -> Dropout] x depth -> readout."""

    def __init__(self, vocab_size: int, context: int, emb: int, width: int, depth: int, dropout: float = 0.0, readout_bias: bool = True):
        super().__init__()
        self.emb = Embedding(vocab_size, emb)
        self.layers = nn.ModuleList(Linear(context * emb if i == 0 else width, width) for i in range(depth))
        # nn.Dropout masks and rescales by 1/(1-p) in training mode only (Srivastava et al. 2014).
        self.drop = nn.Dropout(dropout)
        self.out = Linear(width, vocab_size, bias=readout_bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.emb(idx).flatten(1)
        for layer in self.layers:
            h = self.drop(torch.relu(layer(h)))
        return self.out(h)

    def parameter_roles(self) -> dict[str, Role]:
        roles = {"emb.weight": Role.EMBEDDING, "out.weight": Role.READOUT}
        if self.out.bias is not None:
            roles["out.bias"] = Role.READOUT_BIAS
        return roles | _layer_roles(len(self.layers))

    def probe_points(self) -> dict[str, tuple[nn.Module, str]]:
        return _probe_points(self, self.layers, self.out)


# Family builders, registered in models.build: (model config, classes or symbols) -> module, and
# the model keys each reads beyond the schema's common ones.
DEEP_RULES = {"d_in": Int(1, fix=32)}
WINDOW_RULES = {"context": Int(1, fix=16), "emb": Int(1, fix=16), "dropout": Num(0, 1, hi_open=True, fix=0.2), "readout_bias": Bool()}


def deep_mlp(m: Mapping, n_classes: int) -> DeepMLP:
    return DeepMLP(m["d_in"], n_classes, m["width"], m["depth"], m["activation"])


def window_mlp(m: Mapping, vocab_size: int) -> WindowMLP:
    return WindowMLP(vocab_size, m["context"], m["emb"], m["width"], m["depth"], m["dropout"], m["readout_bias"])
