"""Sweep plots by name: each is a pure function of a sweep's job records (their metrics.json).

A preset names its plots in ``summary.plots`` (``[lr_transfer]``); every job copies the list
into its metrics.json and ``initnorm.summary.summarize`` calls each plot with all the records, writes the
files it returns into the sweep folder and appends its markdown to summary.md. So
``python -m initnorm.summarize PATH`` redraws them from the folder alone. Figures are drawn with
matplotlib's object API on the Agg canvas: no pyplot, no global backend state.
"""

from __future__ import annotations

import io
import math
import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from initnorm import results, transfer
from initnorm.nn.param import PARAMS
from initnorm.registry import GROUPS, Registry, is_dotted
from initnorm.results import LABELS, best_lr, fmt_mean_sd, mean_sd, recorded, settings

Record = dict[str, Any]


@dataclass
class Plot:
    """What a plot gives the summary: PNG files by name and markdown for summary.md."""

    files: dict[str, bytes] = field(default_factory=dict)
    markdown: str = ""


PlotFn = Callable[[list[Record]], Plot]
PLOTS: Registry[PlotFn] = Registry("sweep plot", "summary.plots")
PALETTE = ["#2563eb", "#ea580c", "#16a34a", "#9333ea", "#dc2626", "#0891b2", "#ca8a04", "#4b5563"]
MUP_WIDTH_COLOURS = ["#9ca3af", "#ea580c", "#9a3412", "#431407"]  # light to dark as width grows (the chapter's)


# One style for every figure of the project (sweep plots, probes, coordinate check), applied while
# a figure is built so that nothing touches matplotlib's global state.
STYLE = {
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.25,
    "font.size": 9,
    "axes.titlesize": 10,
    "legend.frameon": False,
    "legend.fontsize": 8,
}
DPI = 120


