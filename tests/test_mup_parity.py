"""param=mup against microsoft/mup 1.0.0 on the same Decoder (skipped where `mup` is not installed;
install it without its dependencies: `pip install --no-deps mup==1.0.0`, a plain install pulls
torchvision, which replaces the CPU build of torch).

How the reference is made, and the special cases it needs:

- the readout swap: mup applies the logits' 1/m in ``MuReadout``, so the reference Decoder's
  ``head`` is a ``MuReadout`` (same shape, no bias); ours is a plain readout whose forward
  multiplier (1/m, on its input, as MuReadout) the build sets from the table;
- the attention scale: mup has no attention layer of its own (its examples write 1/d by hand),
  so the reference's attention multiplier is set by hand to sqrt(16 / width), which makes the
  scores 1/d_k at every width and 1/sqrt(d_k) at the base width 16;
- re-initialising after ``set_base_shapes``: ``set_base_shapes(rescale_params=True)`` assumes a
  torch-default (fan-in) init and rescales MuReadout and biases; we call it with
  ``rescale_params=False`` and load our initial parameters into the reference, so both start
  equal; the init rule is compared with what ``mup.init.normal_`` sets from the reference's
  ``infshape`` (std / sqrt(width_mult) for matrix-like tensors, std for vector-like ones) and,
  under ``init=he``, the drawn std with ``mup.init.kaiming_normal_``'s fan adjustment;
- weight decay: MuAdamW multiplies the hidden weight decay by m, which is our
  ``optim.weight_decay_mode=scaled``; MuAdam keeps ε, which is our ``param.scale_eps=false``;
  matrices decay and vectors do not on both sides (two groups handed to MuAdamW);
- the default ``param.scale_eps=true`` (ε x 1/m): Adam's step is the same with the gradient and ε
  scaled together, so ours equals MuAdamW's on the loss times m (a power of two: exact gradients).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

mup = pytest.importorskip("mup")

from initnorm.config import to_plain
from initnorm.models.build import build_model
from initnorm.nn.roles import HIDDEN_ROLES, Role
from initnorm.training.optim import make_optimizer
from tests.conftest import compose

VOCAB = 28
BASE = 16
WIDTHS = (16, 64, 256)


def ours(width: int, *overrides: str):
    c = to_plain(compose(f"width={width}", "param=mup", "param.scale_eps=false", *overrides))
    torch.manual_seed(0)
    return build_model(c["model"], c["init"], c["param"], VOCAB), c


def reference(width: int, built) -> torch.nn.Module:
    """The same Decoder under param=sp, with MuReadout, 1/d attention by hand and mup's base shapes."""

    def plain(w):
        c = to_plain(compose(f"width={w}", "param=sp"))
        model = build_model(c["model"], c["init"], c["param"], VOCAB).model
        model.head = mup.MuReadout(w, VOCAB, bias=False)
        for block in model.blocks:
            block.attn.forward_mult = math.sqrt(BASE / w)
        return model

    return with_base_shapes(plain, width, BASE, built.model.state_dict())


def with_base_shapes(plain, width: int, base: int, state: dict) -> torch.nn.Module:
    """``plain(width)`` with mup's base shapes from ``plain(base)`` and ``plain(2 base)``, holding ``state``
    (our initial parameters: both sides start equal)."""
    model = plain(width)
    mup.set_base_shapes(model, plain(base), delta=plain(2 * base), rescale_params=False)
    model.load_state_dict(state)
    return model


def mup_std(p: torch.Tensor, std: float = 0.02) -> float:
    """The std mup.init.normal_ draws: constant for vector-like, / sqrt(width_mult) for matrix-like."""
    return std / math.sqrt(p.infshape.width_mult()) if p.infshape.ninf() == 2 else std


def per_param(opt, model) -> dict[str, dict]:
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: {k: g.get(k) for k in ("lr", "weight_decay", "eps")} for g in opt.param_groups for p in g["params"]}


