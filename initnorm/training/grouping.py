"""The grouping policy of a sweep's jobs into units of work: which run alone, which share a stacked model, how large
a group may grow. ``hydra/launcher=vectorized`` calls it (``cli/vectorized.py``); any other caller that has jobs'
configs and folders can (a notebook's own sweep through ``fit``).

1. A job runs alone when its folder holds a result (finished: skipped; failed: trained again) or a checkpoint the
   resume refuses (it then fails as one line, as it would alone).
2. The others group by ``group.group_key`` (everything that changes shapes or the graph) and by the step they start
   from: their checkpoint's, or, with none, their horizon fork's branch step (``training/forks.py``).
3. A group larger than ``max_group`` members, or than ``max_params`` parameters in all, is cut into even chunks
   (13 jobs at 12 are 7 + 6, not 12 + 1); a job too big to gain from stacking is a unit of one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from initnorm.errors import ConfigError
from initnorm.results import METRICS_FILE
from initnorm.training.group import group_key


class Placed(Protocol):
    alone: str | None  # why it runs alone (None: it can be a member)
    key: tuple  # (group key, the step it starts from)


J = TypeVar("J", bound=Placed)


def place(c: Mapping[str, Any], folder: Path | None, resume_step: Callable[[], int],
          fork_step: Callable[[], int]) -> tuple[str | None, tuple]:
    """(why job ``c`` runs alone, or None; its key): ``folder`` its folder (None: made just now, it holds nothing),
    ``resume_step()`` the step its checkpoint resumes from (a ``ConfigError``: the resume refuses it), ``fork_step()``
    its horizon fork's branch step (0: none)."""
    alone, step = None, 0
    if folder is not None and (folder / METRICS_FILE).is_file():
        alone = "its folder holds a result"
    if alone is None and folder is not None:
        try:
            step = resume_step()
        except ConfigError as exc:
            alone = str(exc)
    if alone is None and step == 0:
        step = fork_step()
    return alone, (group_key(c), step)


def units_of(jobs: list[J], max_group: int, max_params: int | None = None,
             params_of: Callable[[J], int] | None = None) -> list[list[J]]:
    """Groups of at most ``max_group`` jobs with one key, and at most ``max_params`` parameters in all
    (``params_of(job)``: one member's count); everything else one job at a time, in job order."""
    groups: dict[tuple, list[J]] = {}
    for j in jobs:
        if j.alone is None:
            groups.setdefault(j.key, []).append(j)
    units, seen = [], set()
    for j in jobs:
        if j.alone is not None:
            units.append([j])
        elif j.key not in seen:
            seen.add(j.key)
            members = groups[j.key]
            most = max_group if max_params is None else max(1, min(max_group, max_params // max(1, params_of(j))))
            n_chunks = math.ceil(len(members) / most)
            size = math.ceil(len(members) / n_chunks)
            units += [members[i : i + size] for i in range(0, len(members), size)]
    return units
