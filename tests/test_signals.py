"""SIGTERM, SIGINT and SIGUSR2: the job in progress checkpoints, the sweep stops, 128 + signal, the printed command
resumes; at every phase of the command, on every launcher of this machine."""

import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest

from initnorm.training import signals
from tests.conftest import ROOT, TINY
from tests.inproc import command as in_process
from tests.test_startup import end_marked, survivors


class SignalAt(L.Callback):
    """Sends ``signum`` to this process after the batch of step ``step`` (a real signal, at a known
    point), once per ``marker`` file: the rerun that resumes must not be stopped again."""

    def __init__(self, step: int, signum: int, marker: str):
        self.step, self.signum, self.marker = step, signum, Path(marker)

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step == self.step and not self.marker.exists():
            self.marker.touch()
            os.kill(os.getpid(), self.signum)


@pytest.mark.parametrize("signum,status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_signal_checkpoints_stops_the_sweep_and_the_printed_command_resumes(tmp_path, signum, status):
    """A real signal, to the sweep's own process at a known step, and the printed command: both run in this process
    (tests/inproc.py; the handler, the checkpoint, the exit status and the resume line are the library's work, each a
    process start of ~10 s of CPU less). The signal from outside, to a sweep's process or its group, on every launcher
    and phase, each sweep a process of its own: the matrix below (`make test-signals`)."""
    sweep = tmp_path / "sweep"
    kill = ["+callbacks.kill._target_=tests.test_signals.SignalAt", "+callbacks.kill.step=4", f"+callbacks.kill.signum={int(signum)}",
            f"+callbacks.kill.marker={tmp_path / 'fired'}"]
    args = ["-m", "seed=1,2", *TINY, "steps=8", "checkpoint.every_n_steps=0", "summary.plots=[]", f"hydra.sweep.dir={sweep}", *kill]
    first = in_process(*args, cwd=tmp_path)
    assert first.returncode == status, first.stderr[-2000:]
    assert f"stopped by {signum.name}" in first.stderr and "saved a checkpoint at step 4" in first.stderr
    job1, job2 = sweep / "default" / "seed=1", sweep / "default" / "seed=2"
    assert (job1 / "checkpoints" / "initnorm.ckpt").is_file() and not (job1 / "metrics.json").exists()
    assert not job2.exists()  # the sweep stopped: the next job never started
    resume = next(line for line in first.stderr.splitlines() if line.startswith("resume with: "))
    command = shlex.split(resume.removeprefix("resume with: "))
    assert command[:3] == ["python", "-m", "initnorm.train"] and f"hydra.sweep.dir={sweep.resolve()}" in command

    second = in_process(*command[3:], cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-2000:]
    m1, m2 = (json.loads((j / "metrics.json").read_text()) for j in (job1, job2))
    assert m1["status"] == m2["status"] == "finished" and m1["resumed_from_step"] == 4 and m2["resumed_from_step"] == 0
    assert (sweep / "summary.md").is_file()


def test_usr2_is_honoured_as_sigterm_when_asked():
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)}
    saved_env = os.environ.get(signals.STOP_ENV)
    try:
        signals.clear()
        assert signal.SIGUSR2 in signals.install(extra=[signal.SIGUSR2])
        assert "USR2" in os.environ[signals.STOP_ENV].split(",")  # worker processes honour it too
        os.kill(os.getpid(), signal.SIGUSR2)
        assert signals.requested() == signal.SIGUSR2
        with pytest.raises(signals.Interrupted) as info:
            signals.raise_if_requested()
        assert info.value.exit_status == 128 + signal.SIGUSR2
    finally:
        signals.clear()
        for s, h in before.items():
            signal.signal(s, h)
        os.environ.pop(signals.STOP_ENV, None) if saved_env is None else os.environ.__setitem__(signals.STOP_ENV, saved_env)


