"""Why a learning rate does not transfer, in one place:

- ``callback.py``: ``Diagnostics``, the callback that records, per layer and member, the effective
  lr, Adam's eps fraction and the top singular values of W and ΔW (``SpectralTracker``);
- ``analysis.py``: a sweep's events read back, each width (or depth) against the base one, and the
  layers that depart.

The command is ``python -m initnorm.diagnose`` (``cli/diagnose.py``).
"""

from initnorm.instruments.diagnostics.analysis import (
    FACTOR,
    STATS,
    ZERO,
    Departure,
    departures,
    job_table,
    read_events,
    render,
    summary_value,
)

__all__ = [
    "COLD_STEPS",
    "FACTOR",
    "POWER_STEPS",
    "STATS",
    "ZERO",
    "Departure",
    "Diagnostics",
    "SpectralTracker",
    "departures",
    "eps_below",
    "eps_fraction",
    "fans",
    "job_table",
    "member_eps_records",
    "member_lr_records",
    "read_events",
    "render",
    "summary_value",
    "top_singular",
    "top_singulars",
]

# The callback's names are looked up when first used: it imports Lightning (most of a command's start), which the
# commands that only read finished folders (``initnorm-diagnose``, ``initnorm-coord-check --help``) never need.
_CALLBACK = (
    "COLD_STEPS", "POWER_STEPS", "Diagnostics", "SpectralTracker", "eps_below", "eps_fraction",
    "fans", "member_eps_records", "member_lr_records", "top_singular", "top_singulars",
)


def __getattr__(name: str):
    if name in _CALLBACK:
        import importlib

        return getattr(importlib.import_module("initnorm.instruments.diagnostics.callback"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
