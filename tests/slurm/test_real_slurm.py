"""Sweeps through `hydra/launcher=slurm` on a real single-node SLURM (scripts/slurm/cluster.sh):
the happy path, a one-job sweep, `--export=NONE`, `scancel` then a rerun that resumes, a time limit
with requeue, and a time limit that ends in SIGTERM with no USR2 first.

Run with `make test-slurm` (it brings the cluster up and down). The waits below wait for events
(a checkpoint written, a job requeued), never for a fixed time; nothing asserts a duration.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
QUIET = ["callbacks=none", "trainer.enable_progress_bar=false", "log_every=50", "hydra/launcher=slurm"]


@pytest.fixture(autouse=True)
def cluster():
    if shutil.which("sbatch") is None or subprocess.run(["sinfo", "-h"], capture_output=True).returncode != 0:
        pytest.fail("no SLURM answers here: run these tests with `make test-slurm`, which starts one")
    yield


def command(sweep: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "initnorm.train", "-m", *args, *QUIET, f"hydra.sweep.dir={sweep}"]


def environment(extra: dict | None = None) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), **(extra or {})}


def run(sweep: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(command(sweep, *args), cwd=sweep.parent, env=environment(env), capture_output=True, text=True, timeout=900)


def start(sweep: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(command(sweep, *args), cwd=sweep.parent, env=environment(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def output(proc: subprocess.Popen) -> str:
    try:
        out, _ = proc.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return out


def wait_for(what: str, ready, limit_s: float = 600) -> None:
    """Poll ``ready()`` until it is true; fail naming ``what`` if it never is (a generous ceiling, not a timing)."""
    deadline = time.monotonic() + limit_s
    while not ready():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.5)


def metrics(sweep: Path) -> dict[str, dict]:
    """Every job's metrics.json, keyed by its folder relative to the sweep (``norm=pre/seed=1``)."""
    return {str(p.parent.relative_to(sweep)): json.loads(p.read_text()) for p in sweep.rglob("metrics.json")}


def slurm_ids(sweep: Path) -> list[str]:
    """The SLURM ids of the sweep's jobs in job order (``12_0``, ``12_1``, or ``12`` for one job)."""
    names = [p.name for p in (sweep / ".submitit").iterdir() if p.is_dir()]
    tasks = sorted((n for n in names if "_" in n), key=lambda n: int(n.split("_")[1]))
    return tasks or names


def states(job: str, history: bool = False) -> list[str]:
    """sacct's states of ``job`` (``COMPLETED``, ``CANCELLED``, ``REQUEUED``...), every run of it with ``history``."""
    args = ["sacct", "-n", "-X", "-P", "-j", job, "-o", "State"] + (["-D"] if history else [])
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def squeue_state(job: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True).stdout.strip()


def checkpoint_step(folder: Path) -> int:
    return int(torch.load(folder / "checkpoints" / "initnorm.ckpt", map_location="cpu", weights_only=True)["global_step"])


def submitted_script(sweep: Path) -> str:
    return next((sweep / ".submitit").glob("*/*_submission.sh")).read_text()


def assert_ok(out: subprocess.CompletedProcess) -> None:
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]


def assert_stopped_cleanly(text: str, sweep: Path, job: str, state: str) -> None:
    """Non-zero exit is checked by the caller; here: no traceback, the summary, and a resume line for ``job``."""
    assert "Traceback" not in text, text[-4000:]
    assert (sweep / "summary.md").is_file(), text[-4000:]
    lines = [line for line in text.splitlines() if job in line and state in line]
    assert lines, f"no line names {job} as {state}:\n{text[-4000:]}"
    assert f"hydra.sweep.dir={sweep}" in text, text[-4000:]


@pytest.fixture
def sweep(tmp_path):
    folder = tmp_path / "sweep"
    yield folder
    if (folder / ".submitit").is_dir():  # leave nothing queued for the next test
        ids = {i.split("_")[0] for i in slurm_ids(folder)}
        subprocess.run(["scancel", *ids], capture_output=True)


def test_sweep_is_one_array_and_ends_in_the_summary(sweep):
    out = run(sweep, "norm=pre,post", "seed=1,2", "steps=100")
    assert_ok(out)
    assert "#SBATCH --array=0-3%4\n" in submitted_script(sweep)
    done = metrics(sweep)
    assert sorted(done) == ["norm=post/seed=1", "norm=post/seed=2", "norm=pre/seed=1", "norm=pre/seed=2"]
    assert {m["status"] for m in done.values()} == {"finished"}
    assert all(states(j) == ["COMPLETED"] for j in slurm_ids(sweep))
    table = (sweep / "summary.md").read_text()
    assert "| pre |" in table and "| post |" in table


