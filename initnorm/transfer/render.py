"""The transfer report as text: one verdict line per setting, the exponent against the rules, the table, transfer.csv.

The verdict reads the largest shift against ``SHIFT_TOL`` and the largest penalty against
``PENALTY_TOL`` together (``verdict_class``: transfers / borderline / does not transfer, undetermined
where an optimum on the grid's edge leaves one open; docs/transfer.md). The exponent line sets the
fitted exponent of the optimum along the axis beside each rule's (``axes.RULES``): a rule whose
exponent lies inside the interval holds.
"""

from __future__ import annotations

import csv
import io
import math
import re

from initnorm.nn.param import PARAMS
from initnorm.results import csv_cell
from initnorm.transfer.axes import SHORT, rules_for, word
from initnorm.transfer.bootstrap import BOOT_SEED, LEVEL, N_BOOT, Estimate
from initnorm.transfer.fit import HALF_WIDTH, finite
from initnorm.transfer.records import PARAM_KEYS
from initnorm.transfer.rows import Row

# The verdict's two thresholds (docs/transfer.md, "The verdict"). A shift within ±0.5 octave is within
# half the grid step of every sweep here (one octave; deck §7e 1.6): the rate tuned at the base size is
# still the grid point nearest the larger size's optimum. A penalty under 0.01 nats is below the seed-to-seed spread of the
# loss at the best grid rate in both lr x width sweeps in results/ (sd 0.006-0.109): no single run sees it.
SHIFT_TOL = 0.5  # octaves
PENALTY_TOL = 0.01  # nats (the metric's unit)
HEADING = "## Learning-rate transfer"  # summary.md's section; the terminal summary prints its verdict lines
# The section's name for each tuned rate: a report over a weight-decay grid is not a learning-rate one
TITLES = {"lr": "Learning-rate", "optim.weight_decay": "Weight-decay"}
HEADING_RE = re.compile(r"^## ([\w-]+) transfer$", re.MULTILINE)  # any tuned rate's section (cli/console.py finds it)


def heading(rate: str) -> str:
    """``## Learning-rate transfer``, ``## Weight-decay transfer``: the section of a report that tunes ``rate``."""
    return f"## {TITLES.get(rate, rate)} transfer"
PLURALS = {"width": "widths", "depth": "depths", "batch_size": "batch sizes", "steps": "horizons", "tokens": "token counts",
           "optim.weight_decay": "weight decays"}


def size_text(x: float) -> str:
    """An axis value as a table shows it: 64, 1500, 0.01."""
    return f"{x:g}" if isinstance(x, float) else str(x)


def value_text(axis: str, x: float) -> str:
    """``width 64``, ``batch size 8``, ``steps 1500``."""
    return f"{word(axis)} {size_text(x)}"


def ref(axis: str, x: float) -> str:
    """``width-64`` (one word: the table's old phrasing), ``batch size 8``: the base value in a sentence."""
    w = word(axis)
    return f"{w}-{size_text(x)}" if " " not in w else f"{w} {size_text(x)}"


def setting_label(setting: tuple[tuple[str, str], ...]) -> str:
    """``SP``, ``µP, norm=post``: a parameterisation by its display name, any other key as set."""
    if not setting:
        return "the sweep"  # no setting but the axis: "all" read as if several settings were pooled
    return ", ".join(PARAMS.display(v) if k in PARAM_KEYS else f"{k}={v}" for k, v in setting)


def base_word(setting: tuple[tuple[str, str], ...]) -> str:
    """What the smallest size is to a setting: its table's ``base``, or the ``reference`` of a table
    with no base size (``About.absolute``: u-µP), which the sweep's smallest size only stands for."""
    absolute = any(PARAMS.about(v, strict=False).absolute for k, v in setting if k in PARAM_KEYS)
    return "reference" if absolute else "base"


def _g(x: float, digits: int = 2) -> str:
    if math.isnan(x):
        return "—"
    if math.isinf(x):
        return "diverges" if x > 0 else "-∞"
    return f"{x:+.{digits}f}" if digits else f"{x:.0f}"