def mup_groups(model, wd):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": wd}, {"params": rest, "weight_decay": 0.0}]


@pytest.mark.parametrize("width", WIDTHS)
def test_init_forward_and_attention_match_mup(width):
    built, _ = ours(width)
    ref = reference(width, built)
    torch.manual_seed(1)
    for (name, p), (_, q) in zip(built.model.named_parameters(), ref.named_parameters()):
        if built.roles[name] in (Role.BIAS, Role.NORM_BIAS, Role.NORM_GAIN):
            continue
        # the init rule: mup's std for this parameter against what the build's multiplier makes of 0.02
        want = mup_std(q)
        got = 0.02 * built.table.rule(built.roles[name], name.startswith("blocks.")).init
        assert got == pytest.approx(want, rel=1e-12), name
    m = width / BASE
    assert built.model.head.forward_mult == 1 / m and ref.head.width_mult() == m  # logits x 1/m on both sides
    assert built.model.blocks[0].attn.forward_mult == pytest.approx(math.sqrt(BASE / width))
    x = torch.randint(0, VOCAB, (4, 32))
    assert torch.equal(built.model(x), ref(x))  # same parameters, same function


@pytest.mark.parametrize("width", WIDTHS)
def test_fan_in_init_is_not_shrunk_twice(width):
    """init=he: hidden matrices keep He's gain/sqrt(fan_in) (mup.init.kaiming_normal_ on a
    matrix-like tensor), the readout keeps its std at the base width (kaiming_normal_ on the
    vector-like MuReadout weight: 1/sqrt(16) = 0.25). The embedding is a special case: our
    lookup tables read a one-hot (fan-in 1, ``init.emb_std``), mup's kaiming treats the
    embedding's width as its fan-in; both are width-independent, so it is left out."""
    built, _ = ours(width, "init=he")
    ref = reference(width, built)
    for name, p in built.model.named_parameters():
        role = built.roles[name]
        if role not in HIDDEN_ROLES and role != Role.READOUT:
            continue
        q = dict(ref.named_parameters())[name]
        fan_in = q.shape[1]
        gain = 1.0 if role == Role.READOUT else math.sqrt(2.0)
        # mup.init._inf_fan_adjust_kaiming: matrix-like keeps gain/sqrt(fan_in); vector-like x sqrt(width_mult)
        want = gain / math.sqrt(fan_in) * (1.0 if q.infshape.ninf() == 2 else math.sqrt(q.infshape.width_mult()))
        assert p.detach().std().item() == pytest.approx(want, rel=0.1), name
    if width == 256:
        q_std = dict(built.model.named_parameters())["blocks.0.attn.q.weight"].std().item()
        assert q_std == pytest.approx(math.sqrt(2.0 / 256), rel=0.05)  # 0.088, not 0.022
        assert built.model.head.weight.std().item() == pytest.approx(0.25, rel=0.1)


