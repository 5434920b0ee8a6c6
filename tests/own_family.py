"""A model family of one's own, in one file outside the package (what tests/test_own_entries.py
names by its dotted path, ``model.family=tests.own_family:FAMILY``): a residual MLP on character
windows. Embed ``context`` characters, project them to ``width``, add ``depth`` ReLU branches to that
stream (or stack them, ``model.residual=false``), read out the next character.

Everything initnorm needs is here: the module (its parameters' roles for the parameterisation
tables, its probe points for the instruments; initnorm.nn.layers' Linear and Embedding apply any
forward multiplier a table sets), the builder, and the ``Family`` with its display name, its kind
(the ``data.kind`` it trains on) and the ``model`` keys it reads with their rules.
"""

import torch
from torch import nn

from initnorm.keyrules import Bool, Int, Num
from initnorm.models.build import Family
from initnorm.nn.layers import Embedding, Linear
from initnorm.nn.roles import Role
from initnorm.registry import About


class ResidualWindowMLP(nn.Module):
    def __init__(self, vocab_size: int, context: int, emb: int, width: int, depth: int, dropout: float, readout_bias: bool, residual: bool):
        super().__init__()
        self.emb = Embedding(vocab_size, emb)
        self.inp = Linear(context * emb, width)
        self.layers = nn.ModuleList(Linear(width, width) for _ in range(depth))
        self.drop = nn.Dropout(dropout)
        self.out = Linear(width, vocab_size, bias=readout_bias)
        self.residual = residual

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(self.emb(idx).flatten(1)))
        for layer in self.layers:
            branch = self.drop(torch.relu(layer(h)))
            h = h + branch if self.residual else branch
        return self.out(h)

    def parameter_roles(self) -> dict[str, Role]:
        roles = {"emb.weight": Role.EMBEDDING, "inp.weight": Role.INPUT, "inp.bias": Role.BIAS, "out.weight": Role.READOUT}
        for i in range(len(self.layers)):
            roles |= {f"layers.{i}.weight": Role.HIDDEN, f"layers.{i}.bias": Role.BIAS}
        return roles | ({"out.bias": Role.READOUT_BIAS} if self.out.bias is not None else {})

    def probe_points(self) -> dict[str, tuple[nn.Module, str]]:
        return {f"layer_{i:02d}/preact": (layer, "out") for i, layer in enumerate(self.layers, 1)} | {"logits/output": (self, "out")}


def build(m, vocab_size: int) -> ResidualWindowMLP:
    return ResidualWindowMLP(vocab_size, m["context"], m["emb"], m["width"], m["depth"], m["dropout"], m["readout_bias"], m["residual"])


RULES = {
    "context": Int(1, fix=16),
    "emb": Int(1, fix=16),
    "dropout": Num(0, 1, hi_open=True, fix=0.0),
    "readout_bias": Bool(),
    "residual": Bool(),  # this family's own key: branches added to a stream, or stacked
}
FAMILY = Family(build, about=About("residual window MLP", "char_windows", RULES))
