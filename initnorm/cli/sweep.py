"""Hydra glue for sweeps: readable job folder names and the summary at the end of a multirun."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
import sys
import time
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from initnorm import envvars
from initnorm.cli import console, lock
from initnorm.cli.disk import disk_error
from initnorm.config import IGNORED
from initnorm.errors import ConfigError
from initnorm.results import read_metrics
from initnorm.summary import summarize

log = logging.getLogger(__name__)


FAILED_JOBS: list[str] = []  # folders of failed jobs, filled at the end of a multirun; train.cli exits 1 then
STOPPED_JOBS: list[str] = []  # folders of jobs a cluster stopped before they finished (cancelled, timeout ...): exit 1 too
SWEPT_ENV = envvars.SWEPT_KEYS  # set by SummaryCallback.on_multirun_start, read by every job
NOT_IN_NAME = {"seed", "experiment", "hydra.sweep.dir"}


def resume_command(folder: str) -> str:
    """This command again with its sweep folder pinned: a rerun skips the finished jobs and resumes the others."""
    from initnorm.cli.signals import resume_command as pinned

    return pinned(sys.argv[1:], "hydra.sweep.dir", str(Path(folder).absolute()))


def swept_keys() -> list[str] | None:
    """The keys this multirun sweeps over, in command-line order (None outside a known multirun)."""
    value = os.environ.get(SWEPT_ENV)
    return None if value is None else [k for k in value.split(",") if k]


def parse_sweep(task_overrides) -> list[str]:
    """Keys given several values on the command line (``norm=pre,post``, ``lr=range(...)``); a list is one value
    (``logger=[tensorboard,mlflow]``), a sweep of lists several (``logger=[csv],[mlflow]``)."""
    keys = []
    for o in task_overrides:
        key, _, value = str(o).partition("=")
        if "," in re.sub(r"\[[^\]]*\]", "[]", value) or value.startswith(("range(", "choice(", "glob(")):
            keys.append(key.lstrip("+~"))
    return keys


def sweep_overrides(config: DictConfig) -> list[str]:
    """A preset's ``hydra.sweeper.params``, then the command line, which wins key by key (as Hydra's basic sweeper merges them)."""
    from omegaconf import OmegaConf

    merged: dict[str, str] = {}
    # as written, not resolved: `trainer.val_check_interval=${steps}` is each job's own steps, not the primary config's
    params = OmegaConf.to_container(config.hydra.sweeper.params, resolve=False) if config.hydra.sweeper.get("params") else {}
    task = OmegaConf.to_container(config.hydra.overrides.task, resolve=False)
    for o in [f"{k}={v}" for k, v in params.items()] + [str(o) for o in task]:
        merged[o.partition("=")[0].lstrip("+~")] = o
    return list(merged.values())


def job_dir(task_overrides, seed) -> str:
    """``norm=post,warmup=200/seed=3``: this job's swept values in sweep order, then the seed."""
    swept = swept_keys()
    parts = []
    for o in task_overrides:
        key = str(o).partition("=")[0].lstrip("+~")
        if key not in NOT_IN_NAME and (swept is None or key in swept):
            parts.append(str(o).lstrip("+~").replace("/", "_"))
    return f"{','.join(parts) or 'default'}/seed={seed}"


def what_sets_apart(overrides) -> list[str]:
    """The overridden keys that change the experiment: not ``hydra.*``, not how a run is watched or
    where it runs (``trainer.enable_progress_bar``, ``threads`` ...: config.IGNORED)."""
    keys = [str(o).partition("=")[0].lstrip("+~") for o in overrides]
    return [k for k in keys if not k.startswith("hydra.") and k not in IGNORED and k.split(".")[0] not in IGNORED]


RUN_NAME_MAX = 120  # characters of a single run's folder name (a file name may have 255 bytes)


def run_name(task_overrides) -> str:
    """A single run's folder name: what its command line set (``norm=post,lr=0.02``), or ``default``;
    TensorBoard pointed at ``outputs/runs`` then lists runs by what sets them apart. A long command line keeps
    the overrides that fit whole and names the rest by their count and a hash of them all
    (``model=custom,model.width_arg=n_embd,+3_more_9f2c1a``): cut mid-value it read ``...context_arg=block_``."""
    keep = set(what_sets_apart(task_overrides))
    parts = [re.sub(r"[^A-Za-z0-9._=,+-]", "_",
                    str(o).lstrip("+~")) for o in task_overrides if str(o).partition("=")[0].lstrip("+~") in keep]
    name = ",".join(parts)
    if len(name) <= RUN_NAME_MAX:
        return name or "default"
    digest = hashlib.sha1(name.encode()).hexdigest()[:6]
    for n in range(len(parts) - 1, -1, -1):
        rest = f"+{len(parts) - n}_more_{digest}"
        head = ",".join(parts[:n] or [parts[0].partition("=")[0]])  # one override too long alone: its key
        if len(head) + 1 + len(rest) <= RUN_NAME_MAX or n == 0:
            return f"{head},{rest}"[:RUN_NAME_MAX]
    return name[:RUN_NAME_MAX]


