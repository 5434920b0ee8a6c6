"""Issue 34: files a hostile user plants in run and sweep folders. Nothing read from a folder names
code, no reader hangs on a FIFO or follows a link, and no write lands in a link's target. One test per class."""

from __future__ import annotations

import json
import logging
import os

import pytest
import torch

from initnorm import results
from initnorm.cli import console
from initnorm.errors import ConfigError


def record(seed: int) -> dict:
    return {"status": "finished", "seed": seed, "overrides": {"seed": str(seed)}, "swept": ["seed"], "diverged": False,
            "final_val_loss": 2.0, "job_num": seed - 1}


def no_sweep_env(monkeypatch):
    """The sweep's variables unset for a command run in this process, and as they were after it (the sweep sets them itself)."""
    from initnorm.cli import sweep

    for name in (sweep.SWEPT_ENV, console.TOTAL_ENV, console.START_ENV):
        monkeypatch.setenv(name, "")  # recorded, so that the test's end restores it (delenv alone forgets an unset one)
        monkeypatch.delenv(name)


@pytest.fixture
def sweep_env(monkeypatch):
    monkeypatch.setenv(console.TOTAL_ENV, "4")
    monkeypatch.setenv(console.START_ENV, "1")


# ---- readers: no FIFO opened, no link followed, a bound on what is read


def test_a_fifo_named_progress_never_hangs_the_sweep(tmp_path, alarm, sweep_env):
    """A FIFO named .progress hung the sweep's progress line after its jobs finished (and SIGTERM with it: the
    handler only sets a flag while open() blocks)."""
    results.write_metrics(tmp_path / "seed=1", record(1))
    for seed in (2, 3):
        (tmp_path / f"seed={seed}").mkdir()
    os.mkfifo(tmp_path / "seed=2" / results.PROGRESS_FILE)
    (tmp_path / "seed=3" / results.PROGRESS_FILE).write_text("5 10\n")
    assert console.sweep_progress(tmp_path, now=3.0) == "1/4 done, estimating time left"  # nothing hung (one end: no rate yet)


def test_a_link_to_dev_zero_named_progress_reads_a_bounded_amount(tmp_path, sweep_env, monkeypatch):
    """/dev/zero behind a link named .progress ate the memory of the job whose end line read it (recorded as failed)."""
    results.write_metrics(tmp_path / "seed=1", record(1))
    (tmp_path / "seed=2").mkdir()
    os.symlink("/dev/zero", tmp_path / "seed=2" / results.PROGRESS_FILE)
    read, real = [], os.read

    def counted(fd, n):
        data = real(fd, min(n, 1 << 20))
        read.append(len(data))
        return data

    monkeypatch.setattr(os, "read", counted)
    assert console.sweep_progress(tmp_path).startswith("1/4 done")
    assert sum(read) == len(json.dumps(record(1), indent=2, sort_keys=True)) + 1  # the record; not a byte of /dev/zero


