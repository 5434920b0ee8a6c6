"""param=umup against graphcore-research/unit-scaling on the same Decoder (skipped where ``unit_scaling``
is not installed: ``pip install -e ".[umup]"``, or ``pip install --no-deps unit-scaling`` and its three
small dependencies beside the CPU torch).

The reference is the Decoder written with unit-scaling's own modules (``Embedding``, ``LayerNorm``
with its affine parameters, ``Linear`` with biases, ``GELU``, ``LinearReadout``, the functional
``scaled_dot_product_attention`` and ``residual_split``/``residual_add`` with the package's residual
rule, its blocks in a ``DepthModuleList``) and its optimiser ``unit_scaling.optim.AdamW``, our
initial parameters loaded into it. What is compared, and the statement each design allows:

- activations at initialisation: every block's output and the logits, equal to float32 rounding;
- per-parameter learning rates and (independent) weight decays: equal;
- gradients: unit-scaling also scales some gradients in the backward pass only (a weight's by
  batch^-1/2, the readout's input by fan_out^-1/2, the norms', the embedding's, the loss's), which
  initnorm does not (docs/parameterisations.md): each parameter's gradient equals ours times one
  number per tensor, which Adam divides out (it sees it only through ε).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

uu = pytest.importorskip("unit_scaling")
U = pytest.importorskip("unit_scaling.functional")
from unit_scaling.core.functional import transformer_residual_scaling_rule

from initnorm.config import to_plain
from initnorm.models.build import build_model
from initnorm.models.decoder import sinusoidal
from initnorm.training.optim import make_optimizer
from tests.conftest import compose_cfg

VOCAB, T = 28, 16
SHAPES = [(16, 2), (64, 3)]  # (width, depth)
KNOBS = ("param.residual_mult=0.7", "param.residual_attn_ratio=1.5", "param.attn_mult=2.0")


class RefBlock(nn.Module):
    def __init__(self, d, heads, taus, attn_mult):
        super().__init__()
        self.heads, self.taus, self.attn_mult = heads, taus, attn_mult
        self.ln1, self.ln2 = (uu.LayerNorm(d, elementwise_affine=True) for _ in range(2))
        self.attn = nn.Module()
        for n in "qkvo":
            setattr(self.attn, n, uu.Linear(d, d, bias=True))
        self.mlp = nn.Module()
        self.mlp.fc, self.mlp.proj = uu.Linear(d, 2 * d, bias=True), uu.Linear(2 * d, d, bias=True)
        self.gelu = uu.GELU()

    def attention(self, x):
        B, T_, D = x.shape
        q, k, v = (getattr(self.attn, n)(x).view(B, T_, self.heads, -1).transpose(1, 2) for n in "qkv")
        out = U.scaled_dot_product_attention(q, k, v, is_causal=True, mult=self.attn_mult)
        return self.attn.o(out.transpose(1, 2).reshape(B, T_, D))

    def forward(self, x):
        r, skip = U.residual_split(x, tau=self.taus[0])
        x = U.residual_add(self.attention(self.ln1(r)), skip, tau=self.taus[0])
        r, skip = U.residual_split(x, tau=self.taus[1])
        return U.residual_add(self.mlp.proj(self.gelu(self.mlp.fc(self.ln2(r)))), skip, tau=self.taus[1])


class Reference(nn.Module):
    def __init__(self, d, depth, residual_mult=1.0, attn_ratio=1.0, attn_mult=1.0):
        super().__init__()
        rule = transformer_residual_scaling_rule(residual_mult, attn_ratio)
        self.tok_emb = uu.Embedding(VOCAB, d)
        self.blocks = uu.DepthModuleList(RefBlock(d, 2, (rule(2 * i, 2 * depth), rule(2 * i + 1, 2 * depth)), attn_mult)
                                         for i in range(depth))
        self.ln_f = uu.LayerNorm(d, elementwise_affine=True)
        self.head = uu.LinearReadout(d, VOCAB)
        self.register_buffer("pos", sinusoidal(64, d), persistent=False)

    def forward(self, idx):
        x = self.tok_emb(idx) + self.pos[: idx.shape[-1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def pair(width, depth, *knobs):
    c = to_plain(compose_cfg(f"width={width}", f"depth={depth}", "param=umup", "optim.weight_decay=0.1",
                             "optim.weight_decay_mode=independent", *knobs))
    torch.manual_seed(0)
    built = build_model(c["model"], c["init"], c["param"], VOCAB)
    p = c["param"]
    ref = Reference(width, depth, p["residual_mult"], p["residual_attn_ratio"], p["attn_mult"])
    ref.load_state_dict(built.model.state_dict())
    return built, ref, c


def outputs(model, idx):
    seen = []
    hooks = [b.register_forward_hook(lambda m, i, o: seen.append(o.detach())) for b in model.blocks]
    seen.append(model(idx))
    for h in hooks:
        h.remove()
    return seen


@pytest.mark.parametrize("width,depth", SHAPES)
@pytest.mark.parametrize("knobs", [(), KNOBS], ids=["defaults", "multipliers"])
def test_activations_at_init_equal_unit_scalings(width, depth, knobs):
    built, ref, _ = pair(width, depth, *knobs)
    assert all(w.std().item() == pytest.approx(1.0, abs=0.1) for n, w in built.model.named_parameters() if w.dim() == 2)
    idx = torch.randint(0, VOCAB, (4, T), generator=torch.Generator().manual_seed(1))
    for a, b in zip(outputs(built.model, idx), outputs(ref, idx)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    # unit scale: every block's output within a factor 2 of RMS 1; the logits at width^-1/2 (readout x fan_in^-1)
    *stream, logits = (o.pow(2).mean().sqrt().item() for o in outputs(built.model, idx))
    assert all(0.5 < s < 2 for s in stream) and 0.5 < logits * width**0.5 < 2


@pytest.mark.parametrize("width,depth", SHAPES)
def test_learning_rates_and_weight_decay_equal_unit_scalings(width, depth):
    built, ref, c = pair(width, depth)
    ours = make_optimizer(built.model, built.roles, built.table, 1.0, c["optim"])
    named = dict(ref.named_parameters())
    groups = [{"params": [p for p in named.values() if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in named.values() if p.dim() < 2], "weight_decay": 0.0}]
    theirs = uu.optim.AdamW(groups, lr=1.0)
    rate = {id(p): (g["lr"], g["weight_decay"]) for g in theirs.param_groups for p in g["params"]}
    by_name = {n: (g["lr"], g["weight_decay"]) for g in ours.param_groups for n in g["names"]}
    assert set(by_name) == set(named)
    for n, p in named.items():
        assert by_name[n] == pytest.approx(rate[id(p)], rel=1e-6), n
    assert by_name["tok_emb.weight"][0] == pytest.approx(width**-0.5)  # embedding x d^-1/2
    assert by_name["head.weight"][0] == 1.0 and by_name["ln_f.weight"][0] == 1.0
    assert by_name["blocks.0.mlp.proj.weight"][0] == pytest.approx((2 * width) ** -0.5 * depth**-0.5)


def test_gradients_differ_by_one_number_per_parameter():
    built, ref, _ = pair(16, 2, *KNOBS)
    idx = torch.randint(0, VOCAB, (4, T + 1), generator=torch.Generator().manual_seed(2))
    F.cross_entropy(built.model(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten()).backward()
    U.cross_entropy(ref(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten()).backward()
    theirs = dict(ref.named_parameters())
    for n, p in built.model.named_parameters():
        if n.endswith("attn.k.bias"):  # shifts a query's scores by one number, which the softmax ignores: rounding noise
            continue
        g, h = p.grad.flatten(), theirs[n].grad.flatten()
        factor = (g @ h) / (g @ g)
        torch.testing.assert_close(g * factor, h, rtol=1e-4, atol=1e-6 * h.abs().max().item(), msg=n)
