"""The coordinate check (deck §7d; Yang et al. 2022, "Tensor Programs V", §D.1), in one place:

- ``callback.py``: ``CoordCheck``, the callback that records it while a job (or every member of a
  stacked group at once) trains: each probe point's RMS change from step 0 -> events and ``coord.csv``;
- ``analysis.py``: many jobs' ``coord.csv`` set side by side over width (or depth), and the verdict,
  read from each parameterisation's declared kind;
- ``figure.py``: its picture.

The command that trains and judges a whole check is ``python -m initnorm.coord_check``
(``cli/coord_check.py``: command-line glue only); the preset is ``experiment=coord_check``.
"""

from initnorm.instruments import lazy
from initnorm.instruments.coord.analysis import (
    BLOCK_UPDATE,
    COORD_FILE,
    FIELDS,
    KEY_LAYERS,
    block_update,
    combined_csv,
    coord_axis,
    curves,
    depth_verdict,
    display_name,
    kind,
    ordered,
    panels,
    ratio,
    read_rows,
    summarize,
    table,
    verdict,
)
from initnorm.instruments.coord.figure import (
    coord_check_png,
)

__all__ = [
    "BLOCK_UPDATE",
    "COORD_FILE",
    "FIELDS",
    "KEY_LAYERS",
    "STAT",
    "CoordCheck",
    "block_update",
    "combined_csv",
    "coord_axis",
    "coord_check_png",
    "curves",
    "delta_records",
    "depth_verdict",
    "display_name",
    "fixed_windows",
    "kind",
    "member_rms",
    "ordered",
    "panels",
    "ratio",
    "read_rows",
    "resumed_error",
    "summarize",
    "table",
    "to_csv",
    "verdict",
    "watched_points",
]

# The callback's names are looked up when first used (instruments.lazy): it imports Lightning.
_CALLBACK = ("STAT", "CoordCheck", "delta_records", "fixed_windows", "member_rms", "resumed_error", "to_csv", "watched_points")
__getattr__ = lazy(__name__, "initnorm.instruments.coord.callback", _CALLBACK)