def test_resume_command_pins_the_folder_and_quotes():
    from initnorm.cli.signals import resume_command

    line = resume_command(["-m", "seed=1,2", "hydra.sweep.dir=old", "data.path=my file.txt"], "hydra.sweep.dir", "/abs/sweep")
    assert shlex.split(line) == ["python", "-m", "initnorm.train", "-m", "seed=1,2", "data.path=my file.txt", "hydra.sweep.dir=/abs/sweep"]


def test_a_second_ctrl_c_stops_at_once():
    signals.clear()
    try:
        signals._record(signal.SIGINT, None)  # the first: recorded, the job checkpoints at its next step
        assert signals.requested() == signal.SIGINT
        with pytest.raises(signals.Interrupted) as info:
            signals._record(signal.SIGINT, None)  # the second: no waiting for the step
        assert info.value.hard and info.value.exit_status == 130
    finally:
        signals.clear()


# Two workers: both jobs in flight at the signal (with one, kill -TERM of the group looked clean while it killed the
# fork server and recorded every job in flight failed).
LAUNCHERS = {"basic": [], "local_parallel": ["hydra/launcher=local_parallel", "hydra.launcher.n_jobs=2"],
             "vectorized": ["hydra/launcher=vectorized", "hydra.launcher.n_jobs=2", "hydra.launcher.max_group=1"]}
# Where the test sends it: the first line the sweep prints (the checks, the workers' start), the first job's start line
# (it trains), or a Hydra callback after the summary. To the sweep's process alone as `kill` does, or to its whole group
# as Ctrl-C does, or SIGTERM to the group (``kill -TERM -PGID``, a container's stop).
TRIGGERS = {"preflight": "sweep: composing and checking", "training": "start seed=1"}
SENT = {"parent": signal.SIGTERM, "group": signal.SIGINT, "group-TERM": signal.SIGTERM}


PHASES = ["preflight", "training", "summary"]
# Every launcher x phase once, each target with every launcher and every phase (9 cases, each a sweep started and
# stopped); INITNORM_TEST_FULL_MATRIX=1 runs all 27 (`make test-signals`).
MATRIX = [(launcher, target, phase) for i, launcher in enumerate(LAUNCHERS) for j, phase in enumerate(PHASES)
          for target in (list(SENT) if os.environ.get("INITNORM_TEST_FULL_MATRIX") else [list(SENT)[(i + j) % 3]])]


