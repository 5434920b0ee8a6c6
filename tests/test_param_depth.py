"""µP made complete (issue 15): the optimiser groups of sp, mup, depth_mup and completep against a
table written out by hand, weight-decay modes, branch multipliers in the forward pass, the depth
variants equal to µP at the base depth and to SP at the base width and depth, and refusals."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from initnorm.cli.train import train
from initnorm.config import to_plain, validate
from initnorm.errors import ConfigError
from initnorm.models.build import build_model
from initnorm.training.optim import make_optimizer
from initnorm.training.optimizers import takes
from tests.conftest import TINY, compose

VOCAB = 28
LR, WD, EPS = 0.01, 0.1, 1e-8

PARAMS = {
    "emb": "tok_emb.weight",
    "q": "blocks.0.attn.q.weight",
    "o": "blocks.0.attn.o.weight",
    "bias": "blocks.0.mlp.fc.bias",
    "gain": "blocks.0.ln1.weight",
    "ln_f": "ln_f.weight",
    "head": "head.weight",
}
ONES = {"emb": (1, 1, 1), "q": (1, 1, 1), "o": (1, 1, 1), "bias": (1, 0, 1), "gain": (1, 0, 1), "ln_f": (1, 0, 1), "head": (1, 1, 1)}
# (lr multiplier, weight-decay multiplier under `scaled` (vectors: no decay), ε multiplier), by hand
# from docs/parameterisations.md: m = width / 16, l = depth / 2; depth 8 is l = 4, width 64 is m = 4.
MUP_W64 = {"emb": (1, 1, 0.25), "q": (0.25, 4, 0.25), "o": (0.25, 4, 0.25), "bias": (1, 0, 0.25), "gain": (1, 0, 0.25),
           "ln_f": (1, 0, 0.25), "head": (1, 1, 0.25)}
EXPECTED = {
    ("sp", 16, 2): ONES,
    ("sp", 64, 8): ONES,
    ("mup", 16, 2): ONES,
    ("mup", 16, 8): ONES,  # µP makes no depth claim
    ("mup", 64, 2): MUP_W64,
    ("mup", 64, 8): MUP_W64,
    ("depth_mup", 16, 2): ONES,
    ("depth_mup", 64, 2): MUP_W64,
    ("depth_mup", 16, 8): {"emb": (1, 1, 1), "q": (0.5, 1, 0.5), "o": (0.5, 1, 0.5), "bias": (0.5, 0, 0.5), "gain": (0.5, 0, 0.5),
                           "ln_f": (1, 0, 1), "head": (1, 1, 1)},
    ("depth_mup", 64, 8): {"emb": (1, 1, 0.25), "q": (0.125, 4, 0.125), "o": (0.125, 4, 0.125), "bias": (0.5, 0, 0.125),
                           "gain": (0.5, 0, 0.125), "ln_f": (1, 0, 0.25), "head": (1, 1, 0.25)},
    ("completep", 16, 2): ONES,
    ("completep", 64, 2): MUP_W64,
    ("completep", 16, 8): {"emb": (1, 1, 1), "q": (1, 1, 0.25), "o": (1, 1, 0.25), "bias": (1, 0, 0.25), "gain": (1, 0, 0.25),
                           "ln_f": (1, 0, 1), "head": (1, 1, 1)},
    ("completep", 64, 8): {"emb": (1, 1, 0.25), "q": (0.25, 4, 0.0625), "o": (0.25, 4, 0.0625), "bias": (1, 0, 0.0625),
                           "gain": (1, 0, 0.0625), "ln_f": (1, 0, 0.25), "head": (1, 1, 0.25)},
}
# the branch multiplier on attn_out / mlp_out, and the logits' multiplier
FORWARD = {"sp": lambda m, l: (1, 1), "mup": lambda m, l: (1, 1 / m), "depth_mup": lambda m, l: (l**-0.5, 1 / m),
           "completep": lambda m, l: (1 / l, 1 / m)}


def built(*overrides):
    c = to_plain(compose(*overrides))
    validate(c)
    torch.manual_seed(0)
    return build_model(c["model"], c["init"], c["param"], VOCAB), c


def groups_by_name(b, **optim):
    cfg = {"name": "adamw", "betas": [0.9, 0.999], "eps": EPS, "weight_decay": WD, "weight_decay_mode": "scaled", **optim}
    # the optimiser's own keys only (an optim.* key it does not take is refused: training/optimizers.py)
    cfg = {k: v for k, v in cfg.items() if v is not None and (k in ("name", "weight_decay_mode") or takes(cfg["name"], k))}
    opt = make_optimizer(b.model, b.roles, b.table, LR, cfg)
    return {n: g for g in opt.param_groups for n in g["names"]}


@pytest.mark.parametrize("param, width, depth", sorted(EXPECTED))
def test_groups_match_the_table_by_hand(param, width, depth):
    b, _ = built(f"param={param}", f"width={width}", f"depth={depth}")
    groups = groups_by_name(b)
    for key, name in PARAMS.items():
        lr, wd, eps = EXPECTED[(param, width, depth)][key]
        g = groups[name]
        assert g["lr"] == pytest.approx(LR * lr), (key, "lr")
        assert g["weight_decay"] == pytest.approx(WD * wd), (key, "wd")
        assert g["eps"] == pytest.approx(EPS * eps), (key, "eps")
    branch, logits = FORWARD[param](width / 16, depth / 2)
    assert b.model.blocks[0].attn.o.forward_mult == pytest.approx(branch)
    assert b.model.blocks[-1].mlp.proj.forward_mult == pytest.approx(branch)
    assert b.model.blocks[0].attn.q.forward_mult == 1.0 and b.model.head.forward_mult == pytest.approx(logits)


def test_weight_decay_modes():
    b, _ = built("param=mup", "width=64")
    coupled = groups_by_name(b, weight_decay_mode="coupled")
    scaled = groups_by_name(b, weight_decay_mode="scaled")
    independent = groups_by_name(b, weight_decay_mode="independent")
    q = PARAMS["q"]
    assert coupled[q]["weight_decay"] == pytest.approx(WD)  # decays lr/4 x wd per step: 4x less than at width 16
    assert scaled[q]["lr"] * scaled[q]["weight_decay"] == pytest.approx(LR * WD)  # as at width 16 (MuAdamW)
    for name in ("tok_emb.weight", q, "head.weight"):  # decay per step = wd, whatever the rate
        assert independent[name]["lr"] * independent[name]["weight_decay"] == pytest.approx(WD)
    sp, _ = built("param=sp", "width=64")
    assert {n: g["weight_decay"] for n, g in groups_by_name(sp, weight_decay_mode="scaled").items()} == {
        n: g["weight_decay"] for n, g in groups_by_name(sp, weight_decay_mode="coupled").items()
    }  # param=sp is unaffected


def test_scale_eps_off_keeps_eps():
    b, _ = built("param=completep", "width=64", "depth=8", "param.scale_eps=false")
    assert {g["eps"] for g in groups_by_name(b).values()} == {EPS}


def test_branch_multiplier_scales_the_branch_in_the_forward_pass():
    """Same parameters under mup and completep at depth 8 (l = 4): block 1's attention adds a quarter
    as much to the stream, its MLP (on the same input) a quarter as much, bias included."""
    mup, _ = built("param=mup", "width=32", "depth=8")
    cp, _ = built("param=completep", "width=32", "depth=8")
    cp.model.load_state_dict(mup.model.state_dict())
    with torch.no_grad():
        for p in mup.model.parameters():  # non-zero biases, so the multiplier is seen to cover them
            p.add_(0.01)
        cp.model.load_state_dict(mup.model.state_dict())
        x = mup.model.embed(torch.randint(0, VOCAB, (2, 16)))
        a, c = mup.model.blocks[0], cp.model.blocks[0]
        assert torch.allclose(c.attn(c.ln1(x)), a.attn(a.ln1(x)) / 4, atol=1e-7)
        assert torch.allclose(c.mlp(c.ln2(x)), a.mlp(a.ln2(x)) / 4, atol=1e-7)
        assert torch.allclose(c(x) - x, (a.attn(a.ln1(x)) + a.mlp(a.ln2(x + a.attn(a.ln1(x)) / 4))) / 4, atol=1e-6)


def test_depth_variants_are_mup_at_the_base_depth_and_sp_at_the_base_shape(tmp_path):
    runs = {p: train(compose(*TINY, f"param={p}", "width=32"), tmp_path / p)["val_history"] for p in ("mup", "depth_mup", "completep")}
    assert runs["mup"] == runs["depth_mup"] == runs["completep"]  # depth 2 = base depth, width 32 = 2 x base
    base = {p: train(compose(*TINY, f"param={p}"), tmp_path / f"base_{p}")["val_history"] for p in ("sp", "completep")}
    assert base["sp"] == base["completep"]  # width 16, depth 2: every multiplier is 1


def test_refusals_name_what_to_use():
    with pytest.raises(ConfigError, match="residual branches.*param=mup"):
        built("experiment=mup_mlp_sweep", "param=completep")  # no base depth: refused by the table
    with pytest.raises(ConfigError, match="residual branches.*param=mup"):
        built("experiment=mup_mlp_sweep", "param=completep", "+model.mup.base_depth=3")  # refused by the build
    with pytest.raises(ConfigError, match="optim.weight_decay_mode=scaled"):
        built("optim=sgd", "optim.weight_decay=0.1", "optim.weight_decay_mode=independent")
    with pytest.raises(ConfigError, match="optim.weight_decay_mode"):
        built("optim.weight_decay_mode=decoupled")


def test_mlp_families_honour_the_readout_multiplier():
    b, _ = built("experiment=mup_mlp_sweep", "param=mup", "param.readout=logits", "width=256")
    assert b.model.out.forward_mult == 0.25 and b.model.out.scale_input
    x = torch.randint(0, VOCAB, (4, 8))
    with torch.no_grad():
        scaled = b.model(x)
        b.model.out.forward_mult = 1.0
        assert torch.allclose(scaled, b.model(x) * 0.25, atol=1e-6)  # no readout bias in wide_mlp


def test_sgd_reads_the_musgd_table():
    b, _ = built("param=mup", "optim=sgd", "width=64", "depth=2")
    groups = groups_by_name(b, name="sgd", momentum=0.9, eps=None)
    assert groups["tok_emb.weight"]["lr"] == pytest.approx(4 * LR) and groups["blocks.0.attn.q.weight"]["lr"] == pytest.approx(LR)
    assert groups["tok_emb.weight"]["weight_decay"] == pytest.approx(WD / 4)


@pytest.mark.parametrize("param", ["depth_mup", "completep"])
def test_gpt2_init_counts_depth_once_under_a_depth_table(param):
    """GPT-2's 1/sqrt(2L) on branch outputs reads the base depth under a table that scales depth, so the
    deep model's branch weights start as the base model's and only the table's (L/L0)^-α depends on depth;
    under SP the scheme keeps reading the model's own depth."""
    def branch_std(*overrides):
        torch.manual_seed(0)
        c = to_plain(compose("width=64", *overrides))
        w = dict(build_model(c["model"], c["init"], c["param"], VOCAB).model.named_parameters())[PARAMS["o"]]
        return w.std().item()

    base, deep = branch_std(f"param={param}", "init=gpt2", "depth=2"), branch_std(f"param={param}", "init=gpt2", "depth=32")
    assert deep == pytest.approx(base, rel=0.05)  # counted twice it would be 4x smaller (sqrt(32 / 2))
    assert base == pytest.approx(0.02 / 2 * 0.5, rel=0.05)  # 0.02 / sqrt(2 x base depth 2), x m^-1/2 at m = 64 / 16
    assert branch_std("param=sp", "init=gpt2", "depth=32") == pytest.approx(0.02 / 8, rel=0.05)  # 0.02 / sqrt(2 x 32)


class OneRateForAll(L.Callback):
    """What mup's README warns of: a scheduler of one's own that sets one rate for every parameter group."""

    def on_train_start(self, trainer, pl_module):
        for g in trainer.optimizers[0].param_groups:
            g["lr"] = 0.01


def test_a_callback_that_sets_one_rate_for_every_group_is_one_line(tmp_path):
    flat = "+callbacks.flat._target_=tests.test_param_depth.OneRateForAll"
    cfg = compose(*TINY, "param=mup", "width=64", "lr=0.01", "warmup=0", flat)
    with pytest.raises(ConfigError) as err:
        train(cfg, tmp_path)
    says = str(err.value)
    assert "\n" not in says and "at step 0 the optimiser steps" in says and "not 0.0025" in says and "param=mup" in says
