"""Muon (``optim=muon``: torch.optim.Muon on the hidden matrices, AdamW on the rest) and a user's own optimiser train
alone and stacked, under SP, µP and depth-µP; resume bit for bit alone and stacked; a checkpoint of the format before
(the flat optimiser's moments by name) is read. Tiny Decoders, 8 steps, in this process."""

import json
import shutil

import lightning as L
import pytest
import torch

from initnorm.config import to_plain
from initnorm.training.fit import Member, fit
from initnorm.training.optim import schedule_factor
from initnorm.training.resume import FORMAT_1, checkpoint_path
from tests.conftest import compose_cfg

SHARED = ("steps=8", "checkpoint.every_n_steps=4", "trainer.val_check_interval=4", "callbacks=none",
          "trainer.enable_progress_bar=false", "width=32", "batch_size=8")
MUON = ("optim=muon",)
LION = ("optim=custom", "optim._target_=tests.own_optim.Lion", "optim.family=adam", "+optim.betas=[0.9,0.99]", "lr=0.001")
# Stacked members against the same jobs alone: the group's forward and backward round in float32 as one stacked kernel
# (tests/test_group_engine.py's bound for AdamW), and Muon's bf16 Newton-Schulz sees those gradients; measured here
# at 8 steps on this CPU: below 1e-6 relative (see the report); the bound leaves room for another CPU's rounding.
BOUND = 1e-5


def cfg(*extra: str, seed: int = 1):
    return to_plain(compose_cfg(*SHARED, *extra, f"seed={seed}"))


def muon_matrix(c) -> tuple[str, tuple[int, int]]:
    """The first parameter Muon steps, and its shape."""
    from initnorm.models.build import build_model
    from initnorm.training.optimizers import is_muon_matrix

    built = build_model(c["model"], c["init"], c["param"], 65)
    return next((n, tuple(p.shape)) for n, p in built.model.named_parameters() if is_muon_matrix(built.roles[n], p))


def alone(folder, *extra: str, seed: int = 1) -> dict:
    from initnorm.cli.train import train

    return train(compose_cfg(*SHARED, *extra, f"seed={seed}"), folder)


def stacked(root, *extra: str, seeds=(1, 2), callbacks=None) -> list[dict]:
    return fit([Member(cfg(*extra, seed=s), root / f"seed={s}") for s in seeds], callbacks=callbacks)


class Seen(L.Callback):
    """What an instrument reads of the optimiser after the first step (``callbacks/members.py``'s view)."""

    rates = adam = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        from initnorm.callbacks.members import members_of

        if self.rates is None:
            view = members_of(pl_module, trainer)
            self.rates, self.adam, self.step = view.rates(), view.adam(), trainer.global_step


@pytest.mark.parametrize("param", ["sp", "mup", "depth_mup"])
def test_muon_trains_alone_and_stacked_each_member_as_its_job_alone(tmp_path, param):
    extra = (*MUON, f"param={param}")
    a = alone(tmp_path / "alone", *extra, seed=2)
    seen = Seen()
    group = stacked(tmp_path / "group", *extra, callbacks=[seen])
    g = group[1]
    assert a["status"] == g["status"] == "finished" and a["group"]["optimizer"] == "torch" and g["group"]["size"] == 2
    assert g["group"]["optimizer"] == "muon_stack"  # the matrices of both members in one Newton-Schulz iteration
    assert abs(a["final_val_loss"] - g["final_val_loss"]) <= BOUND * a["final_val_loss"], (param, a["final_val_loss"], g["final_val_loss"])
    assert group[0]["final_val_loss"] != group[1]["final_val_loss"]  # two seeds, two runs
    # the instruments' view: a Muon matrix's effective rate is lr x schedule x its shape factor (match_rms_adamw; at
    # depth = base depth and the table's lr x 1 for Muon's matrices), and it has no Adam ε
    c = cfg(*extra)
    name, (fan_out, fan_in) = muon_matrix(c)
    want = c["lr"] * schedule_factor(seen.step, c["steps"], c["warmup"], c["schedule"]) * 0.2 * max(fan_out, fan_in) ** 0.5
    assert seen.rates[name].tolist() == pytest.approx([want] * 2, rel=1e-6), (name, seen.rates[name], want)
    assert name not in seen.adam and "tok_emb.weight" in seen.adam


