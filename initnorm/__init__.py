"""initnorm: initialisation, normalisation and µP experiments with Lightning + Hydra, and a library for a training
loop of one's own (docs/library.md).

The stable surface is ``__all__``:

- ``parameterize(model, *, width, base_width, param, init, optimizer, ...) -> Parameterized``: a model built under a
  parameterisation (sp, mup, depth_mup, completep, umup, or a table of one's own), its roles inferred where not
  declared, init and forward multipliers applied once; ``.param_groups(lr, ...)`` for any torch optimiser of its
  family, the role table as ``str()`` and ``.records()``;
- ``coord_check(model, batches, loss_fn, *, widths, params, ...) -> CoordReport``: the coordinate check in a plain
  loop, judged as ``initnorm-coord-check`` judges (records, verdict, figure);
- ``transfer_report(df, *, axis, lr, metric, seed, by) -> TransferReport``: does the learning rate transfer, from a
  table of runs made anywhere (the optimum per axis value with its interval, the shift, the penalty, the verdict,
  the figure);
- ``initnorm.callbacks``: ``LayerStats``, ``Diagnostics``, ``CoordCheck`` for any Lightning project;
- ``ConfigError``: every refusal, one line, the command line's.

Everything else is internal and may change. Names load on first use, so ``import initnorm`` imports neither torch
nor Lightning.
"""

from initnorm.errors import ConfigError
from initnorm.instruments import lazy

__version__ = "0.1.0"

__all__ = ["ConfigError", "CoordReport", "Parameterized", "TransferReport", "coord_check", "parameterize", "transfer_report"]

_WHERE = {
    "parameterize": "initnorm.models.parameterize",
    "Parameterized": "initnorm.models.parameterize",
    "coord_check": "initnorm.instruments.coord.check",
    "CoordReport": "initnorm.instruments.coord.analysis",
    "transfer_report": "initnorm.own_runs",
    "TransferReport": "initnorm.own_runs",
}
__getattr__ = lazy(__name__, _WHERE)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
