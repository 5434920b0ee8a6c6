"""The trackers (``logger=csv|mlflow|wandb`` and several at once) get what TensorBoard gets, read back through each one's own API.

MLflow: its file store, an SQLite store, and a ``mlflow server`` this module starts on localhost (started
first, so that it comes up while the other tests train), read with ``MlflowClient``. W&B: offline, read from
the run's transaction log (``run-<id>.wandb``) in its folder. Jobs are tiny (30 steps, width 16).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch
import yaml

# Found, not imported: importing both took ~1.5 s of CPU at collection in every worker, also those that run none of this
# module's tests (the jobs that log to them import them where they run).
if importlib.util.find_spec("mlflow") is None or importlib.util.find_spec("wandb") is None:
    pytest.skip("needs the trackers extra (mlflow, wandb)", allow_module_level=True)

from initnorm.cli.train import train
from initnorm.config import to_plain
from initnorm.errors import ConfigError
from initnorm.training import trackers
from initnorm.training.fit import Member, fit
from tests.conftest import compose_cfg
from tests.inproc import command

TINY = ["steps=30", "trainer.val_check_interval=10", "log_every=5", "trainer.enable_progress_bar=false", "checkpoint.every_n_steps=0"]
# the instruments on, measuring at steps 0 and 10, so per-layer statistics and diagnostics reach every tracker too
INSTRUMENTS = ["callbacks.stats.every_n_steps=10", "callbacks.diagnostics.every_n_steps=10"]
NOT_SCALARS = {"step", "_step", "_runtime", "_timestamp", "trainer/global_step"}


@pytest.fixture(scope="module", autouse=True)
def mlflow_server(tmp_path_factory):
    """A tracking server on localhost, as a team's would be; its job runner off (nothing here queues jobs)."""
    folder = tmp_path_factory.mktemp("mlflow_server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{folder / 'server.db'}",
                             "--host", "127.0.0.1", "--port", str(port), "--workers", "1"], cwd=folder, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    yield proc, f"http://127.0.0.1:{port}"
    os.killpg(proc.pid, signal.SIGTERM)  # the server and the uvicorn worker it started
    proc.wait(timeout=30)


def wait_for(url: str, proc, limit: float = 90.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        assert proc.poll() is None, "mlflow server exited"
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return
        except OSError:
            time.sleep(0.25)
    pytest.fail(f"mlflow server did not answer at {url} in {limit} s")


def wandb_records(run_file: Path):
    """The protobuf records of a W&B transaction log: a 7-byte header, then LevelDB-style 32 KiB blocks of
    chunks (crc32, length, type: 1 whole, 2 first, 3 middle, 4 last), a block's tail under 7 bytes padded."""
    from wandb.proto import wandb_internal_pb2

    raw, block, head = run_file.read_bytes(), 32768, 7
    assert raw[:4] == b":W&B"
    pos, parts = head, b""
    while pos + head <= len(raw):
        if block - pos % block < head:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos:pos + head])
        if kind == 0:  # zero padding to the block's end
            pos += block - pos % block
            continue
        parts += raw[pos + head:pos + head + length]
        pos += head + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            parts = b""
            yield record


def wandb_run(job: Path) -> tuple[str, list[dict], dict]:
    """A W&B offline run of ``job``: its name, its history rows and its config. W&B's own service process writes the
    file: ``run.finish()`` returns before the last records are on disk when the machine is busy (the name read back as
    None under load), so the file is read once it holds the run's exit record, for at most 60 s."""
    (run_file,) = job.glob("wandb/offline-run-*/run-*.wandb")
    deadline = time.monotonic() + 60
    while not _has_exit(run_file) and time.monotonic() < deadline:
        time.sleep(0.2)
    name, rows, config = None, [], {}
    for r in wandb_records(run_file):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            name = r.run.display_name
        elif kind == "history":
            rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item})
        elif kind == "config":
            config |= {i.key: json.loads(i.value_json) for i in r.config.update}
    return name, rows, config


def _has_exit(run_file: Path) -> bool:
    try:
        return any(r.WhichOneof("record_type") == "exit" for r in wandb_records(run_file))
    except Exception:  # a chunk still being written
        return False


def series(rows: list[dict], tag: str) -> list[tuple[int, float]]:
    step = "trainer/global_step" if any("trainer/global_step" in r for r in rows) else "step"
    return [(int(r[step]), float(r[tag])) for r in rows if tag in r and r[tag] not in ("", None)]


