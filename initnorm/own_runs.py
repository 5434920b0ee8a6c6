"""``initnorm.transfer_report``: does the learning rate transfer, read from a table of runs made anywhere (a W&B or
MLflow export, a CSV of one's own), one row per run::

    report = initnorm.transfer_report(pandas.read_csv("runs.csv"), axis="width", lr="lr", metric="val_loss",
                                      seed="seed", by="param")
    print("\\n".join(report.verdicts)); report.table(); open("transfer.png", "wb").write(report.png())

A thin adapter: each row becomes the job record an initnorm sweep leaves (its overrides: the learning rate, the
axis value and the ``by`` columns; its seed; its metric, a run whose metric is not finite counted as diverged), and
the transfer report is initnorm's own, made by ``initnorm/transfer/`` (``cells_from_records``, ``transfer_rows``,
``verdicts``, ``render_markdown``, ``render_csv``) and drawn by the sweep plot ``lr_transfer`` (``plots.py``): the
optimum per axis value by a parabola in log2 lr with its bootstrap interval over seeds, the shift from the
smallest axis value's optimum, the penalty of training at that optimum, the exponent of the optimum along the axis
beside the rules the literature proposes for it, and the verdict (docs/transfer.md).
"""

from __future__ import annotations

import io
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from initnorm import transfer
from initnorm.errors import ConfigError, bad_value

__all__ = ["TransferReport", "transfer_report"]


@dataclass(frozen=True)
class TransferReport:
    """The transfer report of a table: ``rows`` (``transfer.Row``: per setting and axis value, the optimum with its
    interval, the shift and the penalty), ``verdicts`` (one line per setting), ``markdown`` (the verdicts and the
    table, as a sweep's summary.md shows them), ``csv`` (``transfer.csv``'s), and ``records``, the runs as the
    report read them. ``table()`` is the CSV as a DataFrame; ``png()`` the figure."""

    axis: str
    metric: str
    rows: list
    verdicts: list[str]
    markdown: str
    csv: str
    records: list[dict]

    def table(self):
        """The report's rows as a ``pandas.DataFrame`` (columns: the settings, axis, size, seeds, log2_lr with its
        interval, lr, the fit, shift and penalty with theirs)."""
        import pandas

        return pandas.read_csv(io.StringIO(self.csv))

    def png(self) -> bytes:
        """Loss against learning rate per axis value, one panel per setting: the sweep plot ``lr_transfer``."""
        from initnorm.plots import PLOTS

        stem = "lr_transfer" if self.axis == "width" else f"lr_transfer_{self.axis}"
        return PLOTS.get(stem)(self.records).files[f"{stem}.png"]


def transfer_report(df: Any, *, axis: str, lr: str = "lr", metric: str = "final_val_loss", seed: str | None = "seed",
                    by: str | Sequence[str] | None = None) -> TransferReport:
    """The transfer report of ``df`` (a ``pandas.DataFrame``, or any iterable of mappings), one row per run:
    ``axis`` names the column the rate should transfer across (one of ``transfer.SWEPT_AXES``: ``width``, ``depth``,
    ``batch_size``, ``steps``, ``optim.weight_decay``), ``lr`` the peak
    learning rate's, ``metric`` the loss's (lower is better; not finite: the run diverged), ``seed`` the seed's
    (None: one seed), ``by`` the columns that tell settings apart (default: ``param`` where the table has one; a
    column named ``param`` is read as initnorm's parameterisations, by their display names and declared kinds)."""
    rows = df.to_dict("records") if hasattr(df, "to_dict") else [dict(r) for r in df]
    if axis not in transfer.SWEPT_AXES:
        raise bad_value("axis", axis, f"one of {', '.join(transfer.SWEPT_AXES)} (the axes the transfer report reads)", "axis='width'")
    columns = list(dict.fromkeys(k for r in rows for k in r))
    keys = ([by] if isinstance(by, str) else list(by)) if by is not None else [k for k in ("param",) if k in columns]
    for role, column in (("axis", axis), ("lr", lr), ("metric", metric), ("seed", seed), *(("by", k) for k in keys)):
        if column is not None and column not in columns:
            raise ConfigError(f"{role}={column!r}: the table has no such column (its columns: {', '.join(map(str, columns))}); fix it "
                              f"with `{role}=<the column that holds the {role if role != 'by' else 'setting'}>`")
    records = [_record(r, axis, lr, metric, seed, keys, i) for i, r in enumerate(rows)]
    found, cells = transfer.cells_from_records(records, axis=axis, metric=metric, rate="lr")
    sizes = {n for by_size in cells.values() for n in by_size}
    rates = {x for by_size in cells.values() for s in by_size.values() for c in s.values() for x in c}
    if len(sizes) < 2 or len(rates) < 2:
        raise ConfigError(f"the table has {len(sizes)} value(s) of {axis} and {len(rates)} learning rate(s): the transfer report needs "
                          f"runs at two or more of each")
    out = transfer.transfer_rows(cells, found, rate="lr")
    verdicts = transfer.verdicts(out, "nats" if "loss" in metric else metric)
    if diverged := sum(r["diverged"] for r in records):  # evidence against their rate: said, never left out unsaid
        verdicts.append(f"{diverged} of {len(records)} runs diverged ({metric} NaN or infinite): each counts as the worst loss at "
                        "its rate, and a rate where any seed diverged is not an optimum")
    markdown = transfer.render_markdown(out, metric) + (f"\n{verdicts[-1]}.\n" if diverged else "")
    return TransferReport(found, metric, out, verdicts, markdown, transfer.render_csv(out), records)


def _record(row: Mapping[str, Any], axis: str, lr: str, metric: str, seed: str | None, keys: Iterable[str], i: int = 0) -> dict:
    """One run (row ``i``) as the job record a sweep leaves (``metrics.json``): what the transfer report and its figure
    read. A loss of NaN or inf is a run that diverged; one that is no number (text, empty) is refused, naming the row."""
    rate = row[lr]
    if not (isinstance(rate, numbers.Real) and math.isfinite(rate) and rate > 0):
        raise bad_value(f"{lr} (the learning rate)", rate, "a positive finite number in every row")
    value = row[metric]
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise ConfigError(f"row {i} ({lr}={rate}, {axis}={row[axis]}): {metric}={value!r} is not a number; give every run its loss "
                          f"as a number (NaN or inf for a run that diverged), or drop the row")
    finite = math.isfinite(value)
    settings = {k: row[k] for k in keys}
    return {"overrides": {"lr": rate, axis: row[axis], **settings}, "swept": list(settings), "status": "finished",
            "seed": row[seed] if seed is not None else 0, metric: value if finite else math.nan, "diverged": not finite,
            "summary_metrics": [metric]}