@pytest.mark.parametrize("how", ["fifo", "link"])
def test_no_reader_of_a_run_folder_opens_a_fifo_or_follows_a_link(tmp_path, alarm, caplog, how):
    """Every reader of a file in a run or sweep folder, planted with a FIFO or a link to another folder's (genuine)
    file: ignored or refused in one line naming what it is, never a hang, never the link's target read."""
    from initnorm.cli import transfer
    from initnorm.instruments.coord.analysis import read_rows, unit_lines
    from initnorm.instruments.diagnostics.analysis import read_events
    from initnorm.training.resume import load_checkpoint

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = {  # name in the folder -> what a genuine file of that name holds
        "metrics.json": json.dumps(record(1)),
        "coord.csv": "width,depth,param,seed,step,layer,role,value\n16,2,sp,1,0,logits/output,readout,1.0\n",
        "unit_scale.txt": "planted verdict\n",
        "search.json": json.dumps({"best": {"params": {"lr": 0.1}, "loss": 1.0}, "overrides": [], "seeds": [1]}),
        "runs.csv": results.render_runs_csv([record(1) | {"_dir": "seed=1"}]),
        "events.out.tfevents.1.host.1.0": "",
    }
    job = tmp_path / "sweep" / "seed=1"
    (job / "checkpoints").mkdir(parents=True)
    for name, text in victim.items():
        (elsewhere / name).write_text(text)
        os.mkfifo(job / name) if how == "fifo" else os.symlink(elsewhere / name, job / name)
    torch.save({"global_step": 5}, elsewhere / "initnorm.ckpt")
    ckpt = job / "checkpoints" / "initnorm.ckpt"
    os.mkfifo(ckpt) if how == "fifo" else os.symlink(elsewhere / "initnorm.ckpt", ckpt)
    kind = "a FIFO" if how == "fifo" else "a symbolic link to "

    with caplog.at_level(logging.WARNING):
        assert results.read_metrics(job) == []
        with pytest.raises(ConfigError, match="no coord.csv below"):
            read_rows(job.parent)  # (a coord.csv in the folder read is the combined one it writes)
        assert unit_lines(job.parent) == f"unit scale, seed=1: not read ({kind}{elsewhere / 'unit_scale.txt' if how == 'link' else ''})\n"
        assert read_events(job) == {}
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert f"metrics.json: {kind}" in warned and f"coord.csv: {kind}" in warned and f"is {kind}" in warned
    for read, name in [(transfer.load, "search.json"), (results.read_runs_csv, "runs.csv")]:
        with pytest.raises(ConfigError, match=f"{name} is {kind}"):
            read(job)
    with pytest.raises(ConfigError, match=f"initnorm.ckpt is {kind}.*not a checkpoint initnorm wrote"):
        load_checkpoint(ckpt)


def test_read_bounded_refuses_a_big_file_and_names_the_bound(tmp_path):
    from initnorm import safe_files

    path = tmp_path / "big"
    with open(path, "wb") as f:
        f.truncate(2 * safe_files.KiB + 1)
    with pytest.raises(safe_files.NotAFile, match="larger than 2 KiB"):
        safe_files.read_bounded(path, 2 * safe_files.KiB)
    assert len(safe_files.read_bounded(path, 4 * safe_files.KiB)) == 2 * safe_files.KiB + 1


def test_open_no_follow_never_opens_a_device(tmp_path, monkeypatch):
    """lstat first: a link to a device (or a FIFO) is refused before any open(), which for some devices does something."""
    from initnorm import safe_files

    os.symlink("/dev/null", tmp_path / "dev")
    opened = []
    monkeypatch.setattr(os, "open", lambda *a, **k: opened.append(a))
    with pytest.raises(safe_files.NotAFile, match="a symbolic link to /dev/null"):
        safe_files.open_no_follow(tmp_path / "dev")
    assert opened == []


# ---- the lock: never opened through a link, never a FIFO


@pytest.mark.parametrize("what", ["link", "dangling", "fifo"])
def test_a_planted_lock_file_is_refused_and_its_target_untouched(tmp_path, alarm, what):
    """A link named .initnorm.lock to another sweep's finished metrics.json: the rerun opened it O_RDWR|O_CREAT and truncated
    the victim to its pid. A link to nowhere would have been created; a FIFO opened. Each is now one line, nothing written."""
    from initnorm.cli import lock

    victim = tmp_path / "other" / "metrics.json"
    results.write_metrics(victim.parent, record(1))
    before = victim.read_bytes()
    folder = tmp_path / "sweep"
    folder.mkdir()
    planted = folder / lock.LOCK_FILE
    {"link": lambda: os.symlink(victim, planted), "dangling": lambda: os.symlink(tmp_path / "new", planted),
     "fifo": lambda: os.mkfifo(planted)}[what]()
    with pytest.raises(ConfigError) as err:
        lock.claim(folder, "hydra.sweep.dir")
    line = str(err.value)
    assert "\n" not in line and f"{planted} is a " in line and "not initnorm's lock file" in line and "`hydra.sweep.dir=...`" in line
    assert victim.read_bytes() == before and not (tmp_path / "new").exists()
    assert str(folder.absolute()) not in lock._held


