"""Language models of one's own whose logits reuse the embedding table (weight tying, Press & Wolf 2017): by hand
(``h @ emb.weight.T``: no module is the readout, so µP's 1/m readout multiplier has nowhere to go) and through a
head module that reads the table as its weight (where it goes)."""

import torch
from torch import nn


class TiedByHand(nn.Module):
    """Embedding -> a width x width mix -> logits as ``h @ emb.weight.T``."""

    def __init__(self, vocab_size: int, width: int):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, width)
        self.mix = nn.Linear(width, width)

    def forward(self, x):
        return torch.tanh(self.mix(self.emb(x))) @ self.emb.weight.T


class TiedHead(TiedByHand):
    """The same model, its logits through ``head``, an ``nn.Linear`` whose weight is the embedding's table."""

    def __init__(self, vocab_size: int, width: int):
        super().__init__(vocab_size, width)
        self.head = nn.Linear(width, vocab_size, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x):
        return self.head(torch.tanh(self.mix(self.emb(x))))
