"""model=custom (issue 24): a user's own nn.Module, its roles inferred from builds at two widths, every
parameterisation applied through the same tables; against microsoft/mup on examples/nanogpt.py."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from initnorm import schema
from initnorm.config import to_plain
from initnorm.errors import ConfigError
from initnorm.models.build import build_model
from initnorm.models.own import logits_of
from initnorm.nn.roles import Role
from initnorm.training.optim import make_optimizer
from tests.conftest import compose

VOCAB = 28
GPT = ["model=custom", "model._target_=examples.nanogpt.GPT", "model.width_arg=n_embd", "model.depth_arg=n_layer",
       "model.context_arg=block_size", "+model.n_head=2", "model.attn_mult_attr=attn_mult", "model.blocks=h"]
ADAMW = {"name": "adamw", "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.1, "weight_decay_mode": "scaled"}


HF_GPT2 = ["model=custom", "model._target_=examples.hf_gpt2.gpt2", "model.width_arg=n_embd", "model.depth_arg=n_layer",
           "model.context_arg=n_positions", "+model.n_head=2", "model.blocks=transformer.h"]


def config(*overrides: str, model: list[str] = GPT) -> dict:
    return schema.check(to_plain(compose(*model, *overrides)))


def built(width: int, *overrides: str, seed: int = 0, model: list[str] = GPT):
    c = config(f"width={width}", *overrides, model=model)
    torch.manual_seed(seed)
    return build_model(c["model"], c["init"], c["param"], VOCAB)


def per_param(opt, model) -> dict[str, tuple[float, float, float]]:
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: (g["lr"], g["weight_decay"], g["eps"]) for g in opt.param_groups for p in g["params"]}


def test_nanogpt_roles_are_inferred_tied_weight_and_readout_multiplier():
    b = built(64, "param=mup")
    table = b.model.role_table
    assert b.roles["wte.weight"] == Role.EMBEDDING and table.params["wte.weight"].tied == ("lm_head.weight",)
    assert b.roles["wpe.weight"] == Role.EMBEDDING
    assert {b.roles[f"h.1.{n}.weight"] for n in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")} == {Role.HIDDEN}
    assert (b.roles["h.0.ln_1.weight"], b.roles["h.0.ln_1.bias"], b.roles["h.0.mlp.c_fc.bias"]) == (Role.NORM_GAIN, Role.NORM_BIAS,
                                                                                                       Role.BIAS)
    assert table.forward_roles == {"lm_head": Role.READOUT}  # the tied weight's readout use keeps its 1/m
    x = torch.randint(0, VOCAB, (2, 8))
    seen = {}
    b.model.lm_head.register_forward_pre_hook(lambda m, a: seen.setdefault("x", a[0]))
    b.model.ln_f.register_forward_hook(lambda m, a, out: seen.setdefault("ln", out))
    assert b.model(x).shape == (2, 8, VOCAB)  # the (logits, None) tuple's first element
    assert torch.equal(seen["x"], seen["ln"] * 0.25)  # the readout reads its input x 1/m, m = 64/16
    assert b.model.h[0].attn.attn_mult == 0.5  # scores 1/d_k: sqrt(16/64) on top of 1/sqrt(d_k)


def test_mup_at_the_base_width_is_sp_exactly():
    """Same seed, width = model.base_width: the same parameters, groups and five AdamW steps, bit for bit."""
    runs = []
    for param in ("sp", "mup"):
        b = built(16, f"param={param}")
        opt = make_optimizer(b.model, b.roles, b.table, 0.01, ADAMW)
        g = torch.Generator().manual_seed(3)
        for _ in range(5):
            x, y = torch.randint(0, VOCAB, (4, 16), generator=g), torch.randint(0, VOCAB, (4, 16), generator=g)
            opt.zero_grad()
            F.cross_entropy(b.model(x).flatten(0, 1), y.flatten()).backward()
            opt.step()
        runs.append(dict(b.model.named_parameters()))
    assert all(torch.equal(runs[0][n], runs[1][n]) for n in runs[0])


def nanogpt(mup, w: int, base: int) -> nn.Module:
    """examples/nanogpt.py as microsoft/mup's user writes it: MuSharedReadout for the tied readout, 1/d attention by hand."""
    from examples.nanogpt import GPT

    model = GPT(VOCAB, n_embd=w, n_layer=2, n_head=2, block_size=32)
    model.lm_head = mup.MuSharedReadout(model.wte.weight, bias=False)
    for block in model.h:
        block.attn.attn_mult = math.sqrt(base / w)
    return model