def grid(width: float, height: float, nrows: int = 1, ncols: int = 1, sharey: bool | str = False):
    """A figure on the Agg canvas (no pyplot) with an ``nrows`` x ``ncols`` array of axes in the house style, laid out
    by matplotlib's constrained layout: titles, axis labels, a suptitle and legends outside the axes clear of each other
    (by hand, a row's x-labels printed over the titles of the row below: tests/test_figure_text.py)."""
    import matplotlib
    from cycler import cycler
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with matplotlib.rc_context({**STYLE, "axes.prop_cycle": cycler(color=PALETTE)}):
        fig = Figure(figsize=(width, height), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(nrows, ncols, sharey=sharey, squeeze=False)
    return fig, axes


def figure(width: float, height: float, ncols: int = 1, sharey: bool = False):
    """One row of axes (see ``_grid``)."""
    fig, axes = grid(width, height, 1, ncols, sharey)
    return fig, list(axes[0])


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return buf.getvalue()


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


# Plain-language names for swept values in legends (``norm=post`` -> ``post-LN``) that no registry
# describes; a family, parameterisation, init scheme or norm prints its own display name (``About``).
VALUE_NAMES = {
    ("norm", "pre"): "pre-LN", ("norm", "post"): "post-LN",
    ("init", "unit_normal"): "N(0, 1)",  # an option of conf/init/ (init.name=normal, std 1), not a registry name
    ("model.activation", "tanh"): "tanh", ("model.activation", "relu"): "ReLU", ("model.activation", "gelu"): "GELU",
    ("regularizer", "none"): "no regularisation", ("regularizer", "dropout_0.2"): "dropout 0.2",
    ("regularizer", "dropout_0.5"): "dropout 0.5",
    ("regularizer", "weight_decay_1.0"): "weight decay 1.0",
}
CORPUS_NAMES = {"alice": "Alice", "shakespeare": "tiny Shakespeare"}


def display(group: str, value: str) -> str | None:
    """The display name of the entry ``value`` of a registry's config group (``param``, ``init.name``,
    ``model.family`` ...), or None when the group has no registry or the registry no such entry."""
    head, _, rest = group.partition(".")
    if head not in GROUPS or rest not in ("", GROUPS[head][0]):
        return None
    registry = GROUPS[head][1].registry()
    return registry.display(value) if value in registry.names() or is_dotted(value) else None


def plain(setting: str) -> str:
    """``norm=post`` -> ``post-LN``; ``warmup=0`` -> ``no warmup``; ``width=64`` -> ``width 64``."""
    key, _, value = setting.partition("=")
    if (key, value) in VALUE_NAMES:
        return VALUE_NAMES[(key, value)]
    shown = display(key, value)
    if shown is not None:
        return shown
    if key == "warmup":
        return "no warmup" if value in ("0", "0.0") else f"warmup {value} steps"
    return f"{key.rsplit('.', 1)[-1].replace('_', ' ')} {value}"


def labels(keys: list[tuple[str, ...]]) -> dict[tuple[str, ...], str]:
    """Each setting's legend entry in plain words, a search's 18-digit rates to the digits that tell them apart
    (``lr 0.00443``)."""
    columns = [results.short_values(v.partition("=")[2] for v in col) for col in zip(*keys)]
    return {key: ", ".join(plain(f"{v.partition('=')[0]}={columns[i][v.partition('=')[2]]}") for i, v in enumerate(key)) or "run"
            for key in keys}


def setup_title(records: list[Record], leave_out: tuple[str, ...] = ()) -> str:
    """What the runs share, in words (``Decoder, width 16, 6 blocks, Alice, 1,500 steps, batch 32, AdamW peak lr
    0.01, 3 seeds``); swept keys and ``leave_out`` are left out (they are in the legend or on an axis)."""
    if not records:
        return ""
    c = records[0].get("config") or {}
    given = set(records[0].get("swept") or records[0].get("overrides", {}))
    # a key that differs between the runs is theirs, not shared, though no one command swept it (a sweep run in parts,
    # separate runs summarised together: their table's keys)
    differ = {k for k in ("width", "depth", "steps", "batch_size") if len({(r.get("config") or {}).get(k) for r in records}) > 1}
    swept = given | differ | set(leave_out) | set(results.setting_keys(records))
    data, optim = (c.get(g) or {} if g not in swept else {} for g in ("data", "optim"))
    family = (c.get("model") or {}).get("family", "")
    parts = [display("model", family) or family.replace("_", " ")] if family and "model" not in swept else []
    if "width" not in swept and c.get("width") is not None:
        parts.append(f"width {c['width']}")
    if "depth" not in swept and c.get("depth") is not None:
        parts.append(f"{c['depth']} {'blocks' if family == 'decoder' else 'layers'}")
    if data.get("name"):
        parts.append(CORPUS_NAMES.get(data["name"], data["name"]))
    elif data.get("kind") == "clusters":
        parts.append("Gaussian clusters")
    if "steps" not in swept and c.get("steps"):
        parts.append(f"{c['steps']:,} steps")
    elif "steps" not in given and "batch_size" in swept:  # set per batch by separate commands: a fixed-token sweep
        held = {(r.get("config") or {}).get("steps", 0) * (r.get("config") or {}).get("batch_size", 0) for r in records}
        parts.append(f"steps x batch {held.pop():,}" if len(held) == 1 else "")
    if "batch_size" not in swept and c.get("batch_size"):  # the optimum moves with it: a figure alone must say it
        parts.append(f"batch {c['batch_size']}")
    rate = "" if "lr" in swept or c.get("lr") is None else f"{'lr' if c.get('schedule') == 'constant' else 'peak lr'} {c['lr']:g}"
    name = (display("optim", optim["name"]) or optim["name"]) if optim.get("name") else ""
    parts.append(" ".join(p for p in (name, rate) if p))  # the rate alone where the runs' optimisers differ
    seeds = {r.get("seed") for r in records if r.get("status") == "finished"}
    parts.append(f"{len(seeds)} seed{'s' * (len(seeds) != 1)}")
    return ", ".join(p for p in parts if p)


def _png_svg(fig, stem: str) -> dict[str, bytes]:
    """The figure as PNG (pages, summary.md) and SVG (print, papers)."""
    svg = io.BytesIO()
    fig.savefig(svg, format="svg", bbox_inches="tight")
    return {f"{stem}.png": png(fig), f"{stem}.svg": svg.getvalue()}


def draw_ahead() -> threading.Thread:
    """Draw a small figure, then drop it, in a thread of its own: matplotlib's import, its Agg and SVG canvases and the
    fonts' first use (0.3-0.4 s of CPU), which the summary's first figure pays otherwise, after the last job. A sweep's own
    process calls it once its jobs are with its workers, while it only waits for them. A daemon thread: a sweep that ends
    first does not wait for it. Matplotlib's global state is left alone (no ``rc_context``, unlike ``grid``): the summary
    may draw while it still runs."""

    def draw() -> None:
        try:
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure

            fig = Figure(figsize=(2.0, 1.5), layout="constrained")
            FigureCanvasAgg(fig)
            ax = fig.subplots()
            ax.plot([0, 1], [1, 0], label="ahead")
            ax.set_title("ahead")
            ax.legend()
            _png_svg(fig, "ahead")
        except Exception:  # nothing is written: the summary draws its own figures, and says what fails
            return

    thread = threading.Thread(target=draw, name="initnorm-draw-ahead", daemon=True)
    thread.start()
    return thread


TAIL = 0.3  # val_curves' second panel: the last 30% of training, where settings 0.05 nats apart separate


@PLOTS.register("val_curves")
def val_curves(records: list[Record]) -> Plot:
    """Validation loss against step, one line per setting (the mean over seeds) and a band from the
    lowest to the highest seed: the canonical sweep and deck §7b (pre/post-LN x warmup). A second
    panel shows the last ``TAIL`` of training on its own scale, with each setting's final loss as
    mean ± sd over seeds (the legend) and its seeds' spread as an error bar at the last step."""
    fig, (ax, tail) = figure(11.0, 4.4, ncols=2)
    curves = []
    found = settings(records)
    names = labels(list(found))
    for i, (key, runs) in enumerate(found.items()):
        by_step: dict[int, list[float]] = {}
        for r in runs:
            for step, loss, *_ in r.get("val_history", []):
                if _finite(loss):
                    by_step.setdefault(int(step), []).append(loss)
        if by_step:
            curves.append((i, names[key], runs, by_step))
    last = max((max(b) for *_, b in curves), default=0)
    lows: list[float] = []
    highs: list[float] = []
    colours = setting_colours(len(found))
    for j, (i, label, runs, by_step) in enumerate(curves):
        steps = sorted(by_step)
        colour, ls = colours[i], "-"
        mean, lo, hi = ([f(by_step[s]) for s in steps] for f in (statistics.fmean, min, max))
        finals = [r["final_val_loss"] for r in runs if _finite(r.get("final_val_loss")) and not r.get("diverged")]
        for a in (ax, tail):
            a.plot(steps, mean, color=colour, lw=1.6, ls=ls, label=f"{label}: {fmt_mean_sd(*mean_sd(finals))}" if finals else label)
            if len(runs) > 1:
                a.fill_between(steps, lo, hi, color=colour, alpha=0.15, lw=0)
        shown = [k for k, s in enumerate(steps) if s >= (1 - TAIL) * last]
        lows += [lo[k] for k in shown]
        highs += [hi[k] for k in shown]
        if finals:  # a shorter run (a horizon sweep's) ends before the zoomed window: its end marker still in the panel
            lows.append(min(finals))
            highs.append(max(finals))
        if len(finals) > 1:
            m = statistics.fmean(finals)
            x = last * (1 + 0.012 * (j + 1))  # side by side past the last step, not on top of each other
            tail.errorbar([x], [m], yerr=[[m - min(finals)], [max(finals) - m]], color=colour, capsize=3, marker="o", ms=4)
    ax.set(xlabel="training step", ylabel="validation loss (nats per character)", title="the whole run")
    fig.suptitle(f"Validation loss: mean over seeds, band from the lowest to the highest seed\n{setup_title(records)}", fontsize=10)
    if curves:
        pad = 0.08 * max(1e-3, max(highs) - min(lows))
        tail.set(xlim=((1 - TAIL) * last, last * (1 + 0.012 * (len(curves) + 1))),
                 ylim=(min(lows) - pad, max(highs) + pad), xlabel="training step")
        tail.set_title(f"the last {TAIL:.0%}, bars: lowest to highest seed")
        # one legend, beside the panels: over the curves it hid them (a search's 24 rates)
        tail.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7, title="final loss, mean ± sd", title_fontsize=7,
                    ncol=2 if len(curves) > 16 else 1)
    return Plot(_png_svg(fig, "val_curves"), "![validation loss per setting, mean over seeds, band over seeds](val_curves.png)\n")


