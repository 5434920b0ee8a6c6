"""initnorm.parameterize (issue 35): the one function that builds and parameterises a model, for initnorm-train
(models.build.build_model calls it) and for a loop of one's own; a plain loop on its groups trains what
initnorm-train trains, bit for bit, and its refusals are the command line's lines."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from initnorm import schema
from initnorm.config import to_plain
from initnorm.errors import ConfigError
from initnorm.models.build import build_model
from initnorm.models.init_check import check_built
from initnorm.models.parameterize import parameterize
from initnorm.nn.roles import Role
from initnorm.training.optim import make_optimizer
from initnorm.training.tasks import TASKS
from tests.conftest import compose
from tests.test_own_model import GPT, VOCAB

# examples/nanogpt.py as initnorm-train's overrides name it (tests/test_own_model.GPT) and as parameterize's keywords do
NANOGPT = {"width_arg": "n_embd", "depth": 2, "depth_arg": "n_layer", "blocks": "h", "attn_mult_attr": "attn_mult", "n_head": 2}
STEPS, WARMUP, LR, WD = 20, 5, 0.01, 0.1
JOB = [*GPT, "param=mup", "width=32", f"steps={STEPS}", f"warmup={WARMUP}", f"lr={LR}", f"optim.weight_decay={WD}", "log_every=1",
       "batch_size=8", "callbacks=none", "trainer.enable_progress_bar=false", f"trainer.val_check_interval={STEPS}", "compile=false"]


def nanogpt(width: int, param: str = "mup", **kw):
    from examples.nanogpt import GPT as Net

    return parameterize(Net, width=width, base_width=16, param=param, vocab_size=VOCAB, block_size=32, **{**NANOGPT, **kw})


def warmup_cosine(step: int) -> float:
    """A user's own schedule, written as nanoGPT writes it: linear warmup, then cosine to 0 at the last step."""
    if step < WARMUP:
        return (step + 1) / WARMUP
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - WARMUP) / max(1, STEPS - WARMUP))))


def test_a_plain_loop_on_its_groups_is_initnorm_train_bit_for_bit(tmp_path, monkeypatch):
    """examples/nanogpt.py under µP at width 32 (base 16), AdamW with weight decay 0.1 (scaled) and a warmup + cosine
    LambdaLR, 20 steps: every step's loss and every final parameter equal the same job under initnorm-train's train()."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from initnorm.cli.train import train
    from initnorm.training import fit

    built, real = [], fit.build_model
    monkeypatch.setattr(fit, "build_model", lambda *a: built.append(real(*a)) or built[-1])  # the job's own module, trained
    cfg = compose(*JOB)
    train(cfg, tmp_path)
    events = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0}).Reload()
    theirs = [e.value for e in events.Scalars("Loss/train")]

    c = schema.check(to_plain(cfg))
    data = TASKS.get("char_lm").make_data(c)
    data.setup("fit")
    torch.manual_seed(c["seed"])  # what the job's seed_everything gives torch before it builds
    p = nanogpt(32)
    assert str(p) == (tmp_path / "roles.txt").read_text()  # the role table initnorm-train writes beside the run
    opt = torch.optim.AdamW(p.param_groups(LR, weight_decay=WD, eps=1e-8))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine)
    ours = []
    for _, (x, y) in zip(range(STEPS), data.train_dataloader()):
        logits, _ = p.model(x)  # the user's model returns what it returns: nanoGPT's (logits, loss)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        ours.append(loss.item())
    assert len(theirs) == STEPS and np.array_equal(np.float32(ours), np.float32(theirs)), (ours, theirs)
    assert all(torch.equal(a, b) for a, b in zip(p.model.state_dict().values(), built[0].model.state_dict().values()))


def test_build_model_is_parameterize_of_the_config():
    """The Decoder family by its name and keywords, and initnorm-train's call with the composed nodes: one model."""
    c = schema.check(to_plain(compose("param=depth_mup", "width=32", "depth=4")))
    torch.manual_seed(0)
    ref = build_model(c["model"], c["init"], c["param"], VOCAB)
    m = c["model"]
    torch.manual_seed(0)
    p = parameterize("decoder", width=32, depth=4, base_width=16, base_depth=2, param="depth_mup", n_out=VOCAB,
                     **{k: m[k] for k in ("n_heads", "mlp_ratio", "max_context", "norm", "norm_type", "norm_eps")}, activation="gelu")
    assert p.roles == ref.roles and p.table == ref.table and str(p) == str(ref)
    assert all(torch.equal(a, b) for a, b in zip(p.model.state_dict().values(), ref.model.state_dict().values()))
    groups = make_optimizer(ref.model, ref.roles, ref.table, 0.01, c["optim"]).param_groups
    mine = p.param_groups(0.01, weight_decay=c["optim"]["weight_decay"], eps=c["optim"]["eps"])
    assert [(g["names"], g["lr"], g["weight_decay"], g["eps"]) for g in mine] == [(g["names"], g["lr"], g["weight_decay"], g["eps"])
                                                                                   for g in groups]
    with pytest.raises(TypeError, match="drop width"):
        parameterize(c["model"], width=64, init=c["init"], param=c["param"], n_out=VOCAB)