def _num(x: float, digits: int = 3) -> str:
    return "—" if math.isnan(x) else "∞" if math.isinf(x) else f"{x:.{digits}f}"


def _digits(e: Estimate, digits: int = 2, signed: bool = True) -> int:
    """At least ``digits`` decimals, more (up to two) until the interval's two ends differ as printed."""
    f = _g if signed else _num
    d = digits
    while d < digits + 2 and e.lo != e.hi and f(e.lo, d) == f(e.hi, d):
        d += 1
    return d


def interval_text(e: Estimate, digits: int = 2, signed: bool = True) -> str:
    """``[+0.47, +0.58]``: to the decimals that show both ends (``_digits``), so a narrow interval
    never reads as a single number."""
    f, d = (_g if signed else _num), _digits(e, digits, signed)
    return f"[{f(e.lo, d)}, {f(e.hi, d)}]"


def has_interval(e: Estimate) -> bool:
    return not (math.isnan(e.lo) or math.isnan(e.hi))


def _shift_state(r: Row) -> str:
    """``within`` / ``past`` ±SHIFT_TOL, or ``unknown`` where an optimum on the grid's edge may move
    the shift across it (a shift past the tolerance that the edge can only enlarge stays ``past``)."""
    past = abs(r.shift.value) > SHIFT_TOL
    if not r.bound:
        return "past" if past else "within"
    return "past" if past and r.bound == ("-" if r.shift.value < 0 else "+") else "unknown"


def _penalty_state(r: Row) -> str:
    """``within`` / ``past`` PENALTY_TOL; an optimum on the grid's edge may have a lower best loss
    beyond it, so its penalty is a lower bound: ``past`` still, ``unknown`` if within."""
    v = r.penalty.value
    if math.isnan(v):
        return "unknown"
    if v > PENALTY_TOL:
        return "past"
    return "unknown" if r.edge else "within"


def verdict_class(shift: str, penalty: str) -> str:
    """The shift and the penalty read together: both within their threshold ``transfers``, both past
    ``does not transfer``, one of each ``borderline``; an edge that leaves either open ``undetermined``."""
    if "unknown" in (shift, penalty):
        return "undetermined"
    return {("within", "within"): "transfers", ("past", "past"): "does not transfer"}.get((shift, penalty), "borderline")


REASONS = {
    ("transfers", "within"): f"both within ±{SHIFT_TOL:g} octave and {PENALTY_TOL:g} {{unit}}",
    ("does not transfer", "past"): f"both past ±{SHIFT_TOL:g} octave and {PENALTY_TOL:g} {{unit}}",
    ("borderline", "past"): f"the optimum moves past ±{SHIFT_TOL:g} octave but its base rate costs under {PENALTY_TOL:g} {{unit}}: "
                            "a flat optimum; a larger {axis} would tell",
    ("borderline", "within"): f"the optimum stays within ±{SHIFT_TOL:g} octave but the base rate costs over {PENALTY_TOL:g} {{unit}}: "
                              "the loss is steep around it",
}