def hf_gpt2(mup, w: int, base: int) -> nn.Module:
    """Hugging Face's GPT-2 with MuSharedReadout; its 1/sqrt(d) attention has no slot, on both sides."""
    from examples.hf_gpt2 import gpt2

    model = gpt2(VOCAB, w, n_layer=2, n_head=2, n_positions=32)
    model.lm_head = mup.MuSharedReadout(model.transformer.wte.weight, bias=False)
    return model


@pytest.mark.parametrize("name", ["nanogpt", "hf_gpt2"])
def test_parity_with_microsoft_mup(name):
    """The roles, init std, lr and weight decay initnorm gives the user's model equal set_base_shapes + mup.init
    + MuAdamW's on the same model, and five steps match: examples/nanogpt.py, and GPT-2's Conv1D (in, out) weights."""
    mup = pytest.importorskip("mup")
    if name == "hf_gpt2":
        pytest.importorskip("transformers")
    from tests.test_mup_parity import mup_groups, mup_std, with_base_shapes

    width, base = 64, 16
    ours = built(width, "param=mup", "param.scale_eps=false", model=GPT if name == "nanogpt" else HF_GPT2)
    reference = lambda w: {"nanogpt": nanogpt, "hf_gpt2": hf_gpt2}[name](mup, w, base)
    assert (name == "hf_gpt2") == ("transformer.h.0.mlp.c_fc.weight" in ours.model.TRANSPOSED)  # Conv1D: (in, out)

    ref = with_base_shapes(reference, width, base, ours.model.state_dict())
    roles = {name: ours.roles[name] for name, _ in ref.named_parameters()}
    assert {n for n, r in roles.items() if r == Role.HIDDEN} == {n for n, q in ref.named_parameters() if q.infshape.ninf() == 2}
    stds = {n: (0.02 * ours.table.rule(r).init, mup_std(dict(ref.named_parameters())[n])) for n, r in roles.items()
            if r not in (Role.BIAS, Role.NORM_BIAS, Role.NORM_GAIN)}  # ours against mup.init.normal_'s
    assert all(a == pytest.approx(b, rel=1e-12) for a, b in stds.values()), stds
    opt = make_optimizer(ours.model, ours.roles, ours.table, 0.01, ADAMW)
    ref_opt = mup.MuAdamW(mup_groups(ref, 0.1), lr=0.01, eps=1e-8)
    a, r = (per_param(o, model) for o, model in ((opt, ours.model), (ref_opt, ref)))
    assert a.keys() == r.keys() and all(a[n] == pytest.approx(r[n], rel=1e-12) for n in a)
    g = torch.Generator().manual_seed(3)
    for _ in range(5):
        x, y = torch.randint(0, VOCAB, (4, 32), generator=g), torch.randint(0, VOCAB, (4, 32), generator=g)
        for model, o in ((ours.model, opt), (ref, ref_opt)):
            o.zero_grad()
            F.cross_entropy(logits_of(model(x)).flatten(0, 1), y.flatten()).backward()
            o.step()
    assert all(torch.equal(p, q) for p, q in zip(ours.model.parameters(), ref.parameters()))


class Conv1D(nn.Module):
    """Hugging Face's layout: the weight is (in, out), which the class declares (models/infer.py: ``stored_in_out``)."""

    weight_layout = "in_out"

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))

    def forward(self, x):
        return x @ self.weight


class Odd(nn.Module):
    """Ids -> embedding -> a transposed hidden matrix -> a transposed readout; ``bare``: a parameter whose
    first dimension grows, which no shape rule places."""

    def __init__(self, vocab_size, width, bare=False):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, width)
        self.up = Conv1D(width, 3 * width)
        self.out = Conv1D(3 * width, vocab_size)
        if bare:
            self.bare = nn.Parameter(torch.zeros(width, 4))

    def forward(self, idx):
        return self.out(torch.relu(self.up(self.emb(idx))))


