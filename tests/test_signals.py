"""SIGTERM and SIGINT: the job in progress checkpoints, the sweep stops, 128 + signal, the printed command resumes."""

import json
import os
import shlex
import signal
from pathlib import Path

import lightning as L
import pytest

from initnorm.training import signals
from tests.conftest import TINY, run_cli


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
    sweep = tmp_path / "sweep"
    kill = ["+callbacks.kill._target_=tests.test_signals.SignalAt", "+callbacks.kill.step=12", f"+callbacks.kill.signum={int(signum)}",
            f"+callbacks.kill.marker={tmp_path / 'fired'}"]
    args = ["-m", "seed=1,2", *TINY, "checkpoint.every_n_steps=0", f"hydra.sweep.dir={sweep}", *kill]
    first = run_cli(*args, cwd=tmp_path)
    assert first.returncode == status, first.stderr[-2000:]
    assert f"stopped by {signum.name}" in first.stderr and "saved a checkpoint at step 12" in first.stderr
    job1, job2 = sweep / "default" / "seed=1", sweep / "default" / "seed=2"
    assert (job1 / "checkpoints" / "initnorm.ckpt").is_file() and not (job1 / "metrics.json").exists()
    assert not job2.exists()  # the sweep stopped: the next job never started
    resume = next(line for line in first.stderr.splitlines() if line.startswith("resume with: "))
    command = shlex.split(resume.removeprefix("resume with: "))
    assert command[:3] == ["python", "-m", "initnorm.train"] and f"hydra.sweep.dir={sweep.resolve()}" in command

    second = run_cli(*command[3:], cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-2000:]
    m1, m2 = (json.loads((j / "metrics.json").read_text()) for j in (job1, job2))
    assert m1["status"] == m2["status"] == "finished" and m1["resumed_from_step"] == 12 and m2["resumed_from_step"] == 0
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
