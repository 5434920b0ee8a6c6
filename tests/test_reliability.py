"""Divergence is a result, nothing finished is lost, a failing job does not stop a sweep."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from initnorm import results
from initnorm.cli.train import train
from initnorm.errors import ConfigError
from initnorm.results import write_metrics
from initnorm.summary import summarize
from initnorm.training.checkpoints import save_atomically
from tests import inproc
from tests.conftest import ROOT, TINY, compose_cfg, whole_and_resumed


def explode(w, role, ctx):
    """A user init that always fails: the job's training raises (used as ``init.fn`` in a sweep)."""
    raise RuntimeError("boom: this init always fails")


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def test_divergence_stops_at_once_and_is_recorded(tmp_path):
    # Chapter 003's 30-layer ReLU MLP at N(0, 1): a first loss near 1e27, then NaN.
    m = train(compose_cfg(*TINY, "experiment=deep_mlp_train", "model.activation=relu", "init=unit_normal", "steps=50"), tmp_path)
    on_disk = read(tmp_path / "metrics.json")
    assert on_disk["status"] == "finished" and on_disk["diverged"] is True
    assert on_disk["diverged_step"] == m["diverged_step"] is not None and m["steps"] < 10  # stopped at once, not after 50 steps
    assert math.isnan(on_disk["final_val_loss"])
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert acc.Scalars("hp/diverged")[-1].value == 1.0 and acc.Scalars("hp/diverged_step")[-1].value == m["diverged_step"]


def test_summary_counts_diverged_runs_instead_of_averaging_nan(tmp_path):
    def job(norm, seed, loss, diverged=False):
        rec = {"status": "finished", "seed": seed, "overrides": {"norm": norm, "seed": str(seed)}, "swept": ["norm", "seed"],
               "diverged": diverged, "diverged_step": 7 if diverged else None, "final_val_loss": math.nan if diverged else loss}
        write_metrics(tmp_path / f"norm={norm}" / f"seed={seed}", rec)

    job("pre", 1, 2.0), job("pre", 2, 2.2), job("post", 1, 2.1), job("post", 2, None, diverged=True)
    table = summarize(tmp_path)
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith(("| pre", "| post"))}
    assert "2.100 ± 0.141" in rows["pre"] and "0/2" in rows["pre"]
    assert "| post | 2.100 | 2.100, diverged |" in rows["post"] and "2.100, diverged" in rows["post"]
    assert "1/2 (seed 2 at step 7)" in rows["post"]
    csv_rows = (tmp_path / "summary.csv").read_text().splitlines()
    post = next(r for r in csv_rows if r.startswith("post,"))
    assert post.startswith("post,2.1,0.0,1,") and post.split(",")[-2] == "1"