def csv_rows(job: Path) -> list[dict]:
    import csv

    with open(job / "csv" / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def mlflow_runs(uri: str) -> dict:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("initnorm").experiment_id])
    return {r.info.run_name: (client, r) for r in runs}


def mlflow_series(client, run, tag: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in sorted(client.get_metric_history(run.info.run_id, tag), key=lambda m: m.step)]


def tensorboard_scalars(job: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list] = {}
    for events in job.glob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return out


def test_every_tracker_gets_tensorboards_scalars_hyperparameters_and_final_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses its file store without it
    job = tmp_path / "job"
    metrics = train(compose_cfg(*TINY, *INSTRUMENTS, "logger=[tensorboard,csv,mlflow,wandb]",
                                f"logger.mlflow.tracking_uri={tmp_path / 'mlruns'}"), job)
    assert (tmp_path / "mlruns").is_dir()  # a path without a scheme: the file store, there
    val = [(s, pytest.approx(v, rel=1e-6)) for s, v in metrics["val_history"]]
    final = pytest.approx(metrics["final_val_loss"], rel=1e-6)

    tb = tensorboard_scalars(job)
    scalars = {t for t in tb if not t.startswith("hp/")}
    assert {"Loss/train", "Loss/validation", "Schedule/learning_rate"} <= scalars
    assert any(t.startswith("act_rms/") for t in scalars) and any(t.startswith("eff_lr/") for t in scalars)

    rows = csv_rows(job)
    assert set(rows[0]) - NOT_SCALARS - {t for t in rows[0] if t.startswith("hp/")} == scalars
    assert series(rows, "Loss/validation") == val and series(rows, "hp/final_val_loss") == [(30, final)]
    assert yaml.safe_load((job / "csv" / "hparams.yaml").read_text())["lr"] == 0.01

    (name, (client, run)), = mlflow_runs((tmp_path / "mlruns").as_uri()).items()
    assert name == "seed=1" and run.data.params["lr"] == "0.01" and run.data.params["param"] == "sp"
    assert {k for k in run.data.metrics if not k.startswith("hp/")} == scalars
    assert mlflow_series(client, run, "Loss/validation") == val and run.data.metrics["hp/final_val_loss"] == final
    assert run.data.tags["initnorm.job_folder"] == str(job.resolve())

    name, history, config = wandb_run(job)
    assert name == "seed=1" and config["lr"] == 0.01 and config["param"] == "sp"
    assert {k for r in history for k in r} - NOT_SCALARS - {k for r in history for k in r if k.startswith("hp/")} == scalars
    assert series(history, "Loss/validation") == val and series(history, "hp/final_val_loss") == [(30, final)]


