"""Does the rate transfer? The optimum along any axis, its uncertainty, the cost of carrying it, and the rules.

For a sweep over a rate (``lr``, or the weight decay at a fixed lr) x an axis (width, depth, batch
size, steps or the tokens they mean, weight decay) x setting (the parameterisation, ...) x seed, per
(setting, axis value): the optimal log2 rate with a bootstrap interval over seeds, its shift from the
base value's, the penalty of training at the base value's rate and a verdict; per setting the
exponent of the optimum along the axis beside each rule the literature proposes. Everything is a
pure function of the job records (their metrics.json), as the plots are.

- ``fit``: a curve's optimum (a parabola in log2 rate around the grid's best point);
- ``bootstrap``: the resamples over seeds (every distinct one when they are few) and the interval;
- ``axes``: the axes, the named rules and their exponents, a job's value on an axis;
- ``rows``: the table's rows (optimum, shift, penalty, exponent);
- ``records``: from job records to the rows (which rate, which axis, which setting);
- ``render``: verdicts, the exponent against the rules, markdown, transfer.csv, the two-axis table;
- ``rules``: what carries a config tuned at a base to a job's batch, steps and model (the same rules, applied once
  where the config is checked).
"""

from initnorm.transfer.axes import RULES, SHORT, SWEPT_AXES, Rule, axis_value, number, rules_for, word
from initnorm.transfer.bootstrap import BOOT_SEED, LEVEL, N_BOOT, Estimate, estimate, interval, is_exact, resamples
from initnorm.transfer.fit import HALF_WIDTH, Curve, Fit, Seeds, fit_optimum, interpolate, seed_mean
from initnorm.transfer.records import (
    PARAM_KEYS,
    base_values,
    cells_from_records,
    metric_of,
    share_base_depth,
    sweep_axes,
    sweep_axis,
    swept_value,
    transfer_table,
    tuned_rate,
)
from initnorm.transfer.render import (
    HEADING,
    HEADING_RE,
    PENALTY_TOL,
    SHIFT_TOL,
    base_word,
    exponent_lines,
    interval_text,
    render_csv,
    render_markdown,
    render_two_axes,
    row_cells,
    setting_label,
    value_text,
    verdict_class,
    verdicts,
)
from initnorm.transfer.rows import Row, penalty, shift_bound, transfer_rows, transferred

__all__ = [
    "BOOT_SEED", "HALF_WIDTH", "HEADING", "HEADING_RE", "LEVEL", "N_BOOT", "PARAM_KEYS", "PENALTY_TOL", "RULES", "SHIFT_TOL", "SHORT",
    "SWEPT_AXES",
    "Curve", "Estimate", "Fit", "Row", "Rule", "Seeds", "axis_value", "base_values", "base_word", "cells_from_records", "estimate",
    "exponent_lines", "fit_optimum", "interpolate", "interval", "interval_text", "is_exact", "metric_of", "number", "penalty",
    "render_csv", "render_markdown", "render_two_axes", "resamples", "row_cells", "rules_for", "seed_mean", "setting_label",
    "share_base_depth", "shift_bound", "sweep_axes", "sweep_axis", "swept_value", "transfer_rows", "transfer_table",
    "transferred", "tuned_rate", "value_text", "verdict_class", "verdicts", "word",
]
