"""A stacked group is trained by the one engine (Lightning's Trainer with the config's callbacks):
stop signals end it as they end a job alone, every member resumes from its own checkpoint bit for
bit, a job checkpointed in a group resumes alone and the other way round, and a user's own callback runs there.

A process only where the process is the point (a stop signal reaching a sweep's workers; a full disk's one line from
them); a sweep trained by its own process runs here, and what the engine computes from the folders a stop leaves (a group
resumed, a job resumed alone) is ``fit`` and ``train`` here."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest

from initnorm.config import to_plain
from initnorm.training.fit import Member, fit
from tests.conftest import ROOT, compose_cfg
from tests.inproc import command

SHARED = ["steps=12", "checkpoint.every_n_steps=4", "trainer.val_check_interval=4", "callbacks=none", "trainer.enable_progress_bar=false"]
GROUPS = ((1, 2), (3, 4))  # hydra.launcher.max_group=2 parts the sweep's four jobs in job order
STOP = 6  # between two periodic checkpoints (4, 8): a resume from 6 is from the checkpoint the stop signal asked for
BASE = ["-m", "seed=1,2,3,4", *SHARED, "hydra/launcher=vectorized", "hydra.launcher.max_group=2"]
# engine, signal, who receives it: a worker passing it to the sweep's process (which passes it on to the other worker),
# the whole process group at once (every worker and the sweep's process), and the sweep's process training the group itself
CASES = {"processes-SIGTERM-parent": ("processes", signal.SIGTERM, "parent"),
         "processes-SIGINT-group": ("processes", signal.SIGINT, "group"),
         "sequential-SIGTERM-parent": ("sequential", signal.SIGTERM, "parent")}
# `make test` runs the sweep trained in its own process (the command runs in the test's); the cases whose workers are
# processes of their own are whole sweeps each in a process, with the stop-signal matrix in `make test-signals` (marked
# `matrix`): by default the one that covers the other engine, signal and target; the third, a stop passed on from the
# sweep's process to its workers, is covered at every phase by tests/test_signals.py's local_parallel and vectorized
# launchers. INITNORM_TEST_FULL_MATRIX=1 runs all three.
RUN = [pytest.param("sequential-SIGTERM-parent"), pytest.param("processes-SIGINT-group", marks=pytest.mark.matrix),
       *([pytest.param("processes-SIGTERM-parent", marks=pytest.mark.matrix)] if os.environ.get("INITNORM_TEST_FULL_MATRIX") else [])]


def members(seeds, folder_of, *extra: str) -> list[Member]:
    return [Member(to_plain(compose_cfg(*SHARED, f"seed={s}", *extra)), folder_of(s)) for s in seeds]


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
    """Each job's final validation loss, its group of the sweep trained here without a stop."""
    tmp = tmp_path_factory.mktemp("whole")
    return {f"seed={s}": r["final_val_loss"] for g in GROUPS for s, r in zip(g, fit(members(g, lambda s: tmp / f"seed={s}")))}


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """The sweep of ``case`` stopped by its signal at step STOP (run once per case and module): its folder, the finished
    command, and the processes of it still alive once it returned (polled for up to 10 s)."""
    runs = {}

    def run(case: str) -> tuple[Path, subprocess.CompletedProcess, list[str]]:
        if case not in runs:
            engine, signum, target = CASES[case]
            tmp = tmp_path_factory.mktemp(case)
            sweep = tmp / "sweep"
            parallel = ["hydra.launcher.n_jobs=2"] if engine == "processes" else []  # both groups at once, whatever the cores
            kill = ["+callbacks.kill._target_=tests.stop_at.StopWhenAll", f"+callbacks.kill.step={STOP}",
                    f"+callbacks.kill.signum={int(signum)}", f"+callbacks.kill.marker={tmp / 'fired'}", f"+callbacks.kill.target={target}",
                    f"+callbacks.kill.count={2 if engine == 'processes' else 1}"]
            args = [*BASE, f"hydra.launcher.engine={engine}", *parallel, f"hydra.sweep.dir={sweep}", *kill]
            # The sequential engine trains in the sweep's own process: the command runs here, and the signal comes to this
            # process, recorded by the command's handler while it runs (tests/inproc.py puts the test's back). Workers
            # are processes of their own: the command too, in a process group of its own.
            first = command(*args, cwd=tmp) if engine == "sequential" else run_own_group(args, tmp)
            deadline = time.time() + 10  # the workers end within a second on a quiet machine; more under a parallel test run
            while (left := subprocess.run(["pgrep", "-f", str(sweep)], capture_output=True, text=True).stdout.split()) and \
                    time.time() < deadline:
                time.sleep(0.05)
            runs[case] = sweep, first, left
        return runs[case]

    return run