def test_one_job_sweep_is_a_plain_job(sweep):
    out = run(sweep, "seed=3", "steps=50")
    assert_ok(out)
    script = submitted_script(sweep)
    assert "--array" not in script, script
    assert metrics(sweep)["default/seed=3"]["status"] == "finished"
    assert (sweep / "summary.md").is_file()


def test_export_none_site_gets_what_the_jobs_need(sweep):
    # SBATCH_EXPORT=NONE is what a site's --export=NONE does: the job starts from the login environment,
    # without INITNORM_DATA_DIR, the swept keys, or submitit's own variable.
    out = run(sweep, "norm=pre,post", "steps=50", env={"SBATCH_EXPORT": "NONE"})
    assert_ok(out)
    done = metrics(sweep)
    assert sorted(done) == ["norm=post/seed=1", "norm=pre/seed=1"]  # the swept keys reached the jobs
    assert {m["status"] for m in done.values()} == {"finished"}


def test_scancel_checkpoints_reports_and_the_rerun_resumes(sweep):
    args = ("steps=100,3000", "checkpoint.every_n_steps=200")
    proc = start(sweep, *args)
    long = sweep / "steps=3000" / "seed=1"
    wait_for("the long job's first checkpoint", lambda: (long / "checkpoints" / "initnorm.ckpt").is_file())
    subprocess.run(["scancel", slurm_ids(sweep)[1]], check=True)
    text = output(proc)
    assert proc.returncode != 0, text[-4000:]
    assert_stopped_cleanly(text, sweep, "steps=3000", "cancelled")
    done = metrics(sweep)
    assert done["steps=100/seed=1"]["status"] == "finished"
    cut = done["steps=3000/seed=1"]
    assert cut["status"] == "cancelled"
    assert checkpoint_step(long) == cut["steps"] > 0  # checkpointed on the signal, at the step it stopped
    assert states(slurm_ids(sweep)[1])[0] == "CANCELLED"

    again = run(sweep, *args)
    assert_ok(again)
    resumed = metrics(sweep)["steps=3000/seed=1"]
    assert resumed["status"] == "finished" and resumed["resumed_from_step"] == cut["steps"] and resumed["steps"] == 3000


def test_time_limit_checkpoints_requeues_and_resumes(sweep):
    # The default max_num_timeout (> 0) lets submitit requeue a job that reaches its time limit.
    # The limit is cut to 1 minute once the job trains, so that SLURM's USR2 (sent up to
    # signal_delay_s + 30 s before the limit) comes while it trains; the requeued run gets 10 minutes.
    proc = start(sweep, "seed=1", "steps=8000", "checkpoint.every_n_steps=100")
    folder = sweep / "default" / "seed=1"
    wait_for("the job's first checkpoint", lambda: (folder / "checkpoints" / "initnorm.ckpt").is_file())
    job = slurm_ids(sweep)[0]
    subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=1"], check=True)
    wait_for("the job to be requeued", lambda: "REQUEUED" in states(job, history=True) or proc.poll() is not None)
    subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=10"], capture_output=True)
    text = output(proc)
    assert proc.returncode == 0, text[-4000:]
    done = metrics(sweep)["default/seed=1"]
    assert done["status"] == "finished" and done["steps"] == 8000 and done["resumed_from_step"] >= 100
    assert "REQUEUED" in states(job, history=True)


def test_sigterm_at_the_time_limit_without_usr2_is_recorded_as_timeout(sweep):
    # signal_delay_s=0: no USR2, SLURM sends SIGTERM at the limit (then SIGKILL after KillWait).
    # No requeue is possible, so the job checkpoints, records `timeout` and the command says how to resume.
    args = ("steps=100,1000000", "checkpoint.every_n_steps=200", "hydra.launcher.signal_delay_s=0")
    proc = start(sweep, *args)
    long = sweep / "steps=1000000" / "seed=1"
    wait_for("the long job's first checkpoint", lambda: (long / "checkpoints" / "initnorm.ckpt").is_file())
    job = slurm_ids(sweep)[1]
    subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=1"], check=True)
    text = output(proc)
    assert proc.returncode != 0, text[-4000:]
    assert "#SBATCH --signal" not in submitted_script(sweep) or "USR2@0" in submitted_script(sweep)
    assert_stopped_cleanly(text, sweep, "steps=1000000", "timeout")
    done = metrics(sweep)
    assert done["steps=100/seed=1"]["status"] == "finished"
    cut = done["steps=1000000/seed=1"]
    assert cut["status"] == "timeout"
    assert checkpoint_step(long) == cut["steps"] > 0
    assert states(job)[0] == "TIMEOUT"