def test_transposed_layout_and_refusals():
    odd = ["model=custom", "model._target_=tests.test_own_model.Odd", "model.width_arg=width", "init=he", "param=mup", "width=256"]
    c = schema.check(to_plain(compose(*odd)))
    torch.manual_seed(0)
    b = build_model(c["model"], c["init"], c["param"], VOCAB)
    assert (b.roles["up.weight"], b.roles["out.weight"]) == (Role.HIDDEN, Role.READOUT)
    assert b.model.TRANSPOSED == {"up.weight", "out.weight"}
    # He through the transpose: fan-in is the stored first dimension (256), not the 768 of the second
    assert b.model.up.weight.std().item() == pytest.approx(math.sqrt(2 / 256), rel=0.05)
    with pytest.raises(ConfigError, match=r"parameter bare \(\[16, 4\] at width 16.*model.roles=\{bare:hidden\}"):
        build_model({**c["model"], "bare": True}, c["init"], c["param"], VOCAB)
    with pytest.raises(ConfigError, match="no parameter changes shape between width 16 and 32.*model.width_arg"):
        built(64, "model.width_arg=n_head")
    with pytest.raises(ConfigError, match=r"model.n_haed: .* takes no argument 'n_haed'.*\+model.n_head"):
        config("+model.n_haed=2")


def test_a_custom_run_trains_with_the_instruments_and_writes_its_roles(tmp_path):
    """The per-layer statistics and the diagnostics on the user's model, through hooks on its named modules."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from initnorm.cli.train import train

    cfg = compose(*GPT, "param=mup", "width=32", "steps=10", "trainer.val_check_interval=10", "data.val_batch_size=64",
                      "callbacks.stats.every_n_steps=5", "callbacks.diagnostics.every_n_steps=5", "trainer.enable_progress_bar=false")
    metrics = train(cfg, tmp_path)
    assert math.isfinite(metrics["final_val_loss"])
    text = (tmp_path / "roles.txt").read_text()
    assert "wte.weight (tied: lm_head.weight)" in text and "lm_head (module)" in text and "0.5" in text
    tags = set()
    for events in tmp_path.rglob("events.out.tfevents.*"):
        tags |= set(EventAccumulator(str(events)).Reload().Tags()["scalars"])
    assert {"act_rms/block_02/stream_out", "act_rms/logits/output"} <= tags, sorted(tags)
    assert any(t.startswith("eff_lr/") for t in tags) and any(t.startswith("grad_norm/") for t in tags), sorted(tags)


def test_roles_command_prints_the_table(capsys):
    from initnorm.cli.roles import main

    assert main([*GPT, "param=mup", "width=64"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# GPT under param=mup (width multiplier 4)")
    row = next(line.split() for line in out.splitlines() if line.startswith("h.0.mlp.c_fc.weight"))
    assert row[1:7] == ["64x16", "256x64", "hidden", "0.5", "0.25", "4"]  # base, target, role, init, lr, wd multipliers
    assert main(["init=xavir"]) == 2 and "fix it with `init=xavier`" in capsys.readouterr().err
    assert main(["--", *GPT, "param=mup", "width=64"]) == 0 and capsys.readouterr().out == out  # coord-check's `--` form


def test_depth_rules_on_marked_branch_outputs():
    """param=depth_mup on the user's model: the branch outputs named by model.roles get x (L/L0)^-1/2 by a
    forward hook (8 blocks over 2: 0.5), and every parameter of a block lr x (L/L0)^-1/2 on top of µP's."""
    b = built(32, "depth=8", "param=depth_mup", "model.roles={*.attn.c_proj.weight:attn_out,*.mlp.c_proj.weight:mlp_out}")
    proj = b.model.h[3].mlp.c_proj
    x = torch.randn(2, 4, 128)
    assert torch.allclose(proj(x), F.linear(x, proj.weight, proj.bias) * 0.5)
    assert b.table.rule(b.roles["h.3.mlp.c_fc.weight"], True).lr == pytest.approx(0.5 * 0.5)  # 1/m x (L/L0)^(α-1)
    with pytest.raises(ConfigError, match="which GPT does not have"):
        built(32, "depth=8", "param=depth_mup")  # no branch output marked: refused, not silently µP


def test_a_classifier_of_ones_own_on_the_clusters():
    """The classification task: the first layer reads the data (input), the last writes the classes (readout)."""
    c = schema.check(to_plain(compose("model=custom", "model._target_=examples.mlp.TwoLayerMLP", "model.vocab_arg=n_classes",
                                          "+model.d_in=32", "data=clusters", "param=mup", "width=256", "model.base_width=64")))
    b = build_model(c["model"], c["init"], c["param"], 8)
    assert b.roles == {"fc.weight": Role.INPUT, "fc.bias": Role.BIAS, "out.weight": Role.READOUT, "out.bias": Role.READOUT_BIAS}
    assert b.model(torch.randn(5, 32)).shape == (5, 8)