def verdicts(rows: list[Row], unit: str = "nats") -> list[str]:
    """One line per setting: how far the optimum moves from the base value (largest shift) and what
    training at the base value's optimal rate costs (largest penalty), read together (``verdict_class``)."""
    out = []
    for setting in dict.fromkeys(r.setting for r in rows):
        rs = [r for r in rows if r.setting == setting]
        base, axis = next((r for r in rs if r.base), rs[0]), rs[0].axis
        others = [r for r in rs if r is not base]
        moved = [r for r in others if finite(r.shift.value)]
        if not moved:
            out.append(f"{setting_label(setting)}: no optimum to compare across {PLURALS.get(axis, axis)}")
            continue
        states = [_shift_state(r) for r in moved]
        past = [r for r, st in zip(moved, states) if st == "past"]
        worst = max(past or moved, key=lambda r: abs(r.shift.value))
        shift = "past" if past else "unknown" if "unknown" in states else "within"
        pens = [r for r in others if not math.isnan(r.penalty.value)]
        pen_rows = [r for r in pens if _penalty_state(r) == "past"] or pens
        pen_row = max(pen_rows, key=lambda r: r.penalty.value) if pen_rows else None
        pen_states = {_penalty_state(r) for r in pens} or {"unknown"}
        penalty = "past" if "past" in pen_states else "unknown" if "unknown" in pen_states else "within"
        cls = verdict_class(shift, penalty)
        edge = [size_text(r.size) for r in rs if r.edge]
        words = [_shift_words(base, worst)]
        if cls == "undetermined":
            words.insert(0, f"the optimum is on the {SHORT.get(base.rate, 'lr')} grid's edge at {word(axis)} {', '.join(edge)} "
                            "(widen the grid)")
        words.append(_penalty_words(pen_row, unit))
        if not has_interval(worst.shift) and not worst.bound:
            words.append("too few seeds for an interval")
        elif (few := few_seeds(worst.shift, worst.seeds)):
            words.append(few)
        if cls == "transfers" and held(rs[0]) is False:  # said beside "none 0 (the rate held): outside" in the rules' line
            words.append(f"the optimum still moves (its exponent's interval excludes 0), by less than ±{SHIFT_TOL:g} octave")
        reason = REASONS.get((cls, shift), "").format(unit=unit, axis=word(axis))
        notes = [f"{value_text(axis, r.size)}: {r.fit.note}" for r in rs if r.fit.method != "parabola"]
        out.append(f"{setting_label(setting)} {cls}: {'; '.join(words)}" + (f" ({reason})" if reason else "")
                   + (f" (grid argmin at {'; '.join(notes)})" if notes else ""))
    return out


def few_seeds(e: Estimate, seeds: int) -> str:
    """With fewer than 3 seeds an interval rests on a handful of distinct resamples (2 seeds: 3), which the bare
    "95% interval" hid; '' from 3 seeds on."""
    n = getattr(e, "resamples", 0)
    if seeds >= 3 or not has_interval(e) or not n:
        return ""
    return f"the interval rests on {n} distinct resamples of {seeds} seeds: a rough one"


def held(r: Row) -> bool | None:
    """Whether the setting's exponent interval holds 0, the tuned rate's optimum held (where the runs applied no rule: the
    exponent line's "none 0 (the rate held)"), for the verdict to say what that line says; None where there is no interval."""
    e = r.exponent
    if len(r.fitted) < 2 or not finite(e.value) or not has_interval(e):
        return None
    return e.lo - 0.005 <= 0.0 <= e.hi + 0.005


def protocol(rows: list[Row]) -> str:
    """A batch sweep's protocol against the rules': the sqrt and linear rules compare batches at fixed tokens (Malladi et
    al. 2022; Goyal et al. 2017: the same epochs), so a sweep that held the steps says it is not theirs."""
    if not rows or rows[0].axis != "batch_size" or not rules_for(rows[0].rate, "batch_size"):
        return ""
    tokens = [r.tokens for r in rows if r.tokens]
    if len(tokens) < 2 or len(tokens) < len(rows):
        return ""
    if max(tokens) <= min(tokens) * 1.01:
        return " (fixed tokens: the rules' protocol)"
    return (" (the tokens grew with the batch: a fixed-steps sweep is not the rules' protocol, which holds the tokens fixed: "
            "steps x batch constant)")


