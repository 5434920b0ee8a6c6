"""A search worker that hangs or is stopped (SIGSTOP), noticed by its heartbeat: ``hydra.sweeper.hang_timeout_s``.

Optuna's journal storage has no heartbeat of its own, and a worker that hangs (a deadlock, a read that never returns,
SIGSTOP, a node that stopped answering) neither ends nor tells its trial. So each worker writes, every ``BEAT_S``
seconds, the CPU seconds its process has spent besides the writing thread into ``<sweep>/.search-workers/<token>``
(the sweep folder: shared by a SLURM task and the sweep's process as the journal is). The sweep's process reads it:
a worker whose number has not moved for ``NAME_S`` seconds is named on the console (a stopped local one as stopped,
with the command that resumes it); one that has not moved for ``hang_timeout_s`` is ended and its trial asked again,
as a dead worker's is (``workers.py``). A stopped process's writing thread is stopped with it, so the
file stays still; a process that trains moves it many times a second.

A worker that waits on purpose spends no CPU (a horizon fork's provider in another worker): the timeout is long
(conf/hydra/sweeper/search.yaml), and null turns the watch off.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from initnorm.safe_files import NotAFile, read_bounded

FOLDER = ".search-workers"
BEAT_S = 2.0  # how often a worker writes its CPU seconds
NAME_S = 30.0  # a worker still this long is named (or at half the timeout, where that is shorter)


def beat_file(folder: Path | str, token: str) -> Path:
    return Path(folder) / FOLDER / token


def start_beating(folder: Path | str, token: str) -> threading.Event:
    """In a worker: a daemon thread that writes this process's CPU seconds (its own left out) every ``BEAT_S``, until the
    event returned is set."""
    path = beat_file(folder, token)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = threading.Event()

    def beat() -> None:
        while not done.is_set():
            spent = time.process_time() - time.thread_time()  # every thread's but this one's: still when the worker is
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            try:
                tmp.write_text(f"{spent:.3f}\n")
                os.replace(tmp, path)
            except OSError:  # a full disk or a lost mount: the sweep's process sees no beat, and says so in time
                pass
            done.wait(BEAT_S)

    threading.Thread(target=beat, name="search-heartbeat", daemon=True).start()
    return done


class Watch:
    """In the sweep's process: how long each worker's CPU seconds have stood still."""

    def __init__(self, folder: Path | str, timeout_s: float | None):
        self.folder, self.timeout_s = Path(folder), timeout_s
        self.seen: dict[str, tuple[str | None, float]] = {}  # token -> (last value read, when it last changed)
        self.named: set[str] = set()

    def started(self, token: str) -> None:
        """Worker ``token`` is starting: counted from its first beat (a SLURM task may wait in the queue; a local one
        unpickles Hydra's state first, seconds on a busy machine). A beat left by a run before (the same token) is
        removed."""
        beat_file(self.folder, token).unlink(missing_ok=True)
        self.seen.pop(token, None)

    def still_for(self, token: str, now: float | None = None) -> float:
        """Seconds since worker ``token``'s number last moved; 0 until its first beat."""
        now = time.monotonic() if now is None else now
        try:
            value: str | None = read_bounded(beat_file(self.folder, token), 64).decode("ascii", "replace")
        except (OSError, NotAFile):  # not written yet; something else planted there counts as no beat
            value = None
        last, since = self.seen.get(token, (None, None))
        if since is None:
            if value is None:
                return 0.0
            self.seen[token] = (value, now)
            return 0.0
        if value != last:
            self.seen[token] = (value, now)
            return 0.0
        return now - since

    def name_after(self) -> float:
        return NAME_S if self.timeout_s is None else min(NAME_S, self.timeout_s / 2)

    def verdict(self, token: str, now: float | None = None) -> str | None:
        """``"name"`` the first time worker ``token`` has stood still for ``name_after()``; ``"end"`` once it has for the
        timeout; else None."""
        still = self.still_for(token, now)
        if self.timeout_s is not None and still >= self.timeout_s:
            return "end"
        if still >= self.name_after() and token not in self.named:
            self.named.add(token)
            return "name"
        return None