def test_muon_matrices_step_by_muon_and_the_rest_by_adamw():
    from initnorm.models.build import build_model
    from initnorm.training.optim import make_optimizer

    c = cfg(*MUON, "param=mup")
    built = build_model(c["model"], c["init"], c["param"], 65)
    opt = make_optimizer(built.model, built.roles, built.table, c["lr"], c["optim"])
    kinds = {type(o).__name__: sorted(n for g in o.param_groups for n in g["names"]) for o in opt.optimizers}
    assert set(kinds) == {"Muon", "AdamW"}
    assert all(n.startswith("blocks.") and n.endswith("weight") for n in kinds["Muon"]), kinds["Muon"]
    assert "tok_emb.weight" in kinds["AdamW"] and not any("norm" in n or "bias" in n for n in kinds["Muon"]), kinds
    # µP: Muon's matrices take no 1/m (width 32 = 2 x base), only match_rms_adamw's 0.2 sqrt(max(fan_out, fan_in))
    # folded into the rate torch adjusts by Keller Jordan's sqrt(max(1, fan_out / fan_in))
    for g in opt.optimizers[0].param_groups:
        assert g["adjust_lr_fn"] == "match_rms_adamw" and g["lr_mult"] == 1.0, g


def test_adamw_lr_sets_the_adamw_parts_base_rate_and_leaves_muons_matrices_at_lr():
    from initnorm.models.build import build_model
    from initnorm.training.optim import make_optimizer, overwritten_rate

    def rates(*extra):
        c = cfg(*MUON, "param=mup", "lr=0.02", *extra)  # width 32: µP's m = 2
        built = build_model(c["model"], c["init"], c["param"], 65)
        opt = make_optimizer(built.model, built.roles, built.table, c["lr"], c["optim"])
        assert overwritten_rate(opt.param_groups, c["lr"], 1.0, 0, "mup") is None  # lr x lr_mult is each group's rate
        return {n: (type(o).__name__, g["lr"]) for o in opt.optimizers for g in o.param_groups for n in g["names"]}

    one, two = rates(), rates("optim.adamw_lr=0.003")
    assert rates("optim.adamw_lr=0.02") == one  # the run's lr given as the AdamW part's: nothing changes
    for n, (kind, lr) in two.items():
        if kind == "Muon":
            assert lr == one[n][1], n  # the Muon matrices keep lr x their shape factor
        else:  # the AdamW part: 0.003 x µP's multiplier in place of 0.02 x the same multiplier
            assert lr == pytest.approx(one[n][1] * 0.003 / 0.02, rel=1e-12), (n, lr, one[n])
    assert two["tok_emb.weight"][1] == pytest.approx(0.003) and two["head.weight"][1] == pytest.approx(0.003)  # µP: AdamW x 1


def test_jobs_that_differ_in_adamw_lr_stack_each_member_as_its_job_alone(tmp_path):
    from initnorm.training.group import group_key

    extra = (*MUON, "param=mup")
    rates = ("0.002", "0.02")
    configs = [cfg(*extra, f"optim.adamw_lr={r}", seed=2) for r in rates]
    assert group_key(configs[0]) == group_key(configs[1])  # a member-wise number: one group
    group = fit([Member(c, tmp_path / f"group/{r}") for c, r in zip(configs, rates)])
    assert [g["group"]["optimizer"] for g in group] == ["muon_stack"] * 2 and group[0]["group"]["size"] == 2
    for r, g in zip(rates, group):
        a = alone(tmp_path / f"alone/{r}", *extra, f"optim.adamw_lr={r}", seed=2)
        assert abs(a["final_val_loss"] - g["final_val_loss"]) <= BOUND * a["final_val_loss"], (r, a["final_val_loss"], g)
    assert group[0]["final_val_loss"] != group[1]["final_val_loss"]  # the AdamW part's rate changed the run


