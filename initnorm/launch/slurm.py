"""SLURM through submitit: ``hydra/launcher=slurm`` (one job a task) and the vectorised launcher's ``engine=submitit``
(one unit a task), both ``cli/run.run``'s ``Submitit`` executor (``executors.py``), as a real cluster behaves.

``hydra_plugins/initnorm_launchers/_slurm.py`` (Hydra's submitit launcher's keys and config) hands its jobs to
``cli/vectorized.launch``, one unit a job, which runs them through ``run.run(units, executors.Submitit(...))``: here, with
three changes to what submitit alone does, tried against a real SLURM (tests/slurm/, docs/slurm.md):

- **What a job needs from the submitting machine reaches it**, also on sites whose sbatch
  exports nothing (``--export=NONE``): the batch script's ``setup`` lines start with
  ``export SLURM_EXPORT_ENV=ALL`` (srun hands the job the script's environment, with submitit's
  own variable) and ``export`` lines for every ``INITNORM_*`` variable and ``PYTHONPATH`` of the
  command (the data folder, the sweep's swept keys, the stop signals).
- **A job that SLURM stops is checkpointed on the signal**, at the next step boundary
  (``initnorm.training.signals``): SLURM's USR2 before a time limit or a preemption, or a plain
  SIGTERM (``scancel``, a time limit without USR2, a preemption). Then submitit requeues it where
  it can (USR2 while ``max_num_timeout`` allows; a SIGTERM while SLURM keeps the job running): the
  task is a ``Task``, whose ``checkpoint`` submitit pickles, and the requeued task resumes from the
  checkpoint. Otherwise the job's ``metrics.json`` records SLURM's state (``cancelled``, ``timeout``,
  ``preempted``) and the step it stopped at.
- **The command always ends in the summary**: a job that never answered (killed, cancelled while
  pending, out of memory) is recorded with its state too, instead of submitit's
  ``UncompletedJobError`` ending the command with a traceback. The summary lists the jobs that did
  not finish, one line each, and the command that resumes them; the exit status is 1.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from initnorm import envvars

# Hydra imports every launcher module at start-up, for any command: what is heavy (Lightning, through the
# stop signals) is imported where it is used.

FINISHED = ("finished", "failed")  # the statuses a job's own run writes; any other is a job SLURM stopped
FORWARDED_PREFIX = envvars.PREFIX
FORWARDED = ("PYTHONPATH",)
POLL_S = 2.0  # how often the waiting command looks at the jobs


def forwarded_environment(environ: dict[str, str] | None = None) -> list[str]:
    """The ``setup`` lines that give a job what it needs from the submitting command's environment."""
    environ = dict(os.environ if environ is None else environ)
    lines = ["export SLURM_EXPORT_ENV=ALL  # srun hands the job this script's environment, also where sbatch exports none"]
    names = sorted(k for k in environ if k.startswith(FORWARDED_PREFIX) or k in FORWARDED)
    return lines + [f"export {k}={shlex.quote(environ[k])}" for k in names]


def status_of(state: str) -> str:
    """sacct's state (``CANCELLED by 0``, ``TIMEOUT``, ``OUT_OF_MEMORY``) as a job status (``cancelled``, ``timeout``...)."""
    word = (state.split() or ["unknown"])[0].rstrip("+")
    return word.lower()


def slurm_state(job_id: str) -> str:
    """This job's state as SLURM's accounting has it (``RUNNING``, ``CANCELLED``, ``TIMEOUT``, ``PREEMPTED``);
    ``UNKNOWN`` if sacct does not answer."""
    try:
        out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"],
                             capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "UNKNOWN"
    lines = [line for line in out.splitlines() if line.strip()]
    return lines[-1].split()[0].rstrip("+") if lines else "UNKNOWN"


WHAT = {"cancelled": "cancelled", "timeout": "reached its time limit", "preempted": "preempted", "out_of_memory": "ran out of memory",
        "node_fail": "lost its node"}


