"""A search's summary in its sweep folder: ``search.json`` (what ``initnorm-transfer`` reads), ``search.md``,
the objective against each searched value as a figure (``search.png``), and Optuna's parameter
importances where the search had two parameters or more (one parameter has importance 1 by definition)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from initnorm import plots
from initnorm.results import write_atomic

SUMMARY_FILE = "search.json"


def summary(study, fixed: list[str], seeds: list[int], metric: str) -> dict[str, Any]:
    """The study as plain values: every trial (number, state, values, loss) and the best one; ``metric``: what
    a trial's loss is the seed mean of (the experiment's summary metric, which initnorm-transfer reads too)."""
    trials = [{"number": t.number, "state": t.state.name, "params": t.params, "loss": t.value}
              for t in study.get_trials(deepcopy=False)]
    log = sorted({k for t in study.get_trials(deepcopy=False) for k, d in t.distributions.items() if getattr(d, "log", False)})
    done = [t for t in trials if t["state"] == "COMPLETE"]
    best = min(done, key=lambda t: t["loss"]) if done else None
    return {"best": best, "trials": trials, "overrides": fixed, "seeds": seeds, "metric": metric, "log_scale": log,
            "objective": f"mean {metric} over seeds {seeds}"}


def importances(study) -> dict[str, float]:
    import optuna

    done = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    if len({k for t in done for k in t.params}) < 2 or len(done) < 2:
        return {}
    return {k: float(v) for k, v in optuna.importance.get_param_importances(study).items()}


def figure(trials: list[dict[str, Any]], best: dict[str, Any] | None, metric: str, log: list[str]) -> bytes | None:
    """The objective against each numeric searched value (a log axis for those searched on a log scale), best trial
    marked; pruned trials (the pruner stopped them, or a seed diverged) along the top."""
    names = sorted({k for t in trials for k, v in t["params"].items() if isinstance(v, (int, float))})
    if not names:
        return None
    fig, axes = plots.figure(3.6 * len(names), 3.0, ncols=len(names), sharey=True)
    done = [t for t in trials if t["state"] == "COMPLETE" and math.isfinite(t["loss"])]
    top = max((t["loss"] for t in done), default=1.0)
    for ax, name in zip(axes, names):
        ax.scatter([t["params"][name] for t in done if name in t["params"]],
                   [t["loss"] for t in done if name in t["params"]], s=14, label="trial")
        pruned = [t["params"][name] for t in trials if t["state"] == "PRUNED" and name in t["params"]]
        if pruned:
            ax.scatter(pruned, [top] * len(pruned), marker="x", s=18, label="pruned")  # stopped by the pruner or a diverged seed
        if best is not None and name in best["params"]:
            ax.scatter([best["params"][name]], [best["loss"]], marker="*", s=90, label="best")
        if name in log:
            from matplotlib.ticker import NullFormatter

            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())  # a range under a decade labels every minor tick, on top of each other
        ax.set_xlabel(name)
    axes[0].set_ylabel(f"{plots.LABELS.get(metric, metric).lower()}, mean over seeds")
    axes[0].legend()
    return plots.png(fig)


def values(params: dict[str, Any]) -> str:
    """``lr=0.01398``: a trial's values as people read them (search.json keeps every digit)."""
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


def markdown(s: dict[str, Any], imp: dict[str, float]) -> str:
    best = s["best"]
    counts = {state: sum(t["state"] == state for t in s["trials"]) for state in ("COMPLETE", "PRUNED", "FAIL", "RUNNING")}
    lines = ["# Search", "", f"Objective: {s['objective']}; fixed overrides: `{' '.join(s['overrides']) or '(none)'}`.", "",
             "Trials: " + ", ".join(f"{n} {state.lower()}" for state, n in counts.items() if n) + ".", ""]
    if best is None:
        lines.append("No trial completed.")
    else:
        lines.append(f"Best: trial {best['number']}, {values(best['params'])}, loss {best['loss']:.4f}.")
    if imp:
        lines += ["", "Parameter importances (Optuna, fANOVA): " + ", ".join(f"{k} {v:.2f}" for k, v in imp.items()) + "."]
    lines += ["", "| trial | state | " + " | ".join(sorted({k for t in s["trials"] for k in t["params"]})) + " | loss |"]
    keys = sorted({k for t in s["trials"] for k in t["params"]})
    lines.append("|" + "---|" * (len(keys) + 3))
    for t in s["trials"]:
        cells = [f"{t['params'][k]:.4g}" if isinstance(t["params"].get(k), float) else str(t["params"].get(k, "")) for k in keys]
        loss = f"{t['loss']:.4f}" if isinstance(t["loss"], float) else ""
        lines.append(f"| {t['number']} | {t['state'].lower()} | " + " | ".join(cells) + f" | {loss} |")
    return "\n".join(lines) + "\n"


def write_report(study, folder: Path, fixed: list[str], seeds: list[int], metric: str) -> dict[str, Any]:
    s = summary(study, fixed, seeds, metric)
    imp = importances(study)
    s["importances"] = imp
    write_atomic(folder / SUMMARY_FILE, json.dumps(s, indent=1) + "\n")  # renamed into place: never through a planted link
    write_atomic(folder / "search.md", markdown(s, imp))
    try:
        png = figure(s["trials"], s["best"], metric, s["log_scale"])
        if png is not None:
            write_atomic(folder / "search.png", png)
    except Exception as exc:  # the figure is a convenience: the summary stands without it
        print(f"warning: no search figure ({type(exc).__name__}: {exc})")
    best = s["best"]
    print(f"\nSearch of {folder}: " + (f"best trial {best['number']}, {values(best['params'])}, loss {best['loss']:.4f}"
                                         if best else "no trial completed") + " (search.md, search.json, search.png)")
    return s
