"""``python -m initnorm.train ...`` run inside the test process, for tests whose point is what a command writes and says
(records, summaries, resumes, its lines and exit status), not its process: no interpreter start, no torch import.

``command(*args, cwd=...)`` runs the command as ``initnorm/train.py``'s ``main`` does (stop signals recorded from the
start, then ``initnorm.cli.train.main``), on Hydra's basic launcher in this process, and returns its exit status and
what it printed. Everything the command changes in this process is put back afterwards: ``sys.argv``, the working
folder, the environment, the handlers of the stop signals and the recorded stop, Hydra's global state, every logger's
handlers, level and switch, the warning filters, torch's thread count, the sweep's module lists, and the folder locks
the command took (closed, so a later command, here or in another process, may take them).
A launcher whose jobs run in worker processes (``local_parallel``, ``vectorized``) or on SLURM is a process test: not
for this.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Ran:
    code: int  # the exit status the process would have had
    out: str
    err: str


def _loggers() -> list[logging.Logger]:
    manager = logging.Logger.manager
    return [logging.getLogger(), *(v for v in list(manager.loggerDict.values()) if isinstance(v, logging.Logger))]


@contextlib.contextmanager
def restored(cwd: Path):
    """Run the block in ``cwd``; afterwards this process is as it was before (the list in the module docstring)."""
    import torch
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from initnorm.cli import lock, sweep
    from initnorm.cli import signals as cli_signals
    from initnorm.training import signals

    argv, here, env = list(sys.argv), os.getcwd(), dict(os.environ)
    handlers = {s: signal.getsignal(s) for s in signals.stop_signals()}
    logs = {lg: (list(lg.handlers), lg.level, lg.disabled, lg.propagate) for lg in _loggers()}
    filters, threads = list(warnings.filters), torch.get_num_threads()
    hydra_cfg, folder = HydraConfig.instance().cfg, dict(cli_signals._folder)
    failed, stopped, held = list(sweep.FAILED_JOBS), list(sweep.STOPPED_JOBS), dict(lock._held)
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(here)
        sys.argv[:] = argv
        os.environ.clear()
        os.environ.update(env)
        for s, h in handlers.items():
            signal.signal(s, h)
        signals.clear()
        for lg in _loggers():
            before = logs.get(lg, ([], logging.NOTSET, False, True))
            for h in lg.handlers:
                if h not in before[0]:
                    h.close()  # a job's train.log stays open otherwise
            lg.handlers[:], lg.level, lg.disabled, lg.propagate = before
        warnings.filters[:] = filters
        warnings._filters_mutated()
        torch.set_num_threads(threads)
        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = hydra_cfg
        cli_signals._folder.clear()
        cli_signals._folder.update(folder)
        sweep.FAILED_JOBS[:], sweep.STOPPED_JOBS[:] = failed, stopped
        for path in set(lock._held) - set(held):
            os.close(lock._held.pop(path))


def command(*args: str, cwd: Path) -> Ran:
    """``python -m initnorm.train *args`` run in ``cwd``, in this process (see the module docstring)."""
    from initnorm.cli import argv, disk, workers
    from initnorm.cli import signals as cli_signals
    from initnorm.cli.train import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    pool = workers.started_early()
    with restored(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        sys.argv[:] = ["initnorm.train", *args]
        cli_signals.record_from_now()  # as initnorm/train.py's main does first
        disk.set_aside_compiler_cache()
        try:
            main(argv.parse(list(args)))
        except SystemExit as exc:
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            if workers.started_early() is not pool:  # a pool of this command's (not meant for this helper): ended
                workers.stop()
    return Ran(code, out.getvalue(), err.getvalue())