def exponent_lines(rows: list[Row]) -> list[str]:
    """One line per setting: the exponent of the optimum along the axis with its interval, beside each named rule's
    (less what the runs' own rule applied already), and which of them the interval holds."""
    out = []
    for setting in dict.fromkeys(r.setting for r in rows):
        r = next(q for q in rows if q.setting == setting)
        rate, axis, e = SHORT.get(r.rate, r.rate), r.axis, r.exponent
        head = f"{setting_label(setting)}, optimal {rate} against {word(axis)}"
        if len(r.fitted) < 2 or not finite(e.value):
            out.append(f"{head}: no exponent (fewer than two {PLURALS.get(axis, axis)} with an optimum inside the grid)")
            continue
        left = [size_text(q.size) for q in rows if q.setting == setting and q.size not in r.fitted]
        span = (f"{size_text(min(r.fitted))}-{size_text(max(r.fitted))}, {len(r.fitted)} values"
                + (f"; {', '.join(left)} left out: an optimum on the grid's edge or no positive value" if left else ""))
        known = has_interval(e)
        value = e.value if round(e.value, 2) else 0.0  # -0.004 reads +0.00, not -0.00
        text = f"{head}: exponent {value:+.2f} " + (f"{interval_text(e)} " if known else "(one seed: no interval) ") + f"({span})"
        if few := few_seeds(e, min(q.seeds for q in rows if q.setting == setting)):
            text += f"; {few}"
        rules = rules_for(r.rate, axis)
        if rules:
            less = f", less the {r.applied:+.2f} the runs' own rule applied" if r.applied else ""
            said = []
            for rule in rules:
                want = rule.exponent - r.applied
                # inside the interval as printed (two decimals): a reader checks the same numbers
                where = ("inside" if e.lo - 0.005 <= want <= e.hi + 0.005 else "outside") if known else f"{abs(e.value - want):.2f} away"
                said.append(f"{rule.name} {_g(want) if want else '0'} ({rule.source}): {where}")
            text += f"; rules{less}{protocol([q for q in rows if q.setting == setting])}: " + ", ".join(said)
        out.append(text)
    return out


def _shift_words(base: Row, r: Row) -> str:
    """``optimum rises 0.52 octaves from width 64 to 1024 (95% interval [+0.44, +0.58])``."""
    v = r.shift.value
    verb = "moves" if abs(v) < 0.005 else "falls" if v < 0 else "rises"
    at_least = "at least " if r.bound and r.bound == ("-" if v < 0 else "+") else "at most " if r.bound in ("+", "-") else ""
    if r.bound:
        why = f" (an optimum on the {SHORT.get(r.rate, 'lr')} grid's edge: no interval)"
    else:
        why = f" ({LEVEL:.0%} interval {interval_text(r.shift)})" if has_interval(r.shift) else ""
    return f"optimum {verb} {at_least}{abs(v):.2f} octaves from {value_text(r.axis, base.size)} to {size_text(r.size)}{why}"


def _penalty_words(r: Row | None, unit: str) -> str:
    if r is None:
        return "penalty —"
    v = r.penalty.value
    if math.isinf(v):
        return f"the base optimum diverges at {value_text(r.axis, r.size)}"
    if r.edge:
        return (f"penalty at least {_sig(v, math.floor)} {unit} at {value_text(r.axis, r.size)} "
                f"(its optimum on the {SHORT.get(r.rate, 'lr')} grid's edge)")
    why = f" ({LEVEL:.0%} interval {interval_text(r.penalty, 3, signed=False)})" if has_interval(r.penalty) else ""
    return f"penalty ≤ {_ceil(v)} {unit} at {value_text(r.axis, r.size)}{why}"


def _ceil(x: float) -> str:
    """A bound for a verdict: rounded up at two significant digits (0.0123 -> 0.013)."""
    return _sig(x, math.ceil)


def _sig(x: float, rounding) -> str:
    """``x`` rounded (``math.ceil`` up, ``math.floor`` down) at two significant digits."""
    if x <= 0:
        return "0"
    e = math.floor(math.log10(x)) - 1
    return f"{rounding(x / 10**e + (-1e-9 if rounding is math.ceil else 1e-9)) * 10**e:.{max(0, -e)}f}"


