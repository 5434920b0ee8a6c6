"""tests/inproc.py: a command run in this process leaves it as it was, whatever the command changed (a runner that put back
less broke later tests of the same worker by their order), and its exit status reads as the interpreter's would."""

import logging
import os
import signal
import sys
import warnings
from pathlib import Path

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig

from tests.conftest import TINY
from tests.inproc import command, run


def flushes_denormals() -> bool:
    """torch has no getter for it: a denormal times one is zero where it flushes them."""
    return (torch.tensor([1e-39]) * torch.tensor([1.0])).item() == 0.0


def open_under(folder: Path) -> list[str]:
    """The files under ``folder`` this process holds open (a job's train.log, a sweep's lock)."""
    fds = Path("/proc/self/fd")
    return [t for t in (os.readlink(fds / fd) for fd in os.listdir(fds) if (fds / fd).is_symlink()) if t.startswith(str(folder))]


def process_state() -> dict:
    from initnorm.cli import lock, sweep
    from initnorm.cli import signals as cli_signals
    from initnorm.training import signals, trackers

    loggers = {name: (lg.level, list(lg.handlers), lg.disabled, lg.propagate)
               for name, lg in [("", logging.getLogger()), *logging.root.manager.loggerDict.items()] if isinstance(lg, logging.Logger)}
    return {"argv": list(sys.argv), "cwd": os.getcwd(), "env": dict(os.environ), "loggers": loggers,
            "signals": {s: signal.getsignal(s) for s in signal.valid_signals()}, "requested": signals.requested(),
            "hydra": (GlobalHydra.instance().is_initialized(), HydraConfig.instance().cfg), "filters": list(warnings.filters),
            "threads": torch.get_num_threads(), "flush": flushes_denormals(), "rng": torch.get_rng_state().tolist(),
            "jobs": (list(sweep.FAILED_JOBS), list(sweep.STOPPED_JOBS)), "folder": cli_signals.current_folder(),
            "locks": dict(lock._held), "runs": set(trackers._OPEN)}


@pytest.mark.parametrize("how", ["sweep", "run"])
def test_a_command_run_here_leaves_the_process_as_it_was(tmp_path, how):
    # A job sets for its process: Hydra's logging, the stop signals' handlers, the threads, denormal flushing, the seeds,
    # the warning filters; a sweep its progress variables and its folder's lock, and the vectorised launcher (its groups
    # trained in this process) leaves Hydra's job config set.
    before = process_state()
    threads = before["threads"] + 1
    where = ["-m", "seed=1,2", "hydra/launcher=vectorized", "hydra.launcher.engine=sequential", f"hydra.sweep.dir={tmp_path}/out"] \
        if how == "sweep" else ["seed=2", f"hydra.run.dir={tmp_path}/out"]
    ran = command(*where, *TINY, f"threads={threads}", "flush_denormal=true", cwd=tmp_path)
    assert ran.returncode == 0 and "final validation loss" in ran.stdout, ran.stderr[-3000:]
    log = tmp_path / "out" / ("default/seed=2" if how == "sweep" else "") / "train.log"
    assert log.stat().st_size > 0  # Hydra's job logging ran (its file closed, below)
    after = process_state()
    made = {name: after["loggers"].pop(name) for name in set(after["loggers"]) - set(before["loggers"])}
    assert {k: v for k, v in after.items() if v != before[k]} == {}
    assert all(state == (logging.NOTSET, [], False, True) for state in made.values()), made  # a logger the command made: as new
    assert open_under(tmp_path) == []


def test_the_exit_status_is_the_interpreters():
    def fails():
        raise RuntimeError("boom")

    crashed = run(fails, ["initnorm-x"])
    assert crashed.returncode == 1 and "RuntimeError: boom" in crashed.stderr and "Traceback" in crashed.stderr
    said = run(lambda: sys.exit("one line"), ["initnorm-x"])
    assert said.returncode == 1 and said.stderr == "one line\n"
    assert run(lambda: 3, ["initnorm-x"]).returncode == 3 and run(lambda: None, ["initnorm-x"]).returncode == 0
    assert run(lambda: print(sys.argv), ["initnorm-x", "a"]).stdout == "['initnorm-x', 'a']\n"
