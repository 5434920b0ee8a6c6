"""Vectorised horizons: jobs that differ only in ``steps`` share one stacked group, each member retires at its own last
step, and its record (metrics.json, val_history, checkpoint, TensorBoard events, HPARAMS, train.log's end line) is its
job alone's; a group stopped after its shortest member retired resumes to the same records."""

import importlib
import json
import math
import re
import signal
from pathlib import Path

import lightning as L
import pytest
import torch
from hydra.utils import instantiate
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata

from initnorm import schema
from initnorm.config import to_plain
from initnorm.training import signals, trackers
from initnorm.training.fit import Member, fit
from initnorm.training.group import group_key
from initnorm.training.resume import checkpoint_path, load_checkpoint
from tests.conftest import compose_cfg
from tests.inproc import command

# the default Decoder at its default width, with its instruments every 5 steps (so some come after a member retired)
SHARED = ["checkpoint.every_n_steps=4", "log_every=2", "callbacks.stats.every_n_steps=5", "callbacks.diagnostics.every_n_steps=5",
          "callbacks.diagnostics.power_steps=5", "trainer.enable_progress_bar=false"]
HORIZONS = ((6, 1), (12, 2), (24, 3))  # (steps, seed): each validates on its own interval (1, 2, 3: a tenth of its run)
BOUND = 1e-6  # members against their jobs alone, relative (measured 3e-7 over these runs: docs/vectorized.md)


def members(folder: Path, schedule: str, *extra: str) -> list[Member]:
    return [Member(to_plain(compose_cfg(*SHARED, f"steps={n}", f"seed={s}", f"schedule={schedule}", *extra)), folder / f"steps={n}")
            for n, s in HORIZONS]


FROZEN: dict[str, list] = {}


class Frozen(L.Callback):
    """The shortest member's parameters, Adam moments and step count as it retires, and as the fit ends."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == pl_module.horizons[0]:
            FROZEN["retired"] = self.state(pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        FROZEN["end"] = self.state(pl_module)

    @staticmethod
    def state(engine) -> list:
        vec = engine.vec
        return [float(vec.steps[0]), *(torch.cat([v[0].flatten() for v in engine.stack.views(t).values()]).clone()
                                      for t in (engine.stack.flat, vec.exp_avg, vec.exp_avg_sq))]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Per schedule: each job alone, and the three as one fit (run once per module)."""
    done = {}

    def run(schedule: str):
        if schedule not in done:
            tmp = tmp_path_factory.mktemp(schedule)
            alone = [fit([m])[0] for m in members(tmp / "alone", schedule)]
            group = fit(members(tmp / "group", schedule, "+callbacks.frozen._target_=tests.test_horizons.Frozen"))
            done[schedule] = tmp, alone, group
        return done[schedule]

    return run


def pairs(history) -> list[tuple]:
    """A val_history as (step, loss) pairs, whether read back from metrics.json (lists) or returned by fit (tuples)."""
    return [tuple(p) for p in history]