def job_folders(sweep: Path) -> dict[int, Path]:
    """Each seed's job folder in ``sweep``, beside the folders of the members that checkpointed."""
    (root,) = {p.parents[2] for p in sweep.rglob("checkpoints/initnorm.ckpt")}
    return {s: root / f"seed={s}" for g in GROUPS for s in g}


@pytest.mark.parametrize("case", RUN)
def test_a_stop_signal_checkpoints_every_member_and_each_group_resumes_bit_for_bit(tmp_path, stopped, uninterrupted, case):
    """A real signal to the sweep's command (its exit status, its last lines, no process of it left); the folders it
    leaves resumed here, each group as one ``fit``, as the command's rerun groups and trains them."""
    engine, signum, _ = CASES[case]
    sweep, first, left = stopped(case)
    assert first.returncode == 128 + signum, first.stderr[-3000:]
    lines = first.stderr.strip().splitlines()
    assert f"stopped by {signum.name}" in first.stderr and "Traceback" not in first.stderr, first.stderr[-3000:]
    assert lines[-1].startswith("resume with: python -m initnorm.train") and f"hydra.sweep.dir={sweep.resolve()}" in lines[-1]
    ckpts = sorted(sweep.rglob("initnorm.ckpt"))
    assert ckpts and not list(sweep.rglob("metrics.json"))  # nothing finished, every started member checkpointed
    assert len(ckpts) == (2 if engine == "sequential" else 4)  # sequential: the second group never started
    assert not left, f"processes of the stopped command still alive 10 s after it returned: {left}"

    work = tmp_path / "sweep"
    shutil.copytree(sweep, work)  # the stopped folders stay as they are for the next test
    folders = job_folders(work)
    resumed = {f"seed={s}": (r["final_val_loss"], r["resumed_from_step"]) for g in GROUPS for s, r in zip(g, fit(members(g, folders.get)))}
    assert {k: v[0] for k, v in resumed.items()} == uninterrupted  # bit for bit
    started = [k for k in resumed if engine != "sequential" or k in ("seed=1", "seed=2")]
    assert all(resumed[k][1] == STOP for k in started), resumed  # from the stop's checkpoint, never from 0
    assert all(resumed[k][1] == 0 for k in resumed if k not in started), resumed


