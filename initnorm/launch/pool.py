"""A sweep's worker processes on pebble's ``ProcessPool``: each runs one unit of work at a time (a job, or a vectorised
group), a worker that dies costs only the unit it held, and a stop signal stops, never fails.

Why pebble: joblib's pool (loky) ends every worker once one dies (``TerminatedWorkerError``), and
``concurrent.futures.ProcessPoolExecutor`` marks the whole pool broken (``BrokenProcessPool``): the other workers' jobs
were lost with it. pebble gives the dead worker's one future ``ProcessExpired`` (its pid and exit status) and starts a
new worker in its place, with the start method, an initializer and a timeout of our choosing (ARCHITECTURE.md).

Around it, this file holds what a sweep adds:

- at most ``n`` units handed to pebble at once, so that a unit starts only on an idle worker and none starts once a
  stop signal came (``run``);
- the workers' signals: they start (the fork server's imports included) with the stop signals blocked or ignored
  (``forkserver_preload.py``), so nothing in their start-up dies of one or prints a ``KeyboardInterrupt`` traceback;
  the initializer installs the sweep's one recording handler (``initnorm.training.signals``) and unblocks them. A
  signal is recorded, never fatal: a unit running checkpoints and stops, the next one stops before it begins, and
  the sweep's process, told by the unit's answer, stops the sweep (an idle worker that died of one would have left
  pebble with no task to charge its death to: its pool breaks);
- a stopped worker (SIGSTOP, SIGTSTP) noticed and named while the sweep waits for it, and woken (SIGCONT) when a stop
  signal is passed on, so that it can checkpoint instead of hanging the stop;
- the fork server's pid (a worker's parent), so that the sweep ends it with its workers (``workers.end``).
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from concurrent.futures import CancelledError
from dataclasses import dataclass
from typing import Any

from pebble import ProcessExpired, ProcessPool

from initnorm import collector
from initnorm.errors import DiskError
from initnorm.training import signals

try:  # pickles the task function and Hydra's context by value where plain pickle cannot (a test's local function)
    import cloudpickle as _pickle
except ImportError:  # pragma: no cover - cloudpickle comes with the launchers extra
    import pickle as _pickle

BLOCKED = {signal.SIGTERM, signal.SIGINT, signal.SIGUSR2}  # every stop signal a sweep may honour (signals.stop_signals)
POLL_S = 0.2  # how often the parent, waiting on its workers, looks whether a stop signal came
STOPPED_SAY_S = 5.0  # a worker stopped this long is named on the console


@dataclass
class Lost:
    """A unit that ended without its result: ``reason`` says how (its worker died, or it raised past the launcher)."""

    reason: str


def died(pid: int | None, exitcode: int | None) -> Lost:
    """A worker's death as the one line its unit's jobs record."""
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        why = " (the out-of-memory killer's signal, or kill -9)" if -exitcode == signal.SIGKILL else ""
        return Lost(f"its worker process (pid {pid}) was killed by {name}{why} before the job ended")
    if exitcode == 255:  # multiprocessing's reading when the fork server, which reports a worker's status, is gone
        return Lost(f"its worker process (pid {pid}) was lost with the fork server it came from (killed?) before the job ended")
    return Lost(f"its worker process (pid {pid}) exited with status {exitcode} before the job ended")


def n_workers(n_jobs: int, units: int) -> int:
    """joblib's reading of ``n_jobs``: -1 one per core, -2 all but one ...; never more than ``units``."""
    cores = os.cpu_count() or 1
    n = n_jobs if n_jobs > 0 else max(1, cores + 1 + n_jobs)
    return max(1, min(n, units))


def _worker_start(modules: Sequence[str]) -> None:
    """pebble's initializer: the stop signals handled (blocked until now), then ``modules`` imported, tqdm's lock a
    thread lock (``_thread_bars``), and the garbage collector on over a frozen heap (``collector.settle``: the fork
    server imported with it off)."""
    signals.install()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, BLOCKED)
    with collector.paused():
        for name in modules:
            importlib.import_module(name)
    _thread_bars()
    collector.settle()


