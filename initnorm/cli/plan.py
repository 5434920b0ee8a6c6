"""What a command will do, said once its jobs are checked and before any trains (``cli/train.main`` prints it).

A sweep's plan is one line: how many jobs, which of them a folder already holds (finished: skipped; a checkpoint:
resumed, from which step), how many train, and what runs them (the launcher, its workers, a stacked group's size).
The vectorised launcher adds its groups' sizes as it forms them (``console.groups_line``). A single run says only
that it resumes, where it does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from initnorm.cli import launchers, memory


def describe(jobs: Sequence[Any], launcher: Mapping[str, Any] | None = None, multirun: bool | None = None) -> str | None:
    """``plan: 12 jobs: 4 finished (skipped), 1 resume (from step 500), 7 to run, on hydra/launcher=...``; ``jobs``:
    the preflight's ``CheckedJob``s, ``launcher``: the resolved ``hydra.launcher`` node (None: not known)."""
    if not jobs:
        return None
    done = sum(j.prior.finished is not None for j in jobs)
    resumed = [j.prior.step for j in jobs if j.prior.checkpoint is not None]
    if not (multirun if multirun is not None else len(jobs) > 1):
        return f"resuming {jobs[0].folder} from step {resumed[0]}" if resumed else None
    steps = ", ".join(str(s) for s in sorted(set(resumed)))
    parts = ([f"{done:,} finished (skipped)"] if done else []) + ([f"{len(resumed):,} resume (from step {steps})"] if resumed else [])
    line = f"plan: {len(jobs):,} job{'s' * (len(jobs) != 1)}: " + ", ".join([*parts, f"{len(jobs) - done - len(resumed):,} to run"])
    return line + (f", on {launcher_text(launcher)}" if launcher else "")


def launcher_text(launcher: Mapping[str, Any]) -> str:
    """``hydra/launcher=vectorized (stacked groups of up to 12 jobs that share every shape; 2 worker processes)``."""
    kind = launchers.kind(launcher)
    workers, _ = memory.at_once(dict(launcher), 1 << 30, 1)  # a worker per core for n_jobs=-1, as joblib counts them
    processes = f"{workers} worker process{'es' * (workers != 1)}"
    if kind == "vectorized":
        engine = str(launchers.engine_name(launcher.get("engine"), quiet=True))
        how = {"processes": processes, "sequential": "one after another in this process",
               "submitit": "one SLURM array task each"}.get(engine, engine)
        return f"hydra/launcher=vectorized (stacked groups of up to {launcher.get('max_group')} jobs that share every shape; {how})"
    if kind == "local_parallel":
        return f"hydra/launcher=local_parallel ({processes}, a job each at a time)"
    if kind == "slurm":
        return "hydra/launcher=slurm (a SLURM array task per job)"
    if kind == "basic":
        return "hydra/launcher=basic (one job after another in this process)"
    return str(launcher.get("_target_"))  # a launcher of one's own: its class
