"""The Decoder: the deck's tiny character transformer (000_318c46f7239ee947, §7).

Reads top to bottom: positional encoding, attention, MLP, block, model. Where the deck is
silent the choices below keep its parameter counts (5,376 with LayerNorm and 5,296 with RMSNorm
at width 16 and 2 blocks; 70,656 at width 64) and its §7a init-time numbers:

- sinusoidal positions, no parameters: RMS exactly sqrt(1/2) at every position, which with an
  embedding at std 0.02 is the deck's "RMS 0.70 at every depth";
- token embedding and a bias-free readout, not tied; q, k, v and output projections with bias;
  an MLP of hidden width ``mlp_ratio`` x d (2) with bias and GELU; two norms per block and a
  final one (5 norms at depth 2).

The forward pass is a pure function of parameters and input (no state changed, plain matmuls
for attention), so a trainer can vmap an ensemble of members over it (torch.func).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from initnorm.nn.layers import Embedding, Linear, is_one
from initnorm.nn.narrow import matmul
from initnorm.nn.norms import NORMS
from initnorm.nn.roles import Role


def sinusoidal(length: int, width: int) -> torch.Tensor:
    """Vaswani et al. 2017 positions: each (sin, cos) pair has unit energy, so the RMS is sqrt(1/2)."""
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10000.0) / width))
    table = torch.zeros(length, width)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table


class Attention(nn.Module):
    """Causal multi-head self-attention with plain matmuls; scores scaled by ``forward_mult / sqrt(d_k)``.

    ``forward_mult`` is the parameterisation's multiplier for the attention scores
    (``Role.ATTN_SCORES``; µP: sqrt(d_k at the base width / d_k), so the scores scale as 1/d_k),
    set once by ``models.build``. ``output_power`` (0: off) multiplies the heads' output by
    (T / log T)^(output_power / 2), u-µP's unit-scaled causal attention (``nn.umup``)."""

    FORWARD_ROLE = Role.ATTN_SCORES

    def __init__(self, width: int, n_heads: int, max_context: int):
        super().__init__()
        self.n_heads, self.d_k = n_heads, width // n_heads
        self.fan_in = self.d_k  # the scores' dot products sum d_k terms
        self.forward_mult = 1.0
        self.output_power = 0.0
        self.q, self.k, self.v, self.o = (Linear(width, width) for _ in range(4))
        # The causal mask as an additive bias (0 on and below the diagonal, -inf above): x + 0 is x and
        # x + -inf is -inf, so the scores and, after the softmax, the gradients are bit for bit those of
        # masked_fill, without its copy and masked write forward and backward (~12% of the attention's
        # time for a stacked group of 6 on a 2-core CPU, docs/performance.md).
        self.register_buffer("causal_bias", torch.full((max_context, max_context), float("-inf")).triu(1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = (proj(x).view(B, T, self.n_heads, self.d_k).transpose(1, 2) for proj in (self.q, self.k, self.v))
        # matmul is torch's `@` eager; compiled, products with few columns take their faster form (nn/narrow.py)
        scores = matmul(q, k.transpose(-2, -1)) * (self.forward_mult / math.sqrt(self.d_k))
        weights = (scores + self.causal_bias[:T, :T]).softmax(dim=-1)
        heads = matmul(weights, v)
        if not (isinstance(self.output_power, float) and self.output_power == 0.0):
            heads = heads * (T / math.log(max(T, 2))) ** (self.output_power / 2)
        return self.o(heads.transpose(1, 2).reshape(B, T, D))

    def parameter_roles(self) -> dict[str, Role]:
        roles = {f"{n}.weight": Role.ATTN_QKV for n in "qkv"} | {"o.weight": Role.ATTN_OUT}
        return roles | {f"{n}.bias": Role.BIAS for n in "qkvo"}


class MLP(nn.Module):
    """Linear -> GELU -> Linear, hidden width ``ratio`` x d; the GELU's output x ``act_mult`` (u-µP's unit-scaled GELU)."""

    def __init__(self, width: int, ratio: int):
        super().__init__()
        self.fc = Linear(width, ratio * width)
        self.proj = Linear(ratio * width, width)
        self.act_mult = 1.0

    def forward(self, x):
        h = F.gelu(self.fc(x))
        return self.proj(h if is_one(self.act_mult) else h * self.act_mult)

    def parameter_roles(self) -> dict[str, Role]:
        return {"fc.weight": Role.MLP_IN, "proj.weight": Role.MLP_OUT, "fc.bias": Role.BIAS, "proj.bias": Role.BIAS}


class Block(nn.Module):
    """One transformer block; ``placement`` says where its two norms sit.

    pre-LN (GPT-2, LLaMA): the stream is only ever added to; each sublayer reads a normalised copy.

        x ──┬───────────────(+)──┬───────────────(+)──> x'
            └── LN ── Attn ───┘   └── LN ── MLP ────┘

    post-LN (Vaswani et al. 2017): every sum is normalised, so every gradient crosses the norms above.

        x ──┬──────────(+)── LN ──┬─────────(+)── LN ──> x'
            └── Attn ───┘          └── MLP ───┘

    ``attn_branch``, ``attn_skip``, ``mlp_branch``, ``mlp_skip`` weight the two paths of each sum
    (u-µP's ``residual_add``; 1 elsewhere), so a sublayer's own output keeps its scale.
    """

    def __init__(self, width, n_heads, mlp_ratio, max_context, placement, norm_type, eps):
        super().__init__()
        self.placement = placement
        self.ln1 = NORMS.get(norm_type)(width, eps)
        self.attn = Attention(width, n_heads, max_context)
        self.ln2 = NORMS.get(norm_type)(width, eps)
        self.mlp = MLP(width, mlp_ratio)
        self.attn_branch = self.attn_skip = self.mlp_branch = self.mlp_skip = 1.0

    def forward(self, x):
        if self.placement == "pre":
            x = _times(x, self.attn_skip) + _times(self.attn(self.ln1(x)), self.attn_branch)
            return _times(x, self.mlp_skip) + _times(self.mlp(self.ln2(x)), self.mlp_branch)
        x = self.ln1(_times(x, self.attn_skip) + _times(self.attn(x), self.attn_branch))
        return self.ln2(_times(x, self.mlp_skip) + _times(self.mlp(x), self.mlp_branch))

    # Each residual sum in order: its (branch, skip) weights' attributes.
    RESIDUAL_SUMS = (("attn_branch", "attn_skip"), ("mlp_branch", "mlp_skip"))

    def parameter_roles(self) -> dict[str, Role]:
        parts = {"ln1": self.ln1, "attn": self.attn, "ln2": self.ln2, "mlp": self.mlp}
        return {f"{p}.{n}": r for p, m in parts.items() for n, r in m.parameter_roles().items()}


def _times(x: torch.Tensor, c) -> torch.Tensor:
    return x if is_one(c) else x * c


PLACEMENTS = ("pre", "post")


class Decoder(nn.Module):
    """Token embedding + sinusoidal positions -> ``depth`` blocks -> final norm -> readout (logits)."""

    def __init__(
        self,
        vocab_size: int,
        width: int = 16,
        depth: int = 2,
        n_heads: int = 2,
        mlp_ratio: int = 2,
        max_context: int = 64,
        placement: str = "pre",
        norm_type: str = "layernorm",
        norm_eps: float = 1e-5,
    ):
        super().__init__()
        self.depth, self.width = depth, width
        self.tok_emb = Embedding(vocab_size, width)
        self.register_buffer("pos", sinusoidal(max_context, width), persistent=False)
        self.blocks = nn.ModuleList(Block(width, n_heads, mlp_ratio, max_context, placement, norm_type, norm_eps) for _ in range(depth))
        self.ln_f = NORMS.get(norm_type)(width, norm_eps)
        self.head = Linear(width, vocab_size, bias=False)

    # The residual blocks: a depth parameterisation's block rules hold for every parameter below it.
    BLOCKS = "blocks"

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        return self.tok_emb(idx) + self.pos[: idx.shape[-1]]

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    def parameter_roles(self) -> dict[str, Role]:
        roles = {"tok_emb.weight": Role.EMBEDDING, "head.weight": Role.READOUT}
        for i, block in enumerate(self.blocks):
            roles |= {f"blocks.{i}.{n}": r for n, r in block.parameter_roles().items()}
        return roles | {f"ln_f.{n}": r for n, r in self.ln_f.parameter_roles().items()}

    def probe_points(self) -> dict[str, tuple[nn.Module, str]]:
        """What the instruments watch (``initnorm.instruments.stats``): "layer/role" -> (module, "in" | "out").
        ``block_01`` is ``blocks[0]``: blocks are counted from 1, as the deck counts them."""
        points: dict[str, tuple[nn.Module, str]] = {}
        for i, block in enumerate(self.blocks, 1):
            b = f"block_{i:02d}"
            # query and key: where the attention scale acts (µP's 1/d_k; a fixed Adam ε shows in them first)
            points |= {f"{b}/stream_in": (block, "in"), f"{b}/query": (block.attn.q, "out"), f"{b}/key": (block.attn.k, "out"),
                       f"{b}/attn_out": (block.attn, "out"), f"{b}/mlp_out": (block.mlp, "out"), f"{b}/stream_out": (block, "out")}
        return points | {"logits/output": (self, "out")}