def _thread_bars() -> None:
    """tqdm takes a multiprocessing lock, a named semaphore, at its first bar (Lightning's bars; the compiler's wait for
    its kernels under ``compile=true``). ``close`` ends a worker by SIGKILL once its units answered, so that semaphore
    outlived it and the sweep's exit printed the resource tracker's "There appear to be 2 leaked semaphore objects"
    warning. A worker's bars are its own: a thread lock is enough."""
    from tqdm import tqdm  # Lightning's dependency: a worker trains through Lightning, which imports it anyway

    tqdm.set_lock(threading.RLock())


def _call(payload: bytes) -> bytes:
    """A unit in a worker: ("ok", result) or ("raised", exception), pickled by value (a job's return holds classes
    that Hydra's plugin scan imported anew: plain pickle refuses them); the recording handler on while it runs."""
    fn, args = _pickle.loads(payload)
    signals.record_again()  # a unit may have left Lightning's handler in place
    try:
        answer = ("ok", fn(*args))
    except BaseException as exc:
        answer = ("raised", exc)
    try:
        return _pickle.dumps(answer)
    except Exception as exc:  # an answer that does not pickle: its text, at least
        return _pickle.dumps(("raised", RuntimeError(f"{type(exc).__name__}: {exc}; the unit's answer: {answer!r:.500}")))
    finally:
        signals.record_again()


def _pid() -> int:
    return os.getpid()


