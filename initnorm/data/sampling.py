"""Batches drawn the chapter's way: one generator per run, ``randint(n, (batch,))`` every step.

Chapter 003 seeds one ``torch.Generator`` per run and draws each step's indices from it in turn.
Batch ``s`` is therefore a function of (seed, s) only: a resumed run replays the first
``start_step`` draws (microseconds each) and then sees exactly the batches an uninterrupted run
would; Lightning's one-batch prefetch cannot shift an in-order stream. At seed 0 the batches are
the chapter's own.
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, IterableDataset


class SampledBatches(IterableDataset):
    """An endless stream of (x[idx], y[idx]) with ``idx`` drawn uniformly, with replacement."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int, start_step: int = 0):
        self.x, self.y = x, y
        self.batch_size, self.seed, self.start_step = batch_size, seed, start_step

    def __iter__(self):
        gen = torch.Generator().manual_seed(self.seed)
        n = len(self.y)
        for _ in range(self.start_step):
            torch.randint(n, (self.batch_size,), generator=gen)
        while True:
            idx = torch.randint(n, (self.batch_size,), generator=gen)
            yield self.x[idx], self.y[idx]


def fixed_loader(x: torch.Tensor, y: torch.Tensor, batch_size: int) -> DataLoader:
    """A fixed evaluation set in order, ``batch_size`` examples at a time."""
    batches = [(x[i : i + batch_size], y[i : i + batch_size]) for i in range(0, len(y), batch_size)]
    return DataLoader(batches, batch_size=None)
