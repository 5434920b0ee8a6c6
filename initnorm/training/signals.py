"""Stop on a signal without losing work: the job in progress checkpoints, then stops.

SIGTERM (``kill``, ``scancel``, ``docker stop``, a CI timeout) and SIGINT (Ctrl-C) do not kill
the process here. A handler only records that a stop was asked for (``requested()``); the
training loop acts on it at the next step boundary, where ``checkpoints.CheckpointOnSignal`` writes the
job's checkpoint (the same consistent point a periodic one uses, so the rerun resumes bit for
bit) and raises ``Interrupted``. Code between jobs asks ``raise_if_requested()``. A second
Ctrl-C while the first is honoured stops at once (``Interrupted`` with ``hard``).

Which signals are honoured: SIGTERM, SIGINT and SIGUSR2 (a cluster's preemption warning, SLURM's
``--signal=USR2@90``, handled as SIGTERM is), plus the names in ``$INITNORM_STOP_SIGNALS``, which
``install`` also sets so that worker processes of a parallel launcher honour the same ones. The exit status is
``128 + signal number`` (143 for SIGTERM, 130 for SIGINT), as shells report a killed process.

A ``KeyboardInterrupt`` is therefore never a stop signal while the handler is in place: SIGINT is recorded, not raised.
One that reaches the training loop then was raised by the job's own code (a callback, a data module) and is that job's
failure (``RaisedInterrupt``, recorded with its line; the sweep goes on); a stop recorded first makes it the stop.
Without the handler (``fit`` in a notebook) it is Python's Ctrl-C and stays a ``KeyboardInterrupt`` (``interrupt_cause``).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from typing import Any

from initnorm import envvars

STOP_ENV = envvars.STOP_SIGNALS
DEFAULT = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)  # USR2: a cluster's warning (SLURM's --signal=USR2@90)

_requested: int | None = None  # the first signal received, until ``clear()``
_where: dict[str, Any] = {}  # what the job in progress saved: folder, step
_listeners: list[Callable[[int], None]] = []  # told of the first signal (a launcher passes it on to its workers)


class Interrupted(BaseException):
    """A stop asked for by a signal. A BaseException, so that no ``except Exception`` that records a
    failed job catches it: the job is not failed, it is to be resumed."""

    def __init__(self, signum: int, folder: str | None = None, step: int | None = None, hard: bool = False):
        super().__init__(signal.Signals(signum).name)
        self.signum, self.folder, self.step, self.hard = signum, folder, step, hard

    def __reduce__(self):  # a parallel launcher's worker sends it back to the sweep's process
        return (type(self), (self.signum, self.folder, self.step, self.hard))

    @property
    def exit_status(self) -> int:
        return exit_status(self.signum)


class RaisedInterrupt(RuntimeError):
    """A ``KeyboardInterrupt`` that no signal caused: raised by the job's own code, it fails that job alone."""


def handling() -> bool:
    """Whether this process records SIGINT (``install``) rather than raising ``KeyboardInterrupt`` on it."""
    return signal.getsignal(signal.SIGINT) is _record


def interrupt_cause(exc: KeyboardInterrupt, handled: bool) -> BaseException:
    """What ``exc`` means: the stop (``Interrupted``) if a stop signal was recorded; a failure of the job
    (``RaisedInterrupt``) where SIGINT was ``handled`` (recorded, so the job's code raised it); else Python's Ctrl-C."""
    if _requested is not None:
        return Interrupted(_requested, _where.get("folder"), _where.get("step"))
    if handled:
        return RaisedInterrupt("KeyboardInterrupt raised by the job's own code (no stop signal was received)")
    return exc


def exit_status(signum: int) -> int:
    """``128 + signum``: what a shell reports for a process ended by that signal (143, 130)."""
    return 128 + int(signum)


def stop_signals() -> tuple[signal.Signals, ...]:
    """SIGTERM, SIGINT, SIGUSR2 and those named in ``$INITNORM_STOP_SIGNALS`` (``TERM,INT,USR2``)."""
    named = [s.strip().upper() for s in os.environ.get(STOP_ENV, "").split(",") if s.strip()]
    full = [n if n.startswith("SIG") else f"SIG{n}" for n in named]
    extra = [signal.Signals[n] for n in full if n in signal.Signals.__members__]
    return tuple(dict.fromkeys([*DEFAULT, *extra]))


def _record(signum: int, frame) -> None:
    global _requested
    if _requested == signal.SIGINT and signum == signal.SIGINT:
        # A second Ctrl-C: stop now, without the checkpoint. Only after a first SIGINT: a worker gets one from its
        # process group and a SIGTERM from the sweep's process passing it on, in either order.
        raise Interrupted(signum, hard=True)
    if _requested is None:
        _requested = signum
        for tell in _listeners.copy():  # a copy: a listener may leave (passed_on's exit) while it is told
            tell(signum)


def record(signum: int) -> None:
    """A stop signal another process received (a worker's), recorded here as if this process had: the sweep stops."""
    _record(signum, None)


@contextmanager
def passed_on(tell: Callable[[int], None]):
    """While the block runs, ``tell(signum)`` at the first stop signal (at once if one came already):
    a parent whose work runs in other processes asks them to stop the same way."""
    _listeners.append(tell)
    try:
        if _requested is not None:
            tell(_requested)
        yield
    finally:
        _listeners.remove(tell)


def install(extra: Iterable[int] = ()) -> tuple[signal.Signals, ...]:
    """Record (do not act on) SIGTERM, SIGINT, SIGUSR2 and ``extra`` in this process from now on; return them.

    Only the main thread may set handlers: elsewhere (a launcher's worker thread) nothing is changed.
    """
    names = [signal.Signals(s).name.removeprefix("SIG") for s in [*stop_signals(), *extra]]
    os.environ[STOP_ENV] = ",".join(dict.fromkeys(names))  # worker processes honour the same signals
    record_again()
    return stop_signals()


def requested() -> int | None:
    """The signal that asked this process to stop, or None."""
    return _requested


def clear() -> None:
    """Forget a recorded stop (tests; a process that goes on after handling one)."""
    global _requested
    _requested = None
    _where.clear()


def raise_if_requested(folder: str | None = None) -> None:
    """Between jobs: ``Interrupted`` if a stop was asked for."""
    if _requested is not None:
        raise Interrupted(_requested, folder, _where.get("step"))


def last_saved() -> dict[str, Any]:
    """``{"folder": ..., "step": ...}`` of the checkpoint written on the stop signal, if one was."""
    return dict(_where)


def record_again() -> None:
    """The recording handler on every stop signal (``install``), and back in place where Lightning set its own SIGTERM
    handler when ``fit`` started (one that stops after the batch, without a checkpoint). Only the main thread may set
    handlers."""
    if threading.current_thread() is threading.main_thread():
        for s in stop_signals():
            signal.signal(s, _record)


def stopped_at(folder: str, step: int) -> Interrupted:
    """The job in progress saved its checkpoint in ``folder`` at ``step`` on the stop signal: remembered for the
    resume line (``last_saved``); returns the ``Interrupted`` that ends the job."""
    _where.update(folder=str(folder), step=int(step))
    return Interrupted(_requested, _where["folder"], _where["step"])