class Pool:
    """``n`` worker processes (``start``), each given one unit at a time by ``run``; ``send`` a signal to them, ``close``."""

    def __init__(self, n: int, method: str, modules: Sequence[str] = ()) -> None:
        self.n, self.modules, self.method = n, tuple(modules), method
        self.ctx = multiprocessing.get_context("forkserver" if method == "forkserver" else "spawn")
        self.pebble: ProcessPool | None = None
        self.closed = False
        self.server: int | None = None  # the workers' parent: the fork server, or this process
        self._starting: threading.Thread | None = None
        self.failed: Exception | None = None  # why no worker could be started

    def start(self, n: int | None = None) -> threading.Thread:
        """Start the workers (``n`` or ``self.n``) in a thread of their own, the stop signals blocked there: the fork
        server, pebble's threads and every worker (a replacement's too) inherit the mask."""

        def grow() -> None:
            signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED)
            try:
                pool = ProcessPool(max_workers=n or self.n, initializer=_worker_start, initargs=(self.modules,),
                                   context=self.ctx)
                self.pebble = pool
                pid = pool.schedule(_pid).result()  # a worker's pid: its parent is the fork server
                self.server = _parent(pid) if self.method == "forkserver" else os.getpid()
            except Exception as exc:  # it cannot start (closed meanwhile, or no process can be made): run() says so
                self.failed = exc

        if self._starting is None:
            self._starting = threading.Thread(target=grow, name="initnorm-start-workers", daemon=True)
            self._starting.start()
        return self._starting

    def wait_started(self, stopping: Callable[[], bool]) -> None:
        """Until the workers asked for are started, or a stop signal came."""
        while self._starting is not None and self._starting.is_alive() and not stopping():
            self._starting.join(POLL_S)

    def run(self, fn: Callable[..., Any], units: Sequence[tuple], stopping: Callable[[], bool],
            on_result: Callable[[Any], None] | None = None) -> list[Any]:
        """``fn(*units[k])`` for every k in the workers, in order, one unit per idle worker; result k, or ``Lost``
        (``on_result`` is told of each as it comes). Once ``stopping()`` no unit starts (the units never started are left
        None); an ``Exception`` a unit raises past ``fn`` (a full disk: the sweep stops) is raised here."""
        results: list[Any] = [None] * len(units)
        self.start(min(self.n, len(units)))
        self.wait_started(stopping)
        if self.pebble is None:
            if stopping():
                return results
            raise RuntimeError(f"no worker process could be started: {type(self.failed).__name__}: {self.failed}")
        todo = list(range(len(units)))[::-1]
        running: dict[Any, int] = {}
        named: set[int] = set()
        while True:
            while todo and len(running) < self.n and not stopping():
                k = todo.pop()
                running[self.pebble.schedule(_call, (_pickle.dumps((fn, units[k])),))] = k
            if not running:
                return results
            finished, _ = futures.wait(running, timeout=POLL_S, return_when=futures.FIRST_COMPLETED)  # a unit's end seen at once
            done = [f for f in running if f in finished]
            if not done:
                self._name_stopped(named)
                continue
            for f in done:
                k = running.pop(f)
                results[k] = self._answer(f)
                if on_result is not None:
                    on_result(results[k])

    def _answer(self, f) -> Any:
        try:
            answer = _pickle.loads(f.result())
        except ProcessExpired as exc:
            if exc.pid is not None and _state(exc.pid) not in ("", "Z"):
                # Its fork server was killed: the worker runs on, out of pebble's sight, and could take the next unit
                # pebble hands out. Its unit is lost either way; what it finished is kept (``record_failure``).
                _kill(exc.pid)
            return died(exc.pid, exc.exitcode)
        except CancelledError:
            return None
        if answer[0] == "ok":
            return answer[1]
        exc = answer[1]
        if isinstance(exc, (Exception, DiskError)):  # a full disk stops the sweep, as it does alone
            raise exc
        # KeyboardInterrupt raised by user code, a SystemExit: that unit's failure
        return Lost(f"it raised {type(exc).__name__}{f': {exc}' if str(exc) else ''} (not a stop signal: none was received)")

    def _name_stopped(self, named: set[int]) -> None:
        """One line for each worker found stopped (SIGSTOP): the sweep waits on it, and says so."""
        for pid, since in stopped(self.workers()).items():
            if pid not in named and time.monotonic() - since >= STOPPED_SAY_S:
                named.add(pid)
                print(f"warning: worker process {pid} is stopped (SIGSTOP or SIGTSTP) and its job waits: `kill -CONT {pid}` "
                      "resumes it; a stop signal to the sweep wakes it to checkpoint", file=sys.stderr, flush=True)

    def workers(self) -> list[int]:
        """The pids of the running workers (the fork server's children, or this process's pebble workers)."""
        if self.server is None:
            return []
        return _children(self.server) if self.server != os.getpid() else [p.pid for p in multiprocessing.active_children()
                                                                          if p.name == "pebble_pool_worker"]

    def send(self, signum: int) -> None:
        """``signum`` to every worker (a stop signal passed on); a stopped one woken to honour it."""
        for pid in self.workers():
            try:
                os.kill(pid, signum)
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:  # ended already
                pass

    def close(self) -> None:
        """End every worker and reap it: nothing outlives the command."""
        self.closed = True
        if self._starting is not None and self._starting.is_alive():
            # Still starting: the first worker waits on the fork server's imports. Killed, the start fails at once.
            for pid in forkservers():
                _kill(pid)
            self._starting.join(10)
        if self.pebble is not None:
            self.pebble.stop()  # no replacement started from here on
            for pid in self.workers():  # every unit answered: nothing to save (pebble's terminate waits 3 s: they record it)
                _kill(pid)
            self.pebble.join()


def forkservers() -> list[int]:
    """This process's fork servers (multiprocessing's, started by whichever thread started the first worker)."""
    servers = []
    for kids in _read_all(f"/proc/{os.getpid()}/task/*/children"):
        for pid in (int(p) for p in kids.split()):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"multiprocessing.forkserver" in f.read():
                        servers.append(pid)
            except OSError:
                pass
    return servers


def _read_all(pattern: str) -> list[str]:
    import glob

    out = []
    for path in glob.glob(pattern):
        try:
            with open(path) as f:
                out.append(f.read())
        except OSError:
            pass
    return out


_STOPPED_AT: dict[int, float] = {}


def stopped(pids: Sequence[int]) -> dict[int, float]:
    """Of ``pids``, those stopped (state T), with when each was first seen so."""
    out = {}
    for pid in pids:
        if _state(pid) in ("T", "t"):
            out[pid] = _STOPPED_AT.setdefault(pid, time.monotonic())
        else:
            _STOPPED_AT.pop(pid, None)
    return out


def _stat(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].decode().split()
    except OSError:  # gone, or no /proc (macOS)
        return []


def _state(pid: int) -> str:
    return (_stat(pid) or [""])[0]


def _parent(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