def record_stop(folder: Path, status: str, job: dict[str, Any], step: int | None, slurm: str) -> None:
    """Write ``status`` (``cancelled``, ``timeout``...) and the step it stopped at into the job's
    metrics.json, unless the folder holds a finished result. ``slurm`` says what SLURM did."""
    from initnorm.results import write_metrics
    from initnorm.training.resume import read_json

    done = read_json(folder / "metrics.json")
    if done is not None and done.get("status") == "finished":
        return
    at = f"at step {step}, checkpoint saved" if step is not None else "before a checkpoint on the signal"
    error = f"{WHAT.get(status, status)} on SLURM ({at})"
    folder.mkdir(parents=True, exist_ok=True)
    write_metrics(folder, {**job, "status": status, "steps": step, "error": error, "slurm": slurm})


def job_id(name: str, num: int) -> str:
    """``hydra.job.id`` in a SLURM task, as Hydra's submitit launcher sets it: SLURM's job id."""
    import submitit

    return str(submitit.JobEnvironment().job_id)


def as_engine(params: Mapping[str, Any]) -> dict[str, Any]:
    """``hydra/launcher=slurm``'s keys as the vectorised launcher's params: one job a unit, each a SLURM task."""
    return {"engine": "submitit", "slurm": dict(params), "max_group": 1, "max_params": None, "n_jobs": 1}


def executor(params: Mapping[str, Any], folder: str | None) -> tuple[Any, dict[str, Any]]:
    """submitit's SLURM executor for ``params`` (``hydra/launcher=slurm``'s keys), and what to give its
    ``update_parameters``: the command's environment forwarded (``forwarded_environment``), the keys of Hydra's submitit
    launcher's base config as they are, every other one as ``slurm_<key>``; ``folder``: submitit's files, unless
    ``params`` names theirs (``submitit_folder``)."""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf

    params = dict(params)
    params["setup"] = forwarded_environment() + list(params.get("setup") or [])
    made = submitit.AutoExecutor(cluster="slurm", folder=params.pop("submitit_folder", folder),
                                 slurm_max_num_timeout=params.pop("max_num_timeout", 0))
    common = set(OmegaConf.structured(BaseQueueConf).keys())
    return made, {k if k in common else f"slurm_{k}": v for k, v in params.items()}


def shown(overrides: Sequence[str]) -> str:
    """A job's overrides as its line shows them: without Hydra's own (``hydra.*``), as Hydra's launchers print them."""
    return " ".join(o for o in overrides if not o.startswith("hydra."))


# Where a job's record goes, what it holds and the return Hydra's sweeper reads: ``run.describe``, passed in (this package
# knows no Hydra job).
Describe = Callable[[Any], tuple[Path, dict[str, Any], Any]]


def submit(fn: Callable[..., Any], args: Sequence[tuple], units: Sequence[Sequence[Any]], sweep_dir: Path,
           params: Mapping[str, Any], describe: Describe) -> list[Any]:
    """Each unit one task of a SLURM array (``params``: hydra/launcher=slurm's keys, or the vectorised launcher's
    ``hydra.launcher.slurm``), the command's environment forwarded, waited for; each task's answer, or, for one that
    gave none, its jobs recorded with SLURM's state (``outcome``)."""
    slurm, settings = executor({k: v for k, v in dict(params).items() if v is not None}, str(sweep_dir / ".submitit" / "%j"))
    slurm.update_parameters(**settings)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    print(f"[slurm] {sum(len(u) for u in units)} job(s) into {sweep_dir}:", file=sys.stderr)
    for job in sorted((j for u in units for j in u), key=lambda j: j.num):
        print(f"[slurm]   #{job.num}: {shown(job.overrides)}", file=sys.stderr)
    submitted = time.time()
    tasks = slurm.map_array(Task(fn, describe), *zip(*args))
    ids = sorted({t.job_id.split("_")[0] for t in tasks})
    print(f"[slurm] submitted as SLURM job {', '.join(ids)}; waiting for it (`squeue -j {ids[0]}`)", file=sys.stderr)
    wait(tasks, ids, sweep_dir)
    return [outcome(t, unit, submitted, describe) for t, unit in zip(tasks, units)]


