"""Sweep plots by name: each is a pure function of a sweep's job records (their metrics.json).

A preset names its plots in ``summary.plots`` (``[lr_transfer]``); every job copies the list
into its metrics.json and ``results.summarize`` calls each plot with all the records, writes the
PNGs it returns into the sweep folder and appends its markdown to summary.md. So
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


def _figure(width: float, height: float, ncols: int = 1, sharey: bool = False):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols, sharey=sharey, squeeze=False)[0]
    return fig, list(axes)


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    return buf.getvalue()


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _groups(records: list[Record]) -> dict[tuple[str, ...], list[Record]]:
    """Jobs by their swept values other than the seed (as the summary table's rows), in job order."""
    keys = [k for k in (records[0].get("swept") or records[0].get("overrides", {})) if k != "seed"] if records else []
    groups: dict[tuple[str, ...], list[Record]] = {}
    for r in records:
        if r.get("status") == "finished":
            groups.setdefault(tuple(f"{k}={r.get('overrides', {}).get(k, '')}" for k in keys), []).append(r)
    return groups


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
    for colour, (key, runs) in zip(PALETTE * 4, _groups(records).items()):
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
    for key, runs in _groups(records).items():
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


def _best(lrs: list[float], losses: list[float]) -> int | None:
    finite = [i for i, v in enumerate(losses) if _finite(v)]
    return min(finite, key=lambda i: losses[i]) if finite else None


def _sd(xs: list[float]) -> str:
    return f"{statistics.stdev(xs):.3g}" if len(xs) > 1 else "0"


@PLOTS.register("lr_transfer")
def lr_transfer(records: list[Record]) -> Plot:
    """Chapter 003, step 4: loss against learning rate per width, one panel per parameterisation,
    each width's optimum starred; the table gives the best rate per (param, width), from the
    mean over seeds, and each seed's own best (log2) as the chapter's three-seed table does."""
    metric = (records[0].get("summary_metrics") or ["final_loss"])[0] if records else "final_loss"
    # (param, width) -> lr -> seed -> loss
    grid: dict[tuple[str, int], dict[float, dict[Any, float]]] = {}
    for r in records:
        ov = r.get("overrides", {})
        if r.get("status") != "finished" or "lr" not in ov:
            continue
        value = math.nan if r.get("diverged") else r.get(metric, math.nan)
        grid.setdefault((ov.get("param", "sp"), int(ov.get("width", 0))), {}).setdefault(float(ov["lr"]), {})[r.get("seed")] = value
    params = list(dict.fromkeys(p for p, _ in grid))
    widths = sorted({w for _, w in grid})
    lrs = sorted({lr for curve in grid.values() for lr in curve})
    fig, axes = _figure(5 * max(1, len(params)), 3.8, ncols=max(1, len(params)), sharey=True)
    rows = ["| param | width | best lr | log2 | loss at best lr (mean ± sd) | best log2 lr per seed | best loss per seed | loss at each lr, 2^{:d} ... 2^{:d} (mean over seeds) |".format(
        round(math.log2(lrs[0])) if lrs else 0, round(math.log2(lrs[-1])) if lrs else 0), "|---|---|---|---|---|---|---|---|"]
    for ax, param in zip(axes, params):
        for colour, width in zip(MUP_WIDTH_COLOURS * 4, widths):
            curve = grid.get((param, width))
            if not curve:
                continue
            xs = sorted(curve)
            means = [statistics.fmean(v) if (v := [x for x in curve[lr].values() if _finite(x)]) else math.nan for lr in xs]
            ax.plot(xs, means, marker="o", ms=3, color=colour, label=f"width {width}")
            best = _best(xs, means)
            seeds = sorted({s for lr in xs for s in curve[lr]}, key=str)
            per_seed = [(xs[i], curve[xs[i]][s]) for s in seeds if (i := _best(xs, [curve[lr].get(s, math.nan) for lr in xs])) is not None]
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
        ax.set(xscale="log", xlabel="learning rate (base)", title="µP: lr scaled with width" if param == "mup" else "standard parameterisation" if param == "sp" else param)
        ax.set_xticks(lrs[::2], [f"$2^{{{round(math.log2(lr))}}}$" for lr in lrs[::2]])
        ax.legend(frameon=False, fontsize=9)
    axes[0].set_ylabel(f"loss after training ({metric}, mean over seeds)")
    text = "\n## Best learning rate per width\n\n" + "\n".join(rows) + "\n\n![loss against learning rate](lr_transfer.png)\n"
    return Plot({"lr_transfer.png": _png(fig)}, text)