# ---- overrides read from a file are data: search.json -> initnorm-transfer

CODE = [  # what a copied search.json may hold, each naming code one way
    "data._target_=os.system", "+data.command='touch X'", "model.family=os:system", "param.name=mypkg.tables.mine",
    "init.fn=os.system", "norm_type.name=os:system", "data.kind=os:system", "init.per_role.readout=os:system",
    "+callbacks.evil._target_=os.system", "callbacks.stats._target_=os.system", "trainer.plugins=x", "logger.mlflow.x=1",
    "+logger.evil._target_=os.system", "hydra/launcher=slurm", "hydra.job.env_set.X=1", "+hydra.callbacks.x._target_=os.system",
    "logger@callbacks.x=mlflow", "data.name=${oc.env:HOME}", "model.foo={_target_: os.system}", "model.foo=[{_target_: os.system}]",
    "param=../../tmp/evil", "logger=[tensorboard,evil]", "lr=0.1,0.2", "lr=abc", 7,
]


@pytest.mark.parametrize("planted", CODE)
def test_an_override_from_a_file_that_could_name_code_is_refused(planted):
    from initnorm.cli.file_overrides import data_overrides

    with pytest.raises(ConfigError) as err:
        data_overrides(["param=mup", "steps=20", planted], "/s/search.json")
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"/s/search.json: {planted!r} ") and "data only" in line


def test_an_override_from_a_file_that_sets_a_value_is_kept():
    from initnorm.cli.file_overrides import data_overrides

    data = ["param=mup", "width=64", "steps=20", "lr=0.01", "logger=[csv]", "data=alice", "norm_type.eps=1e-5", "+summary.tail_steps=3",
            "model=custom", "init=xavier", "param.name=mup", "callbacks.stats.every_n_steps=5", "~logger", "experiment=null"]
    assert data_overrides(data, "search.json") == data


def search_folder(folder, overrides, params=None) -> None:
    folder.mkdir()
    (folder / "search.json").write_text(json.dumps({
        "best": {"number": 0, "state": "COMPLETE", "params": params or {"lr": 0.01}, "loss": 2.0}, "trials": [],
        "overrides": overrides, "seeds": [1], "metric": "final_val_loss", "objective": "mean final_val_loss over seeds [1]"}))


