"""Why a learning rate does not transfer, in one place:

- ``callback.py``: ``Diagnostics``, the callback that records, per layer and member, the effective
  lr, Adam's eps fraction and the top singular values of W and ΔW (``SpectralTracker``);
- ``analysis.py``: a sweep's events read back, each width (or depth) against the base one, and the
  layers that depart.

The command is ``python -m initnorm.diagnose`` (``cli/diagnose.py``).
"""

from initnorm.instruments import lazy
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

# The callback's names are looked up when first used (instruments.lazy): it imports Lightning.
_CALLBACK = (
    "COLD_STEPS", "POWER_STEPS", "Diagnostics", "SpectralTracker", "eps_below", "eps_fraction",
    "fans", "member_eps_records", "member_lr_records", "top_singular", "top_singulars",
)
__getattr__ = lazy(__name__, dict.fromkeys(_CALLBACK, "initnorm.instruments.diagnostics.callback"))
