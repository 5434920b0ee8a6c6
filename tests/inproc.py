"""A command run inside the test process, as ``python -m ...`` or its console script would run it in a process of its own:
for the tests whose point is what a command writes and prints, not its process (no second interpreter importing torch and
Lightning, seconds of CPU a start). A launcher whose jobs run in worker processes (``local_parallel``, the vectorised
launcher's process engine) runs here too: its workers are processes forked from the fork server (initnorm/cli/workers.py),
and a worker's death costs its own unit. A sweep on SLURM's stand-in, or one a signal from outside stops, is a process
test (``tests.conftest.run_cli``).

``restored()`` puts back, when its block ends, everything a command changes in its process. A runner that put back less
broke tests by their order (a sweep's HydraConfig left set: a later ``train()`` in the worker named its run after that
sweep's job). What it keeps:

- ``sys.argv``, the working folder (``hydra.job.chdir``), the environment (the sweep's progress variables, the stop-signal
  list, the compiler cache);
- every signal's handler and the blocked set; the recorded stop signal (none before the command, as in a new process,
  and none after);
- Hydra's global state (cleared for the command, as a new process has it) and its HydraConfig (a job's, left set by
  Hydra's run);
- every logger's handlers (those the command added are closed: a job's train.log), level and flags, and logging's
  disable level; a logger the command made ends as a new one is (``console.quiet`` sets levels);
- the warning filters and ``showwarning`` (``console.quiet``);
- torch's thread count (a job's ``threads``, the bench), denormal flushing (a job's ``flush_denormal``, initnorm-probe;
  torch has no getter: put back to its default, off), the random generators of torch, numpy and ``random``
  (``seed_everything``), and the garbage collector (``initnorm/train.py`` freezes every object at its end: a no-op here);
- initnorm's own process state: the sweep's failed and stopped jobs, the latest job's folder, and what the process's exit
  would end: the folder locks the command took (closed, so that a later command, here or in another process, may take
  them), the tracker runs it left open (a stopped job's: ended as failed) and a pool of workers it started.

``run(main, argv)`` is a console script (``sys.exit(main())``), ``run_module`` is ``python -m``, ``command`` is ``python -m
initnorm.train``; each returns the exit status and what was printed (``Ran``, as ``subprocess.run(capture_output=True)``
has them), the lines of Lightning's own console handler included. An exception that escapes is as the interpreter ends
on one: status 1, its traceback on stderr.
"""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import os
import random
import runpy
import signal
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import lightning  # noqa: F401  its console handler exists before any command: one that _printing_to sends to Ran and _logging keeps
import numpy as np
import torch
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig


@dataclass
class Ran:
    """What a command run here left: its exit status and what it printed."""

    returncode: int
    stdout: str
    stderr: str


def _loggers() -> list[logging.Logger]:
    return [logging.getLogger(), *(lg for lg in list(logging.root.manager.loggerDict.values()) if isinstance(lg, logging.Logger))]


@contextlib.contextmanager
def _hydra() -> Iterator[None]:
    hydra, job = GlobalHydra.instance().hydra, HydraConfig.instance().cfg
    GlobalHydra.instance().clear()  # a test's composition may leave it initialised, which Hydra's run refuses
    HydraConfig.instance().cfg = None
    try:
        yield
    finally:
        GlobalHydra.instance().hydra = hydra
        HydraConfig.instance().cfg = job


@contextlib.contextmanager
def _process(cwd: str | Path | None) -> Iterator[None]:
    argv, args, here, env = sys.argv, list(sys.argv), os.getcwd(), dict(os.environ)
    try:
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        sys.argv = argv
        sys.argv[:] = args
        os.chdir(here)
        os.environ.clear()
        os.environ.update(env)


@contextlib.contextmanager
def _signals() -> Iterator[None]:
    from initnorm.training import signals

    handlers = {s: signal.getsignal(s) for s in signal.valid_signals()}
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    signals.clear()
    try:
        yield
    finally:
        signals.clear()
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        for s, h in handlers.items():
            if h is not None and signal.getsignal(s) is not h:  # None: a handler not set from Python, which none replaces
                signal.signal(s, h)


@contextlib.contextmanager
def _logging() -> Iterator[None]:
    saved = {lg: (list(lg.handlers), lg.level, lg.disabled, lg.propagate) for lg in _loggers()}
    kept = {h for handlers, *_ in saved.values() for h in handlers}
    disabled = logging.root.manager.disable
    try:
        yield
    finally:
        for lg in _loggers():
            handlers, level, off, propagate = saved.get(lg, ([], logging.NOTSET, False, True))
            for h in lg.handlers:
                if h not in kept:
                    h.close()  # a job's train.log stays open otherwise
            lg.handlers[:] = handlers
            lg.setLevel(level)  # setLevel, not the attribute: it clears the loggers' cached answers
            lg.disabled, lg.propagate = off, propagate
        logging.disable(disabled)


@contextlib.contextmanager
def _torch_and_gc() -> Iterator[None]:
    """torch's threads and generators as they were; and the command's last ``gc.freeze()`` (``initnorm/train.py``, for a
    process about to exit) made a no-op, which here would freeze the test's garbage for good; what the suite froze after
    collecting (tests/conftest.py) stays frozen."""
    threads, generators = torch.get_num_threads(), (torch.get_rng_state(), np.random.get_state(), random.getstate())
    enabled, freeze = gc.isenabled(), gc.freeze
    gc.freeze = lambda: None
    try:
        yield
    finally:
        gc.freeze = freeze
        if enabled:
            gc.enable()
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        torch.set_flush_denormal(False)
        torch.set_rng_state(generators[0])
        np.random.set_state(generators[1])
        random.setstate(generators[2])


