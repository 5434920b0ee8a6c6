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
from dataclasses import dataclass, field
from typing import Any, Callable

from initnorm.registry import Registry
from initnorm.results import best_lr, settings

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


def _grid(width: float, height: float, nrows: int = 1, ncols: int = 1, sharey: bool | str = False):
    """A figure on the Agg canvas (no pyplot) with an ``nrows`` x ``ncols`` array of axes in the house style."""
    import matplotlib
    from cycler import cycler
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with matplotlib.rc_context({**STYLE, "axes.prop_cycle": cycler(color=PALETTE)}):
        fig = Figure(figsize=(width, height))
        FigureCanvasAgg(fig)
        axes = fig.subplots(nrows, ncols, sharey=sharey, squeeze=False)
    return fig, axes


def _figure(width: float, height: float, ncols: int = 1, sharey: bool = False):
    """One row of axes (see ``_grid``)."""
    fig, axes = _grid(width, height, 1, ncols, sharey)
    return fig, list(axes[0])


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return buf.getvalue()


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


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
    fig, (ax,) = _figure(7.5, 4.2)
    for colour, (key, runs) in zip(PALETTE * 4, settings(records).items()):
        label = ", ".join(key) or "run"
        ax.plot(*_mean_curve(runs, "val"), color=colour, label=f"{label}: validation")
        ax.plot(*_mean_curve(runs, "train"), color=colour, ls="--", lw=1, label=f"{label}: training")
    ax.set(xlabel="training step", ylabel="loss (nats per character)", ylim=(0, 4.5), title="Training (dashed) and validation (solid) loss")
    ax.legend(frameon=False, fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.15))
    return Plot({"train_val_curves.png": _png(fig)}, "![training (dashed) and validation (solid) loss](train_val_curves.png)\n")


@PLOTS.register("train_curves")
def train_curves(records: list[Record]) -> Plot:
    """Chapter 003, step 2: training loss against step (clipped at 3), one panel per value of the
    first swept key (the activation), one line per setting of the others, mean over seeds."""
    panels: dict[str, dict[str, list[Record]]] = {}
    for key, runs in settings(records).items():
        panels.setdefault(key[0] if key else "", {})[", ".join(key[1:]) or "run"] = runs
    fig, axes = _figure(5 * max(1, len(panels)), 3.6, ncols=max(1, len(panels)), sharey=True)
    for ax, (panel, lines) in zip(axes, panels.items()):
        for colour, (label, runs) in zip(PALETTE * 4, lines.items()):
            curves = [r.get("train_losses", []) for r in runs]
            n = min(map(len, curves))  # a diverged run stops early: its line ends there
            mean = [statistics.fmean(min(3.0, c[i]) if _finite(c[i]) else 3.0 for c in curves) for i in range(n)]
            acc = [r["val_acc"] for r in runs if _finite(r.get("val_acc"))]
            ax.plot(mean, color=colour, lw=1.2, label=f"{label} (val acc {statistics.fmean(acc):.0%})" if acc else f"{label} (diverged)")
        ax.set(title=panel, xlabel="training step", ylim=(0, 3))
        ax.legend(frameon=False, fontsize=8)
    axes[0].set_ylabel("training loss (clipped at 3)")
    return Plot({"train_curves.png": _png(fig)}, "![training loss per setting](train_curves.png)\n")


def _sd(xs: list[float]) -> str:
    return f"{statistics.stdev(xs):.3g}" if len(xs) > 1 else "0"


@PLOTS.register("lr_transfer")
def lr_transfer(records: list[Record]) -> Plot:
    """Chapter 003, step 4: loss against learning rate per width, one panel per parameterisation,
    each width's optimum starred; the table gives the best rate per (param, width), from the
    mean over seeds, and each seed's own best (log2) as the chapter's three-seed table does."""
    return _lr_transfer(records, "width")


@PLOTS.register("lr_transfer_depth")
def lr_transfer_depth(records: list[Record]) -> Plot:
    """The same across depth (``experiment=depth_transfer``): loss against learning rate per depth,
    one panel per parameterisation (µP, depth-µP, CompleteP), each depth's optimum starred."""
    return _lr_transfer(records, "depth")


PANEL_TITLES = {
    "width": {"mup": "µP: lr scaled with width", "sp": "standard parameterisation"},
    "depth": {"mup": "µP: branches not scaled with depth", "depth_mup": "depth-µP: branches x (L/L0)^-1/2", "completep": "CompleteP: branches x (L/L0)^-1"},
}