@pytest.mark.matrix
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("launcher,target,phase", MATRIX)
def test_a_stop_signal_at_any_phase_ends_the_command_in_one_line_with_the_resume_line(tmp_path, launcher, target, phase):
    """One handler for every launcher and phase: 128 + the signal, one "stopped by" line, the resume line last, no
    traceback, no job started after it, nothing of the command left 10 s later."""
    signum, sweep = SENT[target], tmp_path / "sweep"
    mark = secrets.token_hex(8)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "INITNORM_TEST_MARK": mark}
    # A run that lasts until the signal; compile=false: compile=auto would compile a run this long first (30,000 steps
    # on), a minute of CPU before the step the signal is honoured at.
    steps = ["steps=2"] if phase == "summary" else ["steps=100000", "checkpoint.every_n_steps=0", "compile=false"]
    after = ["+hydra.callbacks.stop._target_=tests.stop_at.StopAtSummary", f"+hydra.callbacks.stop.signum={int(signum)}",
             f"+hydra.callbacks.stop.target={'group' if target.startswith('group') else 'self'}"] if phase == "summary" else []
    seeds = "seed=1" if phase == "summary" else "seed=1,2"
    command = [sys.executable, "-m", "initnorm.train", "-m", seeds, *TINY, *steps, *LAUNCHERS[launcher], *after,
               f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out = []
        if phase in TRIGGERS:
            for line in proc.stdout:
                out.append(line)
                if TRIGGERS[phase] in line:
                    (os.killpg if target.startswith("group") else os.kill)(proc.pid, signum)
                    break
        rest, err = proc.communicate(timeout=300)
        out = "".join(out) + rest
        left = survivors(f"INITNORM_TEST_MARK={mark}", 10)
    finally:
        proc.kill()
        end_marked(f"INITNORM_TEST_MARK={mark}")
    assert proc.returncode == 128 + signum, out[-2000:] + err[-3000:]
    assert "Traceback" not in out + err and err.count("stopped by ") == 1, err[-3000:]
    assert f"stopped by {signum.name}" in err and err.strip().splitlines()[-1].startswith("resume with: python -m initnorm.train -m")
    assert not left, f"processes of the stopped command still running 10 s after it ended: {left}"
    # A stop, never a failure: no job recorded or reported failed, no job called lost, Hydra's "missing" line absent.
    assert "error: job" not in err and "[HYDRA]" not in err, err[-3000:]
    assert not [p for p in sweep.rglob("metrics.json") if json.loads(p.read_text()).get("status") == "failed"]
    assert not (sweep / "default" / "seed=2" / "metrics.json").exists()  # no job started after the signal
    if phase == "training":
        assert (sweep / "default" / "seed=1" / "checkpoints" / "initnorm.ckpt").is_file(), err[-2000:]
        assert "no job of this process was training" not in err, err[-2000:]
    if phase == "summary":
        assert (sweep / "summary.md").is_file() and f"hydra.sweep.dir={sweep.resolve()}" in err.strip().splitlines()[-1]


def test_a_transfer_sweep_stopped_by_a_signal_ends_the_transfer_with_its_status(monkeypatch, tmp_path):
    """initnorm-transfer ran its sweep in process and went on to write a report of nothing, exit 0, after SIGTERM."""
    from initnorm.cli import train, transfer

    def stopped() -> None:
        signals._record(signal.SIGTERM, None)
        sys.exit(143)

    monkeypatch.setattr(train, "main", stopped)
    signals.clear()
    try:
        with pytest.raises(SystemExit) as info:
            transfer.train_sweep(["width=32"], tmp_path / "out")
    finally:
        signals.clear()
    assert info.value.code == 143


@pytest.mark.matrix
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_to_the_group_while_a_fork_branch_waits_for_its_provider_stops_and_fails_no_job(tmp_path):
    """FK8: ``kill -TERM -PGID`` of a horizon-fork sweep (local_parallel, two workers) while a branch waits for its
    provider's state: one "stopped by" line, the resume line last, no traceback, no job recorded or said failed, the
    provider's checkpoint kept, nothing of the command left."""
    sweep, mark = tmp_path / "sweep", secrets.token_hex(8)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "INITNORM_TEST_MARK": mark}
    # the branch of 4000 steps under wsd:0.25 starts from the provider's state at step 3001: it waits from its start
    command = [sys.executable, "-m", "initnorm.train", "-m", *TINY, "schedule=wsd:0.25", "steps=4000,100000", "seed=1",
               "checkpoint.every_n_steps=0", "compile=false", "hydra/launcher=local_parallel", "hydra.launcher.n_jobs=2",
               f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    branch_log = sweep / "steps=4000" / "seed=1" / "train.log"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if branch_log.is_file() and "waiting for the state at step" in branch_log.read_text():
                break
            time.sleep(0.5)
        assert proc.poll() is None, "the sweep ended before its branch waited"
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=300)
        left = survivors(f"INITNORM_TEST_MARK={mark}", 10)
    finally:
        proc.kill()
        end_marked(f"INITNORM_TEST_MARK={mark}")
    assert proc.returncode == 128 + signal.SIGTERM, out[-2000:] + err[-3000:]
    assert "Traceback" not in out + err and err.count("stopped by ") == 1, err[-3000:]
    assert "stopped by SIGTERM" in err and err.strip().splitlines()[-1].startswith("resume with: python -m initnorm.train -m")
    assert "error: job" not in err and "[HYDRA]" not in err, err[-3000:]
    assert not [p for p in sweep.rglob("metrics.json") if json.loads(p.read_text()).get("status") == "failed"]
    assert (sweep / "steps=100000" / "seed=1" / "checkpoints" / "initnorm.ckpt").is_file(), err[-2000:]
    assert not left, f"processes of the stopped command still running 10 s after it ended: {left}"