def row_cells(r: Row) -> list[str]:
    """The optimum, shift and penalty columns of one row, each with its interval: ``—`` where none
    can be drawn (one seed, the base size, an optimum on the grid's edge: the resamples all find
    the edge, a zero-width interval that measures nothing)."""
    none = "— (1 seed)" if not has_interval(r.optimum) else "— (grid edge)"
    opt = f"{'≤ ' if r.edge == 'lowest' else '≥ ' if r.edge == 'highest' else ''}{r.optimum.value:.2f}" if finite(r.optimum.value) else "—"
    opt_int = interval_text(r.optimum) if has_interval(r.optimum) and not r.edge else none
    if r.base:
        zero = f"0 ({base_word(r.setting)})"
        return [opt, opt_int, zero, "—", zero, "—"]
    mark = {"-": "≤ ", "+": "≥ ", "?": "? "}.get(r.bound, "")
    shift_int = interval_text(r.shift) if has_interval(r.shift) and not r.bound else none
    measured = has_interval(r.penalty) and not r.edge
    # as many decimals as its interval
    pen = ("≥ " if r.edge else "") + _num(r.penalty.value, _digits(r.penalty, 3, signed=False) if measured else 3)
    pen_int = interval_text(r.penalty, 3, signed=False) if measured else none
    return [opt, opt_int, mark + _g(r.shift.value), shift_int, pen, pen_int]