def test_the_preflight_refuses_before_any_folder_exists(tmp_path):
    """A width argument that changes no shape is found by the command line's check (the model built on the
    meta device), not in a job folder."""
    from initnorm.cli.preflight import check_command_line

    run = tmp_path / "run"
    with pytest.raises(ConfigError, match="no parameter changes shape"):
        check_command_line([*GPT, "model.width_arg=n_head", f"hydra.run.dir={run}"])
    assert not run.exists()


def test_the_diagnostics_read_a_transposed_weight_as_the_map_it_applies():
    from initnorm.instruments.diagnostics.callback import fans

    c = schema.check(to_plain(compose("model=custom", "model._target_=tests.test_own_model.Odd", "model.width_arg=width", "width=64")))
    b = build_model(c["model"], c["init"], c["param"], VOCAB)
    assert fans(b.model)["up.weight"] == (192, 64) and fans(b.model)["out.weight"] == (VOCAB, 192)  # (fan_out, fan_in)


def test_a_readout_made_by_hand_from_a_tied_weight_is_refused_under_mup_and_a_tied_head_is_scaled(tmp_path):
    # Issue 34: logits as h @ emb.weight.T leave no readout: µP's 1/m (Yang et al. 2022, Table 3) applied nowhere, silently.
    from initnorm.models.parameterize import parameterize
    from tests.own_tied import TiedByHand, TiedHead

    kw = {"width": 64, "base_width": 16, "width_arg": "width", "vocab_size": VOCAB}
    for param in ("mup", {"name": "mup", "readout": "zero"}):  # readout=zero too (u-µP: refused on any own model)
        name = param if isinstance(param, str) else param["name"]
        with pytest.raises(ConfigError, match=rf"own_tied.TiedByHand has no readout under param={name}: .*self.head.weight = "
                                              r"self.emb.weight.*model.roles=\{<its weight>:readout\}.*param=sp") as err:
            parameterize(TiedByHand, **kw, param=param)
        assert "\n" not in str(err.value)
    assert parameterize(TiedByHand, **kw, param="sp").roles["emb.weight"] == Role.EMBEDDING
    with pytest.raises(ConfigError, match=r"emb.weight is named the readout, but it is an nn.Embedding's table"):
        parameterize(TiedByHand, **kw, param="mup", roles={"emb.weight": "readout"})
    p = parameterize(TiedHead, **kw, param="mup")
    x = torch.randint(0, VOCAB, (2, 8))
    h = torch.tanh(p.model.mix(p.model.emb(x)))
    assert torch.allclose(p.model(x), h @ p.model.emb.weight.T / 4)  # the head reads its input x 1/m, m = 64/16
    assert "head (module)" in str(p) and "0.25" in str(p)


@pytest.mark.parametrize("blocks", ["model.blocks=h", "model.blocks=null"])
def test_umup_on_a_model_of_ones_own_is_refused_in_one_line_never_trained_as_half_of_it(blocks):
    """Issue 36: without model.blocks it was accepted, its fan-in forward multipliers never applied (qkv outputs at RMS 3.9
    and 15.9 at widths 16 and 256, a validation loss of 20 after 10 steps). Its ops act inside the layers: refused."""
    with pytest.raises(ConfigError, match=r"^param=umup on model=custom: its unit-scaled ops act inside the layers") as err:
        config("width=32", "param=umup", "model.base_width=16", blocks)
    assert "\n" not in str(err.value) and "use param=mup" in str(err.value)
    config("width=32", "param=mup", "model.base_width=16", blocks)  # the tables whose rules all land are taken


class InlineGPT(nn.Module):
    """mymodels-style: the attention is written inline in a Block (no module class named ...Attention); ``scale``: a
    multiplier that stands in place of 1/sqrt(d_head) (``replace``), one on top of it, or one the forward never reads."""

    def __init__(self, vocab_size, width, n_head=2, use="multiply"):
        super().__init__()
        self.emb, self.n_head, self.use = nn.Embedding(vocab_size, width), n_head, use
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.head = nn.Linear(width, vocab_size)
        self.scale = (width // n_head) ** -0.5 if use == "replace" else 1.0

    def forward(self, idx):
        x = self.emb(idx)
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, -1).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))
        factor = {"replace": self.scale, "multiply": self.scale * k.shape[-1] ** -0.5, "unread": k.shape[-1] ** -0.5}[self.use]
        att = ((q @ k.transpose(-2, -1)) * factor).softmax(dim=-1)
        return self.head(x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C)))