@pytest.mark.parametrize("width", WIDTHS)
def test_adamw_groups_and_five_steps_match_muadamw(width):
    built, _c = ours(width)
    ref = reference(width, built)
    cfg = {"name": "adamw", "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.1, "weight_decay_mode": "scaled"}
    opt = make_optimizer(built.model, built.roles, built.table, 0.01, cfg)
    ref_opt = mup.MuAdamW(mup_groups(ref, 0.1), lr=0.01, betas=(0.9, 0.999), eps=1e-8)
    a, b = per_param(opt, built.model), per_param(ref_opt, ref)
    for name in a:
        assert a[name]["lr"] == pytest.approx(b[name]["lr"], rel=1e-12), name
        assert a[name]["weight_decay"] == pytest.approx(b[name]["weight_decay"], rel=1e-12), name
        assert a[name]["eps"] == b[name]["eps"] == 1e-8
    m = width / BASE
    assert a["blocks.0.attn.q.weight"]["weight_decay"] == pytest.approx(0.1 * m)  # lr x wd = 0.001 at every width
    g = torch.Generator().manual_seed(3)
    for _ in range(5):
        x = torch.randint(0, VOCAB, (8, 32), generator=g)
        y = torch.randint(0, VOCAB, (8, 32), generator=g)
        for model, o in ((built.model, opt), (ref, ref_opt)):
            o.zero_grad()
            F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
            o.step()
    for (name, p), (_, q) in zip(built.model.named_parameters(), ref.named_parameters()):
        assert torch.equal(p, q), name


@pytest.mark.parametrize("width", WIDTHS)
def test_sgd_groups_match_musgd(width):
    """optim=sgd param=mup is MuSGD's table: vector-like (embedding, readout, biases, gains) lr x m and
    wd / m, matrices lr x fan-in/fan-out ratio (1 for every Decoder matrix)."""
    built, _ = ours(width, "optim=sgd")
    ref = reference(width, built)
    cfg = {"name": "sgd", "momentum": 0.9, "weight_decay": 0.1, "weight_decay_mode": "scaled"}
    opt = make_optimizer(built.model, built.roles, built.table, 0.01, cfg)
    ref_opt = mup.MuSGD(mup_groups(ref, 0.1), lr=0.01, momentum=0.9)
    a, b = per_param(opt, built.model), per_param(ref_opt, ref)
    for name in a:
        assert a[name]["lr"] == pytest.approx(b[name]["lr"], rel=1e-12), name
        assert a[name]["weight_decay"] == pytest.approx(b[name]["weight_decay"], rel=1e-12), name
    m = width / BASE
    assert a["tok_emb.weight"]["lr"] == pytest.approx(0.01 * m) and a["blocks.0.attn.q.weight"]["lr"] == pytest.approx(0.01)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_default_scaled_eps_is_muadamw_on_gradients_m_times_larger(width):
    """The default ``param.scale_eps=true``: ε x 1/m for every role whose gradient shrinks like 1/m
    (here every parameter: the Decoder's readout has no bias). Adam's step is unchanged when the
    gradient and ε are scaled together (m̂ / (sqrt(v̂) + ε) with g -> m g, ε -> m ε), so our step
    with ε/m must be MuAdamW's, with its fixed ε, on the loss times m: the rule is what keeps ε at
    the same size against the gradient as at the base width. m is a power of two, so scaling the
    loss scales every gradient exactly."""
    c = to_plain(compose(f"width={width}", "param=mup"))
    assert c["param"]["scale_eps"] is True  # the default this test is about
    torch.manual_seed(0)
    built = build_model(c["model"], c["init"], c["param"], VOCAB)
    ref = reference(width, built)
    m = width / BASE
    cfg = {"name": "adamw", "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.1, "weight_decay_mode": "scaled"}
    opt = make_optimizer(built.model, built.roles, built.table, 0.01, cfg)
    ref_opt = mup.MuAdamW(mup_groups(ref, 0.1), lr=0.01, betas=(0.9, 0.999), eps=1e-8)
    a, b = per_param(opt, built.model), per_param(ref_opt, ref)
    for name in a:
        assert a[name]["eps"] == pytest.approx(1e-8 / m, rel=1e-12), name  # the rule, on every parameter
        assert a[name]["lr"] == pytest.approx(b[name]["lr"], rel=1e-12), name
        assert a[name]["weight_decay"] == pytest.approx(b[name]["weight_decay"], rel=1e-12), name
    g = torch.Generator().manual_seed(3)
    for _ in range(5):
        x = torch.randint(0, VOCAB, (8, 32), generator=g)
        y = torch.randint(0, VOCAB, (8, 32), generator=g)
        for model, o, scale in ((built.model, opt, 1.0), (ref, ref_opt, m)):
            o.zero_grad()
            (scale * F.cross_entropy(model(x).flatten(0, 1), y.flatten())).backward()
            o.step()
    for (name, p), (_, q) in zip(built.model.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7, msg=name)