def _mean_curve(runs: list[Record], name: str) -> tuple[list[int], list[float]]:
    """Mean over seeds of one evaluation set's loss at each evaluated step."""
    by_step: dict[int, list[float]] = {}
    for r in runs:
        for step, loss, *_ in r.get("eval_history", {}).get(name, []):
            if _finite(loss):
                by_step.setdefault(step, []).append(loss)
    steps = sorted(by_step)
    return steps, [statistics.fmean(by_step[s]) for s in steps]


@PLOTS.register("train_val_curves")
def train_val_curves(records: list[Record]) -> Plot:
    """Chapter 003, step 3: training loss (dashed, the fixed training sample) and validation
    loss (solid) against step, one colour per setting, mean over seeds."""
    fig, (ax,) = figure(7.5, 4.2)
    found = settings(records)
    names = labels(list(found))
    for colour, (key, runs) in zip(PALETTE * 4, found.items()):
        label = names[key]
        ax.plot(*_mean_curve(runs, "val"), color=colour, label=f"{label}: validation")
        ax.plot(*_mean_curve(runs, "train"), color=colour, ls="--", lw=1, label=f"{label}: training")
    ax.set(xlabel="training step", ylabel="loss (nats per character)", ylim=(0, 4.5))
    fig.suptitle(f"Training (dashed) and validation (solid) loss, mean over seeds\n{setup_title(records)}", fontsize=10)
    ax.legend(frameon=False, fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.15))
    return Plot(_png_svg(fig, "train_val_curves"), "![training (dashed) and validation (solid) loss](train_val_curves.png)\n")


