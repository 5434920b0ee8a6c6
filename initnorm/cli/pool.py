"""A sweep's worker processes: each runs one unit of work at a time (a job, or a vectorised group), and a worker that
dies costs only the unit it held.

joblib's pool (loky) ends every worker once one dies (``TerminatedWorkerError``): the other workers' jobs were lost
with it and the sweep ended in that traceback, without its summary. Here the parent hands one unit to an idle worker
over a pipe and waits on every worker's pipe and process at once (``multiprocessing.connection.wait``). A worker whose
process ends before it answers (``os._exit``, any signal: SIGKILL is the out-of-memory killer's) is reported for its
unit alone (``Lost``, with the reason), a new worker takes its place, and the other units go on.

Signals: a worker is started with the stop signals blocked (its parent thread blocks them: ``start``), so that nothing
in its start-up (the fork server's imports of torch and Lightning, ~10 s) dies of one or prints a ``KeyboardInterrupt``
traceback; ``serve`` installs the sweep's one recording handler (``initnorm.training.signals``) and then unblocks them.
The fork server, started the same way, keeps them blocked for good: only the parent ends it (``workers.end``).
A worker whose parent is gone reads the end of its pipe and exits; one in the middle of a unit stops at its next
step (the launcher's ``abandoned`` check).
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from initnorm.cli.disk import DiskError
from initnorm.training import signals

try:  # pickles the task function and Hydra's context by value where plain pickle cannot (a test's local function)
    import cloudpickle as _pickle
except ImportError:  # pragma: no cover - cloudpickle comes with the launchers extra
    import pickle as _pickle

BLOCKED = {signal.SIGTERM, signal.SIGINT, signal.SIGUSR2}  # every stop signal a sweep may honour (signals.stop_signals)
POLL_S = 0.2  # how often the parent, waiting on its workers, looks whether a stop signal came


@dataclass
class Lost:
    """A unit that ended without its result: ``reason`` says how (its worker died, or it raised past the launcher)."""

    reason: str


def died(pid: int, exitcode: int | None) -> Lost:
    """A worker's death as the one line its unit's jobs record."""
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        why = " (the out-of-memory killer's signal, or kill -9)" if -exitcode == signal.SIGKILL else ""
        return Lost(f"its worker process (pid {pid}) was killed by {name}{why} before the job ended")
    return Lost(f"its worker process (pid {pid}) exited with status {exitcode} before the job ended")


def n_workers(n_jobs: int, units: int) -> int:
    """joblib's reading of ``n_jobs``: -1 one per core, -2 all but one ...; never more than ``units``."""
    cores = os.cpu_count() or 1
    n = n_jobs if n_jobs > 0 else max(1, cores + 1 + n_jobs)
    return max(1, min(n, units))


def serve(conn, modules: Sequence[str]) -> None:
    """A worker: the sweep's recording handler on the stop signals (blocked until now), ``modules`` imported, then one
    unit after another as the parent sends them, each answered with ("ok", result) or ("raised", exception, traceback)."""
    signals.install()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, BLOCKED)
    for name in modules:
        importlib.import_module(name)
    while True:
        try:
            fn, args = _pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return  # the sweep's process is gone: nothing to report to
        try:
            answer = ("ok", fn(*args))
        except BaseException as exc:
            answer = ("raised", exc, traceback.format_exc())
        try:
            data = _pickle.dumps(answer)
        except Exception as exc:  # an answer that does not pickle: its text, at least
            data = _pickle.dumps(("raised", RuntimeError(f"{type(exc).__name__}: {exc}; the unit's answer: {answer!r:.500}"), ""))
        try:
            conn.send_bytes(data)
        except OSError:
            return


class _Worker:
    def __init__(self, process, conn) -> None:
        self.process, self.conn, self.unit = process, conn, None