def render_markdown(rows: list[Row], metric: str = "final_loss") -> str:
    if not rows:
        return ""
    axis, rate = rows[0].axis, SHORT.get(rows[0].rate, rows[0].rate)
    base = next((r for r in rows if r.base), rows[0])
    unit = "nats" if "loss" in metric else metric
    pct = f"{LEVEL:.0%}"
    with_tokens = any(r.tokens for r in rows)
    head = ["setting", word(axis), *(["tokens"] if with_tokens else []), "seeds", f"optimal log2 {rate}", f"{pct} interval", "fit",
            f"best {metric}", f"shift from {value_text(axis, base.size)} (log2)", f"{pct} interval", f"penalty ({unit})", f"{pct} interval"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        fit = r.fit.method if r.fit.method == "parabola" else f"{r.fit.method}: {r.fit.note}"
        opt, opt_int, shift, shift_int, pen, pen_int = row_cells(r)
        cells = [setting_label(r.setting), size_text(r.size), *([f"{r.tokens:,.0f}" if r.tokens else "—"] if with_tokens else []),
                 str(r.seeds), opt, opt_int, fit, _num(r.fit.measured), shift, shift_int, pen, pen_int]
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    name = ref(axis, base.size)
    notes = (
        f"Optimal log2 {rate}: the vertex of a parabola through the seed-mean loss at the grid's best {rate} and its {HALF_WIDTH} "
        "neighbour(s) each side (the grid argmin where that is ill-posed, as the fit column says). Best: the lowest seed-mean measured "
        f"(not the vertex's loss). Intervals: {boot_words(rows, word(axis))}. Shift: the optimum minus the {name} optimum "
        "(negative: the optimum falls). Penalty: this "
        f"{word(axis)}'s fitted loss at the {name} optimal {rate} minus its best fitted loss. Verdict: the largest shift against "
        f"±{SHIFT_TOL:g} octave and the largest penalty against {PENALTY_TOL:g} {unit}: both within, transfers; both past, does not "
        f"transfer; one of each, borderline; undetermined where an optimum on the {rate} grid's edge leaves one open (≤/≥: a bound). "
        f"Exponent: the least-squares slope of the optimal log2 {rate} on log2 {word(axis)} over the values whose optimum lies inside "
        "the grid, its interval from the same resamples; a rule holds where its exponent lies inside that interval."
    )
    lines_out = verdicts(rows, unit) + exponent_lines(rows)
    return f"\n{heading(rows[0].rate)}\n\n" + "\n".join(f"- {v}" for v in lines_out) + "\n\n" + text + "\n\n" + notes + "\n"


def boot_words(rows: list[Row], axis: str) -> str:
    """What the intervals rest on: ``95% percentile bootstrap over seeds (every one of the 10 distinct resamples of 3
    seeds, weighted by its multiplicity; ...)``, or ``1000 random resamples of 7 seeds (RNG seed 0)``; one phrase per
    number of seeds the settings have."""
    found = {}
    for r in rows:
        if r.optimum.resamples:
            found[max(q.seeds for q in rows if q.setting == r.setting)] = (r.optimum.resamples, r.optimum.exact)
    if not found:
        return "none (one seed: nothing to resample)"
    words = [f"every one of the {k} distinct resamples of {n} seeds, weighted by its multiplicity" if exact
             else f"{N_BOOT} random resamples of {n} seeds (RNG seed {BOOT_SEED}; {k} distinct)" for n, (k, exact) in sorted(found.items())]
    return f"{LEVEL:.0%} percentile bootstrap over seeds ({'; '.join(words)}; the same seeds drawn for every {axis})"


def render_csv(rows: list[Row]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    setting_keys = list(dict.fromkeys(k for r in rows for k, _ in r.setting))
    w.writerow([csv_cell(k) for k in setting_keys] + [
        "axis", "size", "seeds", "log2_lr", "log2_lr_lo", "log2_lr_hi", "lr", "method", "note", "best_loss", "fitted_loss", "shift",
        "shift_lo", "shift_hi", "penalty", "penalty_lo", "penalty_hi", "resamples", "exact", "rate", "tokens", "exponent",
        "exponent_lo", "exponent_hi", "applied"])
    for r in rows:
        s = dict(r.setting)
        w.writerow([csv_cell(s.get(k, "")) for k in setting_keys] + [
            r.axis, r.size, r.seeds, r.optimum.value, r.optimum.lo, r.optimum.hi,
            2**r.optimum.value if finite(r.optimum.value) else math.nan,
            r.fit.method, r.fit.note, r.fit.measured, r.fit.loss, r.shift.value, r.shift.lo, r.shift.hi,
            r.penalty.value, r.penalty.lo, r.penalty.hi, r.optimum.resamples, r.optimum.exact, r.rate,
            "" if r.tokens is None else r.tokens, r.exponent.value, r.exponent.lo, r.exponent.hi, r.applied,
        ])
    return out.getvalue()


def render_two_axes(rows: list[Row], first: str) -> str:
    """A sweep over two axes at once (width x batch, width x horizon): per setting, a table of the optimum at each
    (``first`` value, axis value) with its interval, and the exponent along the axis at each ``first`` value.
    ``rows``: the report over the second axis, with ``first`` in its settings."""
    if not rows:
        return ""
    axis, rate = rows[0].axis, SHORT.get(rows[0].rate, rows[0].rate)
    values = sorted({r.size for r in rows})
    groups: dict[tuple, dict[str, list[Row]]] = {}
    for r in rows:
        rest = tuple((k, v) for k, v in r.setting if k != first)
        groups.setdefault(rest, {}).setdefault(dict(r.setting).get(first, ""), []).append(r)
    out = [f"\n## The optimum over two axes: {word(first)} x {word(axis)}\n"]
    for rest, by_first in groups.items():
        head = [word(first), *(value_text(axis, v) for v in values), f"exponent along {word(axis)}", f"{LEVEL:.0%} interval"]
        lines = ([f"{setting_label(rest)}: optimal log2 {rate} ({LEVEL:.0%} interval)", ""] if rest else []) + [
            "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for key in sorted(by_first, key=lambda k: float(k) if k.replace(".", "", 1).isdigit() else k):
            rs = {r.size: r for r in by_first[key]}
            cells = [_opt_cell(rs[v]) if v in rs else "—" for v in values]
            e = by_first[key][0].exponent
            lines.append("| " + " | ".join([key, *cells, _g(e.value), interval_text(e) if has_interval(e) else "—"]) + " |")
        out.append("\n".join(lines) + "\n")
    return "\n".join(out)


def _opt_cell(r: Row) -> str:
    """``-7.21 [-7.40, -7.05]``, ``≤ -9.00`` on the grid's edge, ``—`` where nothing was finite."""
    if not finite(r.optimum.value):
        return "—"
    if r.edge:
        return f"{'≤' if r.edge == 'lowest' else '≥'} {r.optimum.value:.2f}"
    return f"{r.optimum.value:.2f}" + (f" {interval_text(r.optimum)}" if has_interval(r.optimum) else "")