def test_each_member_of_a_stacked_group_is_its_own_run(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    db = (tmp_path / "mlruns").as_uri()  # the file store: an SQLite store spends seconds creating its tables
    members = [Member(to_plain(compose_cfg(*TINY, "callbacks=none", f"seed={s}", f"lr={lr}", "logger=[csv,mlflow,wandb]",
                                           f"logger.mlflow.tracking_uri={db}")), tmp_path / f"m{s}")
               for s, lr in ((1, 0.01), (2, 0.03))]
    results = fit(members)
    runs = mlflow_runs(db)
    assert set(runs) == {"seed=1", "seed=2"}
    for m, metrics in zip(members, results):
        val = [(s, pytest.approx(v, rel=1e-6)) for s, v in metrics["val_history"]]
        client, run = runs[f"seed={m.cfg['seed']}"]
        assert mlflow_series(client, run, "Loss/validation") == val and float(run.data.params["lr"]) == m.cfg["lr"]
        assert series(csv_rows(m.out_dir), "Loss/validation") == val
        name, history, config = wandb_run(m.out_dir)
        assert name == f"seed={m.cfg['seed']}" and config["lr"] == m.cfg["lr"] and series(history, "Loss/validation") == val


def test_a_team_server_receives_the_run(tmp_path, mlflow_server):
    proc, url = mlflow_server
    wait_for(url, proc)
    metrics = train(compose_cfg(*TINY, "callbacks=none", "logger=[tensorboard,mlflow]", f"logger.mlflow.tracking_uri={url}"),
                    tmp_path / "job")
    (name, (client, run)), = mlflow_runs(url).items()
    assert name == "seed=1" and run.info.status == "FINISHED" and run.data.params["lr"] == "0.01"
    assert mlflow_series(client, run, "Loss/validation") == [(s, pytest.approx(v, rel=1e-6)) for s, v in metrics["val_history"]]


def test_a_tracker_whose_package_is_missing_is_one_line_naming_its_extra(monkeypatch):
    real = trackers.importlib.util.find_spec
    monkeypatch.setattr(trackers.importlib.util, "find_spec", lambda name: None if name == "wandb" else real(name))
    node = to_plain(compose_cfg("logger=[tensorboard,wandb]"))["logger"]
    with pytest.raises(ConfigError, match=r"^logger=wandb needs the wandb package.*pip install 'initnorm\[wandb\]'"):
        trackers.check(node)
    trackers.check(to_plain(compose_cfg("logger=[tensorboard,csv,mlflow]"))["logger"])


def test_a_list_of_loggers_is_one_value_not_a_sweep():
    from initnorm.cli.sweep import parse_sweep

    assert parse_sweep(["logger=[tensorboard,mlflow]", "seed=1,2", "lr=0.01"]) == ["seed"]
    assert parse_sweep(["logger=[csv],[mlflow]"]) == ["logger"]



def test_a_resumed_job_writes_on_into_the_run_it_started(tmp_path, monkeypatch):
    """A second start of a job in the same folder (a resume after a kill) gets the first start's MLflow and W&B runs."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    node = to_plain(compose_cfg("logger=[mlflow,wandb]", f"logger.mlflow.tracking_uri={uri}"))["logger"]
    job = tmp_path / "job"
    started = []
    for step in (5, 10):  # the first start logs step 5 and is cut off after its checkpoint; the resumed one logs step 10 and ends
        loggers = trackers.make(node, job, "seed=1")
        for writer in trackers.writers(loggers):
            writer.add_scalar("Loss/train", float(step), step)
        trackers.finish(loggers, "failed" if step == 5 else "success")
        started.append((loggers[0].run_id, loggers[1].experiment.id))
        (job / "checkpoints").mkdir(exist_ok=True)
        torch.save({"global_step": step}, job / "checkpoints" / "initnorm.ckpt")  # what vouches for the kept run ids
    assert started[0] == started[1]
    kept = json.loads((job / trackers.RUN_IDS).read_text())
    assert kept == {"folder": str(job.resolve()), "runs": dict(zip(("mlflow", "wandb"), started[0]))}
    (name, (client, run)), = mlflow_runs(uri).items()
    assert name == "seed=1" and run.info.status == "FINISHED" and mlflow_series(client, run, "Loss/train") == [(5, 5.0), (10, 10.0)]
    logs = list(job.glob("wandb/offline-run-*/run-*.wandb"))  # run-<id>.wandb in each start's folder
    assert len(logs) == 2 and {p.stem.removeprefix("run-") for p in logs} == {started[0][1]}


def test_mlflow_under_the_vectorised_launcher_at_the_default_address(tmp_path, monkeypatch):
    """Issue 36: the config read MLFLOW_TRACKING_URI, which building the first member's logger sets, so the second
    member composed another config and every group failed. At the default address (none given): every job finishes,
    the store and its artifacts sit in outputs/, the experiment is announced once. (The command runs in this process:
    the sweep's members and their runs are what is checked.)"""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    proc = command("-m", "lr=0.01,0.03", "seed=1,2", "logger=mlflow", "hydra/launcher=vectorized", "hydra.launcher.engine=sequential",
                   "steps=4", "width=8", "trainer.val_check_interval=2", "callbacks=none", "summary.plots=[]",  # the runs, no figure
                   f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in (tmp_path / "sweep").rglob("metrics.json")]
    assert len(records) == 4 and all(r["status"] == "finished" and r["group"]["size"] == 4 for r in records), records
    assert not (tmp_path / "mlflow.db").exists() and (tmp_path / "outputs" / "mlflow.db").is_file()
    runs = mlflow_runs(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    assert {n: r.info.status for n, (_, r) in runs.items()} == {f"lr={lr} seed={s}": "FINISHED" for lr in (0.01, 0.03) for s in (1, 2)}
    client = next(iter(runs.values()))[0]
    assert client.get_experiment_by_name("initnorm").artifact_location == (tmp_path / "outputs" / "mlartifacts").as_uri()
    said = proc.stdout + proc.stderr
    assert said.count("experiment initnorm created") == 1 and "not found. Creating it" not in said, said[-3000:]
    assert "\nMLflow: experiment initnorm created" in "\n" + proc.stdout and "[WARNING] - MLflow" not in said  # news, not a warning
    # the group's four end lines count 1 to 4 (they read 4/4 each: every record was written before the first line)
    assert [line.split("[")[1].split(" done")[0] for line in proc.stdout.splitlines() if line.startswith("done ")] == \
        [f"{k}/4" for k in range(1, 5)]


def test_a_failed_try_ends_its_runs_and_leaves_the_address_as_it_was(tmp_path, monkeypatch):
    """A job that fails after its loggers are made and before they are finished (the engine ends them itself only
    when Lightning's fit raises) leaves no run RUNNING: recording the failure ends them (fit's record of a failed member,
    as the launchers' records do: trackers.fail, then resume.record_failure); making a logger does not set
    MLFLOW_TRACKING_URI for the next job, which would then compose another config."""
    from initnorm.training.fit import Member, _failed

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = to_plain(compose_cfg("logger=mlflow"))
    for width in (8, 16):
        trackers.make(cfg["logger"], tmp_path / f"w{width}", f"width={width}", base=tmp_path)
        assert "MLFLOW_TRACKING_URI" not in os.environ
    for width in (8, 16):
        _failed(Member(cfg, tmp_path / f"w{width}"), RuntimeError("the group could not be built"))
    runs = mlflow_runs(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    assert {n: r.info.status for n, (_, r) in runs.items()} == {"width=8": "FAILED", "width=16": "FAILED"}
    assert not trackers._OPEN


def test_what_the_trackers_write_at_the_launch_folder_is_ignored_by_git():
    """Issue 36: mlflow.db and mlflow.db.lock landed at the repository root and .gitignore did not cover them. The default
    store now sits in outputs/; a path given without it (``logger.mlflow.tracking_uri=mlflow.db``), MLflow's own folders and
    W&B's are ignored too, wherever the command starts in the checkout."""
    root = Path(__file__).resolve().parents[1]
    names = ["mlflow.db", "mlflow.db.lock", "outputs/mlflow.db", "outputs/mlflow.db.lock", "mlruns/0/meta.yaml",
             "mlartifacts/1/a.txt", "outputs/mlartifacts/1/a.txt", "wandb/latest-run", "examples/mlflow.db"]
    proc = subprocess.run(["git", "check-ignore", "--no-index", *names], cwd=root, capture_output=True, text=True)
    if proc.returncode == 128:  # not a git checkout (an unpacked sdist): nothing to commit by mistake
        pytest.skip(proc.stderr.strip())
    assert proc.stdout.split() == names, proc.stdout + proc.stderr


def test_tensorboard_gets_one_event_a_step_holding_every_tag_of_it(tmp_path):
    """A step's scalars reach TensorBoard as one event of many values, read back tag by tag as ``add_scalar`` wrote them."""
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.compat.proto.event_pb2 import Event

    lg = TensorBoardLogger(str(tmp_path), name="", version="")
    (w,) = trackers.writers([lg])
    for step, tags in ((5, ("a/x", "a/y", "b")), (10, ("a/x", "b"))):
        for i, tag in enumerate(tags):
            w.add_scalar(tag, step + i / 4, step)
    w.flush()
    (events,) = list(tmp_path.glob("events.out.tfevents.*"))
    raw = events.read_bytes()
    records, at = [], 0
    while at < len(raw):  # TFRecord framing: length (8 bytes), its CRC (4), the Event, its CRC (4)
        (n,) = struct.unpack("<Q", raw[at:at + 8])
        records.append(Event.FromString(raw[at + 12:at + 12 + n]))
        at += 12 + n + 4
    scalars = [e for e in records if e.HasField("summary")]
    assert [(e.step, [v.tag for v in e.summary.value]) for e in scalars] == [(5, ["a/x", "a/y", "b"]), (10, ["a/x", "b"])]
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert [(s.step, s.value) for s in acc.Scalars("a/x")] == [(5, 5.0), (10, 10.0)]
    assert [(s.step, s.value) for s in acc.Scalars("b")] == [(5, 5.5), (10, 10.25)]