def test_records_and_groups_for_any_optimiser_of_the_family():
    p = nanogpt(64)
    rows = {r["parameter"]: r for r in p.records()}
    assert set(rows) == {n for n, _ in p.model.named_parameters()}
    hidden = rows["h.0.mlp.c_fc.weight"]
    assert (hidden["role"], hidden["shape"], hidden["base_shape"], hidden["init"], hidden["lr_mult"]) == ("hidden", (256, 64), (64, 16),
                                                                                                        0.5, 0.25)
    assert rows["wte.weight"]["tied"] == ("lm_head.weight",) and rows["h.0.ln_1.weight"]["in_block"]
    groups = p.param_groups(0.01)  # eps: torch's default (1e-8) x µP's ε multiplier 1/m
    assert {g["eps"] for g in groups} == {1e-8 / 4} and {g["weight_decay"] for g in groups} == {0.0}
    by_name = {n: g for g in p.param_groups(0.01, weight_decay=0.1) for n in g["names"]}
    assert by_name["h.0.mlp.c_fc.weight"]["weight_decay"] == pytest.approx(0.4)  # scaled: wd x m where lr x 1/m
    sgd = nanogpt(64, optimizer="sgd")
    assert "eps" not in sgd.param_groups(0.1)[0] and isinstance(torch.optim.SGD(sgd.param_groups(0.1), momentum=0.9), torch.optim.SGD)
    with pytest.raises(ConfigError, match="independent decay needs a decoupled optimiser"):
        sgd.param_groups(0.1, weight_decay=0.1, mode="independent")
    with pytest.raises(ConfigError, match=r"optim.weight_decay_mode='scald' is invalid.*`optim.weight_decay_mode=scaled`"):
        p.param_groups(0.01, mode="scald")
    assert p.roles["h.0.attn.c_attn.weight"] == Role.HIDDEN


def refusal(call) -> str:
    with pytest.raises(ConfigError) as err:
        call()
    return str(err.value)


def test_refusals_are_the_command_lines_lines():
    """A width argument that changes nothing, a parameter no rule places, an argument the constructor does not take, a
    bad value and a table the model cannot take: the same one line as initnorm-roles (the command line's build)."""
    from examples.nanogpt import GPT as Net
    from initnorm.cli.roles import table_text
    from tests.test_own_model import Odd

    cases = [
        ([*GPT, "width=64", "model.width_arg=n_head"], lambda: nanogpt(64, width_arg="n_head")),
        ([*GPT, "width=64", "+model.n_haed=2"], lambda: parameterize(Net, width=64, base_width=16, vocab_size=VOCAB, n_haed=2,
                                                                      width_arg="n_embd")),
        ([*GPT, "width=0"], lambda: nanogpt(0)),
        ([*GPT, "width=64", "param=depth_mup", "depth=8"],
         lambda: parameterize(Net, width=64, base_width=16, base_depth=2, param="depth_mup", vocab_size=VOCAB, block_size=32,
                              **{**NANOGPT, "depth": 8})),
        (["model=custom", "model._target_=tests.test_own_model.Odd", "+model.bare=true", "width=64"],
         lambda: parameterize(Odd, width=64, base_width=16, param="sp", vocab_size=VOCAB, bare=True)),
    ]
    for overrides, call in cases:
        cli = refusal(lambda o=overrides: table_text(o))
        assert refusal(call) == cli and "\n" not in cli


def test_an_init_that_ignores_the_table_is_the_command_lines_line():
    from tests.test_init_check import LATE, LateReset

    c = schema.check(to_plain(compose(*LATE)))
    data = TASKS.get(c["data"]["kind"]).make_data(c)
    torch.manual_seed(0)
    cli = refusal(lambda: check_built(build_model(c["model"], c["init"], c["param"], data.vocab_size), c, data))
    torch.manual_seed(0)
    p = parameterize(LateReset, width=256, base_width=16, param="mup", vocab_size=data.vocab_size)
    data.setup("fit")
    inputs = next(iter(data.train_dataloader()))[0][:2]
    assert refusal(lambda: p.check_init(inputs)) == cli and "head.weight (readout: std 0.1" in cli


def test_a_table_and_an_init_of_ones_own_handed_over_as_functions():
    from initnorm.nn.param import mup_table

    def halved(w, role, ctx):
        w.normal_(0.0, 0.01)

    def lr_power(**options):
        return mup_table(**options, name="lr_power")

    torch.manual_seed(0)
    p = nanogpt(64, param=lr_power, init=halved)
    assert p.table.name == "lr_power" and p.model.h[0].mlp.c_fc.weight.std().item() == pytest.approx(0.005, rel=0.1)  # x m^-1/2