@PLOTS.register("train_curves")
def train_curves(records: list[Record]) -> Plot:
    """Chapter 003, step 2: training loss against step (clipped at 3), one panel per value of the
    first swept key (the activation), one line per setting of the others, mean over seeds."""
    panels: dict[str, dict[str, list[Record]]] = {}
    for key, runs in settings(records).items():
        panels.setdefault(plain(key[0]) if key else "", {})[", ".join(map(plain, key[1:])) or "run"] = runs
    fig, axes = figure(5 * max(1, len(panels)), 3.6, ncols=max(1, len(panels)), sharey=True)
    for ax, (panel, lines) in zip(axes, panels.items()):
        for colour, (label, runs) in zip(PALETTE * 4, lines.items()):
            curves = [r.get("train_losses", []) for r in runs]
            n = min(map(len, curves))  # a diverged run stops early: its line ends there
            mean = [statistics.fmean(min(3.0, c[i]) if _finite(c[i]) else 3.0 for c in curves) for i in range(n)]
            acc = [r["val_acc"] for r in runs if _finite(r.get("val_acc"))]
            ax.plot(mean, color=colour, lw=1.2, label=f"{label} (val acc {statistics.fmean(acc):.0%})" if acc else f"{label} (diverged)")
        ax.set(title=panel, xlabel="training step", ylim=(0, 3))
        ax.legend(frameon=False, fontsize=8)
    axes[0].set_ylabel("training loss, mean over seeds (clipped at 3)")
    fig.suptitle(f"Training loss per initialisation\n{setup_title(records)}", fontsize=10)
    return Plot(_png_svg(fig, "train_curves"), "![training loss per setting](train_curves.png)\n")


