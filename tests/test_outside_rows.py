"""The rows of issue 48's "found from outside" that are a job's or a sweep's own behaviour, each tested by its class:
a tracker that fails mid-run (F4: any logger, not only MLflow), an early stop (ES: any callback's deliberate stop), a
failed job in the summary (N02), a directory planted where a checkpoint goes (C10), an unknown trainer key (BV1).
Tiny jobs, in this process."""

from __future__ import annotations

import json

import pytest
from lightning.pytorch.loggers import CSVLogger

from initnorm.config import to_plain
from initnorm.training.fit import Member, fit
from tests.conftest import compose_cfg
from tests.inproc import command

TINY = ["steps=20", "width=8", "trainer.val_check_interval=10", "log_every=5", "checkpoint.every_n_steps=0", "callbacks=none"]


class FailingLogger(CSVLogger):
    """A tracker whose store goes away at step 10: every call from then on raises, as MLflow's did on an overwritten store."""

    def __init__(self, save_dir: str, **kwargs):
        super().__init__(save_dir, name="failing")

    def log_metrics(self, metrics, step=None):
        if step is not None and step >= 10:
            raise OSError("the store went away")
        super().log_metrics(metrics, step)

    def finalize(self, status):
        raise OSError("the store went away")


def test_a_tracker_that_fails_mid_run_costs_the_tracker_only(tmp_path, caplog):
    """F4: a logger raising mid-run (an MLflow store overwritten, a server gone) is one warning line; the job trains to its
    end, every other tracker gets everything, and the record names the tracker that failed."""
    cfg = to_plain(compose_cfg(*TINY, "logger=[tensorboard,csv]"))
    cfg["logger"]["failing"] = {"_target_": f"{__name__}.FailingLogger"}
    (r,) = fit([Member(cfg, tmp_path / "job")])
    assert r["status"] == "finished" and r["steps"] == 20
    assert r["trackers_failed"] == {"failing": "log_metrics: OSError: the store went away"}
    assert json.loads((tmp_path / "job" / "metrics.json").read_text())["trackers_failed"] == r["trackers_failed"]
    said = [rec for rec in caplog.records if "tracker failed" in rec.getMessage()]
    assert len(said) == 1 and "the failing tracker failed (OSError: the store went away, in log_metrics)" in said[0].getMessage()
    steps = [line.rsplit(",", 1)[1] for line in (tmp_path / "job" / "csv" / "metrics.csv").read_text().splitlines()[1:]]
    assert steps[-1] == "20"  # the csv tracker beside it got the last step's record


def test_a_sweep_whose_jobs_a_callback_stopped_early_is_finished_and_exits_0(tmp_path):
    """ES: Lightning's EarlyStopping (a callback's decision, not a failure) ends each job early; the sweep reports them
    finished, early-stopped: no Failed column, no "did not finish", exit status 0."""
    stop = ["+callbacks.stop._target_=lightning.pytorch.callbacks.EarlyStopping", "+callbacks.stop.monitor=val_loss",
            "+callbacks.stop.patience=0", "+callbacks.stop.min_delta=100"]
    proc = command("-m", "seed=1,2", *TINY[:-1], "steps=40", "summary.plots=[]", *stop, f"hydra.sweep.dir={tmp_path / 'sweep'}",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in (tmp_path / "sweep").rglob("metrics.json")]
    assert [r["status"] for r in records] == ["finished", "finished"] and all(r["steps"] < 40 for r in records), records
    assert all("stopped the fit at step" in r["early_stopped"] for r in records)
    summary = (tmp_path / "sweep" / "summary.md").read_text()
    assert "Failed" not in summary and "did not finish" not in proc.stdout


def test_a_failed_job_adds_no_column_to_the_summary(tmp_path):
    """N02: a job that failed before training has no config in its record; it said nothing of the keys nobody swept, so it
    must not split the table by the first of them (it was batch_size: an empty column, and "Not swept, yet set
    differently between jobs")."""
    from initnorm.summary import summarize
    from initnorm.training.fit import _failed

    sweep = tmp_path / "sweep"
    cfgs = {s: to_plain(compose_cfg(*TINY, f"seed={s}")) for s in (1, 2)}
    meta = lambda s: {"overrides": {"seed": str(s), "lr": "0.01"}, "swept": ["seed"]}
    fit([Member(cfgs[1], sweep / "seed=1", meta=meta(1))])
    _failed(Member(cfgs[2], sweep / "seed=2", meta=meta(2)), RuntimeError("the data went away"))
    table = summarize(sweep)
    assert "Not swept" not in table and "batch_size" not in table
    assert "Failed" in table.splitlines()[0] and "RuntimeError: the data went away" in table


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_what_stands_at_a_checkpoints_name_is_found_before_training(tmp_path, kind):
    """C10: a folder (or a FIFO) at checkpoints/initnorm.ckpt was found only at the first checkpoint, after training: it is
    one line in the command's preflight, and a fit of the library refuses it at set-up, before any step."""
    import os

    from initnorm.errors import ConfigError
    from initnorm.training.resume import checkpoint_path

    run = tmp_path / "run"
    at = checkpoint_path(run)
    at.parent.mkdir(parents=True)
    at.mkdir() if kind == "folder" else os.mkfifo(at)
    proc = command(*TINY, f"hydra.run.dir={run}", cwd=tmp_path)
    said = f"{at} is a {'folder' if kind == 'folder' else 'FIFO'}"
    assert proc.returncode == 2 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (run / "metrics.json").exists()
    with pytest.raises(ConfigError, match=said):
        fit([Member(to_plain(compose_cfg(*TINY)), run)])
    assert not (run / "metrics.json").exists() and not (run / "train.log").exists()


