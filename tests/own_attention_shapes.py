"""Two attention models whose score matrix is not the input length squared (issue 46): a learned token prepended inside
forward (ViT's CLS: (T+1) x (T+1) scores) and a learned sink column (T x (T+1) scores, as in attention-sink models).
Each is one pre-norm block with single-head attention at 1/sqrt(d), its own scale, and no attribute µP could set."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class _Attention(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def scores(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), v


class ClsNet(nn.Module):
    """Token ids -> a learned CLS token prepended inside forward -> attention over T+1 positions -> logits per token."""

    def __init__(self, width: int = 16, vocab_size: int = 8):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, width)
        self.cls = nn.Parameter(torch.zeros(width))
        self.norm = nn.LayerNorm(width)
        self.attn = _Attention(width)
        self.out = nn.Linear(width, vocab_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x)
        h = torch.cat([self.cls.expand(h.shape[0], 1, -1), h], dim=1)  # [B, T+1, d]
        s, v = self.attn.scores(self.norm(h))  # [B, T+1, T+1]
        h = h + self.attn.proj(F.softmax(s, dim=-1) @ v)
        return self.out(h[:, 1:])


class SinkNet(nn.Module):
    """Token ids -> causal attention with a learned sink logit as an extra column (T x (T+1) scores) -> logits."""

    def __init__(self, width: int = 16, vocab_size: int = 8):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, width)
        self.sink = nn.Parameter(torch.zeros(1))
        self.norm = nn.LayerNorm(width)
        self.attn = _Attention(width)
        self.out = nn.Linear(width, vocab_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x)
        s, v = self.attn.scores(self.norm(h))  # [B, T, T]
        t = s.shape[-1]
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        s = torch.cat([s, self.sink.expand(*s.shape[:-1], 1)], dim=-1)  # [B, T, T+1]: the sink column
        p = F.softmax(s, dim=-1)[..., :t]  # the sink's share goes nowhere
        h = h + self.attn.proj(p @ v)
        return self.out(h)


class FeatureNet(nn.Module):
    """No attention, and features in (not token ids): measured on features of its first matrix's fan-in."""

    def __init__(self, width: int = 16, d_in: int = 5, n_out: int = 3):
        super().__init__()
        self.inp = nn.Linear(d_in, width)
        self.hidden = nn.Linear(width, width)
        self.out = nn.Linear(width, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(torch.relu(self.inp(x)))))


class Unmeasurable(nn.Module):
    """A forward that takes what no scratch input gives (a mapping): whether it attends cannot be measured."""

    def __init__(self, width: int = 16, vocab_size: int = 8):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, width)
        self.out = nn.Linear(width, vocab_size)

    def forward(self, batch: dict) -> torch.Tensor:
        return self.out(self.emb(batch["ids"]))
