"""The examples' data: the characters of this repository's README as token ids, in random windows of a fixed
length (a seeded draw), so that nothing is downloaded. ``Windows[i]`` is ``(x, y)``: y is x shifted by one."""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.data import Dataset

TEXT = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


class Windows(Dataset):
    def __init__(self, context: int = 32, n: int = 1024, seed: int = 0, text: str = TEXT):
        self.chars = sorted(set(text))
        self.ids = torch.tensor([self.chars.index(c) for c in text])
        self.context = context
        self.starts = torch.randint(len(self.ids) - context - 1, (n,), generator=torch.Generator().manual_seed(seed)).tolist()

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.ids[self.starts[i] : self.starts[i] + self.context + 1]
        return w[:-1], w[1:]
