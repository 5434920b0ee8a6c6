"""The members' data as one: every member's training stream batch by batch, and every evaluation set, stacked ``[E, ...]``.

Batch ``s`` of member ``e`` is the batch its own data module gives at step ``s`` (a function of its seed and
``s``), so a member sees exactly what its job alone sees; a job alone is the case E = 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import lightning as L
import torch
from torch.utils.data import DataLoader, IterableDataset

from initnorm.errors import ConfigError


def stack_batches(batches, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Each member's ``(x, y)`` stacked into ``(xs, ys)``, the member first."""
    stacked = (torch.stack([b[k] for b in batches]) for k in range(2))
    return tuple(t if device is None else t.to(device) for t in stacked)


class _Zipped(IterableDataset):
    """Every member's training stream, batch by batch, stacked: batch ``s`` of member ``e`` is ``xs[e]``."""

    def __init__(self, datas):
        self.datas = datas

    def __iter__(self):
        streams = [iter(d.train_dataloader().dataset) for d in self.datas]
        while True:
            yield stack_batches([next(s) for s in streams])


class StackedData(L.LightningDataModule):
    """The members' data modules as one: stacked training batches, and per evaluation set stacked batches."""

    def __init__(self, datas: Sequence[L.LightningDataModule]):
        super().__init__()
        self.datas = list(datas)
        self.eval_names = tuple(getattr(self.datas[0], "eval_names", ("val",)))
        self._evals: list[list] | None = None

    @property
    def start_step(self) -> int:
        return self.datas[0].start_step

    @start_step.setter
    def start_step(self, step: int) -> None:
        for d in self.datas:
            d.start_step = step  # batch s of each member is a function of (its seed, s)

    def first_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Each member's first training batch, stacked (the engine's probe)."""
        return stack_batches([next(iter(d.train_dataloader().dataset)) for d in self.datas])

    def train_dataloader(self):
        return DataLoader(_Zipped(self.datas), batch_size=None)

    def check_evaluation(self) -> None:
        """Every evaluation set has examples: a loss over none would read 0, which a summary or a search ranks best."""
        self.val_dataloader()
        for name, batches in zip(self.eval_names, self._evals):
            if sum(ys[0].numel() for _, ys in batches) == 0:
                raise ConfigError(f"the data's evaluation set {name!r} has no examples, so its loss would read 0; give it examples "
                                  "(a longer text, or more under data.*: e.g. `data.val_chars=...`, `data.n_val=...`)")

    def val_dataloader(self):
        if self._evals is None:  # fixed sets: stacked once
            per_member = []
            for d in self.datas:
                loaders = d.val_dataloader()
                per_member.append([list(loader) for loader in (loaders if isinstance(loaders, (list, tuple)) else [loaders])])
            self._evals = [[stack_batches([m[k][b] for m in per_member]) for b in range(len(per_member[0][k]))]
                           for k in range(len(self.eval_names))]
        loaders = [DataLoader(batches, batch_size=None) for batches in self._evals]
        return loaders if len(loaders) > 1 else loaders[0]
