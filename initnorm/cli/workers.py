"""The vectorised launcher's worker processes (joblib's loky workers): started early, ended promptly.

A worker needs torch, Lightning and initnorm (~3 s of imports) before its first group. The parent
spends about as long importing the same, then composing and checking every job. So the workers are
started first: ``start_early`` reads the command line before anything heavy is imported and, for a
vectorised sweep on joblib, starts them in a thread; the sweep's own ``Parallel``
(initnorm/cli/vectorized.py) finds them ready (loky reuses an executor asked for with the same
arguments). This module imports nothing heavy: it runs first.

On Linux the workers come from a fork server (``multiprocessing``'s "forkserver" start method,
which loky supports): one server process imports ``WORKER_MODULES`` once, on the second core while
the parent imports on the first, and every worker is forked from it with everything imported. With
loky's own start method each worker imported for itself: three processes importing on two cores.
Forking from the server is safe because it has run nothing but imports (one thread, no OpenMP pool).

What the parent sets in its environment after the workers started (the sweep's size, its swept
keys, the stop signals) reaches them as an argument of each unit of work instead (``shared_env``).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import sys
import threading

from initnorm import envvars
from initnorm.cli.argv import CommandLine

log = logging.getLogger(__name__)

# Read by the code a worker runs, set by the parent once the sweep is known (after the workers started).
SHARED_ENV = envvars.SHARED
DEFAULT_N_JOBS = -1  # conf/hydra/launcher/vectorized.yaml's n_jobs
# What a worker imports before its first unit: the task function's module and the job's (torch, Lightning, the library).
WORKER_MODULES = ("initnorm.cli.train", "initnorm.cli.job")
# The launching process's pid, handed to each unit: a worker tells from it that it is a worker.
LAUNCHER_PID_ENV = envvars.LAUNCHER_PID
# Set to 0 for loky's own start method (every worker imports for itself), as on other platforms.
FORKSERVER_ENV = envvars.FORKSERVER

_started: threading.Thread | None = None
_stopping = False


def imports() -> int:
    """What a worker needs before its first unit of work (nothing left to do in a worker forked from the server)."""
    import importlib

    for name in WORKER_MODULES:
        importlib.import_module(name)
    return os.getpid()


def start_method() -> str:
    """How loky starts the workers: "forkserver" on Linux (``INITNORM_FORKSERVER=0`` turns it off), else loky's own."""
    if sys.platform.startswith("linux") and os.environ.get(FORKSERVER_ENV, "1") != "0":
        return "forkserver"
    return "loky"


def parallel(n_jobs: int):
    """The joblib ``Parallel`` of the vectorised launcher: the warm-up and the sweep must ask for the
    same one, or loky makes a new pool instead of reusing the warm workers."""
    from joblib import Parallel
    from joblib.externals.loky.backend import context

    method = start_method()
    if method == "forkserver":
        import multiprocessing

        # Read when the server starts (with the first worker), so set before every pool is asked for.
        multiprocessing.get_context("forkserver").set_forkserver_preload(list(WORKER_MODULES))
    context.set_start_method(method, force=True)  # joblib passes no start method to loky: its default
    return Parallel(n_jobs=n_jobs, backend="loky", batch_size=1, pre_dispatch="n_jobs")


def warm(n_jobs: int) -> threading.Thread:
    """Start joblib's workers in a thread and let each import what it needs; ``.join()`` the result."""
    global _stopping
    _stopping = False

    def start() -> None:
        try:
            from joblib import delayed, effective_n_jobs

            parallel(n_jobs)(delayed(imports)() for _ in range(effective_n_jobs(n_jobs)))
        except Exception as exc:  # only a head start: the sweep's own Parallel starts them otherwise
            if not _stopping:  # stop() ended them on purpose (a command line that failed its checks)
                log.warning("could not start the workers early (%s: %s)", type(exc).__name__, exc)

    thread = threading.Thread(target=start, name="initnorm-warm-workers", daemon=True)
    thread.start()
    return thread


def _launcher_args(cmd: CommandLine) -> tuple[bool, int | None]:
    """(a vectorised sweep on joblib, its n_jobs) as far as the command line says."""
    if not (cmd.multirun and cmd.runs_jobs) or cmd.value("hydra/launcher") != "vectorized":
        return False, None
    if cmd.value("hydra.launcher.engine", "joblib") != "joblib":
        return False, None
    if importlib.util.find_spec("joblib") is None:  # an install without the launchers extra: the preflight says so, in one line
        return False, None
    try:
        return True, int(cmd.value("hydra.launcher.n_jobs", str(DEFAULT_N_JOBS)))
    except ValueError:  # a bad value: the launcher says so, in one line
        return False, None


