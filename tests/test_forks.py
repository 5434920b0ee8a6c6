"""Horizon forks (training/forks.py): a sweep over steps under wsd trains the shared stable phase once and each shorter
horizon starts from the longest run's state at its branch step; each branch equals its separate run (bit for bit where
jobs train alone, to float32 rounding in stacked groups), on every launcher, and a stopped sweep resumes to the same
records."""

import json
import logging
import re
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from initnorm.training import forks
from initnorm.training.optim import schedule_factor
from tests.inproc import command

# three horizons of the default Decoder under wsd:0.25, validated every 8 steps (the same points in every run); no summary
# figure (0.5 s of CPU a sweep, none of these tests reads one: test_mlp and test_train check that a sweep draws them)
SWEEP = ["-m", "schedule=wsd:0.25", "steps=16,32,64", "seed=1", "trainer.val_check_interval=8", "log_every=2", "callbacks=none",
         "checkpoint.every_n_steps=0", "trainer.enable_progress_bar=false", "summary.plots=[]"]
BRANCH = {16: 13, 32: 25}  # the decay of 16 steps starts at 12 (factor 1 there, below it from 13); of 32 at 24


def records(sweep: Path) -> dict[int, dict]:
    return {r["config"]["steps"]: r for r in (json.loads(p.read_text()) for p in sweep.rglob("metrics.json"))}


def scalars(folder: Path, tag: str) -> list[tuple[int, float]]:
    out = []
    for f in sorted(folder.glob("events.out.tfevents.*")):
        ea = EventAccumulator(str(f))
        ea.Reload()
        if tag in ea.Tags()["scalars"]:
            out += [(e.step, e.value) for e in ea.Scalars(tag)]
    return sorted(out)


@pytest.fixture(scope="module")
def separate(tmp_path_factory):
    """The three horizons as separate runs (forks=false), once for the module."""
    tmp = tmp_path_factory.mktemp("separate")
    ran = command(*SWEEP, "forks=false", f"hydra.sweep.dir={tmp / 'sweep'}", cwd=tmp)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert not (tmp / "sweep" / forks.STORE).exists()
    return tmp / "sweep"


@pytest.fixture(scope="module")
def forked(tmp_path_factory):
    """The three horizons as one forked sweep (the default: forks=true), once for the module: the tests that read it, and
    the test that plants a state in a copy of it, share its training."""
    tmp = tmp_path_factory.mktemp("forked")
    ran = command(*SWEEP, f"hydra.sweep.dir={tmp / 'sweep'}", cwd=tmp)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return tmp / "sweep", ran


def test_branch_steps_follow_each_schedule():
    wsd = lambda h, big, warmup=0: forks.shared_until((h, h), (big, big), warmup, "wsd:0.25")
    assert wsd(40, 160) == 31 and wsd(80, 160) == 61  # the decay of 40 starts at 30 (factor 1 there)
    assert schedule_factor(30, 40, 0, "wsd:0.25") == schedule_factor(30, 160, 0, "wsd:0.25") == 1.0
    assert schedule_factor(31, 40, 0, "wsd:0.25") < schedule_factor(31, 160, 0, "wsd:0.25")
    assert wsd(40, 160, warmup=10) == 31  # the warmup is shared too
    assert forks.shared_until((40, 40), (160, 160), 0, "cosine") == 1  # parts at the first step: no fork
    assert forks.shared_until((40, 40), (160, 160), 0, "linear_to_zero") == 1
    assert forks.shared_until((40, 40), (160, 160), 0, "constant") == 39  # a prefix of the longer run
    assert forks.shared_until((40, 8), (160, 16), 0, "constant") == 7  # validated at 8 in one run only: parts there
    base = {"warmup": 0, "trainer": {"val_check_interval": 8}}
    assert forks.branch_step({**base, "steps": 16, "schedule": "wsd:0.25"}, (64, 8)) == 13
    assert forks.branch_step({**base, "steps": 16, "schedule": "cosine"}, (64, 8)) is None  # shares too little to fork
    assert forks.branch_step({**base, "steps": 16, "schedule": "wsd:0.75"}, (64, 8)) is None  # decays over 3/4 of its run


