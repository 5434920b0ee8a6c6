"""The one engine, in process: ``fit(members)`` for E >= 1, its member view (each member the family's or the user's own
module over one flat tensor), the probe that decides how members run, one checkpoint format, and Lightning's stock
callbacks working the same for a job alone and a group."""

import json

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

from initnorm.config import to_plain
from initnorm.models.decoder import Decoder
from initnorm.training.fit import Member, assemble, fit
from initnorm.training.resume import checkpoint_path
from tests.conftest import compose

QUIET = ["callbacks=none", "trainer.enable_progress_bar=false"]
SHORT = ["steps=12", "trainer.val_check_interval=4", "checkpoint.every_n_steps=0", "width=8", "depth=1", *QUIET]


def members(tmp_path, *variants, shared=SHORT):
    return [Member(to_plain(compose(*shared, *v)), tmp_path / f"m{i}") for i, v in enumerate(variants)]


@pytest.mark.parametrize("E", [1, 3])
def test_each_member_is_the_familys_own_module_over_one_flat_tensor(tmp_path, E):
    engine, _, _ = assemble(members(tmp_path, *[[f"seed={s}"] for s in range(1, E + 1)]))
    flat = engine.stack.flat
    assert engine.E == E and len(engine.members) == E and len(engine.configs) == E
    assert [c["seed"] for c in engine.configs] == list(range(1, E + 1))  # each member's config, a job alone's too
    for e, m in enumerate(engine.members):
        assert isinstance(m, Decoder)
        for p in m.parameters():  # views of the flat tensor: no copy
            assert p.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr()
    with torch.no_grad():  # writing through a member's module writes the flat tensor, and only that member's rows
        engine.members[E - 1].tok_emb.weight.fill_(7.0)
    rows = engine.stack.views(flat)["tok_emb.weight"]
    assert bool((rows[E - 1] == 7).all()) and (E == 1 or not bool((rows[0] == 7).any()))


def test_the_probe_stacks_the_decoder_and_loops_a_job_alone(tmp_path):
    group, _, _ = assemble(members(tmp_path / "g", ["seed=1"], ["seed=2", "param=mup", "param.base_width=8", "lr=0.02"]))
    alone, _, _ = assemble(members(tmp_path / "a", ["seed=1"]))
    assert group.stack.strategy == "vmap" and alone.stack.strategy == "loop"
    assert not group.stack.draws and group.stack.streams is None  # no dropout: no random streams to keep


def test_a_member_checkpointed_in_a_group_resumes_alone_and_a_job_alone_resumes_in_a_group(tmp_path):
    shared = ["steps=24", "trainer.val_check_interval=6", "checkpoint.every_n_steps=12", "width=8", "depth=1", *QUIET]
    whole = {s: fit(members(tmp_path / f"whole{s}", [f"seed={s}"], shared=shared))[0] for s in (1, 2)}
    group = members(tmp_path / "cut", ["seed=1"], ["seed=2"], shared=shared)
    fit(group)
    for m in group:
        (m.out_dir / "metrics.json").unlink()  # as if killed after the checkpoint of step 12
        state = torch.load(checkpoint_path(m.out_dir), weights_only=True)
        assert state["global_step"] == 12 and set(state["state_dict"]) >= {"tok_emb.weight"}  # the module's own names
    again = fit([group[0]])[0]  # alone, from the group's checkpoint
    assert again["resumed_from_step"] == 12 and again["group"]["size"] == 1
    assert again["final_val_loss"] == pytest.approx(whole[1]["final_val_loss"], rel=1e-5)  # vmap's rounding, then alone
    alone = members(tmp_path / "alone", ["seed=1"], ["seed=2"], shared=shared)
    for m in alone:
        fit([m])
        (m.out_dir / "metrics.json").unlink()
    resumed = fit(alone)  # two jobs checkpointed alone, on as one group
    assert [r["resumed_from_step"] for r in resumed] == [12, 12] and resumed[0]["group"]["size"] == 2
    for s, r in zip((1, 2), resumed):
        assert r["final_val_loss"] == pytest.approx(whole[s]["final_val_loss"], rel=1e-5)


def test_a_checkpoint_of_another_shape_is_one_line(tmp_path):
    from initnorm.errors import ConfigError

    shared = ["steps=24", "checkpoint.every_n_steps=12", "width=8", "depth=1", *QUIET]
    (m,) = members(tmp_path, ["seed=1"], shared=shared)
    fit([m])
    (m.out_dir / "metrics.json").unlink()
    state = torch.load(checkpoint_path(m.out_dir), weights_only=True)
    state["state_dict"]["tok_emb.weight"] = torch.zeros(3, 3)
    torch.save(state, checkpoint_path(m.out_dir))
    with pytest.raises(ConfigError, match=r"does not fit this job.s model \(tok_emb.weight\); delete it") as caught:
        fit([m])
    assert "\n" not in str(caught.value)


