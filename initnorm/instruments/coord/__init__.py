"""The coordinate check (deck §7d; Yang et al. 2022, "Tensor Programs V", §D.1), in one place:

- ``record.py``: what it measures (the probe points, the fixed inputs, each point's RMS change from step 0)
  and its flat records, apart from Lightning;
- ``callback.py``: ``CoordCheck``, the callback that records it while a job (or every member of a
  stacked group at once) trains -> events and ``coord.csv``;
- ``check.py``: ``coord_check``, the whole check on a model of one's own in a plain loop (``initnorm.coord_check``);
- ``exponents.py``: per point, the exponent of its change on width (or depth), with a bootstrap interval over
  seeds, beside the one its registration expects;
- ``analysis.py``: many jobs' records set side by side over width (or depth), and the verdict in exponents,
  read from each parameterisation's declared kind (``judge``, for the command and the library alike);
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
    STAT,
    TOLERANCE,
    CoordReport,
    block_update,
    block_updates,
    combined_csv,
    coord_axis,
    curves,
    display_name,
    judge,
    judged_step,
    kind,
    ordered,
    panels,
    ratio,
    read_rows,
    summarize,
    table,
    verdict,
)
from initnorm.instruments.coord.exponents import (
    Exponent,
    exponent_table,
    exponents,
    log_slope,
)
from initnorm.instruments.coord.figure import (
    coord_check_png,
)
from initnorm.instruments.coord.record import (
    delta_records,
    fixed_windows,
    member_records,
    member_rms,
    resumed_error,
    to_csv,
    watched_points,
)

__all__ = [
    "BLOCK_UPDATE",
    "COORD_FILE",
    "FIELDS",
    "KEY_LAYERS",
    "STAT",
    "TOLERANCE",
    "CoordCheck",
    "CoordReport",
    "Exponent",
    "block_update",
    "block_updates",
    "combined_csv",
    "coord_axis",
    "coord_check",
    "coord_check_png",
    "curves",
    "delta_records",
    "display_name",
    "exponent_table",
    "exponents",
    "fixed_windows",
    "judge",
    "judged_step",
    "kind",
    "log_slope",
    "member_records",
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

# Looked up when first used (instruments.lazy): the callback imports Lightning, the library's check the model builder.
__getattr__ = lazy(__name__, {"CoordCheck": "initnorm.instruments.coord.callback", "coord_check": "initnorm.instruments.coord.check"})