def relative(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def events(folder: Path) -> EventAccumulator:
    (files,) = {p.parent for p in folder.rglob("events.out.tfevents.*")}  # its files, read as TensorBoard reads them
    acc = EventAccumulator(str(files), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


def test_jobs_that_differ_only_in_steps_share_one_group_key():
    c = {n: to_plain(compose_cfg(*SHARED, f"steps={n}")) for n in (6, 12, 24)}
    assert len({group_key(x) for x in c.values()}) == 1
    once = [to_plain(compose_cfg(f"steps={n}", "trainer.val_check_interval=" + str(n))) for n in (6, 24)]  # a preset's ${steps}
    assert group_key(once[0]) == group_key(once[1])
    # a trainer.max_steps of its own (not the steps) stops each job where it stops: it stays a shape of the group
    assert group_key(to_plain(compose_cfg("steps=12", "trainer.max_steps=6"))) != group_key(to_plain(compose_cfg("steps=12")))
    assert group_key(c[6]) != group_key(to_plain(compose_cfg(*SHARED, "steps=6", "width=32")))
    # what a horizon rule resolves differs by horizon (lr, weight decay, transfer.applied): numbers of each member
    rules = ["transfer.horizon_rule=power", "transfer.base.steps=375", "optim.weight_decay_rule=fraction"]
    ruled = [schema.check(to_plain(compose_cfg(f"steps={n}", *rules))) for n in (375, 1500)]
    assert ruled[0]["lr"] != ruled[1]["lr"] and group_key(ruled[0]) == group_key(ruled[1])


@pytest.mark.parametrize("schedule", ["cosine", "linear_to_zero"])
def test_members_of_three_horizons_train_as_one_group_each_as_its_job_alone(runs, schedule):
    tmp, alone, group = runs(schedule)
    # retired at step 6, the shortest member took no step of the 18 that followed: no update, decay or moment
    frozen = importlib.import_module("tests.test_horizons").FROZEN  # the module Hydra made the callback from
    assert frozen["retired"][0] == frozen["end"][0] == 6
    assert all(torch.equal(a, b) for a, b in zip(frozen["retired"][1:], frozen["end"][1:]))
    worst = 0.0
    for (n, _), a, g in zip(HORIZONS, alone, group):
        assert g["status"] == a["status"] == "finished" and g["group"]["size"] == 3 and a["group"]["size"] == 1
        assert g["steps"] == a["steps"] == n
        assert [s for s, _ in g["val_history"]] == [s for s, _ in a["val_history"]]  # its own schedule, its own last step
        assert [s for s, _ in a["val_history"]][-1] == n and len(a["val_history"]) == 1 + n // math.ceil(n / 10)
        for (_, x), (_, y) in zip(g["val_history"], a["val_history"]):
            worst = max(worst, relative(x, y))
        assert relative(g["best_val_loss"], a["best_val_loss"]) <= BOUND
        # its checkpoint is the last one its job alone writes, not one the group took after it retired
        ga, aa = (load_checkpoint(checkpoint_path(tmp / k / f"steps={n}")) for k in ("group", "alone"))
        assert ga["global_step"] == aa["global_step"] == 4 * ((n - 1) // 4)
        assert len(ga["history"]["train_losses"]) == len(aa["history"]["train_losses"])
        # train.log ends on the same line (its ms a step aside)
        end = [re.search(r"\] - (.*) \((\d+) steps, ", (tmp / k / f"steps={n}" / "train.log").read_text().strip().splitlines()[-1])
               for k in ("group", "alone")]
        assert [x.groups() for x in end] == [(f"final validation loss {r['final_val_loss']:.4f}", str(n)) for r in (g, a)]
        # TensorBoard: the same tags at the same steps (instruments, losses, HPARAMS: nothing after it retired), within the bound
        ge, ae = (events(tmp / k / f"steps={n}") for k in ("group", "alone"))
        assert sorted(ge.Tags()["scalars"]) == sorted(ae.Tags()["scalars"])
        for tag in ae.Tags()["scalars"]:
            gs, as_ = ge.Scalars(tag), ae.Scalars(tag)
            assert [p.step for p in gs] == [p.step for p in as_], tag
            for p, q in zip(gs, as_):
                assert abs(p.value - q.value) <= 1e-4 * max(abs(q.value), 1e-3), (tag, p.step, p.value, q.value)
        assert set(ge.PluginTagToContent(metadata.PLUGIN_NAME)) == set(ae.PluginTagToContent(metadata.PLUGIN_NAME))
        assert ge.Scalars("hp/final_val_loss")[0].step == n
    assert worst <= BOUND, worst


class StopAt(L.Callback):
    """A stop signal recorded after the batch of ``step`` (as the handler records one): the fit checkpoints and stops."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step == self.step:
            signals._record(signal.SIGTERM, None)


@pytest.mark.parametrize("stop", [6, 8])
def test_a_group_stopped_after_its_shortest_member_retired_resumes_to_the_same_records(tmp_path, runs, stop):
    """Stopped at the shortest member's retirement (6) or after it (8): that member is finished (skipped by the rerun),
    its checkpoint still its own last (step 4); the others checkpoint at the stop and resume from it as a group of two."""
    *_, uninterrupted = runs("cosine")
    group = members(tmp_path, "cosine")
    try:
        with pytest.raises(signals.Interrupted):
            fit(group, callbacks=[*(instantiate(node) for node in group[0].cfg["callbacks"].values()), StopAt(stop)])
    finally:
        signals.clear()
        for m in group:  # what the stopped process's exit would end: the runs of the members it left training
            trackers.fail(m.out_dir)
    first = json.loads((group[0].out_dir / "metrics.json").read_text())
    assert first["status"] == "finished" and pairs(first["val_history"]) == pairs(uninterrupted[0]["val_history"])
    assert load_checkpoint(checkpoint_path(group[0].out_dir))["global_step"] == 4
    assert [load_checkpoint(checkpoint_path(m.out_dir))["global_step"] for m in group[1:]] == [stop, stop]
    assert not any((m.out_dir / "metrics.json").exists() for m in group[1:])
    again = fit(members(tmp_path, "cosine"))
    assert again[0].get("skipped") and [r["resumed_from_step"] for r in again[1:]] == [stop, stop]
    assert [r["group"]["size"] for r in again[1:]] == [2, 2]
    for r, u in zip(again, uninterrupted):
        assert pairs(r["val_history"]) == pairs(u["val_history"]) and r["final_val_loss"] == u["final_val_loss"]  # bit for bit


def test_the_vectorised_launcher_stacks_a_sweep_over_steps_into_one_group(tmp_path):
    sweep = tmp_path / "sweep"
    proc = command("-m", "steps=6,12,24", "seed=1,2", "callbacks=none", "trainer.enable_progress_bar=false", "summary.plots=[]",
                   "hydra/launcher=vectorized", "hydra.launcher.engine=sequential", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "vectorized: 6 jobs in 1 stacked group (1 of 6) and 0 alone" in proc.stdout, proc.stdout[-2000:]
    # its progress lines count the members that retired (at 50%, step 12: the two of 6 steps; those of 12 retire as the next step starts)
    assert re.search(r"group of 6 \(.*\): step 12/24 \(50%\), 4/6 alive, 2 done at their last step", proc.stdout), proc.stdout[-3000:]
    records = [json.loads(p.read_text()) for p in sweep.rglob("metrics.json")]
    assert len(records) == 6 and {r["group"]["size"] for r in records} == {6}, [r["group"] for r in records]
    for r in records:
        n = r["config"]["steps"]
        assert r["steps"] == n and r["val_history"][-1][0] == n and r["status"] == "finished"