@contextlib.contextmanager
def _initnorm() -> Iterator[None]:
    from initnorm.cli import lock, sweep
    from initnorm.cli import signals as cli_signals
    from initnorm.launch import workers
    from initnorm.training import trackers

    jobs, folder, held = (list(sweep.FAILED_JOBS), list(sweep.STOPPED_JOBS)), cli_signals.current_folder(), dict(lock._held)
    opened, pool = set(trackers._OPEN), workers.started_early()
    try:
        yield
    finally:
        for key in set(trackers._OPEN) - opened:
            trackers.fail(key)
        if workers.started_early() is not pool:
            workers.stop()
        for path in set(lock._held) - set(held):
            os.close(lock._held.pop(path))
        sweep.FAILED_JOBS[:], sweep.STOPPED_JOBS[:] = jobs
        cli_signals._folder.clear()
        cli_signals._folder.update(folder)


@contextlib.contextmanager
def _printing_to(out: io.StringIO, err: io.StringIO) -> Iterator[None]:
    """stdout and stderr, and the handlers a library made at its import with the console stream of then (Lightning's, which
    does not propagate), to ``out`` or ``err`` as theirs was; a file's handler is left alone."""
    consoles = {id(sys.stderr): err, id(sys.__stderr__): err, id(sys.stdout): out, id(sys.__stdout__): out}
    streams = {h: h.stream for lg in _loggers() for h in lg.handlers
               if isinstance(h, logging.StreamHandler) and id(h.stream) in consoles}
    for h, stream in streams.items():
        h.setStream(consoles[id(stream)])
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield
    finally:
        for h, stream in streams.items():
            h.setStream(stream)


@contextlib.contextmanager
def restored(cwd: str | Path | None = None, out: io.StringIO | None = None, err: io.StringIO | None = None) -> Iterator[None]:
    """Run the block in ``cwd`` (its printing to ``out`` and ``err`` where given); afterwards this process is as it was
    (the list in the module docstring). What the process's exit would end is ended while the block's printing still
    goes to ``out`` and ``err``."""
    with contextlib.ExitStack() as stack:
        for part in (_hydra(), _process(cwd), _signals(), _logging(), warnings.catch_warnings(), _torch_and_gc()):
            stack.enter_context(part)
        if out is not None and err is not None:
            stack.enter_context(_printing_to(out, err))
        stack.enter_context(_initnorm())
        yield


def _status(main: Callable[[], object]) -> int:
    """``main()``'s exit status as ``sys.exit(main())`` gives it."""
    try:
        code = main()
    except SystemExit as exc:
        code = exc.code
    except Exception:
        traceback.print_exc()
        return 1
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def run(main: Callable[[], object], argv: list[str], cwd: str | Path | None = None, env: dict[str, str] | None = None) -> Ran:
    """A console script: ``main()`` with ``sys.argv`` = ``argv`` (``argv[0]`` the script's name, which Hydra reads) in
    ``cwd``, ``env`` added to the environment, in this process; its exit status and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with restored(cwd, out, err):
        sys.argv[:] = argv
        os.environ.update(env or {})
        code = _status(main)
    return Ran(code, out.getvalue(), err.getvalue())


def run_module(module: str, args: list[str], cwd: str | Path | None = None) -> Ran:
    """``python -m module args`` in ``cwd``, in this process: the module run as ``__main__`` (its shim, its ``main``)."""

    def main() -> None:  # python -m reads no return value
        # runpy's note that the module was imported before (by an earlier test): harmless here
        warnings.filterwarnings("ignore", message=".*found in sys.modules", category=RuntimeWarning)
        runpy.run_module(module, run_name="__main__", alter_sys=True)

    return run(main, [module, *args], cwd)


def command(*args: str, cwd: str | Path) -> Ran:
    """``python -m initnorm.train args`` in ``cwd``, in this process (``initnorm/train.py`` as it runs), except that a parallel
    sweep's workers are not started early: a fork server and workers importing torch, seconds of CPU, where the command's
    checks refuse the sweep before any worker would train."""
    from initnorm.cli import workers

    start_early = workers.start_early
    workers.start_early = lambda cmd: None
    try:
        return run_module("initnorm.train", list(args), cwd)
    finally:
        workers.start_early = start_early


def in_process_subprocess() -> SimpleNamespace:
    """A stand-in for the ``subprocess`` module whose ``run([python, "-m", module, *args], cwd=...)`` runs the command with
    ``run_module``: for a caller that starts commands (``initnorm.repro.reproduce.run``), its own code unchanged. What the
    command printed goes to this process's stdout and stderr, as a child's would, unless ``capture_output``."""

    def run_(argv: list[str], cwd=None, check: bool = False, capture_output: bool = False, **_) -> SimpleNamespace:
        assert argv[0] == sys.executable and argv[1] == "-m" and not check, argv
        ran = run_module(argv[2], argv[3:], cwd)
        if not capture_output:
            sys.stdout.write(ran.stdout)
            sys.stderr.write(ran.stderr)
        return SimpleNamespace(args=argv, returncode=ran.returncode, stdout=ran.stdout if capture_output else None,
                               stderr=ran.stderr if capture_output else None)

    return SimpleNamespace(run=run_)
