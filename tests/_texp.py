"""A command as ``python -m initnorm.<command> args`` would run it, in this process: the tests that check what a
command writes (a sweep's folders, a report) pay for its work, not for a second interpreter importing torch and
Lightning (about 5 s of CPU a start).

``run_module`` executes the command's ``__main__`` (``runpy``, as ``python -m`` does: the shim, its ``main``, its exit
status) and puts back everything a command changes in its process: ``sys.argv``, the working folder (Hydra's
``hydra.job.chdir``), the environment (the sweep's progress variables, the stop-signal list), the stop-signal
handlers and any recorded signal, the warning filters, the logging configuration Hydra installs for each job, Hydra's
global state, torch's thread count and denormal flushing, and the garbage collector's frozen objects (``initnorm/train.py`` freezes them at
its end)."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import runpy
import signal
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

from hydra.core.global_hydra import GlobalHydra

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)


def _logging_state() -> dict:
    loggers = [logging.getLogger(), *(lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger))]
    return {lg: (lg.level, list(lg.handlers), lg.propagate, lg.disabled) for lg in loggers}


def _put_back_logging(saved: dict) -> None:
    for lg in [logging.getLogger(), *logging.root.manager.loggerDict.values()]:
        if not isinstance(lg, logging.Logger):
            continue
        level, handlers, propagate, disabled = saved.get(lg, (logging.NOTSET, [], True, False))
        for h in lg.handlers:
            if h not in handlers:
                h.close()  # a job's train.log
        lg.setLevel(level)
        lg.handlers[:] = handlers
        lg.propagate, lg.disabled = propagate, disabled


@contextlib.contextmanager
def restored() -> Iterator[None]:
    """Whatever a command changes in its process, as it was before."""
    import torch

    from initnorm.training import signals

    argv, cwd, env, threads = list(sys.argv), os.getcwd(), dict(os.environ), torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in SIGNALS}
    logs = _logging_state()
    GlobalHydra.instance().clear()
    try:
        with warnings.catch_warnings():  # the filters a command adds (console.quiet) end with it
            # runpy's note that the shim was imported before (by an earlier test): harmless here
            warnings.filterwarnings("ignore", message=".*found in sys.modules", category=RuntimeWarning)
            yield
    finally:
        sys.argv[:] = argv
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        for s, h in handlers.items():
            signal.signal(s, h)
        signals.clear()
        _put_back_logging(logs)
        GlobalHydra.instance().clear()
        gc.unfreeze()
        torch.set_num_threads(threads)  # the bench's timings and a job's `threads` set it for the process
        torch.set_flush_denormal(False)  # torch's default, which initnorm-probe turns on for its process


def _status(exc: SystemExit) -> int:
    return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)  # as the interpreter exits


def run_module(module: str, args: list[str], cwd: str | Path | None = None) -> int:
    """``python -m module args`` (in ``cwd``) in this process; its exit status."""
    with restored():
        if cwd is not None:
            os.chdir(cwd)
        sys.argv[:] = [module, *args]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            return _status(exc)
        return 0


def run_main(main: Callable[[], object], argv: list[str], env: dict[str, str] | None = None) -> int:
    """A console script: ``main()`` with ``sys.argv`` = ``argv`` (``argv[0]`` the script's name, which Hydra reads)
    and ``env`` added to the environment, in this process; its exit status."""
    with restored():
        sys.argv[:] = argv
        os.environ.update(env or {})
        try:
            main()
        except SystemExit as exc:
            return _status(exc)
        return 0


def in_process_subprocess() -> SimpleNamespace:
    """A stand-in for the ``subprocess`` module whose ``run([python, "-m", module, *args], cwd=...)`` runs the command
    with ``run_module``: for a caller that starts commands (``initnorm.repro.reproduce.run``), its own code unchanged."""

    def run(argv: list[str], cwd=None, check: bool = False, **_) -> SimpleNamespace:
        assert argv[0] == sys.executable and argv[1] == "-m", argv
        return SimpleNamespace(returncode=run_module(argv[2], argv[3:], cwd), args=argv)

    return SimpleNamespace(run=run)