class Pool:
    """``n`` worker processes (``start``), each given one unit at a time by ``run``; ``send`` a signal to them, ``close``."""

    def __init__(self, n: int, method: str, modules: Sequence[str] = ()) -> None:
        self.n, self.modules = n, tuple(modules)
        self.ctx = multiprocessing.get_context("forkserver" if method == "forkserver" else "spawn")
        self.workers: list[_Worker] = []
        self.closed = False
        self._lock = threading.Lock()
        self._starting: threading.Thread | None = None
        self.failed: Exception | None = None  # why no worker could be started

    def start(self, n: int | None = None) -> threading.Thread:
        """Start workers up to ``n`` (all of them by default) in a thread of their own, the stop signals blocked there
        (a child inherits the mask: its start-up is not cut short by one)."""

        def grow() -> None:
            signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED)
            try:
                while not self.closed and len(self.workers) < (n or self.n):
                    self._start_one()
            except Exception as exc:  # the pool closed meanwhile (its fork server killed), or it cannot start: run() says so
                self.failed = exc

        previous = self._starting
        if previous is not None and previous.is_alive():
            previous.join()
        self._starting = threading.Thread(target=grow, name="initnorm-start-workers", daemon=True)
        self._starting.start()
        return self._starting

    def _start_one(self) -> None:
        here, there = self.ctx.Pipe()
        process = self.ctx.Process(target=serve, args=(there, self.modules), name="initnorm-worker")
        process.start()
        there.close()
        with self._lock:
            self.workers.append(_Worker(process, here))
            if self.closed:  # closed while this one started
                _kill(process)

    def wait_started(self, stopping: Callable[[], bool]) -> None:
        """Until the workers asked for are started, or a stop signal came."""
        while self._starting is not None and self._starting.is_alive() and not stopping():
            self._starting.join(POLL_S)

    def run(self, fn: Callable[..., Any], units: Sequence[tuple], stopping: Callable[[], bool]) -> list[Any]:
        """``fn(*units[k])`` for every k in the workers, in order, one unit per idle worker; result k, or ``Lost``.
        Once ``stopping()`` no unit starts (the units never started are left None); an ``Exception`` a unit raises past
        ``fn`` (a full disk: the sweep stops) is raised here."""
        results: list[Any] = [None] * len(units)
        todo = list(range(len(units)))[::-1]
        if len(self.workers) < min(self.n, len(units)) and (self._starting is None or not self._starting.is_alive()):
            self.start(min(self.n, len(units)))
        while True:
            if not self.workers:
                self.wait_started(stopping)
                if not self.workers and not stopping():
                    raise RuntimeError(f"no worker process could be started: {type(self.failed).__name__}: {self.failed}")
            with self._lock:
                idle = [w for w in self.workers if w.unit is None]
            while idle and todo and not stopping():
                w, k = idle.pop(), todo.pop()
                w.unit = k
                w.conn.send_bytes(_pickle.dumps((fn, units[k])))
            busy = [w for w in self.workers if w.unit is not None]
            if not busy and (not todo or stopping()):
                return results
            ready = wait([x for w in self.workers for x in (w.conn, w.process.sentinel)], timeout=POLL_S)
            for w in list(self.workers):
                if w.conn not in ready and w.process.sentinel not in ready:
                    continue
                answer = None
                if w.conn in ready:
                    try:
                        answer = _pickle.loads(w.conn.recv_bytes())
                    except (EOFError, OSError):
                        pass
                if answer is not None:
                    k, w.unit = w.unit, None
                    if answer[0] == "ok":
                        results[k] = answer[1]
                    elif isinstance(answer[1], (Exception, DiskError)):  # a full disk stops the sweep, as it does alone
                        raise answer[1]
                    else:  # KeyboardInterrupt raised by user code, a SystemExit: that unit's failure
                        results[k] = Lost(f"it raised {type(answer[1]).__name__}{f': {answer[1]}' if str(answer[1]) else ''} "
                                          "(not a stop signal: none was received)")
                    continue
                w.process.join(5)
                if w.unit is not None:
                    results[w.unit] = died(w.process.pid, w.process.exitcode)
                with self._lock:
                    self.workers.remove(w)
                w.conn.close()
                if todo and not stopping():
                    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED)  # as in start(); a signal meanwhile waits
                    try:
                        self._start_one()
                    finally:
                        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def send(self, signum: int) -> None:
        """``signum`` to every worker (a stop signal passed on)."""
        for w in list(self.workers):
            try:
                os.kill(w.process.pid, signum)
            except (ProcessLookupError, TypeError):  # ended already, or not started
                pass

    def close(self) -> None:
        """Kill every worker and reap it: nothing outlives the command."""
        with self._lock:
            self.closed = True
            workers, self.workers = list(self.workers), []
        for w in workers:
            _kill(w.process)
        for w in workers:
            w.process.join(5)
            w.conn.close()


def _kill(process) -> None:
    try:
        process.kill()
    except (OSError, AttributeError, ValueError):
        pass
