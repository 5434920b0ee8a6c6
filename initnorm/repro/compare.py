"""The documents' tables beside ours, one function per experiment of ``initnorm.reproduce``.

Each function takes the experiment's output folder and returns markdown: our table beside the
document's (same rows, same columns) and an agreement column. A row is judged against the
document's seed spread where the document gives one (the deck's §7b, §7c, §7e; the chapter's
"Across three seeds"); elsewhere the document printed one run, and the column gives the difference.
Nothing here is tuned toward the documents: it only reads what the runs wrote.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from initnorm import transfer
from initnorm.instruments.coord import KEY_LAYERS, coord_axis, curves, display_name, ordered, ratio, read_rows
from initnorm.repro import reference as ref
from initnorm.results import RUNS_FILE, best_lr, fmt, fmt_mean_sd, group_rows, mean_sd, read_metrics, read_runs_csv


def _fmt(x: float | None, digits: int = 3) -> str:
    """The summary's number format, with a dash where there is no value."""
    return fmt(x, digits, missing="—")


def _table(head: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _diff(ours: float | None, theirs: float) -> str:
    if ours is None or not math.isfinite(ours) or not math.isfinite(theirs):
        return "—"
    return f"{ours - theirs:+.3g}"


def _spread_verdict(mu: float, sd: float, n: int, t_mu: float, t_sd: float) -> str:
    """Agreement when the means differ by no more than the two seed spreads added together."""
    if n == 0:
        return "no result"
    return "within the seed spreads" if abs(mu - t_mu) <= sd + t_sd else f"differs by {mu - t_mu:+.3f}"


# ---------------------------------------------------------------- sweeps with per-seed values (deck §7b, §7c, §7e)


def seed_table(folder: Path, keys: tuple[str, ...], reference: dict, metric: str = "final_val_loss", label: str = "Deck") -> str:
    """Our mean ± sd and per-seed values beside the document's, one row per configuration; for an
    lr x width sweep (deck §7e), the transfer table after it."""
    _, _, rows = group_rows(read_metrics(folder))
    ours = {tuple(str(r.get(k, "")) for k in keys): r for r in rows}
    out = []
    for key, theirs in reference.items():
        row = ours.get(key)
        mu, sd, n = mean_sd(row["values"][metric]) if row else (math.nan, math.nan, 0)
        per_seed = ", ".join("diverged" if v is None else f"{v:.3f}" for v in row["values"][metric]) if row else "not run"
        if len(theirs) == 2:  # the document gives mean and sd only
            t_mu, t_sd, t_seeds = theirs[0], theirs[1], "—"
        else:
            t_mu, t_sd, _ = mean_sd(theirs)
            t_seeds = ", ".join(f"{v:.3f}" for v in theirs)
        out.append([*key, fmt_mean_sd(mu, sd, n, missing="—"), per_seed, f"{t_mu:.3f} ± {t_sd:.3f}", t_seeds,
                    _spread_verdict(mu, sd, n, t_mu, t_sd)])
    head = [*keys, "ours (mean ± sd)", "ours per seed", f"{label} (mean ± sd)", f"{label} per seed", "agreement"]
    return _table(head, out) + transfer_section(folder)


SWEEP_FIGURES = {  # the figures a sweep's summary draws (initnorm/plots.py), as the report shows them
    "val_curves.png": "validation loss against step per setting: mean over seeds, band from the lowest to the highest seed",
    "lr_transfer.png": "final validation loss against learning rate per width, SP beside µP, band over seeds",
}


def sweep_figures(folder: Path) -> str:
    """Markdown for the summary figures that the sweep in ``folder`` drew (none: empty)."""
    return "".join(f"\n![{alt}]({name})\n" for name, alt in SWEEP_FIGURES.items() if (Path(folder) / name).is_file())


# ---------------------------------------------------------------- job records of the chapter's presets


def _records(folder: Path) -> list[dict]:
    """The finished jobs below ``folder``: their metrics.json, or the runs.csv results/ keeps."""
    recs = read_metrics(folder) or (read_runs_csv(folder) if (folder / RUNS_FILE).is_file() else [])
    return [r for r in recs if r.get("status") == "finished"]


def _seed_values(records: list[dict], match: dict[str, str], metric: str, keep_diverged: bool = False) -> dict[int, float | None]:
    """seed -> the metric of the job whose overrides match; None for a diverged run (unless kept)."""
    out = {}
    for r in records:
        ov = r.get("overrides", {})
        if all(str(ov.get(k)) == v for k, v in match.items()):
            out[int(r["seed"])] = None if r.get("diverged") and not keep_diverged else r.get(metric)
    return dict(sorted(out.items()))


def three_seed_rows(seeds: dict[str, dict[int, float | None]], digits: int = 3) -> str:
    """Rows of the chapter's "Across three seeds" table beside ours (seed 0, mean ± sd, per seed)."""
    rows = []
    for label, values in seeds.items():
        t_page, t_mu, t_sd, t_seeds = ref.CHAPTER_SEEDS[label]
        mu, sd, n = mean_sd(values.values())
        page = values.get(0)
        fmt = (lambda v: "—" if v is None else f"{v:.3g}") if "log2" in label else (lambda v: _fmt(v, digits))
        per_seed = " / ".join("diverged" if v is None else fmt(v) for v in values.values()) or "not run"
        rows.append([
            label, fmt(page), fmt_mean_sd(mu, sd, n, missing="—") if "log2" not in label else (f"{fmt(mu)} ± {fmt(sd)}" if n else "—"),
            per_seed,
            fmt(t_page), f"{fmt(t_mu)} ± {fmt(t_sd)}", " / ".join(fmt(v) for v in t_seeds), _spread_verdict(mu, sd, n, t_mu, t_sd),
        ])
    head = ["run", "ours seed 0", "ours mean ± sd", "ours per seed", "chapter seed 0", "chapter mean ± sd",
            "chapter seeds 0 / 1 / 2", "agreement"]
    return "Across three seeds (the chapter's table):\n\n" + _table(head, rows)


def _page_row(ours: list[float | None], theirs: tuple) -> list[str]:
    """ours / chapter pairs, then the differences (ours − chapter) in one cell."""
    cells = [c for o, t in zip(ours, theirs) for c in (_fmt(o), _fmt(t))]
    return cells + [" / ".join(_diff(o, t) for o, t in zip(ours, theirs))]


# ---------------------------------------------------------------- deck §7a and chapter steps 1-2: the probes


def _read_csv(path: Path) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def deck_7a(folder: Path) -> str:
    """Stream RMS and block gradient norms of the Decoder probe beside the deck's sentences."""
    series: dict[tuple[str, float, str], list[float]] = {}
    for r in _read_csv(Path(folder) / "probe_decoder.csv"):
        series.setdefault((r["norm"], float(r["std"]), r["stat"]), []).append(float(r["value"]))
    depth = len(series[("pre", 0.25, "grad_norm")])
    stream = lambda norm, std: series[(norm, std, "stream_rms")]  # entering each block, then leaving the last
    grads = series[("post", 0.25, "grad_norm")]
    ours = {  # the deck's sentence -> our values (a range where the deck speaks of every depth)
        "pre, std 0.02: stream RMS at every depth": stream("pre", 0.02),
        "pre, std 0.25: stream RMS entering block 1": stream("pre", 0.25)[:1],
        "pre, std 0.25: stream RMS leaving block 8": stream("pre", 0.25)[-1:],
        "post: stream RMS": stream("post", 0.02)[1:] + stream("post", 0.25)[1:],  # after the first block
        "post: gradient norm, block 1": grads[:1],
        "post: gradient norm, block 8": grads[-1:],
    }
    rows = []
    for label, theirs in ref.DECK_7A.items():
        v = ours[label]
        shown = f"{min(v):.2f}" if f"{min(v):.2f}" == f"{max(v):.2f}" else f"{min(v):.2f}–{max(v):.2f}"
        worst = max(v, key=lambda x: abs(x - theirs))
        rows.append([label, shown, f"{theirs:.2f}", f"{worst - theirs:+.2f} ({(worst - theirs) / theirs:+.0%})"])
    note = f"\n{depth} blocks here; \"block 8\" is the last block.\n" if depth != 8 else ""
    return (
        "The deck gives one run and no seed spread: the last column is the largest difference (ours − deck). "
        "Post-LN's stream is counted from block 2 (block 1's input is the embedding); the gradient norms are post-LN's at std 0.25.\n\n"
        + _table(["quantity", "ours", "deck", "difference"], rows) + note
        + "\n![stream RMS and gradient norm per block](probe_decoder.png)\n"
    )


def chapter_probe(folder: Path) -> str:
    """The chapter's two probe tables, every number, beside ours."""
    series: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in _read_csv(Path(folder) / "probe_mlp.csv"):
        series.setdefault((r["activation"], r["init"]), []).append((float(r["act_std"]), float(r["grad_std"])))
    rows = []
    for (act, init), theirs in ref.CHAPTER_PROBE.items():
        s = series.get((act, init))
        if not s:
            rows.append([act, init] + [c for t in theirs for c in ("—", f"{t:.2e}")] + ["not run"])
            continue
        ours = (s[0][0], s[-1][0], s[0][1], s[-1][1])
        same = [f"{o:.2e}" == f"{t:.2e}" for o, t in zip(ours, theirs)]
        factor = max(max(o / t, t / o) if o > 0 and t > 0 else math.inf for o, t in zip(ours, theirs))
        apart = f"up to {factor - 1:.1%} apart" if factor < 2 else f"up to a factor of {factor:.3g} apart"
        verdict = "same to the 3 printed digits" if all(same) else apart
        rows.append([act, init] + [c for o, t in zip(ours, theirs) for c in (f"{o:.2e}", f"{t:.2e}")] + [verdict])
    n = len(next(iter(series.values()))) if series else 0
    stats = ("act std L1", f"act std L{n}", "grad std L1", f"grad std L{n}")
    head = ["activation", "init"] + [f"{q} {w}" for q in stats for w in ("ours", "chapter")] + ["agreement"]
    note = "" if n == 30 else f"\n{n} layers here: L{n} is compared with the chapter's L30.\n"
    return _table(head, rows) + note + "\n![activation and gradient std per layer](probe_mlp.png)\n"


# ---------------------------------------------------------------- deck §7d: the coordinate check


def _g(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}"


def _coord(folder: Path) -> tuple[dict, str, int]:
    """param -> layer -> width (or depth) -> RMS change after the last step, the axis, that step."""
    rows = read_rows(folder)
    axis, step = coord_axis(rows), max(r["step"] for r in rows)
    return curves(rows, axis, step), axis, step


def deck_7d(folder: Path) -> str:
    """The logits' RMS change at widths 16 and 256 and across widths, SP and µP, beside the deck's."""
    data, _, step = _coord(folder)
    rows = []
    for param in ("sp", "mup"):
        v = data.get(param, {}).get("logits/output", {})
        t16, t256 = ref.DECK_7D[(param, 16)], ref.DECK_7D[(param, 256)]
        o16, o256 = v.get(16), v.get(256)
        growth = o256 / o16 if o16 and o256 else None
        agree = f"16: {_diff(o16, t16)}; 256: {_diff(o256, t256)}; 256/16: {_diff(growth, t256 / t16)}"
        rows.append([f"{display_name(param)} logits", _g(o16), _g(t16), _g(o256), _g(t256), _g(growth), _g(t256 / t16),
                     f"{ratio(v):.2f}" if v else "—", agree])
    stream = data.get("sp", {}).get("stream/last", {})
    rows.append(["SP last residual stream", _g(stream.get(16)), "—", _g(stream.get(256)), _g(ref.DECK_7D_SP_STREAM_256), "—", "—",
                 f"{ratio(stream):.2f}" if stream else "—", f"256: {_diff(stream.get(256), ref.DECK_7D_SP_STREAM_256)}"])
    head = [f"after {step} steps", "ours 16", "deck 16", "ours 256", "deck 256", "ours 256/16", "deck 256/16",
            "ours max/min (all widths)", "difference (ours − deck)"]
    return (
        "RMS change from step 0 (the deck's: after 10 steps); the deck gives one run, so the last column is the difference.\n\n"
        + _table(head, rows) + "\n" + _every_layer(data, "width") + _verdict(folder) + "\n![coordinate check](coord.png)\n"
    )


def deck_7d_depth(folder: Path) -> str:
    """The same check across depth at one width, µP against depth-µP and CompleteP: not in the deck."""
    data, axis, step = _coord(folder)
    return (
        f"Not in the deck: no document numbers to set beside these. RMS change from step 0 after step {step}; "
        "`blocks/update_x_depth` is the mean change of every block's attention and MLP output times the number of blocks.\n\n"
        + _every_layer(data, axis) + _verdict(folder) + "\n![coordinate check across depth](coord.png)\n"
    )


def depth_transfer(folder: Path) -> str:
    """Learning-rate transfer across depth: per (param, depth) the best base lr (from the mean over
    seeds), its loss, and the loss at every lr; then how far each parameterisation's optimum moves."""
    recs = _records(folder)
    grid: dict[tuple[str, int], dict[float, list[float]]] = {}
    for r in recs:
        ov = r.get("overrides", {})
        value = math.nan if r.get("diverged") else r.get("final_val_loss", math.nan)
        grid.setdefault((ov.get("param", "mup"), int(ov.get("depth", r.get("depth", 0)))), {}).setdefault(float(ov["lr"]), []).append(value)
    params = [p for p in ("mup", "depth_mup", "completep") if any(k[0] == p for k in grid)]
    depths = sorted({d for _, d in grid})
    shared = []  # at the base depth every depth variant is param=mup exactly (tests/test_param_depth.py)
    for param in params[1:]:
        if (param, depths[0]) not in grid and ("mup", depths[0]) in grid:
            grid[(param, depths[0])] = grid[("mup", depths[0])]
            shared.append(param)
    lrs = sorted({lr for curve in grid.values() for lr in curve})
    rows, moves = [], []
    for param in params:
        best_exps = []
        for depth in depths:
            curve = grid.get((param, depth), {})
            means = {lr: mean_sd(v)[0] if any(math.isfinite(x) for x in v) else math.nan for lr, v in curve.items()}
            best = best_lr(means)
            cells = []
            for lr in lrs:
                m = means.get(lr, math.nan)
                cells.append("—" if lr not in means else "div." if not math.isfinite(m) else (f"**{m:.3f}**" if lr == best else f"{m:.3f}"))
            if best is None:
                rows.append([param, depth, "none finite", "—", *cells])
                continue
            mu, sd, n = mean_sd(curve[best])
            best_exps.append(round(math.log2(best)))
            label = f"{depth} (the mup run)" if param in shared and depth == depths[0] else depth
            rows.append([param, label, f"2^{round(math.log2(best))}", f"{mu:.3f} ± {_fmt(sd)} ({n})", *cells])
        if best_exps:
            moves.append(f"{param}: best log2 lr {' / '.join(map(str, best_exps))} at depths {' / '.join(map(str, depths))} "
                         f"(moves {max(best_exps) - min(best_exps)} octave{'s' if max(best_exps) - min(best_exps) != 1 else ''})")
    head = ["param", "depth", "best lr", "loss at best (mean ± sd, seeds)"] + [f"2^{round(math.log2(lr))}" for lr in lrs]
    steps = sorted({r.get("steps") for r in recs}, key=str)
    return (
        f"Final validation loss after {', '.join(map(str, steps))} steps, mean over seeds; the best lr per depth in bold "
        "(a parameterisation transfers across depth when its bold cells stay in one column).\n\n"
        + _table(head, rows)
        + (f"\nAt the base depth {depths[0]} every depth variant is `param=mup` exactly (a test checks identical losses), so "
           f"{', '.join(shared)} share the mup run there.\n" if shared else "")
        + "\nHow far the optimum moves: " + "; ".join(moves) + ".\n\n![loss against learning rate, per depth](lr_transfer_depth.png)\n"
        + transfer_section(folder)
    )


def _every_layer(data: dict, axis: str) -> str:
    xs = sorted({x for layers in data.values() for v in layers.values() for x in v})
    rows = [[display_name(p), layer] + [_g(v[x]) for x in xs] + [f"{ratio(v):.2f}"]
            for p in ordered(data) for layer, v in data[p].items() if layer in KEY_LAYERS]
    return _table(["param", "layer"] + [f"{axis} {x}" for x in xs] + ["max/min"], rows)


def _verdict(folder: Path) -> str:
    path = Path(folder) / "verdict.txt"
    return f"\nThe command's verdict: {path.read_text(encoding='utf-8').strip().splitlines()[-1]}\n" if path.is_file() else ""


# ---------------------------------------------------------------- chapter steps 2-4: the MLP presets


DEEP_MLP_INITS = {"N(0, 1)": "unit_normal", "N(0, 0.01)": "small", "Xavier": "xavier", "He": "he"}
REGULARIZERS = {"no regularization": "none", "dropout 0.2": "dropout_0.2", "dropout 0.5": "dropout_0.5",
                "weight decay 1.0": "weight_decay_1.0"}
# The chapter's "Dropout 0.5, final val" row holds, at seed 0, the step-3 table's final *train* loss
# of dropout 0.5 (its final val is another number): we compare that row with our final train loss.
_DROPOUT_TRAIN = ref.CHAPTER_SEEDS["Dropout 0.5, final val"][0] == ref.CHAPTER_REGULARIZATION["dropout 0.5"][0]
REGULARIZATION_SEEDS = {
    "No regularization, best val": ("none", "best_val_loss"),
    "No regularization, final val": ("none", "final_val_loss"),
    "Dropout 0.5, final val": ("dropout_0.5", "final_train_loss" if _DROPOUT_TRAIN else "final_val_loss"),
    "Dropout 0.5, best val": ("dropout_0.5", "best_val_loss"),
    "Weight decay 1.0, best val": ("weight_decay_1.0", "best_val_loss"),
}
_DROPOUT_NOTE = (
    "The chapter's row \"Dropout 0.5, final val\" has, at seed 0, the value its step-3 table gives as dropout 0.5's final "
    "*train* loss (its final val there is another number), so that row is compared with our final train loss."
    if _DROPOUT_TRAIN else ""
)


def chapter_deep_mlp(folder: Path) -> str:
    """Step 2 at seed 0 (first loss, final loss, val accuracy) and the three-seed accuracy rows."""
    recs = _records(folder)
    rows = []
    for (act, init), theirs in ref.CHAPTER_DEEP_MLP.items():
        match = {"model.activation": act, "init": DEEP_MLP_INITS[init]}
        page = next((r for r in recs if r["seed"] == 0 and all(str(r["overrides"].get(k)) == v for k, v in match.items())), None)
        if page is None:
            rows.append([act, init, *_page_row([None] * 3, theirs)])
            continue
        # A diverged run keeps its first loss; its accuracy is the last evaluation's (on NaN logits, as the chapter's is).
        last = (page.get("eval_history", {}).get("val") or [[None, None, None]])[-1]
        acc = (last[2] if len(last) > 2 else None) if page.get("diverged") else page.get("val_acc")
        row = _page_row([page.get("first_loss"), None if page.get("diverged") else page.get("final_loss"), acc], theirs)
        if page.get("diverged"):
            row[2] = f"diverged at step {page.get('diverged_step')}"
        rows.append([act, init, *row])
    head = ["activation", "init", "first loss ours", "chapter", "final loss ours", "chapter", "val acc ours", "chapter",
            "difference (ours − chapter)"]
    seeds = {
        "Tanh, Xavier: val accuracy": _seed_values(recs, {"model.activation": "tanh", "init": "xavier"}, "val_acc"),
        "ReLU, Xavier: val accuracy": _seed_values(recs, {"model.activation": "relu", "init": "xavier"}, "val_acc"),
        "ReLU, He: val accuracy": _seed_values(recs, {"model.activation": "relu", "init": "he"}, "val_acc"),
    }
    return ("Seed 0 (the chapter's page; one run, so the last column is the difference):\n\n" + _table(head, rows) + "\n"
            + three_seed_rows(seeds) + "\n![training loss per init](train_curves.png)\n")


def chapter_regularization(folder: Path) -> str:
    """Step 3 at seed 0 (final train, final val, best val, gap) and the three-seed rows."""
    recs = _records(folder)
    metrics = ("final_train_loss", "final_val_loss", "best_val_loss", "gap")
    rows = []
    for name, theirs in ref.CHAPTER_REGULARIZATION.items():
        ours = [_seed_values(recs, {"regularizer": REGULARIZERS[name]}, m).get(0) for m in metrics]
        rows.append([name, *_page_row(ours, theirs)])
    head = (["setting"] + [c for q in ("final train", "final val", "best val", "gap") for c in (f"{q} ours", "chapter")]
            + ["difference (ours − chapter)"])
    seeds = {label: _seed_values(recs, {"regularizer": reg}, m) for label, (reg, m) in REGULARIZATION_SEEDS.items()}
    return (
        "Seed 0 (the chapter's page; one run, so the last column is the difference):\n\n" + _table(head, rows) + "\n"
        + three_seed_rows(seeds)
        + f"\n{_DROPOUT_NOTE}\n\n![training (dashed) and validation (solid) loss](train_val_curves.png)\n"
    )


def _lr_grid(records: list[dict], param: str, width: int) -> dict[int, dict[float, float]]:
    """seed -> lr -> the chapter's score (mean loss of the last 50 batches; nan when diverged)."""
    grid: dict[int, dict[float, float]] = {}
    for r in records:
        ov = r.get("overrides", {})
        if ov.get("param", "sp") == param and int(ov.get("width", 0)) == width and "lr" in ov:
            grid.setdefault(int(r["seed"]), {})[float(ov["lr"])] = math.nan if r.get("diverged") else r.get("final_loss", math.nan)
    return grid


def _best(curve: dict[float, float]) -> tuple[int, float] | None:
    """(log2 of the best lr, its loss), or None where no loss is finite."""
    lr = best_lr(curve)
    return None if lr is None else (round(math.log2(lr)), curve[lr])


def chapter_mup(folder: Path) -> str:
    """Step 4 at seed 0 (best lr and loss per param and width, the loss at every lr) and the width-1024 seed rows."""
    recs = _records(folder)
    rows = []
    for (param, width), (t_exp, t_loss, t_curve) in ref.CHAPTER_MUP.items():
        curve = _lr_grid(recs, param, width).get(0, {})
        best = _best(curve)
        if best is None:
            rows.append([param, width, "not run", f"2^{t_exp}", "—", f"{t_loss:.3f}", "—", " ".join(f"{v:.2f}" for v in t_curve), "—"])
            continue
        exp, loss = best
        steps = "same best lr" if exp == t_exp else f"best lr off by {exp - t_exp:+d} in log2"
        losses = " ".join(f"{curve[lr]:.2f}" for lr in sorted(curve))
        rows.append([param, width, f"2^{exp}", f"2^{t_exp}", f"{loss:.3f}", f"{t_loss:.3f}", losses, " ".join(f"{v:.2f}" for v in t_curve),
                     f"{steps}; loss {loss - t_loss:+.3f}"])
    head = ["param", "width", "best lr ours", "chapter", "loss ours", "chapter", "loss per lr ours",
            "chapter (2^-12 ... 2^-4)", "agreement (seed 0)"]
    seeds = {}
    for param, name in (("sp", "SP"), ("mup", "muP")):
        per_seed = {s: _best(c) for s, c in _lr_grid(recs, param, 1024).items()}
        seeds[f"Width 1024 under {name}, best lr (log2)"] = {s: float(b[0]) if b else None for s, b in per_seed.items()}
        seeds[f"Width 1024 under {name}, best loss"] = {s: b[1] if b else None for s, b in per_seed.items()}
    order = [k for k in ref.CHAPTER_SEEDS if k.startswith("Width 1024")]
    steps = sorted({r.get("steps") for r in recs}, key=str)
    return (
        f"Seed 0 (the chapter's page; one run). Loss: the mean of the last 50 training batches after {', '.join(map(str, steps))} "
        "steps.\n\n" + _table(head, rows)
        + "\n" + three_seed_rows({k: seeds[k] for k in order}) + "\n![loss against learning rate](lr_transfer.png)\n"
        + transfer_section(folder)
    )


def transfer_section(folder: Path) -> str:
    """The transfer table of an lr x width (or depth) sweep (``initnorm.transfer``): not in the documents,
    so nothing to set beside it; empty for any other sweep."""
    recs = _records(folder)
    rows = transfer.transfer_table(recs)
    if not rows:
        return ""
    return transfer.HEADING_RE.sub(r"#### \1 transfer (not in the documents)", transfer.render_markdown(rows, transfer.metric_of(recs)))


COMPARE: dict[str, Callable[[Path], str]] = {
    "deck_7a": deck_7a,
    "deck_7d": deck_7d,
    "deck_7d_depth": deck_7d_depth,
    "chapter_probe": chapter_probe,
    "chapter_deep_mlp": chapter_deep_mlp,
    "chapter_regularization": chapter_regularization,
    "chapter_mup": chapter_mup,
}
