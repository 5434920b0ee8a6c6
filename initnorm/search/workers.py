"""``hydra.sweeper.workers=N``: the sweep's process starts N workers (``worker.py``) and waits for them (``supervise``;
the command line, ``cli/search_workers.py``, makes each worker and says where it runs).

Local processes (forked from a server that has only imported, or spawned: never a fork of this process), or SLURM
tasks through submitit under ``hydra/launcher=slurm`` (its ``hydra.launcher.*`` settings: partition, time limit, GPUs ...).

A worker that dies (any exit but 0: a signal, the OOM killer, a node lost, a time limit) leaves its trial
RUNNING in the journal: this process records it failed and asks it again with its values (Optuna's
``RetryFailedTrialCallback``, at most ``hydra.sweeper.retries`` times), and starts a worker in its place; its
jobs resume from their checkpoints. A worker that dies before it asked any trial is not started again (the same
start would fail the same way): one line names it and its log. Optuna's journal storage has no heartbeat, so
this process, which sees its workers end, is what finds a dead one; a worker that hangs or is stopped (SIGSTOP) is
found by a heartbeat of its own (``hang.py``): named when it stands still, ended after
``hydra.sweeper.hang_timeout_s``, and then its trial is asked again as a dead one's is.

A rerun of the command holds the sweep folder's lock (``cli/lock.py``): any trial still RUNNING in the journal
was left by a run that ended, and is asked again the same way before the workers start.

Why not ``cli/run.run``'s executors: a worker is no unit that answers once. It lives for many trials, and the sweep's
process must see each one's end as it happens, start another in its place under a new token while the others go on,
and end one (a hung or stopped worker, found by its heartbeat) by itself. ``executors.Processes`` hands a fixed list of
units to the pool and answers when every one has (a dead worker's unit lost, never started again), and shows no unit's
process; ``executors.Submitit`` waits on one SLURM array as a whole. Each of a worker's trials does run through
``run.run`` (``InProcess``) in the worker's process.
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from initnorm.errors import ConfigError
from initnorm.search import hang
from initnorm.search import study as search_study
from initnorm.search.worker import Worker, local_main

POLL_S = 0.5  # how often the workers are looked at: a local worker's end is seen at once through its sentinel
SLURM_POLL_S = 10.0  # submitit asks squeue/sacct: not more often than this


def supervise(study, folder: Path, workers: int, hang_timeout_s: float | None, retries: int,
              make: Callable[[int, str], Worker], start) -> None:
    """Start ``workers`` workers (``make(k, token)``, started by ``start``: ``LocalStart`` or ``SlurmStart``) on
    ``folder``'s study and wait for them; a dead one's trial asked again (at most ``retries`` times) and a worker started
    in its place; one still for ``hang_timeout_s`` ended as dead."""
    starts = {k: 0 for k in range(workers)}
    watch = hang.Watch(folder, hang_timeout_s)

    def launch(k: int):
        starts[k] += 1
        token = f"{k}.{starts[k]}"
        watch.started(token)  # counted from its first beat
        return token, start(make(k, token))

    running = {k: launch(k) for k in starts}
    try:
        while running:
            for k, (token, handle) in list(running.items()):
                code = handle.exit_code()
                if code is None:
                    _look(watch, study, token, k, handle)
                    continue
                del running[k]
                if code != 0 and _restart(study, token, k, handle, retries):
                    running[k] = launch(k)
            if not running and _unowned(study, retries):  # a trial asked by a worker that died before it said whose
                running[0] = launch(0)
            start.wait(running)
    finally:
        for _, handle in running.values():
            handle.stop()


def _look(watch, study, token: str, k: int, handle) -> None:
    """Worker ``k`` (start ``token``), still running: named once it stands still, ended once it has for the timeout (its
    end is then seen as a death: its trial asked again)."""
    verdict = watch.verdict(token)
    if verdict is None or handle.ended:
        return
    from optuna.trial import TrialState

    held = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if (t.user_attrs.get("worker") or {}).get("token") == token]
    what = f"search worker {k} ({handle.where()}{f', trial {held[0]}' if held else ''})"
    still = f"has spent no CPU for {watch.still_for(token):.0f} s{handle.state()}"
    if verdict == "name":
        print(f"warning: {what} {still}; it is ended, and its trial asked again, once it has for "
              f"hydra.sweeper.hang_timeout_s={watch.timeout_s:g}", file=sys.stderr, flush=True)
    else:
        print(f"{what} {still}: ended as hung (hydra.sweeper.hang_timeout_s={watch.timeout_s:g})", file=sys.stderr, flush=True)
        handle.end()


def _restart(study, token: str, k: int, handle, retries: int) -> bool:
    """Worker ``k`` (start ``token``) died: its trial failed and asked again; True where a worker must take its place."""
    from optuna.trial import TrialState

    held = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if (t.user_attrs.get("worker") or {}).get("token") == token]
    if not held and not any(t.state == TrialState.WAITING for t in study.get_trials(deepcopy=False)):
        print(f"error: search worker {k} ended ({handle.describe()}) before it asked a trial: not started again; "
              f"its log: {handle.log()}", file=sys.stderr)
        return False
    for t in held:
        again = search_study.retry(study, t.number, retries)
        print(f"search worker {k} ended ({handle.describe()}) in trial {t.number}: "
              + (f"asked again with its values (its jobs resume from their checkpoints); its log: {handle.log()}" if again
                 else f"failed, asked {retries} times already (hydra.sweeper.retries={retries}); its log: {handle.log()}"),
              file=sys.stderr, flush=True)
    return True


def _unowned(study, retries: int) -> bool:
    """Once every worker has ended: trials still RUNNING (asked by a worker that died before it wrote its name on them)
    asked again; True where any trial now waits."""
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        search_study.retry(study, t.number, retries)
    return any(t.state == TrialState.WAITING for t in study.get_trials(deepcopy=False))


class LocalProcess:
    def __init__(self, process):
        self.process, self.ended = process, False

    def exit_code(self) -> int | None:
        return self.process.exitcode

    def describe(self) -> str:
        code = self.process.exitcode
        return f"exit {code}" if code is None or code >= 0 else f"signal {-code}"

    def log(self) -> str:
        return "this command's output"

    def where(self) -> str:
        return f"pid {self.process.pid}"

    def state(self) -> str:
        """`` (stopped: ...)`` where the process is stopped (SIGSTOP, SIGTSTP), with what resumes it."""
        from initnorm.launch.pool import stopped

        pid = self.process.pid
        return f" (stopped by SIGSTOP or SIGTSTP: `kill -CONT {pid}` resumes it)" if pid is not None and stopped([pid]) else ""

    def end(self) -> None:
        """A hung worker ended at once (SIGKILL: a stopped one would not honour SIGTERM)."""
        self.ended = True
        self.process.kill()
        self.process.join(30)

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.terminate()  # SIGTERM: its job stops; a rerun resumes it from its last checkpoint
            self._wake()
        self.process.join(30)

    def _wake(self) -> None:
        import os
        import signal

        try:
            os.kill(self.process.pid, signal.SIGCONT)  # a stopped worker honours the SIGTERM once woken
        except (ProcessLookupError, TypeError):
            pass


class LocalStart:
    """Local worker processes, as a parallel sweep's (``launch/workers.py``): on Linux forked from a server that has only
    imported ``modules`` (torch, Lightning and the library), else spawned; never a fork of this process, whose torch may
    have started its thread pools."""

    def __init__(self, modules: Sequence[str]):
        from initnorm.launch import workers

        self.context = multiprocessing.get_context(workers.start_method())
        if workers.start_method() == "forkserver":
            self.context.set_forkserver_preload(list(modules))

    def __call__(self, worker: Worker) -> LocalProcess:
        import cloudpickle  # submitit's dependency: the worker's jobs (Hydra's context, the task function), as submitit pickles them

        process = self.context.Process(target=local_main, args=(cloudpickle.dumps(worker),), name=f"search-worker-{worker.index}")
        process.start()
        return LocalProcess(process)

    def wait(self, running: dict[int, tuple[str, LocalProcess]]) -> None:
        """Until a worker ends, or a stop signal to this command (which then stops the workers)."""
        from multiprocessing.connection import wait

        from initnorm.training import signals

        signals.raise_if_requested()
        if running:
            wait([h.process.sentinel for _, h in running.values()], timeout=POLL_S)


class SlurmJob:
    def __init__(self, job):
        self.job, self.ended = job, False

    def exit_code(self) -> int | None:
        if not self.job.done():
            return None
        try:
            self.job.result()
        except Exception:
            return 1
        return 0

    def describe(self) -> str:
        return f"SLURM job {self.job.job_id}, {self.job.state}"

    def log(self) -> str:
        return str(self.job.paths.stderr)

    def where(self) -> str:
        return f"SLURM job {self.job.job_id}"

    def state(self) -> str:
        return ""

    def end(self) -> None:
        """A hung worker's task cancelled (``scancel``): SLURM ends it, the job then reads as done."""
        self.ended = True
        self.job.cancel(check=False)

    def stop(self) -> None:
        if not self.job.done():
            self.job.cancel(check=False)


class SlurmStart:
    """Each worker one SLURM task through submitit, with the slurm launcher's settings (``conf/hydra/launcher/slurm.yaml``)."""

    def __init__(self, params: Mapping[str, Any]):
        from initnorm.launch.slurm import executor

        self.executor, settings = executor(params, None)
        try:
            self.executor.update_parameters(**settings)
        except Exception as exc:
            raise ConfigError(f"hydra.launcher: {exc}; fix the setting it names (conf/hydra/launcher/slurm.yaml)") from None

    def __call__(self, worker: Worker) -> SlurmJob:
        job = self.executor.submit(worker)
        print(f"[slurm] search worker {worker.index} submitted as SLURM job {job.job_id}", file=sys.stderr, flush=True)
        return SlurmJob(job)

    def wait(self, running: dict[int, tuple[str, Any]]) -> None:
        from initnorm.training import signals

        deadline = time.monotonic() + SLURM_POLL_S
        while time.monotonic() < deadline:
            signals.raise_if_requested()
            time.sleep(POLL_S)