@pytest.mark.parametrize(("value", "says"), [("0", "optim.adamw_lr"), ("-0.01", "optim.adamw_lr"), ("fast", "optim.adamw_lr")])
def test_a_bad_adamw_lr_is_refused_in_one_line(tmp_path, value, says):
    from initnorm.errors import ConfigError

    with pytest.raises(ConfigError, match=says) as err:
        alone(tmp_path, *MUON, f"optim.adamw_lr={value}")
    assert "\n" not in str(err.value)


def test_adamw_lr_is_refused_for_an_optimiser_without_a_muon_part(tmp_path):
    from initnorm.errors import ConfigError

    with pytest.raises(ConfigError, match="adamw_lr") as err:
        alone(tmp_path, "optim=adamw", "+optim.adamw_lr=0.01")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("optim", ["muon", "muon_adamw_lr", "lion"])
def test_a_job_resumes_bit_for_bit_alone_and_stacked(tmp_path, optim):
    extra = {"muon": (*MUON, "param=mup"), "muon_adamw_lr": (*MUON, "param=mup", "optim.adamw_lr=0.003"), "lion": LION}[optim]
    full = alone(tmp_path / "alone", *extra)
    (tmp_path / "alone" / "metrics.json").unlink()  # killed after its checkpoint of step 4
    again = alone(tmp_path / "alone", *extra)
    assert again["resumed_from_step"] == 4 and again["final_val_loss"] == full["final_val_loss"], (again, full)
    assert full["group"]["optimizer"] == "torch"
    group = stacked(tmp_path / "group", *extra)
    for s in (1, 2):
        (tmp_path / "group" / f"seed={s}" / "metrics.json").unlink()
    resumed = stacked(tmp_path / "group", *extra)
    assert [r["resumed_from_step"] for r in resumed] == [4, 4]
    assert [r["final_val_loss"] for r in resumed] == [r["final_val_loss"] for r in group]
    assert resumed[0]["group"]["optimizer"] == ("torch" if optim == "lion" else "muon_stack")


def test_a_users_own_elementwise_optimiser_trains_alone_and_stacked(tmp_path):
    solo = alone(tmp_path / "alone", *LION)
    group = stacked(tmp_path / "group", *LION)
    assert solo["group"]["optimizer"] == group[0]["group"]["optimizer"] == "torch"
    assert abs(solo["final_val_loss"] - group[0]["final_val_loss"]) <= BOUND * solo["final_val_loss"]
    assert solo["final_val_loss"] < 4.2  # it trained (ln 65 ~ 4.17 at the start)


def test_a_checkpoint_of_the_flat_format_before_is_read(tmp_path):
    """Format 1 kept the flat optimiser's moments by name and one step count: read and converted, the job resumes bit
    for bit; a format-1 optimiser of another form is refused in one line."""
    extra = ("param=mup",)
    full = alone(tmp_path / "job", *extra)
    path = checkpoint_path(tmp_path / "job")
    state = torch.load(path, weights_only=True)
    named = state["optimizer"]["state"]
    old = {"name": "adamw", "step": float(next(iter(named.values()))["step"]),
           "exp_avg": {n: s["exp_avg"] for n, s in named.items()}, "exp_avg_sq": {n: s["exp_avg_sq"] for n, s in named.items()}}
    torch.save({**state, "format": FORMAT_1, "optimizer": old}, path)
    (tmp_path / "job" / "metrics.json").unlink()
    again = alone(tmp_path / "job", *extra)
    assert again["resumed_from_step"] == 4 and again["final_val_loss"] == full["final_val_loss"]
    shutil.rmtree(tmp_path / "job")
    alone(tmp_path / "job", *extra)
    state = torch.load(path, weights_only=True)
    torch.save({**state, "format": FORMAT_1, "optimizer": {"name": "adamw", "moments": {}}}, path)
    (tmp_path / "job" / "metrics.json").unlink()
    with pytest.raises(Exception, match="does not fit this job's model"):
        alone(tmp_path / "job", *extra)


def test_the_record_says_which_optimiser_path_ran(tmp_path):
    r = alone(tmp_path / "sgd", "optim=sgd")
    assert r["group"]["optimizer"] == "flat"
    assert json.loads((tmp_path / "sgd" / "metrics.json").read_text())["group"]["optimizer"] == "flat"