def wait(tasks, ids: list[str], sweep_dir: Path) -> None:
    """Wait for every task; a stop signal to this command stops the waiting, not the tasks."""
    from initnorm.training import signals

    while not all(t.done() for t in tasks):
        if signals.requested() is not None:
            print(f"[slurm] the jobs go on running on the cluster: `scancel {' '.join(ids)}` stops them, "
                  f"`python -m initnorm.summarize {sweep_dir}` summarises them once they end", file=sys.stderr)
            signals.raise_if_requested()
        time.sleep(POLL_S)


def outcome(task, unit: Sequence[Any], submitted: float, describe: Describe) -> Any:
    """The task's own answer, or, where it gave none (killed, cancelled before it started), each of its jobs' state
    recorded in its folder (a job that recorded its stop itself, then was killed, kept as it wrote it)."""
    from submitit.core.utils import FailedJobError, UncompletedJobError

    try:
        return task.results()[0]
    except (UncompletedJobError, FailedJobError) as exc:
        state, rets = task.state, []
        for job in unit:
            folder, info, ret = describe(job)
            own = folder / "metrics.json"
            if not (own.is_file() and own.stat().st_mtime >= submitted):
                status = status_of(state)
                if isinstance(exc, FailedJobError) or status in ("completed", "failed", "unknown"):
                    status = "failed"
                record_stop(folder, status, info, None,
                            f"job {task.job_id} ended {state} without a result; its log: {task.paths.stderr}")
            rets.append(ret)
        return rets, None


class Task:
    """A unit in its SLURM task: ``fn`` (``run.run_unit``) with SLURM's stop signals recorded (USR2 too), and a stop
    answered as SLURM means it: requeued by submitit where it may (``checkpoint``: this task again, which resumes
    from the checkpoint the stop saved), else each job's SLURM state recorded. Returns ``fn``'s answer, a stop made a
    record (never the command's own stop)."""

    def __init__(self, fn: Callable[..., Any], describe: Describe) -> None:
        self.fn, self.describe = fn, describe

    def __call__(self, *args: Any) -> Any:
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        from initnorm.training import signals

        submitit_usr2 = signal.getsignal(signal.SIGUSR2)  # submitit's: checkpoint, requeue, or give up
        signals.install(extra=[signal.SIGUSR2])  # SIGTERM, SIGINT, USR2: checkpoint at the next step, then stop
        try:
            rets, stop = self.fn(*args)
        except SIGTERMException:  # Lightning's SIGTERM handler, in the instant before ours is back in place
            rets, stop = [], (signal.SIGTERM, None, None, False)
        if stop is None:
            return rets, None
        return rets + self.stopped(stop[0], stop[2], args[0], submitit_usr2), None

    def checkpoint(self, *args: Any) -> Any:
        """What submitit requeues: this unit again (its jobs resume from the checkpoints the stop saved)."""
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, *args)

    def stopped(self, signum: int, step: int | None, unit: Sequence[Any], submitit_usr2) -> list[Any]:
        import submitit
        from submitit.core.utils import UncompletedJobError

        slurm_id = submitit.JobEnvironment().job_id
        state = slurm_state(slurm_id)
        described = [self.describe(job) for job in unit]
        # USR2 is SLURM's warning before a time limit or a preemption; a SIGTERM while SLURM keeps the
        # job RUNNING is a preemption's first signal. submitit decides: requeue (it calls
        # self.checkpoint, runs `scontrol requeue` and exits) or raise because it may not.
        if callable(submitit_usr2) and (signum == signal.SIGUSR2 or state == "RUNNING"):
            try:
                submitit_usr2(signal.SIGUSR2, None)
            except UncompletedJobError as exc:
                for folder, info, _ in described:
                    record_stop(folder, "timeout", info, step, f"job {slurm_id}: USR2 before its time limit; {str(exc).strip()}")
                return [ret for _, _, ret in described]
        status = status_of(state) if state not in ("RUNNING", "UNKNOWN") else "interrupted"
        for folder, info, _ in described:
            record_stop(folder, status, info, step, f"job {slurm_id}: {signal.Signals(signum).name}, state {state}")
        return [ret for _, _, ret in described]