class NoAttention(nn.Module):
    def __init__(self, vocab_size, width):
        super().__init__()
        self.emb, self.up, self.head = nn.Embedding(vocab_size, width), nn.Linear(width, width), nn.Linear(width, vocab_size)

    def forward(self, idx):
        return self.head(torch.relu(self.up(self.emb(idx))))


INLINE = ["model=custom", "model._target_=tests.test_own_model.InlineGPT", "model.width_arg=width", "model.base_width=16"]
NO_ATTENTION = ["model=custom", "model._target_=tests.test_own_model.NoAttention", "model.width_arg=width"]


def test_the_mup_attention_notice_is_decided_by_what_the_model_does(caplog):
    """Issue 36: it was printed only for a module class named *Attention*, never for attention written inline in a block."""
    from initnorm.models import own

    own._WARNED.clear()
    with caplog.at_level("WARNING", logger="initnorm.models.own"):
        config("width=64", "param=mup", model=INLINE)
    assert [r.getMessage() for r in caplog.records if "computes attention scores" in r.getMessage()], caplog.text
    assert "param=mup scales attention scores by 0.5" in caplog.text and "model.attn_mult_attr" in caplog.text
    own._WARNED.clear()
    caplog.clear()
    with caplog.at_level("WARNING", logger="initnorm.models.own"):
        config("width=64", "param=mup", model=NO_ATTENTION)
        config("width=64", "param=mup", "model.attn_mult_attr=scale", model=INLINE)  # a multiplier named: nothing to say
    assert "attention" not in caplog.text


@pytest.mark.parametrize(("use", "refused"), [("multiply", None), ("replace", "stands in place of 1/sqrt"), ("unread", "does not read")])
def test_an_attention_attribute_is_measured_to_be_the_multiplier_the_docs_describe(use, refused):
    """Issue 36: an attribute some models use in place of 1/sqrt(d_head) was taken as a multiplier on top of it, so SP itself
    changed (scores x sqrt(d_head)). Measured at build (the forward at its own value, at 1 and at 2), refused in one line."""
    args = ["param=mup", "model.attn_mult_attr=scale", f"+model.use={use}"]
    if refused is None:
        assert built(64, *args, model=INLINE).model.scale == 0.5  # µP's sqrt(16/64), on top of the model's own 1/sqrt(d_head)
        return
    with pytest.raises(ConfigError, match=rf"^model.attn_mult_attr='scale': .*{refused}") as err:
        config("width=64", *args, model=INLINE)
    assert "\n" not in str(err.value) and "model.attn_mult_attr=null" in str(err.value)


class Steady(nn.Module):
    """An RMSNorm of one's own, under a name that says nothing of norms."""

    def __init__(self, n):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.gain


class NormalShift(nn.Module):
    """A learned shift whose name says Norm: no normalisation."""

    def __init__(self, n):
        super().__init__()
        self.shift = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        return x + self.shift


class Normed(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.emb, self.steady, self.shift = nn.Embedding(VOCAB, width), Steady(width), NormalShift(width)
        self.ln, self.out = nn.LayerNorm(width), nn.Linear(width, VOCAB)

    def forward(self, idx):
        return self.out(self.ln(self.shift(self.steady(self.emb(idx)))))


def test_a_norm_is_told_by_what_it_does_not_by_its_class_name():
    from initnorm.models.infer import infer, is_norm

    roles = infer(Normed, 16, 32, 64).roles
    assert roles["steady.gain"] == Role.NORM_GAIN  # a user's RMSNorm called Steady
    assert roles["shift.shift"] == Role.BIAS  # a shift called NormalShift is no norm
    assert (roles["ln.weight"], roles["ln.bias"]) == (Role.NORM_GAIN, Role.NORM_BIAS)
    with torch.device("meta"):
        torch_norms = [nn.GroupNorm(4, 8), nn.BatchNorm1d(8), nn.RMSNorm(8), nn.InstanceNorm1d(8, affine=True)]
    assert [is_norm(m, 8) for m in torch_norms] == [True] * 4
    assert not is_norm(nn.Linear(8, 8), 8) and not is_norm(NormalShift(8), 8)