def test_a_sweep_over_steps_under_wsd_trains_the_stable_phase_once_each_branch_its_separate_run(forked, separate):
    sweep, ran = forked
    # the provider (64 steps) ran first, and wrote its state at each branch step, with its events so far
    assert ran.stdout.index("done  steps=64") < ran.stdout.index("done  steps=16"), ran.stdout
    assert "horizon forks: 1 family of 3 horizons" in ran.stdout and ": 74 of 112 steps to train" in ran.stdout, ran.stdout
    assert re.search(r"done  steps=16 seed=1: final validation loss [0-9.]+ \(16 steps, from step 13 of a longer run, ", ran.stdout)
    store = next((sweep / forks.STORE).glob("*/"))
    assert sorted(p.name for p in store.glob("*.ckpt")) == ["13.ckpt", "25.ckpt"] and any((store / "13.events").iterdir())
    assert not any("tfevents" in p.name for p in store.rglob("*"))  # `tensorboard --logdir <sweep>` shows the jobs alone
    got, alone = records(sweep), records(separate)
    for steps, b in BRANCH.items():
        r, a = got[steps], alone[steps]
        assert r["fork"] == {"from": str(sweep / "steps=64" / "seed=1"), "step": b} and r["resumed_from_step"] == b
        assert r["val_history"] == a["val_history"] and r["final_val_loss"] == a["final_val_loss"]  # bit for bit
        assert r["best_val_loss"] == a["best_val_loss"] and r["steps"] == steps == a["steps"]
        folder = sweep / f"steps={steps}" / "seed=1"
        for tag in ("Loss/train", "Loss/validation", "Schedule/learning_rate"):  # its curves from step 0, as its own run's
            assert scalars(folder, tag) == scalars(separate / f"steps={steps}" / "seed=1", tag), tag
        assert "horizon fork" in (folder / "train.log").read_text()
    assert "fork" not in got[64] and got[64]["val_history"] == alone[64]["val_history"]
    trained = sum(r["steps"] - (r.get("resumed_from_step") or 0) for r in got.values())
    assert trained == 64 + (16 - 13) + (32 - 25) < 16 + 32 + 64