def _lr_transfer(records: list[Record], axis: str) -> Plot:
    metric = (records[0].get("summary_metrics") or ["final_loss"])[0] if records else "final_loss"
    # (param, width or depth) -> lr -> seed -> loss
    grid: dict[tuple[str, int], dict[float, dict[Any, float]]] = {}
    for r in records:
        ov = r.get("overrides", {})
        if r.get("status") != "finished" or "lr" not in ov:
            continue
        value = math.nan if r.get("diverged") else r.get(metric, math.nan)
        size = ov.get(axis, r.get(axis, 0))
        grid.setdefault((ov.get("param", "sp"), int(size)), {}).setdefault(float(ov["lr"]), {})[r.get("seed")] = value
    params = list(dict.fromkeys(p for p, _ in grid))
    widths = sorted({w for _, w in grid})
    if axis == "depth" and ("mup", widths[0]) in grid:  # at the base depth a depth variant is param=mup exactly: one run serves all
        for p in params:
            grid.setdefault((p, widths[0]), grid[("mup", widths[0])])
    lrs = sorted({lr for curve in grid.values() for lr in curve})
    fig, axes = _figure(5 * max(1, len(params)), 3.8, ncols=max(1, len(params)), sharey=True)
    rows = ["| param | " + axis + " | best lr | log2 | loss at best lr (mean ± sd) | best log2 lr per seed | best loss per seed | loss at each lr, 2^{:d} ... 2^{:d} (mean over seeds) |".format(
        round(math.log2(lrs[0])) if lrs else 0, round(math.log2(lrs[-1])) if lrs else 0), "|---|---|---|---|---|---|---|---|"]
    for ax, param in zip(axes, params):
        for colour, width in zip(MUP_WIDTH_COLOURS * 4, widths):
            curve = grid.get((param, width))
            if not curve:
                continue
            xs = sorted(curve)
            means = [statistics.fmean(v) if (v := [x for x in curve[lr].values() if _finite(x)]) else math.nan for lr in xs]
            ax.plot(xs, means, marker="o", ms=3, color=colour, label=f"{axis} {width}")
            lr_best = best_lr(dict(zip(xs, means)))
            best = None if lr_best is None else xs.index(lr_best)
            seeds = sorted({s for lr in xs for s in curve[lr]}, key=str)
            per_seed = [(lr, curve[lr][s]) for s in seeds if (lr := best_lr({x: curve[x].get(s, math.nan) for x in xs})) is not None]
            if best is not None:
                ax.plot(xs[best], means[best], marker="*", ms=12, color=colour)
                at_best = [v for v in curve[xs[best]].values() if _finite(v)]
                rows.append(
                    f"| {param} | {width} | {xs[best]:.6g} | {round(math.log2(xs[best]))} | {statistics.fmean(at_best):.3f} ± {_sd(at_best)} "
                    f"| {' / '.join(str(round(math.log2(lr))) for lr, _ in per_seed)} | {' / '.join(f'{v:.3f}' for _, v in per_seed)} "
                    f"| {' '.join('nan' if math.isnan(m) else f'{m:.2f}' for m in means)} |"
                )
            else:
                rows.append(f"| {param} | {width} | none finite | | | | | |")
        ax.set(xscale="log", xlabel="learning rate (base)", title=PANEL_TITLES[axis].get(param, param))
        ax.set_xticks(lrs[::2], [f"$2^{{{round(math.log2(lr))}}}$" for lr in lrs[::2]])
        ax.legend(frameon=False, fontsize=9)
    axes[0].set_ylabel(f"loss after training ({metric}, mean over seeds)")
    png = "lr_transfer.png" if axis == "width" else f"lr_transfer_{axis}.png"
    text = f"\n## Best learning rate per {axis}\n\n" + "\n".join(rows) + f"\n\n![loss against learning rate]({png})\n"
    return Plot({png: _png(fig)}, text)


def coord_check_png(panels: dict[int, dict[str, dict[str, dict[int, float]]]], axis: str, names: dict[str, str], key_layers: tuple[str, ...]) -> bytes:
    """microsoft/mup's coordinate-check picture: one row of panels per step, one column per
    parameterisation (``panels``: step -> param -> layer -> axis value -> change), log-log."""
    params = list(dict.fromkeys(p for data in panels.values() for p in data))
    fig, axes = _grid(5 * len(params), 3.2 * len(panels), len(panels), len(params), sharey="row")
    for i, (step, data) in enumerate(panels.items()):
        for j, param in enumerate(params):
            ax = axes[i][j]
            for name, v in sorted(data.get(param, {}).items()):
                xs = sorted(v)
                key = name in key_layers
                ax.plot(xs, [v[x] for x in xs], marker="o", ms=3, lw=2.2 if key else 1, alpha=1 if key else 0.6, label=name)
            ax.set(yscale="log", title=f"{names.get(param, param)}, step {step}", xlabel=axis)
            ax.set_xscale("log", base=2)
            if j == 0:
                ax.set_ylabel("RMS change from step 0")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _png(fig)


def probe_decoder_png(results: dict[tuple[str, float], dict[str, list[float]]]) -> bytes:
    """Deck §7a: the residual stream's RMS entering each block and each block's weight-gradient norm."""
    fig, (ax1, ax2) = _figure(10, 3.6, ncols=2)
    for (norm, std), r in results.items():
        label = f"{norm}-LN, std {std:g}"
        ax1.plot(range(1, len(r["stream_rms"]) + 1), r["stream_rms"], marker="o", ms=3, label=label)
        ax2.plot(range(1, len(r["grad_norm"]) + 1), r["grad_norm"], marker="o", ms=3, label=label)
    ax1.set(title="residual stream RMS entering each block", xlabel="block (last point: leaving the last)", ylabel="RMS")
    ax2.set(title="weight-gradient norm per block", xlabel="block", ylabel="norm", yscale="log")
    ax1.legend()
    return _png(fig)


def probe_mlp_png(results: dict[str, dict[str, tuple[list[float], list[float]]]]) -> bytes:
    """Chapter 003, steps 1-2: activation and gradient std per layer, one row per activation."""
    fig, axes = _grid(10, 3.4 * len(results), len(results), 2)
    for (activation, rows), (ax1, ax2) in zip(results.items(), axes):
        for name, (fwd, bwd) in rows.items():
            ax1.semilogy(range(1, len(fwd) + 1), fwd, marker="o", ms=2.5, label=name)
            ax2.semilogy(range(1, len(bwd) + 1), bwd, marker="o", ms=2.5, label=name)
        ax1.set(title=f"{activation}: activation std (forward)", xlabel="layer (1 = input side)", ylabel="std (log scale)")
        ax2.set(title=f"{activation}: gradient std (backward)", xlabel="layer (1 = input side)")
        ax1.legend()
    return _png(fig)