def unique_dir(base: str) -> str:
    """``base`` plus a short random suffix (``2026-11-29_08-20-07_3f9a``), reserved by creating the
    folder: ``mkdir`` fails if it exists, so two sweeps started in the same second (or on two
    machines sharing a disk) never share a folder. Registered with ``use_cache``: Hydra copies the
    resolved value into every job's config, so jobs in other processes see the same folder."""
    Path(base).parent.mkdir(parents=True, exist_ok=True)
    while True:
        path = f"{base}_{secrets.token_hex(2)}"
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("initnorm.job_dir"):
        OmegaConf.register_new_resolver("initnorm.job_dir", job_dir)
    if not OmegaConf.has_resolver("initnorm.run_name"):
        OmegaConf.register_new_resolver("initnorm.run_name", run_name)
    if not OmegaConf.has_resolver("initnorm.unique_dir"):
        OmegaConf.register_new_resolver("initnorm.unique_dir", unique_dir, use_cache=True)


def hold_folder(folder: str, key: str) -> None:
    """This command's lock on its output folder (initnorm/cli/lock.py); exit 2 with one line where another command holds it."""
    try:
        lock.claim(folder, key)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


class SummaryCallback(Callback):
    """Tells jobs what is swept (for folder names and tables), and after the last job writes
    summary.md / summary.csv into the sweep folder."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        if os.environ.get("LOCAL_RANK", "0") != "0":
            return  # another rank of one run across processes, started by rank 0, which holds the folder (training/distributed.py)
        hold_folder(config.hydra.run.dir, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        hold_folder(config.hydra.sweep.dir, "hydra.sweep.dir")  # before multirun.yaml and any job folder
        os.environ[SWEPT_ENV] = ",".join(parse_sweep(sweep_overrides(config)))
        from initnorm.cli.signals import sweep_started

        sweep_started(config.hydra.sweep.dir)  # where to resume, also when the jobs run in other processes
        os.environ[console.START_ENV] = str(time.time())  # every job's progress line estimates the time left from it
        from initnorm.cli.search_plan import planned, workers_line

        trials = planned(config)  # a search asks its jobs as it goes: its total is trials x seeds, known from the start
        if trials is not None:
            os.environ[console.TOTAL_ENV] = str(trials[0] * trials[1])
        from initnorm.cli.launchers import kind

        launcher = kind(config.hydra.launcher) or str(config.hydra.launcher.get("_target_", "")).rpartition(".")[2]
        print(console.sweep_header(str(config.hydra.sweep.dir), launcher, config.hydra.launcher.get("n_jobs"), trials,
                                   how=workers_line(config)), flush=True)

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        folder = config.hydra.sweep.dir
        try:
            table = summarize(folder)
        except FileNotFoundError as exc:
            log.warning("no summary: %s", exc)
            return
        except OSError as exc:
            if err := disk_error(exc, within=folder):  # the docs promise a summary: a sweep without one does not exit 0
                print(f"error: no summary: {err}; the jobs' results are kept: free space (or fix the folder's permissions), then "
                      f"rebuild it with `python -m initnorm.summarize {folder}`", file=sys.stderr)
                raise SystemExit(1) from None
            log.warning("no summary for %s (%s: %s); rebuild it with `python -m initnorm.summarize %s`", folder,
                        type(exc).__name__, exc, folder)
            table = None
        except Exception as exc:  # a record nobody foresaw: the jobs' results stand; say how to rebuild it
            log.warning("no summary for %s (%s: %s); rebuild it with `python -m initnorm.summarize %s`", folder,
                        type(exc).__name__, exc, folder)
            table = None
        if table is not None:
            print(f"\nSummary of {folder} (also in summary.md and summary.csv):\n\n{console.summary_text(folder, table)}", end="")
        FAILED_JOBS[:] = [r["_dir"] for r in read_metrics(folder) if r.get("status") == "failed"]
        if FAILED_JOBS:
            print(f"{len(FAILED_JOBS)} job(s) failed (error lines in summary.md, tracebacks in their metrics.json): "
                  f"{', '.join(FAILED_JOBS)}")
            print(f"this trains them again (the finished jobs are skipped): {resume_command(folder)}")
        stopped = [r for r in read_metrics(folder) if r.get("status") not in ("finished", "failed", "pruned")]  # pruned: on purpose
        STOPPED_JOBS[:] = [r["_dir"] for r in stopped]
        for r in stopped:
            print(f"{r['_dir']} did not finish: {r.get('status')}: {r.get('error') or r.get('stopped') or ''}")
        if stopped:
            print(f"{len(stopped)} job(s) did not finish; this resumes them from their checkpoints: {resume_command(folder)}")