def test_a_stopped_fork_sweep_resumes_to_the_same_records(tmp_path, separate):
    # SIGTERM at the provider's step 20: its state at 13 is written, the one at 25 not yet; the rerun resumes it
    sweep = tmp_path / "sweep"
    args = [*SWEEP, "checkpoint.every_n_steps=10", f"hydra.sweep.dir={sweep}"]
    stop = ["+callbacks.stop._target_=tests.stop_at.StopAt", "+callbacks.stop.step=20", f"+callbacks.stop.signum={int(signal.SIGTERM)}",
            f"+callbacks.stop.marker={tmp_path / 'stopped'}"]
    first = command(*args, *stop, cwd=tmp_path)
    assert first.returncode == 143, first.stderr[-3000:]
    store = next((sweep / forks.STORE).glob("*/"))
    assert (store / "13.ckpt").is_file() and not (store / "25.ckpt").exists()
    again = command(*args, *stop, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    got, alone = records(sweep), records(separate)
    assert got[64]["resumed_from_step"] == 20 and {got[s]["fork"]["step"] for s in BRANCH} == set(BRANCH.values())
    for steps in (16, 32, 64):
        assert got[steps]["val_history"] == alone[steps]["val_history"], steps


def test_the_vectorised_launcher_stacks_each_horizon_at_its_branch_step(tmp_path, separate):
    sweep = tmp_path / "sweep"
    ran = command(*SWEEP[:3], "seed=1,2", *SWEEP[4:], "hydra/launcher=vectorized", "hydra.launcher.engine=sequential",
                  f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "vectorized: 6 jobs in 3 stacked groups (3 of 2)" in ran.stdout, ran.stdout[-2000:]  # by the step each starts from
    alone = records(separate)
    for p in sweep.glob("steps=*/seed=1/metrics.json"):
        r = json.loads(p.read_text())
        steps = r["config"]["steps"]
        assert r["group"]["size"] == 2 and (r.get("fork") or {}).get("step") == BRANCH.get(steps)
        for (s, v), (s0, v0) in zip(r["val_history"], alone[steps]["val_history"], strict=True):
            assert s == s0 and abs(v - v0) <= 2e-6 * abs(v0), (steps, s, v, v0)  # a stacked group's float32 rounding


def test_local_parallel_branches_wait_for_the_provider_and_equal_their_separate_runs(tmp_path, separate):
    sweep = tmp_path / "sweep"
    ran = command(*SWEEP, "hydra/launcher=local_parallel", "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    got, alone = records(sweep), records(separate)
    for steps in (16, 32, 64):
        assert got[steps]["val_history"] == alone[steps]["val_history"], steps  # each worker trains a job alone: bit for bit
    assert {got[s]["fork"]["step"] for s in BRANCH} == set(BRANCH.values())
    # the second worker took a branch while the provider trained in the first, and waited for its state
    assert "waiting for the state at step" in (sweep / "steps=16" / "seed=1" / "train.log").read_text()


def test_a_state_of_another_run_in_the_store_is_refused_and_the_branch_trains_from_step_0(tmp_path, forked, separate):
    sweep = tmp_path / "sweep"
    shutil.copytree(forked[0], sweep, symlinks=True)  # the forked sweep, finished (its plan names folders relative to it)
    config = json.loads((sweep / "steps=32" / "seed=1" / "metrics.json").read_text())["config"]
    # the branches' records and checkpoints gone, and the state at 13 replaced by another run's (lr differs)
    store = next((sweep / forks.STORE).glob("*/"))
    for s in BRANCH:
        for name in ("metrics.json", "checkpoints/initnorm.ckpt"):
            (sweep / f"steps={s}" / "seed=1" / name).unlink()
    state = torch.load(store / "13.ckpt", weights_only=True)
    state["config"]["lr"] = 0.02  # the state of a run whose lr differs, in the branch's place
    torch.save(state, store / "13.ckpt")
    # a link planted (after the command's checks) in a branch's folder at the name its copied events take: replaced,
    # not followed out of the folder
    kept = min((store / "25.events").iterdir()).name.replace(forks.KEPT, forks.SHOWN)
    branch = tmp_path / "branch"
    branch.mkdir()
    (branch / kept).symlink_to(tmp_path / "outside")
    assert forks.adopt(forks.Fork(store, 25, (), sweep / "steps=64" / "seed=1"), branch, config, logging.getLogger("test_forks"))
    assert not (tmp_path / "outside").exists() and (branch / kept).is_file() and not (branch / kept).is_symlink()
    again = command(*SWEEP, f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    got, alone = records(sweep), records(separate)
    assert "fork" not in got[16] and got[16]["val_history"] == alone[16]["val_history"]  # from step 0, its own run
    assert "another config's state (lr differ)" in (sweep / "steps=16" / "seed=1" / "train.log").read_text()
    assert got[32]["fork"]["step"] == 25 and got[32]["val_history"] == alone[32]["val_history"]


def test_a_plan_that_is_not_initnorms_means_no_forks(tmp_path, caplog):
    (tmp_path / forks.STORE).mkdir()
    for text in ('{"format": "initnorm forks 1", "families": {"ab": {"provider": "../../etc", "members": [[16, 8]]}}}', "[1, 2", "7"):
        (tmp_path / forks.STORE / forks.PLAN).write_text(text)
        assert forks.read_plan(tmp_path)["families"] == {}
    assert "is not a plan initnorm wrote" in caplog.text


def test_a_branch_waits_while_its_provider_trains_and_not_after_it_ended(tmp_path):
    store, provider = tmp_path / "store", tmp_path / "provider"
    provider.mkdir()
    fork = forks.Fork(store, 13, (), provider)
    log = logging.getLogger("test_forks")
    with forks.providing([forks.Fork(store, None, (13,), provider)]):
        assert forks.provider_alive(store)
        threading.Timer(0.3, lambda: forks.point(store, 13).write_bytes(b"x")).start()
        start = time.monotonic()
        assert forks.wait(fork, log, lambda: None) and time.monotonic() - start >= 0.3
    assert not forks.provider_alive(store)
    forks.point(store, 13).unlink()
    (provider / "metrics.json").write_text(json.dumps({"status": "finished"}))  # it ended (diverged) before the branch step
    assert forks.wait(fork, log, lambda: None) is False
    (provider / "metrics.json").unlink()
    with forks.providing([forks.Fork(store, None, (13,), provider)]), pytest.raises(KeyboardInterrupt):
        forks.wait(fork, log, lambda: KeyboardInterrupt())  # a stop signal while it waits ends the wait


def test_a_sweep_whose_validations_part_its_horizons_says_how_to_share_the_stable_phase(tmp_path):
    ran = command("-m", "schedule=wsd:0.25", "steps=16,32", "seed=1", "callbacks=none", "checkpoint.every_n_steps=0",
                  "trainer.enable_progress_bar=false", "summary.plots=[]", f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "horizon forks: none, though the horizons share their first steps" in ran.stdout, ran.stdout
    assert "`trainer.val_check_interval=${steps}`" in ran.stdout and not (tmp_path / "sweep" / forks.STORE / forks.PLAN).exists()


class Code:
    """What a planted pickle may carry: a call made when it is loaded without ``weights_only``."""

    def __reduce__(self):
        return (print, ("ran",))


@pytest.mark.parametrize("kind", ["pickle", "text", "folder", "link"])
def test_a_file_planted_at_a_branch_point_is_one_line_naming_it_and_the_branch_trains_from_step_0(tmp_path, caplog, kind):
    """Issue 48, N05: whatever sits at ``.forks/<family>/<step>.ckpt`` that is not a state initnorm wrote (a pickle that would
    run code, text, a folder, a link) is refused in one console line naming the file (it was in train.log only)."""
    from initnorm.config import to_plain
    from tests.conftest import compose_cfg

    store, branch = tmp_path / ".forks" / "ab", tmp_path / "branch"
    store.mkdir(parents=True)
    at = forks.point(store, 13)
    {"pickle": lambda: torch.save(Code(), at), "text": lambda: at.write_text("not a state"), "folder": at.mkdir,
     "link": lambda: at.symlink_to(tmp_path / "elsewhere.ckpt")}[kind]()
    config = to_plain(compose_cfg("schedule=wsd:0.25", "steps=16"))
    with caplog.at_level(logging.WARNING, logger=forks.__name__):
        assert not forks.adopt(forks.Fork(store, 13, (), tmp_path / "provider"), branch, config, logging.getLogger("test_forks"))
    said = [r.getMessage() for r in caplog.records if r.name == forks.__name__]
    assert len(said) == 1 and str(at) in said[0] and "training from step 0" in said[0], said
    assert "\n" not in said[0] and not (branch / "checkpoints").exists()


def test_the_summary_tells_what_the_forks_saved_not_what_the_plan_said(tmp_path):
    """N05: the plan's saving line is said before training; the summary tells what the branches took."""
    from initnorm.summary import fork_note

    forks.write_plan(tmp_path, {"format": forks.PLAN_FORMAT, "families": {
        "ab": {"provider": "steps=64/seed=1", "members": [[16, 8], [32, 8], [64, 8]], "shared": 38}}})
    took = [{"steps": 64}, {"steps": 16, "fork": {"from": "p", "step": 13}}, {"steps": 32, "fork": {"from": "p", "step": 25}}]
    said = "Horizon forks: 2 branches started from the longest run's state, 112 steps recorded of which 74 trained."
    assert fork_note(tmp_path, took).strip() == said
    lost = [took[0], took[1], {"steps": 32}]  # one branch found no state it could take
    assert "1 branch started" in fork_note(tmp_path, lost) and "25 were trained again" in fork_note(tmp_path, lost)
    assert fork_note(tmp_path / "nothing", took) == ""