def test_a_job_checkpointed_in_a_group_resumes_alone_bit_for_bit(tmp_path, stopped, uninterrupted):
    """Stopped as a member of a group (the sequential sweep stopped by SIGTERM), each job resumed alone, as the basic
    launcher's job trains it: from its own checkpoint as a group of one."""
    from initnorm.cli.train import train

    sweep, first, _ = stopped("sequential-SIGTERM-parent")
    assert first.returncode == 143, first.stderr[-2000:]
    work = tmp_path / "sweep"
    shutil.copytree(sweep, work)
    resumed = {}
    for s, folder in job_folders(work).items():
        r = train(compose_cfg(*SHARED, f"seed={s}"), folder)
        resumed[f"seed={s}"] = (r["final_val_loss"], r["resumed_from_step"])
    assert resumed["seed=1"][1] == resumed["seed=2"][1] == STOP and resumed["seed=3"][1] == resumed["seed=4"][1] == 0
    # a group of one sums its batch in one stacked kernel: float32 rounding from the group of two it left
    for k, v in uninterrupted.items():
        assert abs(resumed[k][0] - v) <= 1e-5 * v, (k, resumed[k], v)


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
    """The config's callbacks, instantiated once for the group (as the vectorised launcher does), see all three members."""
    out = tmp_path / "seen"
    watch = ["+callbacks.watch._target_=tests.test_group_engine.Watch", f"+callbacks.watch.out={out}", "steps=5"]
    fit(members((1, 2, 3), lambda s: tmp_path / "s" / f"seed={s}", *watch))
    seen = [json.loads(p.read_text()) for p in tmp_path.glob("seen.*.json")]
    assert len(seen) == 1 and [r["seed"] for r in seen[0]] == [1, 2, 3] and {r["E"] for r in seen[0]} == {3}
    assert all(r["folder"].endswith(f"seed={r['seed']}") and r["grad_names"] > 0 for r in seen[0])


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
    """The command runs here, its groups in the sweep's own process (the sequential engine): a group that finds the disk
    full stops the sweep in one line and the resume line. From a worker process the same ``DiskError`` reaches the sweep's
    process as itself (the next test), where this one reports it."""
    proc = command("-m", "seed=1,2,3,4", "steps=400", "checkpoint.every_n_steps=20", "hydra/launcher=vectorized",
                   "hydra.launcher.max_group=2", "hydra.launcher.engine=sequential", f"hydra.sweep.dir={small_disk / 'sweep'}",
                   cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and "No space left on device" in lines[0] and lines[1].startswith("resume with: "), proc.stderr[-3000:]
    assert not [p for p in small_disk.rglob("*") if p.name.endswith(".tmp")]  # no temporary checkpoint left behind


def test_a_full_disk_in_a_worker_reaches_the_sweeps_process_as_a_disk_error():
    """A unit that finds the disk full in a worker (a BaseException, not a job's failure): the pool raises it in the
    sweep's process, which reports it as the test above shows, instead of recording each of the unit's jobs failed."""
    from initnorm.errors import DiskError
    from initnorm.launch.pool import Pool

    def full(path: str) -> None:  # local: pickled by value, so the spawned worker imports no torch
        raise DiskError(path, "[Errno 28] No space left on device")

    pool = Pool(1, "spawn")
    try:
        with pytest.raises(DiskError, match=r"^cannot write /sweep/seed=1/checkpoints/initnorm.ckpt: \[Errno 28\] No space"):
            pool.run(full, [("/sweep/seed=1/checkpoints/initnorm.ckpt",)], stopping=lambda: False)
    finally:
        pool.close()


def test_jobs_checkpointed_alone_resume_inside_a_group(tmp_path):
    """Two jobs left by a job-alone launcher with their checkpoint at one step (their metrics.json gone, as if
    killed after it), rerun vectorised: they go on as one stacked group from that step, not from 0. (The command runs
    in this process: the sweep's own grouping by the step a folder resumes from is what is checked.)"""
    from initnorm.cli.train import train

    sweep = tmp_path / "sweep"
    alone = {}
    for seed in (1, 2):
        folder = sweep / "default" / f"seed={seed}"
        alone[f"seed={seed}"] = train(compose_cfg(*SHARED, f"seed={seed}"), folder)["final_val_loss"]
        (folder / "metrics.json").unlink()  # the checkpoint of step 8 is left to resume from
    proc = command("-m", "seed=1,2", *SHARED, "summary.plots=[]", "hydra/launcher=vectorized", "hydra.launcher.engine=sequential",
                   f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = {p.parent.name: json.loads(p.read_text()) for p in sweep.rglob("metrics.json")}
    assert len(records) == 2 and all(r["resumed_from_step"] == 8 and r["group"]["size"] == 2 for r in records.values()), records
    for k, v in alone.items():  # 4 stacked steps after 8 alone: float32 rounding from the job alone, not a restart
        assert abs(records[k]["final_val_loss"] - v) <= 1e-5 * v, (k, records[k]["final_val_loss"], v)
