"""SLURM through submitit (``hydra/launcher=slurm``), as a real cluster behaves.

Hydra's submitit launcher with three changes, tried against a real SLURM (tests/slurm/, docs/slurm.md):

- **What a job needs from the submitting machine reaches it**, also on sites whose sbatch
  exports nothing (``--export=NONE``): the batch script's ``setup`` lines start with
  ``export SLURM_EXPORT_ENV=ALL`` (srun hands the job the script's environment, with submitit's
  own variable) and ``export`` lines for every ``INITNORM_*`` variable and ``PYTHONPATH`` of the
  command (the data folder, the sweep's swept keys, the stop signals).
- **A job that SLURM stops is checkpointed on the signal**, at the next step boundary
  (``initnorm.training.signals``): SLURM's USR2 before a time limit or a preemption, or a plain
  SIGTERM (``scancel``, a time limit without USR2, a preemption). Then submitit requeues it where
  it can (USR2 while ``max_num_timeout`` allows; a SIGTERM while SLURM keeps the job running),
  and the requeued job resumes from the checkpoint. Otherwise the job's ``metrics.json`` records
  SLURM's state (``cancelled``, ``timeout``, ``preempted``) and the step it stopped at.
- **The command always ends in the summary**: a job that never answered (killed, cancelled while
  pending, out of memory) is recorded with its state too, instead of submitit's
  ``UncompletedJobError`` ending the command with a traceback. The summary lists the jobs that did
  not finish, one line each, and the command that resumes them; the exit status is 1.
"""

from __future__ import annotations

import math
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as HydraSlurmLauncher
from omegaconf import OmegaConf

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


class SlurmLauncher(HydraSlurmLauncher):
    """``hydra/launcher=slurm``: Hydra's submitit launcher, with the module docstring's three changes."""

    # --- on the submitting machine -------------------------------------------------------------

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import submitit

        assert self.config is not None
        params = dict(self.params)
        params["setup"] = forwarded_environment() + list(params.get("setup") or [])
        executor = submitit.AutoExecutor(cluster="slurm", folder=params.pop("submitit_folder"),
                                         slurm_max_num_timeout=params.pop("max_num_timeout"))
        common = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{k if k in common else f"slurm_{k}": v for k, v in params.items()})
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        print(f"[slurm] {len(job_overrides)} job(s) into {sweep_dir}:", file=sys.stderr)
        calls = []
        for num, overrides in enumerate(job_overrides, start=initial_job_idx):
            print(f"[slurm]   #{num}: {' '.join(filter_overrides(overrides))}", file=sys.stderr)
            calls.append((list(overrides), "hydra.sweep.dir", num, f"job_id_for_{num}", Singleton.get_state()))
        self._submitted = time.time()
        jobs = executor.map_array(self, *zip(*calls))
        ids = sorted({j.job_id.split("_")[0] for j in jobs})
        print(f"[slurm] submitted as SLURM job {', '.join(ids)}; waiting for it (`squeue -j {ids[0]}`)", file=sys.stderr)
        self._wait(jobs, ids)
        return [self._outcome(job, call[0], call[2]) for job, call in zip(jobs, calls)]

    def _wait(self, jobs, ids: list[str]) -> None:
        """Wait for every job; a stop signal to this command stops the waiting, not the jobs."""
        from initnorm.training import signals

        while not all(j.done() for j in jobs):
            if signals.requested() is not None:
                print(f"[slurm] the jobs go on running on the cluster: `scancel {' '.join(ids)}` stops them, "
                      f"`python -m initnorm.summarize {self.config.hydra.sweep.dir}` summarises them once they end", file=sys.stderr)
                signals.raise_if_requested()
            time.sleep(POLL_S)

    def _outcome(self, job, overrides: list[str], num: int) -> JobReturn:
        """The job's own answer, or, where it gave none (killed, cancelled before it started), its state recorded in its folder."""
        from submitit.core.utils import FailedJobError, UncompletedJobError

        try:
            return job.results()[0]
        except (UncompletedJobError, FailedJobError) as exc:
            state = job.state
            folder, job_info = self._job(overrides, num)
            own = folder / "metrics.json"
            if own.is_file() and own.stat().st_mtime >= self._submitted:  # the job recorded its stop itself, then was killed
                return self._nan(overrides, folder)
            status = status_of(state)
            if isinstance(exc, FailedJobError) or status in ("completed", "failed", "unknown"):
                status = "failed"
            record_stop(folder, status, job_info, None, f"job {job.job_id} ended {state} without a result; its log: {job.paths.stderr}")
            return JobReturn(overrides=overrides, working_dir=str(folder), task_name="train",
                             status=JobStatus.COMPLETED, _return_value=math.nan)

    def _job(self, overrides: list[str], num: int) -> tuple[Path, dict[str, Any]]:
        """The job's folder and what its metrics.json says of it (seed, number, overrides), from its config."""
        from initnorm.cli.sweep import swept_keys

        assert self.hydra_context is not None and self.config is not None
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        folder = Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir)
        given = dict(o.split("=", 1) for o in overrides if "=" in o)
        info = {"seed": cfg.get("seed"), "job_num": num, "overrides": {k.lstrip("+~"): v for k, v in given.items()}, "swept": swept_keys()}
        return folder.absolute(), info

    # --- in the job, on the cluster ------------------------------------------------------------

    def __call__(self, sweep_overrides: list[str], job_dir_key: str, job_num: int, job_id: str, singleton_state: dict) -> JobReturn:
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        from initnorm.training import signals

        submitit_usr2 = signal.getsignal(signal.SIGUSR2)  # submitit's: checkpoint, requeue, or give up
        signals.install(extra=[signal.SIGUSR2])  # SIGTERM, SIGINT, USR2: checkpoint at the next step, then stop
        try:
            return super().__call__(sweep_overrides, job_dir_key, job_num, job_id, singleton_state)
        except signals.Interrupted as stop:
            return self._stopped(stop.signum, stop.step, sweep_overrides, job_num, submitit_usr2)
        except SIGTERMException:  # Lightning's SIGTERM handler, in the instant before ours is back in place
            return self._stopped(signal.SIGTERM, None, sweep_overrides, job_num, submitit_usr2)

    def _stopped(self, signum: int, step: int | None, overrides: list[str], num: int, submitit_usr2) -> JobReturn:
        import submitit
        from submitit.core.utils import UncompletedJobError

        job_id = submitit.JobEnvironment().job_id
        state = slurm_state(job_id)
        folder, info = self._job(overrides, num)
        # USR2 is SLURM's warning before a time limit or a preemption; a SIGTERM while SLURM keeps the
        # job RUNNING is a preemption's first signal. submitit decides: requeue (it calls
        # self.checkpoint, runs `scontrol requeue` and exits) or raise because it may not.
        if callable(submitit_usr2) and (signum == signal.SIGUSR2 or state == "RUNNING"):
            try:
                submitit_usr2(signal.SIGUSR2, None)
            except UncompletedJobError as exc:
                record_stop(folder, "timeout", info, step, f"job {job_id}: USR2 before its time limit; {str(exc).strip()}")
                return self._nan(overrides, folder)
        status = status_of(state) if state not in ("RUNNING", "UNKNOWN") else "interrupted"
        record_stop(folder, status, info, step, f"job {job_id}: {signal.Signals(signum).name}, state {state}")
        return self._nan(overrides, folder)

    @staticmethod
    def _nan(overrides: list[str], folder: Path) -> JobReturn:
        return JobReturn(overrides=overrides, working_dir=str(folder), task_name="train",
                         status=JobStatus.COMPLETED, _return_value=math.nan)
