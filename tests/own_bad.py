"""User code that is wrong in the ways the preflight must name in one line (tests/test_preflight_own.py): models that
are no module, raise, or return a dict, ``(loss, logits)`` or the wrong number of classes; data modules whose setup
raises or whose batches are wrong; callbacks that are no Callback or raise when built."""

from __future__ import annotations

import torch
from torch import nn

from tests.own_data import Tokens


class Net(nn.Module):
    """Embedding -> width -> ``out`` classes (``out`` None: the vocabulary)."""

    def __init__(self, vocab_size: int, width: int, out: int | None = None):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, width)
        self.head = nn.Linear(width, out or vocab_size)

    def forward(self, x):
        return self.head(self.emb(x))


def not_a_module(vocab_size: int, width: int):
    return {"vocab_size": vocab_size, "width": width}


def raises(vocab_size: int, width: int):
    raise ValueError(f"no model at width {width}")


class Dict(Net):
    def forward(self, x):
        return {"logits": super().forward(x)}


class LossLogits(Net):
    def forward(self, x):
        logits = super().forward(x)
        return logits.square().mean(), logits


class Wrong(Net):
    def __init__(self, vocab_size: int, width: int):
        super().__init__(vocab_size, width, out=vocab_size + 3)


class SetupRaises(Tokens):
    def setup(self, stage=None):
        raise FileNotFoundError("my_corpus.txt")


class OutOfRange(Tokens):
    def setup(self, stage=None):
        super().setup(stage)
        self.train = self.train + self.vocab_size  # ids past the vocabulary


class Floats(Tokens):
    def setup(self, stage=None):
        super().setup(stage)
        self.train = self.train.float().masked_fill(self.train == 0, float("nan"))


class NotACallback:
    pass


class CallbackRaises:
    def __init__(self):
        raise RuntimeError("my callback cannot start")



class InitRaises(Tokens):
    """A data module whose own constructor raises a TypeError (its arguments are fine)."""

    def __init__(self, batch_size: int, context: int):
        raise TypeError("my data module cannot start")


class BadBatch(Tokens):
    def train_dataloader(self):
        return [(torch.zeros(2, 4, dtype=torch.long), torch.zeros(3, dtype=torch.long))]
