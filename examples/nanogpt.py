"""A nanoGPT-style model written as a user would write it: plain ``nn.Linear``, ``nn.Embedding`` and
``nn.LayerNorm``, the token embedding tied to the readout, nothing of initnorm imported.

    PYTHONPATH=. python -m initnorm.train model=custom model._target_=examples.nanogpt.GPT \\
        model.width_arg=n_embd model.depth_arg=n_layer model.context_arg=block_size model.blocks=h \\
        +model.n_head=2 model.attn_mult_attr=attn_mult param=mup width=64 model.base_width=16

initnorm reads its roles from builds at two widths (README "Your own model"): the tied
``wte.weight`` is an embedding that the readout also reads, ``wpe.weight`` a table of width-size
vectors, every ``c_attn``/``c_fc``/``c_proj`` matrix hidden, the norms' gains and biases vectors.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, block_size: int):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        # A multiplier on the scores beside 1/sqrt(head size): 1 is the usual attention; µP sets it
        # (model.attn_mult_attr=attn_mult) so that the scores scale as 1/head size.
        self.attn_mult = 1.0
        self.register_buffer("mask", torch.ones(block_size, block_size).tril().bool(), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (self.attn_mult / math.sqrt(k.shape[-1]))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, n_embd: int):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    """Pre-norm: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, n_embd: int, n_head: int, block_size: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size: int, n_embd: int = 32, n_layer: int = 2, n_head: int = 2, block_size: int = 64):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head, block_size) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying (Press & Wolf 2017), as nanoGPT does

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x)), None  # (logits, loss) as nanoGPT returns them without targets
