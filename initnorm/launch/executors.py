"""The three executors of ``cli/run.run(units, executor)``: where a sweep's units of work run.

- ``InProcess``: in this process, one after another (Hydra's basic launcher, ``engine=sequential``, a search worker's trials);
- ``Processes``: in this machine's worker processes (pebble's pool: ``pool.py``; ``engine=processes`` and
  ``hydra/launcher=local_parallel``), where a worker's death costs its own unit alone, its jobs recorded failed;
- ``Submitit``: one SLURM array task a unit (``hydra/launcher=slurm``, ``engine=submitit``: ``slurm.py``).

An executor's ``map(fn, args, units, sweep_dir, jobs)`` calls ``fn(*args[k])`` for each unit ``units[k]`` (a list of
jobs) and returns each answer, ``(returns, stop)``, or None for a unit a stop signal kept from starting. What a job is
(its folder, its record, the return Hydra's sweeper reads) is the launcher's to say: ``jobs`` (``Jobs``) brings it, so that
this package knows no Hydra and no command line. ``answers`` turns the answers into the units' returns and raises a stop
signal once.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from initnorm.launch import workers
from initnorm.training import signals


@dataclass
class Jobs:
    """What an executor asks the launcher about a unit's jobs that it could not run."""

    # a job's folder (made), its record's fields and the return of a job that gave no loss
    describe: Callable[[Any], tuple[Path, dict[str, Any], Any]]
    # a unit's jobs, whose worker died (the reason: ``pool.Lost``'s), each recorded failed; their returns
    lost: Callable[[Sequence[Any], str], list[Any]]


class InProcess:
    """Each unit in this process, one after another; none starts after a stop signal."""

    def map(self, fn: Callable[..., Any], args: Sequence[tuple], units: Sequence[Sequence[Any]], sweep_dir: Path,
            jobs: Jobs) -> list[Any]:
        workers.end()  # warmed for nothing: the units run here
        results = []
        for a in args:
            results.append(fn(*a))
            if results[-1][1] is not None:
                break  # stopped by a signal: no further unit starts
        return results


@dataclass
class Processes:
    """Each unit in one of this machine's worker processes (``workers.pool``: pebble's; a new pool's workers import
    ``modules`` first), longest units first. A unit whose worker died (``Lost``) costs its own jobs, each recorded failed
    with the reason (``jobs.lost``). A stop signal to this process alone is passed on to the workers (as SIGTERM: one sent
    to the whole group reached them already, and a second SIGINT would mean "at once"); the workers and their fork server
    are ended whatever happens."""

    n_jobs: int
    modules: Sequence[str] = ()

    def map(self, fn: Callable[..., Any], args: Sequence[tuple], units: Sequence[Sequence[Any]], sweep_dir: Path,
            jobs: Jobs) -> list[Any]:
        from initnorm.launch.pool import Lost  # (pebble: the launchers extra)

        order = sorted(range(len(args)), key=lambda k: -len(args[k][0]))
        pool = workers.pool(self.n_jobs, len(args), self.modules)

        def stopped_there(result: Any) -> None:  # a stop signal sent to one worker alone stops the sweep as one to this process
            if isinstance(result, tuple) and result[1] is not None and signals.requested() is None:
                signals.record(result[1][0])

        try:
            with signals.passed_on(lambda signum: pool.send(signal.SIGTERM)):
                out = pool.run(fn, [args[k] for k in order], stopping=lambda: signals.requested() is not None,
                               on_result=stopped_there)
        finally:
            workers.end()  # nothing outlives the command, stopped or not
        results: list[Any] = [None] * len(args)
        for k, r in zip(order, out):
            # its worker died, or it raised past every job: its jobs alone are failed
            results[k] = (jobs.lost(units[k], r.reason), None) if isinstance(r, Lost) else r
        return results


@dataclass
class Submitit:
    """Each unit one task of a SLURM array through submitit (``slurm.submit``: the command's environment forwarded,
    SLURM's stops checkpointed and requeued or recorded, a task that never answered recorded with its state), with
    ``hydra/launcher=slurm``'s keys (``slurm``)."""

    slurm: Mapping[str, Any]

    def map(self, fn: Callable[..., Any], args: Sequence[tuple], units: Sequence[Sequence[Any]], sweep_dir: Path,
            jobs: Jobs) -> list[Any]:
        from initnorm.launch import slurm

        return slurm.submit(fn, args, units, sweep_dir, self.slurm, jobs.describe)


def answers(results: Sequence[Any]) -> list[list[Any]]:
    """Each unit's returns from the executor's answers. A stop signal that ended or kept back any unit is raised once, as
    ``signals.Interrupted`` with a checkpoint a unit saved, after every unit has answered."""
    unstarted = (signals.requested() or signal.SIGTERM, None, None, False)
    results = [r if r is not None else ([], unstarted) for r in results]  # None: a stop signal kept it from starting
    stops = [stop for _, stop in results if stop is not None]
    if stops:
        saved = next((s for s in stops if s[1] is not None), stops[0])  # a unit that checkpointed, for the report
        raise signals.Interrupted(signals.requested() or saved[0], saved[1], saved[2], any(s[3] for s in stops))
    return [rets for rets, _ in results]
