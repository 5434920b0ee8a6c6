"""The preflight's checked jobs, handed to Hydra's run of the command line as a value: ``cli/train.main`` runs Hydra inside
``planned(jobs)``; the checked sweeper (``sweeper.py``), the launchers (``vectorized.py``) and a job alone (``job.py``) read
``plan()`` (their overrides -> the checked job) while it lasts. Apart from the sweeper, which launches through them: no
import cycle."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

_PLAN: contextvars.ContextVar[Mapping[tuple[str, ...], Any] | None] = contextvars.ContextVar("initnorm_plan", default=None)


@contextlib.contextmanager
def planned(jobs: Sequence[Any] | None) -> Iterator[None]:
    """Hydra's run of this command line, with the preflight's checked ``jobs`` (``preflight.CheckedJob``) at hand."""
    token = _PLAN.set({tuple(j.overrides): j for j in jobs or ()})
    try:
        yield
    finally:
        _PLAN.reset(token)


def plan() -> Mapping[tuple[str, ...], Any]:
    """The checked jobs of the command line Hydra is running, by their overrides (empty outside ``planned``)."""
    return _PLAN.get() or {}