@PLOTS.register("lr_transfer")
def lr_transfer(records: list[Record]) -> Plot:
    """Chapter 003, step 4 (and any sweep of a rate x an axis): loss against learning rate per width (or
    the axis the sweep varies: batch size, steps, ...), one panel per setting: the seed means (points),
    the fitted parabola around each optimum (``initnorm.transfer``), each optimum starred with its
    bootstrap interval, and the base value's optimum as a vertical line. The table gives the best grid
    rate per (setting, value) from the mean over seeds, and each seed's own best (log2) as the chapter's
    three-seed table does; ``summary.summarize`` adds the transfer table below it."""
    return _lr_transfer(records, transfer.sweep_axis(records) or "width")


@PLOTS.register("lr_transfer_depth")
def lr_transfer_depth(records: list[Record]) -> Plot:
    """The same across depth (``experiment=depth_transfer``): one panel per parameterisation."""
    return _lr_transfer(records, "depth")


# A panel's title: the parameterisation's display name and what its declared kind scales on the axis.
PANEL_TITLES = {
    "width": {"neither": "lr not scaled with width", "width": "lr scaled with width", "width+depth": "lr scaled with width"},
    "depth": {"neither": "branches not scaled with depth", "width": "branches not scaled with depth",
              "width+depth": "branches scaled with depth"},
}


def panel_title(param: str, axis: str) -> str:
    about = PARAMS.about(param, strict=False)
    what = PANEL_TITLES.get(axis, {}).get(about.kind)
    return f"{PARAMS.display(param)}: {what}" if what else plain(f"param={param}")


def lr_axis_label(param: str, axis: str, smallest: int, rate: str = "lr") -> str:
    """A panel's lr axis, by the parameterisation's declared kind: a baseline's rate is just the rate
    (SP), a table relative to a base size is read at that base (µP: the base width), and a table
    with no base size (``About.absolute``: u-µP's fan-in rules) is compared from the sweep's smallest size.
    Along an axis no table scales (batch size, steps) the rate is the one the runs were given."""
    about = PARAMS.about(param, strict=False)
    if rate != "lr":
        return f"{transfer.word(rate)} (the value the runs were given)"
    if about.kind == "neither" or axis not in ("width", "depth"):
        return "peak learning rate"
    if about.absolute:
        return f"peak learning rate (no base {axis}; reference: {axis} {smallest}, the smallest)"
    return f"peak learning rate (at the base {axis})"


def size_colours(n: int) -> list:
    """Light to dark as the axis grows: the chapter's four for up to four values; beyond, a ramp of distinct hues in
    order (a ramp of oranges made 15 batch sizes or horizons one colour)."""
    if n <= len(MUP_WIDTH_COLOURS):
        return MUP_WIDTH_COLOURS[:n] if n > 1 else MUP_WIDTH_COLOURS[1:2]
    return ramp(n)


def ramp(n: int) -> list:
    """``n`` colours, each one's hue apart from its neighbours' and in order (matplotlib's turbo, its paler ends left out)."""
    from matplotlib import colormaps

    turbo = colormaps["turbo"]
    return [turbo(0.08 + 0.84 * i / max(1, n - 1)) for i in range(n)]


def setting_colours(n: int) -> list:
    """The palette for up to its length of settings; a ramp for more (it gave 15 settings 8 colours, repeated dashed)."""
    return PALETTE[:n] if n <= len(PALETTE) else ramp(n)


