"""What every launcher's unit of work shares around ``training/fit.fit``, a job alone (``cli/job.train``) or a stacked group
(``cli/run.py``): the device (``training/devices.placement``), the progress status, the failure record (``failed``,
through ``training/failure.job_failed``) and the console's end lines (``fit_unit``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from initnorm.cli import console, disk
from initnorm.training import failure
from initnorm.training.distributed import Placement


def failed(jobs: Sequence[tuple[str | Path, Mapping[str, Any]]], exc: BaseException) -> list[dict[str, Any]]:
    """Each job ``(folder, record fields)`` failed with ``exc``, recorded in its folder (``training/failure.job_failed``);
    a full disk instead stops the sweep in one line (the next job would fail the same way)."""
    if err := disk.disk_error(exc):
        raise err from exc
    try:
        return [failure.job_failed(folder, exc, fields) for folder, fields in jobs]
    except OSError as write_exc:
        raise (disk.disk_error(write_exc) or write_exc) from exc


def full_error() -> bool:
    """``HYDRA_FULL_ERROR=1``: a failure raised with its traceback instead of recorded."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


def fit_unit(members: Sequence[Any], place: Placement, sweep_dir: str | None, *, alone: bool = False, progress_bar: bool = False,
             label: str | None = None, abandoned: Callable[[], bool] | None = None) -> list[dict[str, Any]]:
    """``training/fit.fit(members)`` with what every launcher's unit adds: the sweep's done/total after each progress line
    (``sweep_dir``: None outside a sweep), each member's failure recorded (``failed``; ``alone``: a job alone's error is
    raised instead, for its task function to record and say as a command of one job says it) and each finished member's
    end line. ``label``: the unit's name in its progress lines (default: its members' first and last). Returns each
    member's result."""
    from initnorm.training.fit import fit

    status = None if sweep_dir is None else (lambda left: console.sweep_progress(sweep_dir, at_least=left))
    try:
        results = fit(members, place, progress_bar=progress_bar, abandoned=abandoned, label=label, status=status)
    except Exception as exc:  # a member left alone whose fit raised (fit records a group's members itself, each its own)
        if alone or full_error():
            raise
        results = failed([(m.out_dir, {"seed": m.cfg["seed"], **m.meta}) for m in members], exc)
    for m, r in zip(members, results):
        if r["status"] != "failed":  # a failed one was recorded and said by failure.job_failed; the others went on
            console.job_finished(m.label, r, m.out_dir, sweep_dir)  # ms/step: per member-step of a group
    return results
