"""A LightningDataModule as a user would write one (for tests/test_own_data.py): a repeating pattern of
token ids in shuffled windows, an epoch of a few batches, its own vocab_size."""

from __future__ import annotations

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Tokens(L.LightningDataModule):
    def __init__(self, batch_size: int, context: int, n_tokens: int = 2000, vocab: int = 11):
        super().__init__()
        self.batch_size, self.context, self.n_tokens, self.vocab_size = batch_size, context, n_tokens, vocab

    def setup(self, stage: str | None = None) -> None:
        ids = (torch.arange(self.n_tokens + 1) * 7 % self.vocab_size).unfold(0, self.context + 1, self.context)
        cut = len(ids) * 3 // 4
        self.train, self.val = ids[:cut], ids[cut:]

    def train_dataloader(self):  # shuffled: its order follows torch's seed, which initnorm sets per job
        return DataLoader(TensorDataset(self.train[:, :-1], self.train[:, 1:]), batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(TensorDataset(self.val[:, :-1], self.val[:, 1:]), batch_size=64)


class NotAModule:
    def __init__(self, **kwargs):
        pass


def _tokens(c) -> Tokens:
    return Tokens(c["batch_size"], c["data"]["context"])


def task():
    """A task of one's own (``data.kind=tests.own_data:TOKENS``): its data module and the LightningModule that trains on it."""
    from initnorm.training.module import LanguageModel
    from initnorm.training.tasks import Task

    return Task(_tokens, LanguageModel)


TOKENS = task()
