"""A failed job, written in one place: whatever launcher ran it (a job alone, a member of a stacked group, a unit whose
worker died) and whatever failed (its set-up, its training, its process).

``job_failed`` ends the job's tracker runs still open as failed (none left RUNNING), records ``status: failed`` with
the error line and the traceback in its ``metrics.json`` and prints the one console line ``error: job N failed: <line>
-> <folder>``. A folder that already holds a finished result keeps it, and no failure is printed for it: a job that
finished before its worker died (kill -9 of the fork server) is not reported failed. Each member of a group calls it
with its own error for its own folder.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from initnorm.provenance import describe
from initnorm.results import METRICS_FILE
from initnorm.training import trackers
from initnorm.training.resume import read_json, record_failure


def job_failed(folder: str | Path, exc: BaseException, fields: Mapping[str, Any]) -> dict[str, Any]:
    """Job ``folder`` failed with ``exc``: its tracker runs ended, its record written (``fields``: the record's job
    fields, ``job_num`` among them; the provenance is added), its line printed. Returns what its result reads: the
    finished record it held, else ``{"status": "failed", "error": <line>, **fields}``. An ``OSError`` writing the
    record (a full disk) is raised."""
    trackers.fail(folder)
    done = read_json(Path(folder) / METRICS_FILE)
    if isinstance(done, dict) and done.get("status") == "finished":
        return done
    line = record_failure(folder, exc, {**fields, "provenance": describe()})
    num = fields.get("job_num")
    print(f"error: {'job' if num is None else f'job {num}'} failed: {line} -> {folder}", file=sys.stderr)
    return {"status": "failed", "error": line, **fields}
