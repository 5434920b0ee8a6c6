"""Gaussian clusters (chapter 003, step 2): 8 clusters in 32 dimensions, labels are the cluster.

The chapter draws the centres from ``Generator(0)`` and the training then validation points
from ``Generator(1)``; its batches come from ``Generator(2)``. Its "Across three seeds" runs add
the seed offset to every seed, so here run ``seed=s`` uses centres ``s``, points ``s + 1`` and
batches ``s + 2`` (and ``torch.manual_seed(s)`` for the weights): ``seed=0`` is the chapter's
protocol and data, ``seed=1,2`` its other two runs.
"""

from __future__ import annotations

import lightning as L
import torch

from initnorm.data.sampling import SampledBatches, fixed_loader

CENTRES_OFFSET, POINTS_OFFSET, BATCHES_OFFSET = 0, 1, 2


def make_clusters(n: int, centres: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` points: a uniformly chosen cluster, its centre plus N(0, 1) noise in every dimension."""
    y = torch.randint(len(centres), (n,), generator=gen)
    return centres[y] + torch.randn(n, centres.shape[1], generator=gen), y


class Clusters(L.LightningDataModule):
    """Points and labels in memory; random training batches, the validation set scored whole."""

    eval_names = ("val",)

    def __init__(self, n_clusters: int, dim: int, n_train: int, n_val: int, batch_size: int, seed: int):
        super().__init__()
        self.n_clusters, self.dim, self.n_train, self.n_val = n_clusters, dim, n_train, n_val
        self.batch_size, self.seed = batch_size, seed
        self.start_step = 0  # set from a checkpoint on resume
        self.train_xy = self.val_xy = None

    def setup(self, stage: str | None = None) -> None:
        if self.train_xy is None:
            centres = torch.randn(self.n_clusters, self.dim, generator=torch.Generator().manual_seed(self.seed + CENTRES_OFFSET))
            gen = torch.Generator().manual_seed(self.seed + POINTS_OFFSET)
            self.train_xy = make_clusters(self.n_train, centres, gen)
            self.val_xy = make_clusters(self.n_val, centres, gen)

    @property
    def vocab_size(self) -> int:
        """The number of classes (the model's output width)."""
        return self.n_clusters

    def train_dataloader(self):
        stream = SampledBatches(*self.train_xy, self.batch_size, self.seed + BATCHES_OFFSET, self.start_step)
        return torch.utils.data.DataLoader(stream, batch_size=None)

    def val_dataloader(self):
        return [fixed_loader(*self.val_xy, self.n_val)]
