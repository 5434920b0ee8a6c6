"""Helpers of the group-engine tests: ``python -m initnorm.train`` run in this process where a sweep's files and lines are
what a test checks (no second interpreter importing torch and Lightning), and a stop signal sent once every group of a
parallel sweep stands at the same step.

``run_here`` puts back everything the command touches: ``sys.argv``, the working folder, the environment, the stop-signal
handlers and the recorded stop, Hydra's global state, every logger's level, handlers and flags, the warnings filters,
torch's thread count and the command's own module state (its failed and stopped jobs, the latest job's folder); the
tracker runs the command left open (a stopped job's, which its process's exit would end) are ended."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import lightning as L


@dataclass
class Ran:
    """What a command run here left: its exit status and what it printed (as ``subprocess.CompletedProcess`` has them)."""

    returncode: int
    stdout: str
    stderr: str


def _loggers() -> list[logging.Logger]:
    return [logging.getLogger(), *(lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger))]


def run_here(*args: str, cwd: Path) -> Ran:
    """``python -m initnorm.train args`` in ``cwd``, run by this process: the command's ``main`` as the module runs it (the
    stop signals recorded from its start), its exit status (an exception that escapes it: 1, its traceback on stderr, as an
    interpreter ends) and its output. Parallel launchers' workers would be this process's children: only the basic launcher
    and the vectorised launcher's sequential engine run here."""
    if any(a.startswith(("hydra/launcher=vectorized", "hydra/launcher=local_parallel")) for a in args) and \
            "hydra.launcher.engine=sequential" not in args:
        raise ValueError("run_here runs no worker processes: add hydra.launcher.engine=sequential (vectorized) or run_cli")
    import torch
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from initnorm.cli import signals as cli_signals
    from initnorm.cli import sweep
    from initnorm.cli.train import main
    from initnorm.training import signals, trackers

    handlers = {s: signal.getsignal(s) for s in signals.stop_signals()}
    argv, here, env, threads = list(sys.argv), os.getcwd(), dict(os.environ), torch.get_num_threads()
    logs = {lg: (lg.level, list(lg.handlers), lg.disabled, lg.propagate) for lg in _loggers()}
    disabled, filters, hydra_cfg = logging.root.manager.disable, list(warnings.filters), HydraConfig.instance().cfg
    kept = (list(sweep.FAILED_JOBS), list(sweep.STOPPED_JOBS), cli_signals.current_folder())
    opened = set(trackers._OPEN)
    out, err, code = io.StringIO(), io.StringIO(), 0
    # Handlers a library made at its import (Lightning's own, which does not propagate) hold the console stream of then:
    # theirs too are what the command prints, to stdout or stderr as theirs was (a file's handler left alone).
    consoles = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    streams = {h: h.stream for lg in _loggers() for h in lg.handlers
               if isinstance(h, logging.StreamHandler) and any(h.stream is c for c in consoles)}
    try:
        sys.argv = ["initnorm.train", *args]
        os.chdir(cwd)
        signals.clear()
        for h, stream in streams.items():
            h.setStream(out if stream is consoles[0] or stream is consoles[2] else err)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli_signals.record_from_now()  # initnorm/train.py's first act
                main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:  # what a process's exit ends: the tracker runs a stopped job (or one on a full disk) left open
                for folder in set(trackers._OPEN) - opened:
                    trackers.fail(folder)
    finally:
        for h, stream in streams.items():
            h.setStream(stream)
        sys.argv = argv
        os.chdir(here)
        os.environ.clear()
        os.environ.update(env)
        signals.clear()
        for s, h in handlers.items():
            signal.signal(s, h)
        for lg in _loggers():
            level, before, was_disabled, propagate = logs.get(lg, (lg.level, [], lg.disabled, lg.propagate))
            for h in lg.handlers:
                if h not in before:
                    h.close()
            lg.handlers[:] = before
            lg.setLevel(level)
            lg.disabled, lg.propagate = was_disabled, propagate
        logging.disable(disabled)
        warnings.filters[:] = filters
        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = hydra_cfg
        sweep.FAILED_JOBS[:], sweep.STOPPED_JOBS[:] = kept[0], kept[1]
        cli_signals._folder.clear()
        cli_signals._folder.update(kept[2])
        torch.set_num_threads(threads)
    return Ran(code, out.getvalue(), err.getvalue())


class StopWhenAll(L.Callback):
    """After the batch of step ``step``: wait until ``count`` processes (the groups of a parallel sweep, each in a worker)
    stand there, then the last to arrive sends ``signum`` to ``target`` (self | parent | group: as ``tests.stop_at.StopAt``)
    once per ``marker``; each group waits at that step until its own process has recorded the stop. Every group is
    stopped at ``step`` whatever the load did to its workers' start: none finished, none stopped before its first step."""

    def __init__(self, step: int, signum: int, marker: str, target: str = "self", count: int = 1):
        self.step, self.signum, self.marker, self.target, self.count = step, signum, Path(marker), target, count

    def on_train_batch_end(self, trainer, *args) -> None:
        from initnorm.cli.workers import LAUNCHER_PID_ENV
        from initnorm.training import signals

        if trainer.global_step != self.step or self.marker.exists():
            return
        Path(f"{self.marker}.{os.getpid()}").touch()
        deadline = time.monotonic() + 120
        while len(list(self.marker.parent.glob(f"{self.marker.name}.*"))) < self.count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"StopWhenAll: fewer than {self.count} groups reached step {self.step} in 120 s")
            time.sleep(0.05)
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            if self.target == "group":
                os.killpg(os.getpgid(0), self.signum)
            else:
                os.kill(int(os.environ.get(LAUNCHER_PID_ENV, os.getpid())) if self.target == "parent" else os.getpid(), self.signum)
        except FileExistsError:
            pass
        while signals.requested() is None:  # the signal, or the parent passing it on, reaches this process
            if time.monotonic() > deadline:
                raise RuntimeError(f"StopWhenAll: no stop signal reached process {os.getpid()} in 120 s")
            time.sleep(0.05)