@pytest.mark.parametrize("key, closest", [("bogus", None), ("max_step", "max_steps"), ("gradient_clip", "gradient_clip_val")])
def test_a_key_lightnings_trainer_does_not_take_is_one_line_with_the_closest_and_the_fix(tmp_path, key, closest):
    """BV1: `+trainer.bogus=1` was Lightning's TypeError and a traceback, after the job had started."""
    proc = command(*TINY, f"+trainer.{key}=1", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    said = proc.stderr.strip()
    assert proc.returncode == 2 and len(said.splitlines()) == 1 and "Traceback" not in said, said[-2000:]
    assert f"trainer.{key}: Lightning's Trainer takes no argument '{key}'" in said and f"`~trainer.{key}`" in said
    assert (f"the closest it takes: {closest}" in said) if closest else "closest" not in said
    assert not (tmp_path / "run").exists()


def test_a_command_that_runs_a_sweep_inside_itself_resumes_itself(tmp_path):
    """TR1: initnorm-transfer stopped by SIGTERM printed the inner sweep's resume line (`initnorm.train -m ...`), which never
    writes transfer_report.md; its own line resumes it, and that line, run, finishes the jobs and writes the report."""
    import shlex
    import signal

    from initnorm.cli import transfer
    from tests.inproc import run

    search = tmp_path / "search"
    search.mkdir()
    (search / "search.json").write_text(json.dumps({
        "best": {"number": 0, "state": "COMPLETE", "params": {"lr": 0.01}, "loss": 2.0}, "trials": [],
        "overrides": [*TINY, "hparams_search=lr_base"], "seeds": [1], "metric": "final_val_loss", "objective": "mean"}))
    stop = ["+callbacks.stop._target_=tests.stop_at.StopAt", "+callbacks.stop.step=5", f"+callbacks.stop.signum={int(signal.SIGTERM)}",
            f"+callbacks.stop.marker={tmp_path / 'stopped'}"]
    args = [str(search), "width=8,16", *stop]
    first = run(transfer.main, ["initnorm-transfer", *args], tmp_path)
    assert first.returncode == 143, first.stderr[-3000:]
    resume = [line for line in first.stderr.splitlines() if line.startswith("resume with: ")]
    assert resume == [f"resume with: {shlex.join(['python', '-m', 'initnorm.cli.transfer', *args])}"], first.stderr[-3000:]
    assert not (tmp_path / "search_transfer" / "transfer_report.md").exists()
    again = run(transfer.main, ["initnorm-transfer", *shlex.split(resume[0].removeprefix("resume with: "))[3:]], tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "| 16 |" in (tmp_path / "search_transfer" / "transfer_report.md").read_text()


class NotASearchSweeper:
    """A class whose name ends as the search's does, and is not one."""


def test_the_search_sweeper_is_told_by_its_type_not_its_name():
    """Issue 48 (behaviour decided by strings): the preflight read `_target_.endswith(".SearchSweeper")`; now
    `launchers.kind` reads the class the target names and its bases."""
    from initnorm.cli import launchers

    assert launchers.kind({"_target_": "hydra_plugins.initnorm_launchers.SearchSweeper"}) == "search"
    assert launchers.kind({"_target_": f"{__name__}.NotASearchSweeper"}) is None
    assert launchers.kind({"_target_": "hydra_plugins.initnorm_launchers.CheckedSweeper"}) != "search"
    assert launchers.kind({"_target_": "no_such_module.SearchSweeper"}) is None


def test_a_record_larger_than_its_bound_is_told_by_its_type(tmp_path, caplog, monkeypatch):
    """results.read_record read the error's text (`startswith("larger")`) to choose its advice; now the type (TooLarge)."""
    from initnorm import results

    monkeypatch.setattr(results, "MAX_RECORD_BYTES", 10)
    (tmp_path / "metrics.json").write_text('{"status": "finished", "seed": 1}')
    assert results.read_record(tmp_path / "metrics.json") is None
    assert "larger than 10 bytes" in caplog.text and "a rerun of that job trains it again" in caplog.text
