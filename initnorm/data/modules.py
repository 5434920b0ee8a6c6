"""Lightning data modules: seeded training windows, a fixed validation set.

Training batch ``s`` is drawn by a generator seeded from (seed, s), so a batch depends only on
the run's seed and the step: a resumed run sees exactly the batches an uninterrupted one would,
and Lightning's one-batch prefetch cannot shift the stream.
"""

from __future__ import annotations

import lightning as L
import torch
from torch.utils.data import DataLoader, IterableDataset

from initnorm.data.corpus import Corpus, load_corpus
from initnorm.data.sampling import fixed_loader


def batch_generator(seed: int, step: int) -> torch.Generator:
    # A large odd multiplier keeps (seed, step) pairs from colliding for any realistic run length.
    return torch.Generator().manual_seed(seed * 1_000_003 + step)


class WindowStream(IterableDataset):
    """An endless stream of (x, y) batches of random windows: y is x shifted by one character."""

    def __init__(self, ids: torch.Tensor, context: int, batch_size: int, seed: int, start_step: int = 0):
        self.windows = ids.unfold(0, context + 1, 1)  # a view: every window of context + 1 characters
        self.batch_size, self.seed, self.start_step = batch_size, seed, start_step

    def __iter__(self):
        step = self.start_step
        n = self.windows.shape[0]
        while True:
            idx = torch.randint(n, (self.batch_size,), generator=batch_generator(self.seed, step))
            w = self.windows[idx]
            yield w[:, :-1], w[:, 1:]
            step += 1


def fixed_windows(ids: torch.Tensor, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every non-overlapping window of the validation text: the same text scores every run."""
    n = (len(ids) - 1) // context
    x = ids[: n * context].view(n, context)
    y = ids[1 : n * context + 1].view(n, context)
    return x, y


class CharLM(L.LightningDataModule):
    """Next-character prediction on a character corpus (the Decoder's task)."""

    def __init__(self, name: str, context: int, batch_size: int, seed: int, path: str | None = None, val_batch_size: int = 512):
        super().__init__()
        self.name, self.path, self.context = name, path, context
        self.batch_size, self.seed, self.val_batch_size = batch_size, seed, val_batch_size
        self.corpus: Corpus | None = None
        self.start_step = 0  # set from a checkpoint on resume

    def setup(self, stage: str | None = None) -> None:
        if self.corpus is None:
            self.corpus = load_corpus(self.name, self.path)

    @property
    def vocab_size(self) -> int:
        self.setup()
        return self.corpus.vocab_size

    def train_dataloader(self):
        stream = WindowStream(self.corpus.train, self.context, self.batch_size, self.seed, self.start_step)
        return DataLoader(stream, batch_size=None)

    def val_dataloader(self):
        return fixed_loader(*fixed_windows(self.corpus.val, self.context), self.val_batch_size)