class Seen(L.Callback):
    """A user's callback: what it reads of each member through ``pl_module.members``."""

    def __init__(self):
        self.rows = []

    def on_train_end(self, trainer, pl_module):
        self.rows = [(type(m).__name__, m.blocks[0].attn.q.weight.shape[0], c["seed"])
                     for m, c in zip(pl_module.members, pl_module.configs)]


@pytest.mark.parametrize("E", [1, 2])
def test_lightnings_stock_callbacks_and_a_users_own_work_for_a_job_alone_and_a_group(tmp_path, E):
    seen = Seen()
    stop = EarlyStopping(monitor="val_loss", patience=100)
    keep = ModelCheckpoint(dirpath=tmp_path / "lightning", save_last=True)
    group = members(tmp_path, *[[f"seed={s}"] for s in range(1, E + 1)])
    results = fit(group, callbacks=[seen, stop, keep])
    assert all(r["status"] == "finished" for r in results)
    assert seen.rows == [("Decoder", 8, s) for s in range(1, E + 1)]
    assert stop.best_score is not None  # it read val_loss, the members' mean
    assert (tmp_path / "lightning" / "last.ckpt").is_file()
    assert not checkpoint_path(group[0].out_dir).exists()  # checkpoint.every_n_steps=0: initnorm wrote none of its own
    for m in group:  # a rerun reads nothing of Lightning's: every job is finished
        assert json.loads((m.out_dir / "metrics.json").read_text())["status"] == "finished"
    assert [r.get("skipped") for r in fit(group)] == [True] * E


class StopAt(L.Callback):
    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step >= self.step:
            trainer.should_stop = True


def test_a_fit_a_callback_stopped_early_is_finished_early_stopped_and_a_rerun_keeps_it(tmp_path):
    """Issue 48, ES: a callback's stop (Lightning's EarlyStopping, or one's own setting trainer.should_stop) is the user's
    decision, not a failure: the jobs are finished, early-stopped, their final loss their last validation's."""
    group = members(tmp_path, ["seed=1"], ["seed=2"], shared=[*SHORT[:2], "checkpoint.every_n_steps=4", *SHORT[3:]])
    first = fit(group, callbacks=[StopAt(6)])
    assert [r["status"] for r in first] == ["finished", "finished"] and first[0]["steps"] == 6
    assert "stopped the fit at step 6 of 12" in first[0]["early_stopped"]
    assert [r["final_val_loss"] for r in first] == [r["val_history"][-1][1] for r in first]  # its last validation's (step 4)
    assert [r.get("skipped") for r in fit(group)] == [True, True]  # finished: a rerun keeps it


def test_a_max_steps_below_steps_ends_the_fit_in_its_own_words(tmp_path):
    """trainer.max_steps=6 with steps=12 (a run stopped part-way through its schedule, on purpose): the record said a
    callback had stopped it (trainer.should_stop)."""
    from tests.conftest import TINY

    [record] = fit([Member(to_plain(compose(*TINY, "trainer.max_steps=6")), tmp_path)])
    assert record["status"] == "finished" and record["steps"] == 6
    assert record["early_stopped"] == "trainer.max_steps=6 ended the fit at step 6 of the schedule's 12"


def test_an_empty_evaluation_set_is_an_error_not_a_loss_of_0(tmp_path):
    from initnorm.errors import ConfigError

    text = tmp_path / "short.txt"
    text.write_text("abcdefghij" * 10)  # 90 characters train, 10 validate: no whole window of 16
    with pytest.raises(ConfigError, match="evaluation set 'val' has no examples"):
        fit(members(tmp_path, ["data=text", f"data.path={text}", "data.context=16"]))
    assert not (tmp_path / "m0" / "metrics.json").exists()


class FailFor(L.Callback):
    """A user's callback that raises at ``step`` whenever the fit holds the member of ``seed``."""

    def __init__(self, seed: int, step: int):
        self.seed, self.step = seed, step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step and self.seed in [c["seed"] for c in pl_module.configs]:
            raise RuntimeError(f"my callback cannot take seed {self.seed}")


