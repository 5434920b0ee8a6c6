"""A stop signal ends the whole command: the job in progress checkpoints, no further job starts,
the sweep's summary covers the jobs that finished, the exit status is 128 + the signal (143 for
SIGTERM, 130 for SIGINT) and the last line is the command that resumes.

``python -m initnorm.train`` records the stop signals from its first line (``initnorm/train.py``) and runs
everything after the command line is read inside ``honoured(argv)``: the checks of every job (between two
jobs' checks), the workers' start (``launch/pool.py``: no unit is handed out), Hydra's jobs (each calls
``job_started()`` first; the training loop stops through ``initnorm.training.checkpoints.CheckpointOnSignal``;
a parallel launcher passes the signal on to its workers) and the summary (``raise_if_requested`` after it).
The mechanism itself (what a handler records, which signals, ``Interrupted``) is in
``initnorm/training/signals.py``.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

from initnorm.training import signals

RUN_DIR_KEYS = ("hydra.run.dir", "hydra.sweep.dir")
_folder: dict[str, str] = {}  # {"key": "hydra.sweep.dir", "dir": absolute folder} of the latest job


def record_from_now() -> None:
    """The command's first act (``initnorm/train.py``): the stop signals recorded from here on, in every phase."""
    signals.install()


def job_started() -> None:
    """In a job, before it trains: remember where it writes; stop here if a signal came between jobs."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        hc = HydraConfig.get()
        multirun = hc.mode is not None and hc.mode.name == "MULTIRUN"
        folder = hc.sweep.dir if multirun else hc.runtime.output_dir
        _folder.update(key=RUN_DIR_KEYS[multirun], dir=str(Path(hc.runtime.cwd, folder).resolve()))
    signals.raise_if_requested()


def sweep_started(folder: str) -> None:
    """In the sweep's own process (Hydra's multirun start): the folder a resume must name."""
    _folder.update(key="hydra.sweep.dir", dir=str(Path(folder).resolve()))


def current_folder() -> dict[str, str]:
    """``{"key": "hydra.sweep.dir", "dir": ...}`` of the latest job started in this process (empty before one)."""
    return dict(_folder)


_RESUMED_AS: list[str] = []  # a command that runs a sweep inside itself (initnorm-transfer): its own line resumes it


@contextmanager
def resumed_as(module: str, argv: list[str]):
    """Inside: every resume line is ``python -m module argv``, not the inner sweep's (which would never write what the
    outer command writes at its end: initnorm-transfer's transfer_report.md)."""
    _RESUMED_AS[:] = ["python", "-m", module, *argv]
    try:
        yield
    finally:
        _RESUMED_AS.clear()


def resume_command(argv: list[str], key: str, folder: str, module: str = "initnorm.train") -> str:
    """The command line again, with its output folder pinned to ``folder`` (a rerun there resumes); inside ``resumed_as``,
    the outer command's own line."""
    if _RESUMED_AS:
        return shlex.join(_RESUMED_AS)
    kept = [a for a in argv if a.partition("=")[0].lstrip("+~") not in RUN_DIR_KEYS]
    return shlex.join(["python", "-m", module, *kept, f"{key}={folder}"])


def write_summary(folder: str) -> str | None:
    """The sweep's summary for the jobs that finished; None (and a line on stderr) where it cannot be written."""
    from initnorm.summary import summarize

    try:
        summarize(folder)
        return str(Path(folder) / "summary.md")
    except FileNotFoundError:
        return None  # no job finished yet
    except Exception as exc:  # a damaged record must not hide the line that says how to resume
        print(f"warning: no summary for {folder}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None


def report(stop: signals.Interrupted, argv: list[str], resume: str | None = None) -> int:
    """Say what was saved and how to resume; return the exit status (128 + signal)."""
    name = signal_name(stop.signum)
    saved = signals.last_saved() or ({"folder": stop.folder, "step": stop.step} if stop.folder else {})  # or a worker's
    if stop.hard:
        what = "at once (a second one): the job in progress keeps its last periodic checkpoint"
    elif saved.get("folder"):
        what = f"job {saved['folder']} saved a checkpoint at step {saved['step']}"
    else:
        what = "no job of this process was training"
    if _folder or stop.hard or saved.get("folder"):
        print(f"\nstopped by {name}: {what}; no further job started.", file=sys.stderr)
    else:  # the checks of the command line, the workers' start
        print(f"\nstopped by {name}: before any job started; nothing was trained.", file=sys.stderr)
    if _folder.get("key") == "hydra.sweep.dir":
        summary = write_summary(_folder["dir"])
        if summary:
            print(f"summary of the finished jobs: {summary}", file=sys.stderr)
    if _folder:
        print(f"resume with: {resume_command(argv, _folder['key'], _folder['dir'])}", file=sys.stderr)
    elif resume:
        print(resume, file=sys.stderr)
    else:  # stopped before a folder was named (the checks, the workers' start): the same command starts it
        print(f"resume with: {shlex.join(['python', '-m', 'initnorm.train', *argv])}", file=sys.stderr)
    return stop.exit_status


def signal_name(signum: int) -> str:
    import signal

    return signal.Signals(signum).name


@contextmanager
def honoured(argv: list[str], extra: Iterable[int] = (), resume: str | None = None):
    """Run a command's jobs so that a stop signal ends it as the module docstring says (``SystemExit``);
    ``resume`` is the last line where no Hydra job names the folder (``coord_check --out``)."""
    signals.install(extra)
    try:
        yield
    except signals.Interrupted as stop:
        sys.exit(report(stop, argv, resume))
    except SystemExit as exc:
        if not lightnings_sigterm(exc):
            raise
        # Lightning's own handler, in the instant before ours is back in place
        sys.exit(report(signals.Interrupted(signals.requested() or 15), argv, resume))


def lightnings_sigterm(exc: BaseException) -> bool:
    """Whether ``exc`` is Lightning's ``SIGTERMException`` (a ``SystemExit``), looked up only where Lightning is
    imported already: a command that trained nothing (``--help``, a bad value) never waits for its import."""
    module = sys.modules.get("lightning.pytorch.utilities.exceptions")
    return module is not None and isinstance(exc, module.SIGTERMException)