def test_checkpoint_and_metrics_writes_are_atomic(tmp_path, monkeypatch):
    path = tmp_path / "checkpoints" / "initnorm.ckpt"

    def write(payload, fail=False):
        def into(tmp):
            tmp.write_bytes(payload[: len(payload) // 2] if fail else payload)
            if fail:
                raise KeyboardInterrupt  # killed half way through the write

        return into

    save_atomically(path, write(b"old checkpoint"))
    with pytest.raises(KeyboardInterrupt):
        save_atomically(path, write(b"new checkpoint, never finished", fail=True))
    assert path.read_bytes() == b"old checkpoint" and sorted(p.name for p in path.parent.iterdir()) == ["initnorm.ckpt"]

    write_metrics(tmp_path, {"status": "finished"})

    def killed(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(results.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        write_metrics(tmp_path, {"status": "finished", "final_val_loss": 1.0})
    assert read(tmp_path / "metrics.json") == {"status": "finished"} and not list(tmp_path.glob(".metrics.json*"))


def test_sigkill_then_same_command_resumes_bit_for_bit(tmp_path):
    """kill -9 (no handler runs) of a run held after its checkpoint at step 10, then the same command: it resumes from
    that checkpoint to what an uninterrupted run computes, bit for bit. The kill needs the run's own process; the
    rerun is the library resuming, so it runs in this process (tests/inproc.py)."""
    hold = ["+callbacks.hold._target_=tests.stop_at.HoldAt", "+callbacks.hold.step=12", f"+callbacks.hold.marker={tmp_path / 'held'}"]
    args = [*TINY, "steps=30", "batch_size=8", "trainer.val_check_interval=10", "checkpoint.every_n_steps=10", *hold]
    command = [sys.executable, "-m", "initnorm.train", *args, f"hydra.run.dir={tmp_path}/run"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = tmp_path / "run"
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "held").exists():  # held at step 12, after its checkpoint at step 10
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended before its hold"
            time.sleep(0.05)
        assert (run / "checkpoints" / "initnorm.ckpt").is_file()
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL and not (run / "metrics.json").exists()  # killed mid-way

    again = inproc.command(*args, f"hydra.run.dir={run}", cwd=tmp_path)  # the hold's marker is there: it trains through
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resuming {run} from step" in again.stdout
    resumed = read(run / "metrics.json")
    whole = train(compose_cfg(*args), tmp_path / "uninterrupted")
    assert resumed["resumed_from_step"] == 10 and resumed["steps"] == 30
    assert resumed["final_val_loss"] == whole["final_val_loss"]  # bit for bit
    assert [tuple(v) for v in resumed["val_history"]] == [tuple(v) for v in whole["val_history"]]


def test_resume_restores_the_rng_that_dropout_draws_from(tmp_path):
    overrides = [*TINY, "model=char_mlp", "data=char_windows", "width=32", "model.dropout=0.3", "steps=120",
                 "trainer.val_check_interval=40", "checkpoint.every_n_steps=50"]
    whole, resumed = whole_and_resumed(overrides, tmp_path)
    assert resumed["resumed_from_step"] == 100  # the last checkpoint
    assert resumed["val_history"] == whole["val_history"]


def test_a_folder_of_another_config_is_refused(tmp_path):
    train(compose_cfg(*TINY), tmp_path)
    assert train(compose_cfg(*TINY, "trainer.enable_progress_bar=true"), tmp_path)["skipped"]  # watching differently is fine
    with pytest.raises(ConfigError, match=r"holds a finished run of a different config \(lr: 0.01 -> 0.03\)"):
        train(compose_cfg(*TINY, "lr=0.03"), tmp_path)


def test_rerun_sweep_skips_finished_resumes_killed_and_records_failures(tmp_path):
    """What a sweep writes and what its rerun skips, resumes and records: the library's work, so both commands run in
    this process (tests/inproc.py)."""
    sweep = tmp_path / "sweep"
    args = ["-m", "init=custom", "init.fn=initnorm.nn.init.normal,tests.test_reliability.explode", "seed=1,2", *TINY,
            "checkpoint.every_n_steps=5", "summary.plots=[]", f"hydra.sweep.dir={sweep}"]  # the summary's table, not its figure
    first = inproc.command(*args, cwd=tmp_path)
    assert first.returncode == 1, first.stderr[-2000:]  # the sweep went on, then says something failed
    good, bad = sweep / "init.fn=initnorm.nn.init.normal", sweep / "init.fn=tests.test_reliability.explode"
    for seed in (1, 2):
        assert read(good / f"seed={seed}" / "metrics.json")["status"] == "finished"
        failed = read(bad / f"seed={seed}" / "metrics.json")
        assert failed["status"] == "failed" and failed["error"] == "RuntimeError: boom: this init always fails"
    row = next(line for line in (sweep / "summary.md").read_text().splitlines() if line.startswith("| tests.test_reliability.explode"))
    assert "| failed |" in row and "seed 1: RuntimeError: boom" in row and "seed 2: RuntimeError: boom" in row

    kept, killed = good / "seed=1" / "metrics.json", good / "seed=2" / "metrics.json"
    before, stamp, lost = kept.read_text(), kept.stat().st_mtime_ns, read(killed)
    killed.unlink()  # as if killed after its last checkpoint (step 10 of 12)

    second = inproc.command(*args, cwd=tmp_path)
    assert second.returncode == 1
    assert "4 jobs: 1 finished (skipped), 1 resume (from step 10), 2 to run" in second.stdout
    assert kept.read_text() == before and kept.stat().st_mtime_ns == stamp  # not retrained, not rewritten
    resumed = read(killed)
    assert resumed["resumed_from_step"] == 10 and resumed["final_val_loss"] == lost["final_val_loss"]
    summary = (sweep / "summary.md").read_text()
    assert "4 jobs." in summary and "RuntimeError: boom" in summary