def test_a_member_that_fails_costs_only_its_own_job(tmp_path):
    """A callback that raises for one member mid-run: its group goes on as jobs alone from the last checkpoint; only that
    member is recorded failed, and the others end as they would have in the group."""
    shared = ["steps=12", "trainer.val_check_interval=4", "checkpoint.every_n_steps=4", "width=8", "depth=1", *QUIET]
    whole = fit(members(tmp_path / "whole", ["seed=1"], ["seed=2"], ["seed=3"], shared=shared))
    group = members(tmp_path / "group", ["seed=1"], ["seed=2"], ["seed=3"], shared=shared)
    got = fit(group, callbacks=[FailFor(seed=2, step=6)])
    assert [r["status"] for r in got] == ["finished", "failed", "finished"]
    assert "my callback cannot take seed 2" in got[1]["error"]
    assert json.loads((group[1].out_dir / "metrics.json").read_text())["status"] == "failed"
    for r, w in zip(got[::2], whole[::2]):  # alone from step 4: float32 rounding from the group under vmap
        assert r["resumed_from_step"] == 4 and r["final_val_loss"] == pytest.approx(w["final_val_loss"], rel=1e-5)
    assert "goes on alone" in (group[0].out_dir / "train.log").read_text()


def test_a_members_bad_checkpoint_fails_it_alone_before_it_meets_the_others(tmp_path):
    shared = ["steps=24", "checkpoint.every_n_steps=12", "width=8", "depth=1", *QUIET]
    group = members(tmp_path, ["seed=1"], ["seed=2"], shared=shared)
    fit(group)
    for m in group:
        (m.out_dir / "metrics.json").unlink()
    state = torch.load(checkpoint_path(group[1].out_dir), weights_only=True)
    state["optimizer"]["state"]["tok_emb.weight"]["exp_avg"] = torch.zeros(2)  # a moment of the wrong shape
    torch.save(state, checkpoint_path(group[1].out_dir))
    got = fit(group)
    assert got[0]["status"] == "finished" and got[0]["resumed_from_step"] == 12 and got[0]["group"]["size"] == 1
    assert got[1]["status"] == "failed" and "does not fit this job's model (optimizer state of tok_emb.weight)" in got[1]["error"]


def test_a_group_says_it_started_then_each_quarter_with_the_sweeps_count(tmp_path, capsys):
    """Issue 36: a vectorised group printed nothing until every member's end line came at once ("[40/40 done]"). Its first
    line comes as it starts training, then one at each quarter of its steps, each with the sweep's done/total (``status``)
    and each member's .progress written first, so the sweep's own time left counts the group's share."""
    group = members(tmp_path, ["seed=1"], ["seed=2"])
    asked = []  # the fit's own time left, handed to the sweep's status: the sweep's can be no shorter
    fit(group, label="seed=1 .. seed=2", status=lambda left: asked.append(left) or "3/8 done, about 20s left")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("group of 2")]
    assert lines[0] == "group of 2 (seed=1 .. seed=2): 12 steps [3/8 done, about 20s left]"
    steps = [line.split(": step ")[1].split(",")[0] for line in lines[1:]]
    assert {"3/12 (25%)", "6/12 (50%)", "9/12 (75%)"} <= set(steps) and "12/12 (100%)" not in steps  # the end: the members' lines
    assert all(", 2/2 alive, about " in line and line.endswith("left [3/8 done, about 20s left]") for line in lines[1:])
    last = steps[-1].split("/")[0]  # 9, or a later step where 10 s passed since (a loaded machine)
    assert [(m.out_dir / ".progress").read_text() for m in group] == [f"{last} 12\n"] * 2
    assert asked[0] == 0.0 and len(asked) == len(lines) and all(x > 0 for x in asked[1:])


def test_a_members_train_log_ends_on_the_loss_the_sweeps_table_scores(tmp_path):
    """Issue 36: the done line names the loss the table scores (the chapter's training tail under mup_mlp_sweep); the
    member's train.log said 'final validation loss' beside it, another number."""
    cfg = compose("experiment=mup_mlp_sweep", "steps=12", "width=16", "batch_size=8", "summary.tail_steps=5",
                      "checkpoint.every_n_steps=0", *QUIET)
    m = Member(to_plain(cfg), tmp_path / "m")
    r = fit([m])[0]
    end = (m.out_dir / "train.log").read_text().splitlines()[-1]
    assert f"final loss (mean of the last 5 training batches) {r['final_loss']:.4f} (12 steps" in end, end
    assert "validation" not in end and r["final_loss"] != r["final_val_loss"]