def _lr_transfer(records: list[Record], axis: str) -> Plot:
    metric, rate = transfer.metric_of(records), transfer.tuned_rate(records) or "lr"
    found, cells = transfer.cells_from_records(records, axis=axis, metric=metric, rate=rate)
    if found is None or not cells:  # one size (or none swept): every setting's curve at that size
        cells = {}
        for r in records:
            ov = r.get("overrides", {})
            x = transfer.number(ov[rate] if rate in ov else recorded(r, rate))  # the rate the sweep gave, as a number ("1e-2" is 0.01)
            if r.get("status") == "finished" and rate in (r.get("swept") or ov) and x and x > 0:  # a rate sweep's job
                loss = math.nan if r.get("diverged") else r.get(metric, math.nan)
                setting = (("param", transfer.swept_value(r, "param")),)
                size = transfer.axis_value(r, axis) or r.get(axis, 0) or 0  # the value the job ran with: its config's where not swept
                curve = cells.setdefault(setting, {}).setdefault(size, {}).setdefault(r.get("seed"), {})
                curve[math.log2(x)] = loss if _finite(loss) else math.nan
    rows = {(r.setting, r.size): r for r in transfer.transfer_rows(cells, axis, rate=rate, base=transfer.base_values(records, axis, rate))}
    sizes = sorted({n for by in cells.values() for n in by})
    grid = sorted({x for by in cells.values() for s in by.values() for c in s.values() for x in c})
    powers = all(abs(x - round(x)) < 1e-9 for x in grid)  # a grid of powers of two is labelled 2^k, any other as written
    short, axis_word = transfer.SHORT.get(rate, rate), transfer.word(axis)
    fig, axes = figure(5 * max(1, len(cells)), 3.8, ncols=max(1, len(cells)), sharey=True)
    lines = [(f"| param | {axis_word} | best {short} | log2 | loss at best {short} (mean ± sd) | best log2 {short} per seed | "
              f"best loss per seed | loss at each {short}, {_rate(grid[0], powers) if grid else ''} ... "
              f"{_rate(grid[-1], powers) if grid else ''} (mean over seeds) |"),
             "|---|---|---|---|---|---|---|---|"]
    for ax, (setting, by_size) in zip(axes, cells.items()):
        name = ", ".join(v for _, v in setting) or "the sweep"
        swept_param = dict(setting).get("param")
        param = swept_param or next((p for r in records if isinstance(p := recorded(r, "param.name"), str)), name)
        for colour, size in zip(size_colours(len(sizes)), sizes):
            seeds = by_size.get(size)
            if not seeds:
                continue
            row = rows[(setting, size)]
            xs, means = transfer.seed_mean(seeds)
            ax.plot([2**x for x in xs], means, marker="o", ms=3, lw=0.6, alpha=0.6, color=colour)
            spread = [[c[x] for c in seeds.values() if _finite(c.get(x))] for x in xs]
            if any(len(v) > 1 for v in spread):  # the seed spread: lowest to highest seed at each rate
                ax.fill_between([2**x for x in xs], [min(v) if v else math.nan for v in spread],
                                [max(v) if v else math.nan for v in spread], color=colour, alpha=0.15, lw=0)
            if row.fit.coef is not None:
                lo, hi = row.fit.window
                dense = [lo + (hi - lo) * i / 40 for i in range(41)]
                ax.plot([2**x for x in dense], [row.fit.at(x) for x in dense], lw=2, color=colour)
            if _finite(row.optimum.value):
                x0, lo, hi = row.optimum.value, row.optimum.lo, row.optimum.hi
                xerr = [[2**x0 - 2**lo], [2**hi - 2**x0]] if _finite(lo) and _finite(hi) else None  # one seed: no interval to draw
                ax.errorbar([2**x0], [row.fit.loss], xerr=xerr, marker="*", ms=11, capsize=3, color=colour,
                            label=f"{transfer.value_text(axis, size)}: 2^{x0:.2f}" + ("" if row.fit.method == "parabola" else " (grid)"))
            lines.append(_best_row(name, size, seeds, xs, means, grid))
        base = next((r for (st, _), r in rows.items() if st == setting and r.base), None)
        if base is not None and _finite(base.optimum.value):
            ax.axvline(2**base.optimum.value, color="#6b7280", ls="--", lw=1, label=f"{transfer.value_text(axis, base.size)} optimum")
        others = [plain(f"{k}={v}") for k, v in setting if k != "param"]
        title = panel_title(param, axis) + "".join(f", {o}" for o in others) if swept_param else ", ".join(others) or name
        ax.set(xscale="log", xlabel=lr_axis_label(param, axis, min(by_size), rate), title=title)
        shown = grid[::2] if len(grid) > 5 else grid
        ax.set_xticks([2**x for x in shown], [f"$2^{{{_log2(x)}}}$" if powers else _rate(x, powers) for x in shown])
        ax.minorticks_off()
        ax.legend(frameon=False, fontsize=8)
    axes[0].set_ylabel(f"{LABELS.get(metric, metric).lower()} (mean over seeds)")
    what = "learning rate" if rate == "lr" else transfer.word(rate)
    fig.suptitle(f"Loss against {what} per {axis_word}: fitted optimum with its bootstrap interval, "
                 "band from the lowest to the highest seed\n"
                 f"{setup_title(records, (rate, axis, 'param'))}", fontsize=10)
    stem = "lr_transfer" if axis == "width" else f"lr_transfer_{axis.rsplit('.', 1)[-1]}"
    text = f"\n## Best {what} per {axis_word}\n\n" + "\n".join(lines) + f"\n\n![loss against {what}]({stem}.png)\n"
    return Plot(_png_svg(fig, stem), text)