def start_early(cmd: CommandLine) -> None:
    """Start the workers of ``cmd``'s vectorised sweep now (no-op for any other command line), and
    until the sweep's own signal handling takes over (``initnorm.training.signals.install``), end
    them with the command on SIGTERM or SIGINT (``abort``)."""
    global _started
    wanted, n_jobs = _launcher_args(cmd)
    if wanted and _started is None:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, abort)
        _started = warm(n_jobs)


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children ...), from /proc; [] where there is none."""
    parents: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def abort(signum: int, frame) -> None:
    """SIGTERM or SIGINT before any job started (the command line is still being checked, the
    workers still import): kill the fork server and the workers at once (asking loky to shut down
    from a signal handler can wait on the thread that is starting them), say so in one line and exit
    128 + the signal. The resource trackers are left to end by themselves: they clean up joblib's
    shared-memory folder and exit when the last process that holds their pipe is gone."""
    for _ in range(2):  # a worker forked while the first pass ran
        for pid in descendants(os.getpid()):
            if not _is_resource_tracker(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
    sys.stderr.write(f"\nstopped by {signal.Signals(signum).name} before any job started; nothing was trained.\n")
    sys.stderr.flush()
    os._exit(128 + int(signum))


def _is_resource_tracker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"resource_tracker" in f.read()
    except OSError:
        return False


def started_early() -> threading.Thread | None:
    return _started


def stop() -> None:
    """End joblib's workers now, idle or still importing: left to the interpreter's exit, their
    shutdown took 1-2 s after the summary. (They are loky's reusable workers; the next Parallel
    starts new ones.)"""
    _kill_workers(wait=False)


def _kill_workers(wait: bool) -> None:
    """Kill loky's reusable workers, if this process made any; ``wait``: until they are joined."""
    global _started, _stopping
    _stopping, _started = True, None
    reusable_executor = sys.modules.get("joblib.externals.loky.reusable_executor")  # None: no joblib pool here
    executor = getattr(reusable_executor, "_executor", None)
    if executor is not None:
        _quiet_manager_thread()
        executor.shutdown(wait=wait, kill_workers=True)


MANAGER_THREAD = "ExecutorManagerThread"  # loky's thread that feeds the workers (process_executor.py)


def _quiet_manager_thread() -> None:
    """Workers killed while the warm-up still hands them work (a command line that failed its checks within a second
    of starting) leave loky's manager thread looking up a work item the shutdown removed: a ``KeyError`` traceback
    after the command's one line. They were ended on purpose, so that thread's exception is dropped from then on."""
    previous = threading.excepthook
    if getattr(previous, "initnorm_quiet", False):
        return

    def hook(args) -> None:
        if not (_stopping and args.thread is not None and args.thread.name == MANAGER_THREAD):
            previous(args)

    hook.initnorm_quiet = True
    threading.excepthook = hook


def send(signum: int) -> None:
    """Send ``signum`` to every loky worker of this process (a stop signal passed on); none before a pool exists."""
    reusable_executor = sys.modules.get("joblib.externals.loky.reusable_executor")
    executor = getattr(reusable_executor, "_executor", None)
    for pid in list(getattr(executor, "_processes", None) or {}):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:  # ended already
            pass


def end() -> None:
    """End the workers of a finished sweep and the fork server they came from, and wait for both:
    nothing outlives the command, and the workers' CPU time counts as this process's children's
    (``time``, the benchmark), which it does only once the server has reaped them and this process
    the server. Not for a command that failed its checks (``stop``): a server still importing would
    keep it waiting."""
    _kill_workers(wait=True)  # joined: the server has reaped them
    forkserver = sys.modules.get("multiprocessing.forkserver")
    server = getattr(forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    if pid is not None:
        # Killed, not asked to exit: its interpreter's exit, with torch and Lightning imported, took
        # 0.9 s. The workers' CPU time it collected still reaches this process when it is reaped.
        os.kill(pid, signal.SIGKILL)
        server._stop()  # reaps it and forgets it (multiprocessing has no public call for this)


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