@pytest.mark.parametrize("overrides,params", [
    (["hparams_search=lr_base", "model=custom", "model._target_=torch.nn.Linear", "model.width_arg=in_features",
      "model.vocab_arg=out_features", "data=custom", "data._target_=os.system",
      "+data.command='touch {marker}'"], None),
    (["steps=2"], {"lr": 0.01, "data._target_": "os.system"}),  # the best trial's values are read from the file too
])
def test_a_copied_search_folder_cannot_run_a_command_through_transfer(tmp_path, capsys, monkeypatch, overrides, params):
    """initnorm-transfer FOLDER width=32 handed search.json's overrides to the train command: `touch X` ran."""
    from initnorm.cli import transfer

    marker = tmp_path / "X"
    search_folder(tmp_path / "search", [o.format(marker=marker) for o in overrides], params)
    monkeypatch.chdir(tmp_path)
    assert transfer.main([str(tmp_path / "search"), "width=32"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{tmp_path / 'search' / 'search.json'}: " in err[0] and "._target_=" in err[0], err
    assert not marker.exists() and not (tmp_path / "search_transfer").exists()


@pytest.mark.parametrize("field,value", [("overrides", "data._target_=os.system"), ("seeds", ["1; touch X"]), ("best", {"params": []}),
                                         ("metric", "a b")])
def test_a_search_json_of_the_wrong_shape_is_one_line(tmp_path, field, value):
    from initnorm.cli import transfer

    search_folder(tmp_path / "s", [])
    summary = json.loads((tmp_path / "s" / "search.json").read_text()) | {field: value}
    (tmp_path / "s" / "search.json").write_text(json.dumps(summary))
    with pytest.raises(ConfigError, match=f"its {field} is not of a search's types"):
        transfer.load(tmp_path / "s")


# ---- a search's study is data: a trial left running is launched again only with the space's keys and values

ATTACK = {"model": "custom", "model._target_": "torch.nn.Linear", "model.width_arg": "in_features", "model.vocab_arg": "out_features",
          "data": "custom", "data._target_": "os.system", "+data.command": "touch {marker}"}


@pytest.mark.parametrize("planted,says", [
    (ATTACK | {"lr": 0.01}, "holds the keys +data.command, data, data._target_, lr, model, model._target_"),
    ({"lr": 0.01, "data._target_": "os.system"}, "holds the keys data._target_, lr, not the search space's (lr)"),
    ({"lr": 5.0}, "holds lr=5.0, which the search space (lr: FloatDistribution(high=0.1, log=True, low=0.0001, step=None)) cannot ask"),
    ({"lr": "0.01"}, "holds lr='0.01', which the search space"),
    ({}, "holds the keys (none), not the search space's (lr)"),
])
def test_a_planted_running_trial_is_refused_and_nothing_is_launched(tmp_path, planted, says):
    """A RUNNING trial in search.journal is launched again with its own values when the search is rerun (its documented resume);
    its params became `k=v` overrides unchecked. Now: exactly the space's keys, each value one the space could ask."""
    import optuna

    from initnorm.search.study import STUDY_FILE, open_study
    from tests.test_search import run_search

    marker = tmp_path / "X"
    folder = tmp_path / "search"
    folder.mkdir()
    study = open_study(folder)
    values = {k: v.format(marker=marker) if isinstance(v, str) else v for k, v in planted.items()}
    study.ask({k: optuna.distributions.CategoricalDistribution([v]) for k, v in values.items()})  # asked, never told
    stop = run_search(folder, 1)
    err = stop.stderr.strip().splitlines()
    assert stop.returncode == 2 and len(err) == 1 and err[0].startswith(f"error: {folder / STUDY_FILE}: its trial 0, left running, "), err
    assert says in err[0], err[0]
    assert not marker.exists() and sorted(p.name for p in folder.iterdir()) == [STUDY_FILE]  # no job folder, no multirun.yaml


# ---- a tracker's run id is trusted only where the job's own record vouches for it


def mlflow_job(tmp_path, monkeypatch):
    """A logger node on an MLflow file store, and a finished run of another job there (the victim)."""
    pytest.importorskip("mlflow")
    from initnorm.config import to_plain
    from initnorm.training import trackers
    from tests.conftest import compose

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    node = to_plain(compose("logger=mlflow", f"logger.mlflow.tracking_uri={uri}"))["logger"]
    victim = trackers.make(node, tmp_path / "other", "seed=1")
    for writer in trackers.writers(victim):
        writer.add_scalar("Loss/train", 1.0, 1)
    trackers.finish(victim)
    return node, uri, victim[0].run_id


def history(uri: str, run_id: str) -> list[tuple[int, float]]:
    from mlflow.tracking import MlflowClient

    return [(m.step, m.value) for m in MlflowClient(uri).get_metric_history(run_id, "Loss/train")]


@pytest.mark.parametrize("case,checkpoint,written_for,says", [
    ("fresh, as main wrote it", False, None, "holds no checkpoint of this job"),
    ("fresh", False, "job", "holds no checkpoint of this job"),
    ("beside its checkpoint, as main wrote it", True, None, "not this job's run ids"),
    ("beside its checkpoint, copied from another folder", True, "other", "not this job's run ids"),
    ("beside its checkpoint, forged to name this folder", True, "job", "was not made in"),
])
def test_a_planted_trackers_json_never_sends_a_job_into_another_jobs_run(tmp_path, monkeypatch, caplog, case, checkpoint, written_for,
                                                                         says):
    """trackers.json planted in a job folder, naming another job's finished MLflow run: the job logged into it, whose
    curves then held both. A fresh job (no checkpoint of its own) ignores the file; beside its checkpoint, a file not written
    for this folder is not its own, and a run whose own tag names another folder is not this job's either."""
    from initnorm.training import trackers

    node, uri, victim = mlflow_job(tmp_path, monkeypatch)
    job = tmp_path / "job"
    job.mkdir()
    if checkpoint:
        (job / "checkpoints").mkdir()
        torch.save({"global_step": 5}, job / "checkpoints" / "initnorm.ckpt")
    planted = ({"mlflow": victim} if written_for is None  # the layout main wrote (and read)
               else {"folder": str((tmp_path / written_for).resolve()), "runs": {"mlflow": victim}})
    (job / trackers.RUN_IDS).write_text(json.dumps(planted))
    with caplog.at_level(logging.WARNING):
        loggers = trackers.make(node, job, "seed=2")
        for writer in trackers.writers(loggers):
            writer.add_scalar("Loss/train", 2.0, 2)
        trackers.finish(loggers)
    assert loggers[0].run_id != victim and history(uri, victim) == [(1, 1.0)]
    assert sum(says in r.getMessage() for r in caplog.records) == 1, [r.getMessage() for r in caplog.records]
    assert json.loads((job / trackers.RUN_IDS).read_text())["runs"] == {"mlflow": loggers[0].run_id}  # its own, for its resume


# ---- writes: nothing planted in an output folder is written through


@pytest.mark.parametrize("where,make", [
    ("multirun.yaml", "file"), ("default/seed=1/train.log", "file"), ("default/seed=1/.hydra", "folder"), ("default/seed=1", "folder"),
    ("default/seed=1/checkpoints", "folder"), ("default/seed=1/csv/metrics.csv", "file"), ("default/seed=2/.progress", "fifo"),
    ("search.db", "file"), ("summary.md", "file"), ("default/seed=1/events.out.tfevents.1.host.1.0", "file"),
])
def test_a_link_or_fifo_in_a_named_sweep_folder_is_refused_before_anything_runs(tmp_path, where, make):
    """A link planted as multirun.yaml made Hydra overwrite its target, one as train.log got the job's lines appended to its
    target; a job folder, its .hydra/ or checkpoints/ as a link carried every write there into another folder."""
    from initnorm.cli.preflight import check_command_line

    victim = tmp_path / "victim"
    (victim / "inside").mkdir(parents=True)
    (victim / "file").write_text("the victim's\n")
    sweep = tmp_path / "sweep"
    planted = sweep / where
    planted.parent.mkdir(parents=True, exist_ok=True)
    {"file": lambda: os.symlink(victim / "file", planted), "folder": lambda: os.symlink(victim / "inside", planted),
     "fifo": lambda: os.mkfifo(planted)}[make]()
    with pytest.raises(ConfigError) as err:
        check_command_line(["-m", "seed=1,2", "steps=2", f"hydra.sweep.dir={sweep}"])
    line = str(err.value)
    what = "a FIFO" if make == "fifo" else f"a symbolic link to {victim / ('file' if make == 'file' else 'inside')}"
    assert "\n" not in line and line.startswith(f"{planted} is {what}, ") and "`hydra.sweep.dir=...`" in line, line
    assert (victim / "file").read_text() == "the victim's\n" and os.listdir(victim / "inside") == []


def test_a_link_in_a_named_run_folder_is_refused(tmp_path):
    from initnorm.cli.preflight import check_command_line

    (tmp_path / "run").mkdir()
    os.symlink(tmp_path / "victim", tmp_path / "run" / "train.log")
    with pytest.raises(ConfigError, match=f"{tmp_path / 'run' / 'train.log'} is a symbolic link to .*`hydra.run.dir=...`"):
        check_command_line(["steps=2", f"hydra.run.dir={tmp_path / 'run'}"])


def test_a_sweep_into_a_folder_with_a_planted_multirun_yaml_is_one_line_and_leaves_the_target(tmp_path, monkeypatch):
    from initnorm.cli.train import main
    from tests.conftest import TINY
    from tests.inproc import run

    victim = tmp_path / "other" / "metrics.json"
    results.write_metrics(victim.parent, record(1))
    before = victim.read_bytes()
    (tmp_path / "sweep").mkdir()
    os.symlink(victim, tmp_path / "sweep" / "multirun.yaml")
    no_sweep_env(monkeypatch)
    stop = run(main, ["initnorm.train", "-m", "seed=1,2", *TINY, "steps=4", f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    err = stop.stderr.strip().splitlines()
    assert stop.returncode == 2 and len(err) == 1 and "multirun.yaml is a symbolic link to" in err[0], err
    assert victim.read_bytes() == before and os.listdir(tmp_path / "sweep") == ["multirun.yaml"]


def test_hydras_writes_never_go_through_a_link_planted_after_the_preflight(tmp_path, monkeypatch):
    """Planted after the command was checked (or in a folder it could not name): multirun.yaml, the job's train.log and its
    .hydra/ are taken away (the entry, not its target) before Hydra writes there; the job trains as usual."""
    from initnorm.cli.train import hydra_main
    from tests.conftest import TINY
    from tests.inproc import run

    victim = tmp_path / "victim"
    (victim / "inside").mkdir(parents=True)
    (victim / "file").write_text("the victim's\n")
    job = tmp_path / "sweep" / "default" / "seed=1"
    job.mkdir(parents=True)
    os.symlink(victim / "file", tmp_path / "sweep" / "multirun.yaml")
    os.symlink(victim / "file", job / "train.log")
    os.symlink(victim / "inside", job / ".hydra")
    no_sweep_env(monkeypatch)
    # Hydra itself, without the preflight, in this process (tests/inproc.py: its job's logging and config are put back)
    ran = run(hydra_main, ["initnorm.train", "-m", "seed=1", *TINY, "steps=4", f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert (victim / "file").read_text() == "the victim's\n" and os.listdir(victim / "inside") == []
    for path in (tmp_path / "sweep" / "multirun.yaml", job / "train.log", job / ".hydra" / "config.yaml", job / "metrics.json"):
        assert not path.is_symlink() and path.is_file(), path  # (train.log holds only warnings: none here)
    assert (job / ".hydra").is_dir() and not (job / ".hydra").is_symlink() and "seed: 1" in (job / ".hydra" / "config.yaml").read_text()
    assert json.loads((job / "metrics.json").read_text())["status"] == "finished"


def test_the_log_handler_takes_a_planted_fifo_or_link_away(tmp_path, alarm, capsys):
    from initnorm.safe_files import AppendHandler

    (tmp_path / "victim").write_text("the victim's\n")
    os.symlink(tmp_path / "victim", tmp_path / "a.log")
    os.mkfifo(tmp_path / "b.log")
    for name, what in (("a.log", "a symbolic link to"), ("b.log", "a FIFO")):
        handler = AppendHandler(tmp_path / name)
        handler.emit(logging.makeLogRecord({"msg": "a line"}))
        handler.close()
        assert (tmp_path / name).read_text() == "a line\n" and f"removed {what}" in capsys.readouterr().err
    assert (tmp_path / "victim").read_text() == "the victim's\n"


@pytest.mark.parametrize("name", ["search.journal", "search.journal.lock", "search.db"])
def test_a_link_in_place_of_the_study_is_refused(tmp_path, name):
    pytest.importorskip("optuna")
    from initnorm.cli.search import SearchSweeper

    os.symlink(tmp_path / "victim.db", tmp_path / name)
    with pytest.raises(ConfigError, match=f"{name} is a symbolic link to .*not a study initnorm wrote, and Optuna would go through it"):
        SearchSweeper().study(tmp_path)
    assert not (tmp_path / "victim.db").exists()


# ---- reports over records: a name read from a file never imports (or calls) the code it names


def test_summarising_planted_records_imports_and_calls_nothing_they_name(tmp_path, monkeypatch, caplog):
    """A record's param, its config's family, its summary_plots were looked up in the registries, which import a dotted
    path: a metrics.json naming `planted_code:X` imported planted_code (a module beside the sweep), and a plot named
    `sys:exit` was called with the records. Reports now resolve registered names, and paths of modules already imported."""
    from initnorm.summary import summarize

    code = tmp_path / "code"
    code.mkdir()
    (code / "planted_code.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\nX = F = plot = print\n")
    monkeypatch.syspath_prepend(str(code))
    for i, (lr, width) in enumerate((lr, w) for lr in (0.01, 0.02, 0.04) for w in (16, 32)):
        rec = record(1) | {"job_num": i, "overrides": {"param": "planted_code:X", "lr": str(lr), "width": str(width), "seed": "1"},
                           "swept": ["param", "lr", "width", "seed"], "summary_plots": ["planted_code:plot", "sys:exit", "lr_transfer"],
                           "config": {"model": {"family": "planted_code:F"}, "param": {"name": "planted_code:X"}, "lr": lr,
                                      "width": width}}
        results.write_metrics(tmp_path / "sweep" / f"lr={lr},width={width}" / "seed=1", rec)
    with caplog.at_level(logging.WARNING):
        table = summarize(tmp_path / "sweep")
    assert not (tmp_path / "imported").exists() and "planted_code" not in __import__("sys").modules
    assert "planted_code:X" in table  # shown by its name, as a record of an entry that does not resolve
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "no planted_code:plot plot" in warned and "no sys:exit plot" in warned


# ---- CSV injection: a text cell that a spreadsheet would run is written as text


def test_a_text_cell_that_starts_like_a_formula_is_written_as_text_and_read_back(tmp_path):
    """A swept value or an error line a record holds (`=cmd|' /C calc'!A0`, `@SUM(1+1)`) went into runs.csv and summary.csv
    as it was, where a spreadsheet runs it as a formula; a leading ' keeps it text, and runs.csv reads it back as it was."""
    from initnorm.summary import summarize

    evil, failed = "=cmd|' /C calc'!A0", "@SUM(1+1)"
    for seed, name in ((1, evil), (2, "-0.5"), (3, "+x")):
        rec = record(seed) | {"overrides": {"data.name": name, "seed": str(seed)}, "swept": ["data.name", "seed"]}
        results.write_metrics(tmp_path / f"data.name={seed}" / f"seed={seed}", rec)
    results.write_metrics(tmp_path / "data.name=4" / "seed=4", record(4) | {"status": "failed", "error": failed,
                                                                              "overrides": {"data.name": evil, "seed": "4"}})
    summarize(tmp_path)
    import csv
    import io

    for name in ("runs.csv", "summary.csv"):
        cells = [c for row in csv.reader(io.StringIO((tmp_path / name).read_text(), newline="")) for c in row]
        assert not [c for c in cells if c.startswith(("=", "+", "-", "@")) and c != "-0.5"], (name, cells)
        assert f"'{evil}" in cells and "'+x" in cells and "-0.5" in cells
    assert "'@SUM(1+1)" in (tmp_path / "runs.csv").read_text()
    back = {r["seed"]: r for r in results.read_runs_csv(tmp_path)}
    assert back[1]["overrides"]["data.name"] == evil and back[3]["overrides"]["data.name"] == "+x" and back[4]["error"] == failed