@PLOTS.register("lr_optimum")
def lr_optimum(records: list[Record]) -> Plot:
    """The optimum against the axis (both on log2 scales): per setting its fitted optimum with the bootstrap interval
    at each value, the fitted exponent's line, and each rule's line through the base value's optimum (their
    exponents less what the runs' own rule applied). A sweep over two axes draws one line per value of the first
    along the second, so width x batch reads as the batch rule at every width. ``summary.summarize`` draws it for every
    axis but width and depth (whose reports have their own figure) and for any sweep over two axes."""
    axes_found = transfer.sweep_axes(records)
    two = len(axes_found) > 1
    axis = axes_found[1] if two else (axes_found[0] if axes_found else None)
    rows = transfer.transfer_table(records, axis=axis) if axis else []
    if not rows:
        return Plot()
    rate = transfer.SHORT.get(rows[0].rate, rows[0].rate)
    first = axes_found[0] if two else None
    panels: dict[tuple, dict[str, list]] = {}
    for r in rows:
        rest = tuple((k, v) for k, v in r.setting if k != first)
        panels.setdefault(rest, {}).setdefault(dict(r.setting).get(first, "") if first else "", []).append(r)
    fig, axs = figure(5 * len(panels), 3.8, ncols=len(panels), sharey=True)
    for ax, (rest, lines) in zip(axs, panels.items()):
        for colour, (key, rs) in zip(size_colours(len(lines)) if two else PALETTE, lines.items()):
            inside = [r for r in rs if _finite(r.optimum.value) and r.size > 0]
            xs = [r.size for r in inside]
            ys = [r.optimum.value for r in inside]
            err = [[y - r.optimum.lo if _finite(r.optimum.lo) else 0 for y, r in zip(ys, inside)],
                   [r.optimum.hi - y if _finite(r.optimum.hi) else 0 for y, r in zip(ys, inside)]]
            e = rs[0].exponent
            label = (f"{transfer.value_text(first, float(key)) if first else 'optimum'}: exponent {e.value:+.2f}"
                     + (f" {transfer.interval_text(e)}" if _finite(e.lo) else ""))
            ax.errorbar(xs, ys, yerr=err, marker="o", ms=4, capsize=3, color=colour, lw=0, elinewidth=1, label=label)
            edge = [r for r in inside if r.edge]
            ax.plot([r.size for r in edge], [r.optimum.value for r in edge], ls="", marker="v", ms=7, mfc="none", color=colour)
            fitted = [r for r in inside if r.size in rs[0].fitted]
            if len(fitted) > 1 and _finite(e.value):
                mx = statistics.fmean(math.log2(r.size) for r in fitted)
                my = statistics.fmean(r.optimum.value for r in fitted)
                ends = [min(r.size for r in fitted), max(r.size for r in fitted)]
                ax.plot(ends, [my + e.value * (math.log2(x) - mx) for x in ends], color=colour, lw=1.5)
        base = next((r for rs in lines.values() for r in rs if r.base and _finite(r.optimum.value)), None)
        if base is not None and not two:
            sizes = sorted(r.size for rs in lines.values() for r in rs if r.size > 0)
            for style, rule in zip(("--", ":", "-."), transfer.rules_for(base.rate, base.axis)):
                slope = rule.exponent - base.applied
                ax.plot([sizes[0], sizes[-1]], [base.optimum.value + slope * math.log2(x / base.size) for x in (sizes[0], sizes[-1])],
                        ls=style, color="#6b7280", lw=1, label=f"{rule.name} ({slope:+.2f}; {rule.source})")
        ax.set_xscale("log", base=2)
        ax.set(xlabel=transfer.word(axis), title=transfer.setting_label(rest) if rest else "the sweep")
        ax.legend(frameon=False, fontsize=7)
    axs[0].set_ylabel(f"optimal log2 {rate} ({transfer.LEVEL:.0%} interval; ▽ on the grid's edge)")
    along = f"{transfer.word(first)} x {transfer.word(axis)}" if two else transfer.word(axis)
    fig.suptitle(f"The optimal {rate} against {along}: fitted exponent (slope of log2 {rate}* on log2 {transfer.word(axis)})"
                 + ("" if two else " beside each rule's") + f"\n{setup_title(records, (rows[0].rate, axis, 'param', first or axis))}",
                 fontsize=10, y=1.1)
    return Plot(_png_svg(fig, "lr_optimum"), f"\n![the optimal {rate} against {along}](lr_optimum.png)\n")


