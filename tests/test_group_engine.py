"""A stacked group is trained by the one engine (Lightning's Trainer with the config's callbacks):
stop signals end it as they end a job alone, every member resumes from its own checkpoint bit for
bit, a job checkpointed in a group resumes under any launcher, and a user's own callback runs there."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest

from tests.conftest import ROOT, run_cli

BASE = ["-m", "seed=1,2,3,4", "steps=40", "checkpoint.every_n_steps=10", "trainer.val_check_interval=10", "callbacks=none",
        "trainer.enable_progress_bar=false", "hydra/launcher=vectorized", "hydra.launcher.max_group=2"]


def stop_at(tmp_path: Path, step: int, signum: int, target: str) -> list[str]:
    return ["+callbacks.kill._target_=tests.stop_at.StopAt", f"+callbacks.kill.step={step}", f"+callbacks.kill.signum={int(signum)}",
            f"+callbacks.kill.marker={tmp_path / 'fired'}", f"+callbacks.kill.target={target}"]


def finals(sweep: Path) -> dict[str, tuple[float, int]]:
    out = {}
    for p in sorted(sweep.rglob("metrics.json")):
        r = json.loads(p.read_text())
        out[p.parent.name] = (r["final_val_loss"], r["resumed_from_step"])
    return out


def run_own_group(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """The command in a process group of its own, so that a signal to the whole group reaches only it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "initnorm.train", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
                          start_new_session=True)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("whole")
    proc = run_cli(*BASE, f"hydra.sweep.dir={tmp / 'sweep'}", cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {k: v[0] for k, v in finals(tmp / "sweep").items()}


@pytest.mark.parametrize("engine,signum,target", [("joblib", signal.SIGTERM, "parent"), ("joblib", signal.SIGINT, "group"),
                                                  ("sequential", signal.SIGTERM, "parent")])
def test_a_stop_signal_checkpoints_every_member_and_the_rerun_resumes_bit_for_bit(tmp_path, uninterrupted, engine, signum, target):
    sweep = tmp_path / "sweep"
    args = [*BASE, f"hydra.launcher.engine={engine}", f"hydra.sweep.dir={sweep}", *stop_at(tmp_path, 25, signum, target)]
    started = time.time()
    first = run_own_group(args, tmp_path)
    assert first.returncode == 128 + signum, first.stderr[-3000:]
    lines = first.stderr.strip().splitlines()
    assert f"stopped by {signum.name}" in first.stderr and "Traceback" not in first.stderr, first.stderr[-3000:]
    assert lines[-1].startswith("resume with: python -m initnorm.train") and f"hydra.sweep.dir={sweep.resolve()}" in lines[-1]
    ckpts = sorted(sweep.rglob("initnorm.ckpt"))
    assert ckpts and not list(sweep.rglob("metrics.json"))  # nothing finished, every started member checkpointed
    if engine == "sequential":
        assert len(ckpts) == 2  # the second group never started
    deadline = time.time() + 10  # the workers end within a second on a quiet machine; more under a parallel test run
    while (left := subprocess.run(["pgrep", "-f", str(sweep)], capture_output=True, text=True).stdout.split()) and time.time() < deadline:
        time.sleep(0.2)
    assert not left, f"processes of the stopped command still alive {time.time() - started:.0f} s after it started: {left}"

    second = run_cli(*args, cwd=tmp_path)  # the marker file keeps the rerun from being stopped again
    assert second.returncode == 0, second.stderr[-3000:]
    resumed = finals(sweep)
    assert {k: v[0] for k, v in resumed.items()} == uninterrupted  # bit for bit
    assert all(v[1] > 0 for k, v in resumed.items() if engine != "sequential" or k in ("seed=1", "seed=2")), resumed  # never from 0


class Watch(L.Callback):
    """A user's own callback: what it sees of the members of whatever it runs under."""

    def __init__(self, out: str):
        self.out = out

    def on_train_end(self, trainer, pl_module):
        from initnorm.callbacks.members import members_of

        view = members_of(pl_module, trainer)
        rows = [{"E": view.E, "folder": str(f), "seed": (c or {}).get("seed"), "grad_names": len(view.grads())}
                for f, c in zip(view.folders, view.configs)]
        Path(self.out).with_name(f"{Path(self.out).name}.{os.getpid()}.{view.E}.json").write_text(json.dumps(rows))


def test_a_users_own_callback_runs_in_a_group_and_sees_every_member(tmp_path):
    out = tmp_path / "seen"
    proc = run_cli("-m", "seed=1,2,3", "steps=5", "callbacks=none", "trainer.enable_progress_bar=false", "hydra/launcher=vectorized",
                   "+callbacks.watch._target_=tests.test_group_engine.Watch", f"+callbacks.watch.out={out}",
                   f"hydra.sweep.dir={tmp_path / 's'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = [json.loads(p.read_text()) for p in tmp_path.glob("seen.*.json")]
    assert len(seen) == 1 and [r["seed"] for r in seen[0]] == [1, 2, 3] and {r["E"] for r in seen[0]} == {3}
    assert all(r["folder"].endswith(f"seed={r['seed']}") and r["grad_names"] > 0 for r in seen[0])


def test_a_job_checkpointed_in_a_group_resumes_alone_bit_for_bit(tmp_path, uninterrupted):
    """Stopped as a member of a group, rerun with the basic launcher: each job resumes from its own checkpoint as a group of one."""
    sweep = tmp_path / "sweep"
    first = run_cli(*BASE, "hydra.launcher.engine=sequential", f"hydra.sweep.dir={sweep}",
                    *stop_at(tmp_path, 25, signal.SIGTERM, "self"), cwd=tmp_path)
    assert first.returncode == 143, first.stderr[-2000:]
    basic = [a for a in BASE if not a.startswith("hydra/launcher") and not a.startswith("hydra.launcher")]
    second = run_cli(*basic, f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-2000:]
    resumed = finals(sweep)
    assert resumed["seed=1"][1] == resumed["seed=2"][1] == 25 and resumed["seed=3"][1] == resumed["seed=4"][1] == 0
    # a group of one sums its batch in one stacked kernel: float32 rounding from the group of two it left
    for k, v in uninterrupted.items():
        assert abs(resumed[k][0] - v) <= 1e-5 * v, (k, resumed[k], v)


@pytest.fixture
def small_disk(tmp_path):
    """A 400 KB tmpfs (root only; skipped elsewhere)."""
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(where)],
                                           capture_output=True).returncode:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_a_full_disk_during_a_vectorised_sweep_is_one_line(tmp_path, small_disk):
    proc = run_cli("-m", "seed=1,2,3,4", "steps=400", "checkpoint.every_n_steps=20", "hydra/launcher=vectorized",
                   "hydra.launcher.max_group=2",
                   f"hydra.sweep.dir={small_disk / 'sweep'}", cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and "No space left on device" in lines[0] and lines[1].startswith("resume with: "), proc.stderr[-3000:]
    assert not [p for p in small_disk.rglob("*") if p.name.endswith(".tmp")]  # no temporary checkpoint left behind


def test_jobs_checkpointed_alone_resume_inside_a_group(tmp_path):
    """Two jobs left by a job-alone launcher with their checkpoint at one step (their metrics.json gone, as if
    killed after it), rerun vectorised: they go on as one stacked group from that step, not from 0."""
    from initnorm.cli.train import train
    from tests.conftest import compose_cfg

    sweep = tmp_path / "sweep"
    shared = ["steps=40", "checkpoint.every_n_steps=10", "trainer.val_check_interval=10", "callbacks=none",
              "trainer.enable_progress_bar=false"]
    alone = {}
    for seed in (1, 2):
        folder = sweep / "default" / f"seed={seed}"
        alone[f"seed={seed}"] = train(compose_cfg(*shared, f"seed={seed}"), folder)["final_val_loss"]
        (folder / "metrics.json").unlink()  # the checkpoint of step 30 is left to resume from
    proc = run_cli("-m", "seed=1,2", *shared, "hydra/launcher=vectorized", "hydra.launcher.engine=sequential",
                   f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = {p.parent.name: json.loads(p.read_text()) for p in sweep.rglob("metrics.json")}
    assert all(r["resumed_from_step"] == 30 and r["group"]["size"] == 2 for r in records.values()), records
    for k, v in alone.items():  # 10 stacked steps after 30 alone: float32 rounding from the job alone, not a restart
        assert abs(records[k]["final_val_loss"] - v) <= 1e-5 * v, (k, records[k]["final_val_loss"], v)
