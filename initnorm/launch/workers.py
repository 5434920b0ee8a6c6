"""A parallel sweep's worker processes (``hydra/launcher=local_parallel`` and ``=vectorized``): started early, ended promptly.

A worker needs torch, Lightning and initnorm (~3 s of imports) before its first unit. The parent
spends about as long importing the same, then composing and checking every job. So the workers are
started first: the command line (``cli/workers.start_early``) calls ``warm`` before anything heavy is imported,
which starts them in a thread (``pool.Pool``, which the launcher then uses). This module imports nothing heavy: it
runs first.

The pool is pebble's (``pool.py``). On Linux the workers come from a fork server (``multiprocessing``'s "forkserver" start method):
one server process imports the modules it is given (the task function's and the job's: the caller names them) once, on
the second core while the parent imports on the first, and every worker is forked from it with everything imported.
Spawned instead, each worker imported for itself: three processes importing on two cores. Forking from the server is
safe because it has run nothing but imports (one thread, no OpenMP pool).

What the parent sets in its environment after the workers started (the sweep's size, its swept
keys) reaches them as an argument of each unit of work instead (``shared_env``).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Sequence

from initnorm import envvars

# Read by the code a worker runs, set by the parent once the sweep is known (after the workers started).
SHARED_ENV = envvars.SHARED
# The launching process's pid, handed to each unit: a worker tells from it that it is a worker.
LAUNCHER_PID_ENV = envvars.LAUNCHER_PID
# Set to 0 to spawn each worker (every worker imports for itself), as on other platforms.
FORKSERVER_ENV = envvars.FORKSERVER

# The fork server's first import: the stop signals ignored there (a signal to the group killed it).
SERVER_SIGNALS = "initnorm.launch.forkserver_preload"

_pool = None  # the sweep's pool.Pool, once started


def start_method() -> str:
    """How the workers start: "forkserver" on Linux (``INITNORM_FORKSERVER=0`` turns it off), else "spawn"."""
    if sys.platform.startswith("linux") and os.environ.get(FORKSERVER_ENV, "1") != "0":
        return "forkserver"
    return "spawn"


def pool(n_jobs: int, units: int | None = None, modules: Sequence[str] = ()):
    """The sweep's pool of workers (``pool.Pool``): the one started early where there is one, else a new one, started
    now (``n_jobs`` as joblib reads it, capped at ``units``), whose workers import ``modules`` before their first unit."""
    global _pool
    from initnorm.launch import pool as pools

    n = pools.n_workers(n_jobs, units if units is not None else 1 << 30)
    if _pool is None or _pool.closed:
        method = start_method()
        if method == "forkserver":
            # Read when the server starts (with the first worker), so set before any is started.
            multiprocessing.get_context("forkserver").set_forkserver_preload([SERVER_SIGNALS, *modules, "initnorm.launch.pool"])
        _pool = pools.Pool(n, method, () if method == "forkserver" else modules)
    _pool.n = n
    return _pool


def warm(n_jobs: int, modules: Sequence[str] = ()):
    """Start the workers in a thread (each imports ``modules`` there); returns the pool."""
    p = pool(n_jobs, modules=modules)
    p.start()
    return p


def started_early():
    """The pool started by the command line, if any."""
    return _pool


def stop() -> None:
    """End the workers now, idle or still starting (a command line that failed its checks, or a sweep whose units
    all run in this process)."""
    global _pool
    if _pool is not None:
        _pool.close()
        _pool = None


def send(signum: int) -> None:
    """Send ``signum`` to every worker of this process (a stop signal passed on); none before a pool exists."""
    if _pool is not None:
        _pool.send(signum)


def end() -> None:
    """End the workers of a finished sweep and the fork server they came from: nothing outlives the command.

    The server is killed, not asked to exit: it exits only when this process does (its "alive" pipe), and its
    interpreter's exit, with torch and Lightning imported, took 0.9 s. It is left for ``multiprocessing`` to reap (the
    next pool's start, or this process's exit): reaped here, its next start would fail on a pid already waited for.
    """
    if _pool is None:  # no pool: no server (and a plain install has no pebble to import)
        return
    from initnorm.launch.pool import forkservers

    stop()
    servers = forkservers()
    for server in servers:
        try:
            os.kill(server, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for _ in range(100):  # gone within a few ms: a check right after the command sees nothing of it
        if not any(alive(s) for s in servers):
            return
        time.sleep(0.01)


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, killed and not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process under a reused pid: not ours to judge
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:  # no /proc (macOS): os.kill's answer
        return True


def shared_env() -> dict[str, str]:
    """The part of this process's environment that a worker started earlier lacks."""
    return {k: os.environ[k] for k in SHARED_ENV if k in os.environ}