def _log2(x: float) -> str:
    """A log2 learning rate for a table: -7, or -6.64 off the powers of two."""
    return str(round(x)) if abs(x - round(x)) < 1e-9 else f"{x:.3g}"


def _rate(x: float, powers: bool) -> str:
    """A rate as the grid was written: ``2^-7`` on a grid of powers of two, else ``0.03``."""
    return f"2^{_log2(x)}" if powers else f"{2**x:.3g}"


def _mean_at(means: dict[float, float], x: float) -> str:
    m = means.get(x)
    return "—" if m is None else "nan" if math.isnan(m) else f"{m:.2f}"


def _best_row(name: str, size: int, seeds: dict, xs: tuple[float, ...], means: tuple[float, ...], grid: list[float]) -> str:
    """The best grid rate of the seed mean, the loss there, and each seed's own best; the means at every rate of the
    table's ``grid`` (the union over its rows), ``—`` where this row did not run it, so each column is one rate."""
    by_rate = dict(zip(xs, means))
    best = best_lr(by_rate)
    if best is None:
        return f"| {name} | {size} | none finite | | | | | |"
    per_seed = [(x, seeds[s][x]) for s in sorted(seeds, key=str) if (x := best_lr({x: seeds[s].get(x, math.nan) for x in xs})) is not None]
    at_best = [c[best] for c in seeds.values() if _finite(c.get(best))]
    return (
        f"| {name} | {size} | {2**best:.6g} | {_log2(best)} | {fmt_mean_sd(*mean_sd(at_best))} "
        f"| {' / '.join(_log2(x) for x, _ in per_seed)} | {' / '.join(f'{v:.3f}' for _, v in per_seed)} "
        f"| {' '.join(_mean_at(by_rate, x) for x in grid)} |"
    )
