"""Character windows: the ``context`` characters before a position -> the character there.

Two of chapter 003's setups, one module:

- step 3 (``char_windows``): every window of the first 20,000 training characters (19,984 of
  them), held-out windows of ``val[:4016]`` (4,000), and a fixed sample of 4,000 training windows
  (``randperm`` of ``Generator(seed)``) to score the training loss with dropout off;
- step 4 (``text_windows``): random windows from the whole training text, so every batch is
  almost surely fresh text and the training loss is a fair proxy for validation loss.

Seeds follow the chapter shifted by ``seed``: batches from ``Generator(seed)``, the training
sample from another ``Generator(seed)``, the weights from ``torch.manual_seed(seed)``.
"""

from __future__ import annotations

import lightning as L
import torch

from initnorm.data.corpus import load_corpus
from initnorm.data.sampling import SampledBatches, fixed_loader


def windows(ids: torch.Tensor, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every (``context`` characters, next character) pair of ``ids``: ``len(ids) - context`` of them."""
    w = ids.unfold(0, context + 1, 1)  # a view, not a copy: the whole text is a million windows
    return w[:, :-1], w[:, -1]


class CharWindows(L.LightningDataModule):
    """Training windows from ``train[:train_chars]`` (all of it if null), held-out ones from ``val[:val_chars]``."""

    def __init__(self, name: str, context: int, batch_size: int, seed: int, train_chars: int | None = None, val_chars: int | None = None,
                 train_eval: int = 0, path: str | None = None, eval_batch_size: int = 4096):
        super().__init__()
        self.name, self.path, self.context = name, path, context
        self.train_chars, self.val_chars, self.train_eval = train_chars, val_chars, train_eval
        self.batch_size, self.seed, self.eval_batch_size = batch_size, seed, eval_batch_size
        self.eval_names = ("train", "val") if train_eval else ("val",)
        self.start_step = 0  # set from a checkpoint on resume
        self.corpus = None

    def setup(self, stage: str | None = None) -> None:
        if self.corpus is None:
            self.corpus = load_corpus(self.name, self.path)
            self.train_xy = windows(self.corpus.train[: self.train_chars], self.context)
            self.val_xy = windows(self.corpus.val[: self.val_chars], self.context)

    @property
    def vocab_size(self) -> int:
        self.setup()
        return self.corpus.vocab_size

    def train_dataloader(self):
        stream = SampledBatches(*self.train_xy, self.batch_size, self.seed, self.start_step)
        return torch.utils.data.DataLoader(stream, batch_size=None)

    def val_dataloader(self):
        loaders = [fixed_loader(*self.val_xy, self.eval_batch_size)]
        if self.train_eval:
            x, y = self.train_xy
            sample = torch.randperm(len(y), generator=torch.Generator().manual_seed(self.seed))[: self.train_eval]
            loaders.insert(0, fixed_loader(x[sample], y[sample], self.eval_batch_size))
        return loaders
