"""The µP coordinate check (deck §7d): ``python -m initnorm.coord_check``.

Trains the Decoder for ``--steps`` AdamW steps (10) at a constant ``--lr`` (0.01) for every
(parameterisation, width) pair, with the ``CoordCheck`` callback recording how far the logits,
the last residual stream and every block's output move from step 0 on 16 fixed windows
(``experiment=coord_check``; each job is an ordinary training run in its own folder). Then:

- ``coord.csv``: long form, one row per (width, depth, param, seed, step, layer, role, value);
- ``coord.png``: in the style of microsoft/mup's coordinate-check plots: log-log, width on x,
  one line per layer, one panel per step, SP beside µP;
- the verdict: per layer, the ratio of the largest to the smallest change across widths at the
  last step. µP passes when its logits' ratio is at most ``--bound`` (1.5) while SP's is larger
  and grows with width. The command exits with 1 when it does not.

``--depths 2,4,8,16 --widths 64`` runs the same check across depth at a fixed width (a look at
what depth-µP work asks about; µP as implemented here makes no depth claim, so no verdict).
``--from DIR`` only reads the ``coord.csv`` files below a folder, e.g. a multirun of
``python -m initnorm.train -m experiment=coord_check width=16,32,64,128,256 param=sp,mup``.
Anything after ``--`` is a training-config override (``-- norm=post``).
"""

from __future__ import annotations

import argparse
import csv
import io
import logging
import math
import sys
import time
from pathlib import Path

from initnorm.callbacks.coord import COORD_FILE, FIELDS
from initnorm.config import comma_list, compose_train, split_overrides
from initnorm.errors import ConfigError, bad_value
from initnorm.results import write_atomic

NAMES = {"sp": "SP", "mup": "µP"}
KEY_LAYERS = ("logits/output", "stream/last")


def run_jobs(params, widths, depths, steps: int, lr: float, seed: int, extra: list[str], out: Path) -> None:
    """One training job per (param, depth, width), each in ``out/param=..,depth=..,width=..``."""
    from initnorm.train import train

    for p in params:
        for d in depths:
            for w in widths:
                job = out / f"param={p},depth={d},width={w}"
                overrides = ["experiment=coord_check", f"param={p}", f"width={w}", f"depth={d}", f"steps={steps}", f"lr={lr}", f"seed={seed}", *extra]
                start = time.perf_counter()
                train(compose_train(overrides), job)
                print(f"  {NAMES.get(p, p):3s} depth {d:2d} width {w:4d}: {time.perf_counter() - start:5.1f} s", flush=True)


def read_rows(folder: Path) -> list[dict]:
    """Every ``coord.csv`` row below ``folder`` (the combined file itself excluded), typed."""
    rows = []
    for path in sorted(Path(folder).rglob(COORD_FILE)):
        if path.parent == Path(folder):
            continue
        with path.open(newline="", encoding="utf-8") as f:
            for r in csv.DictReader(f):
                rows.append({**r, "width": int(r["width"]), "depth": int(r["depth"]), "step": int(r["step"]), "value": float(r["value"])})
    if not rows:
        raise ConfigError(f"no {COORD_FILE} below {folder}; run `python -m initnorm.coord_check` or a multirun with experiment=coord_check first")
    return rows


def combined_csv(rows: list[dict]) -> str:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=FIELDS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(sorted(rows, key=lambda r: (r["param"], r["depth"], r["width"], r["step"])))
    return out.getvalue()


def sweep_axis(rows: list[dict]) -> str:
    widths, depths = {r["width"] for r in rows}, {r["depth"] for r in rows}
    if len(widths) > 1 and len(depths) > 1:
        raise bad_value("--widths/--depths", f"{sorted(widths)} x {sorted(depths)}", "one axis at a time: several widths at one depth, or several depths at one width", "--depths 2")
    return "width" if len(widths) > 1 or len(depths) == 1 else "depth"


def curves(rows: list[dict], axis: str, step: int) -> dict[str, dict[str, dict[int, float]]]:
    """param -> "layer/role" -> axis value -> change at ``step``, for layers present at every axis value."""
    out: dict[str, dict[str, dict[int, float]]] = {}
    for r in rows:
        if r["step"] == step:
            out.setdefault(r["param"], {}).setdefault(f"{r['layer']}/{r['role']}", {})[r[axis]] = r["value"]
    for param, layers in out.items():
        xs = set().union(*(v.keys() for v in layers.values()))
        out[param] = {k: v for k, v in layers.items() if set(v) == xs}
    return out


def ratio(values: dict[int, float]) -> float:
    lo, hi = min(values.values()), max(values.values())
    return hi / lo if lo > 0 else math.inf


def table(data, axis: str, step: int) -> str:
    xs = sorted({x for layers in data.values() for v in layers.values() for x in v})
    out = io.StringIO()
    out.write(f"RMS change from step 0 after step {step}, by {axis}\n")
    out.write(f"{'param':5s} {'layer':22s} " + " ".join(f"{x:>7d}" for x in xs) + "  max/min\n")
    for param in ordered(data):
        for name, v in sorted(data[param].items(), key=lambda kv: (kv[0] not in KEY_LAYERS, kv[0])):
            out.write(f"{NAMES.get(param, param):5s} {name:22s} " + " ".join(f"{v[x]:7.3g}" for x in xs) + f"  {ratio(v):7.2f}\n")
    return out.getvalue()


def ordered(params) -> list[str]:
    """SP, then µP, then any other parameterisation by name."""
    return [p for p in ("sp", "mup") if p in params] + sorted(set(params) - {"sp", "mup"})


def verdict(data, axis: str, bound: float) -> tuple[bool, str]:
    """µP's logits change stays within ``bound`` (max/min across widths) while SP's is larger and grows."""
    def span(param):
        v = data.get(param, {}).get("logits/output")
        return None if not v else (v[min(v)], v[max(v)], ratio(v), min(v), max(v))

    sp, mup = span("sp"), span("mup")
    parts = [f"{NAMES[p]} logits move {s[0]:.3g} at {axis} {s[3]} and {s[1]:.3g} at {axis} {s[4]} (max/min {s[2]:.2f})" for p, s in (("sp", sp), ("mup", mup)) if s]
    if axis != "width" or not (sp and mup):
        return True, "; ".join(parts) + ("" if parts else "no logits recorded") + " (no verdict: it needs SP and µP across widths)"
    ok = mup[2] <= bound and sp[2] > mup[2] and sp[1] > sp[0]
    why = f"µP max/min {mup[2]:.2f} {'<=' if mup[2] <= bound else '>'} {bound}; SP {'grows' if sp[1] > sp[0] else 'does not grow'} (max/min {sp[2]:.2f})"
    return ok, "; ".join(parts) + f". Verdict: {'PASS' if ok else 'FAIL'} ({why})"


def plot(rows: list[dict], axis: str, path: Path, panels=(1, 2, 5, 10)) -> None:
    """microsoft/mup's coordinate-check picture: one panel per step (rows), SP beside µP (columns)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = sorted({r["step"] for r in rows})
    shown = [s for s in panels if s in steps] or steps[-1:]
    params = ordered({r["param"] for r in rows})
    fig, axes = plt.subplots(len(shown), len(params), figsize=(5 * len(params), 3.2 * len(shown)), squeeze=False, sharey="row")
    for i, step in enumerate(shown):
        data = curves(rows, axis, step)
        for j, param in enumerate(params):
            ax = axes[i][j]
            for name, v in sorted(data.get(param, {}).items()):
                xs = sorted(v)
                key = name in KEY_LAYERS
                ax.plot(xs, [v[x] for x in xs], marker="o", ms=3, lw=2.2 if key else 1, alpha=1 if key else 0.6, label=name)
            ax.set(xscale="log", yscale="log", title=f"{NAMES.get(param, param)}, step {step}", xlabel=axis)
            ax.set_xscale("log", base=2)
            if j == 0:
                ax.set_ylabel("RMS change from step 0")
    axes[0][-1].legend(frameon=False, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summarize(folder: Path, bound: float = 1.5) -> tuple[bool, str]:
    """Read every job's ``coord.csv`` below ``folder``; write the combined CSV, PNG and ``verdict.txt``."""
    rows = read_rows(folder)
    axis = sweep_axis(rows)
    step = max(r["step"] for r in rows)
    data = curves(rows, axis, step)
    ok, line = verdict(data, axis, bound)
    text = table(data, axis, step) + "\n" + line + "\n"
    write_atomic(folder / COORD_FILE, combined_csv(rows))
    write_atomic(folder / "verdict.txt", text)
    plot(rows, axis, folder / "coord.png")
    return ok, text


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    argv, extra = split_overrides(argv)
    p = argparse.ArgumentParser(prog="python -m initnorm.coord_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--widths", type=comma_list(int), default=[16, 32, 64, 128, 256])
    p.add_argument("--depths", type=comma_list(int), default=[2])
    p.add_argument("--params", type=comma_list(), default=["sp", "mup"])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bound", type=float, default=1.5, help="largest max/min of µP's logits change across widths that passes")
    p.add_argument("--out", default=None, help="output folder (default outputs/coord_check/<time>)")
    p.add_argument("--from", dest="source", default=None, help="only summarise the coord.csv files below this folder")
    return p.parse_args(argv), extra


def main(argv: list[str] | None = None) -> int:
    a, extra = parse_args(sys.argv[1:] if argv is None else argv)
    logging.getLogger("lightning").setLevel(logging.WARNING)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    try:
        if a.source:
            folder = Path(a.source)
        else:
            if a.steps <= 0 or a.lr <= 0:
                raise bad_value("--steps/--lr", f"{a.steps}/{a.lr}", "positive numbers", "--steps 10 --lr 0.01")
            folder = Path(a.out or f"outputs/coord_check/{time.strftime('%Y-%m-%d_%H-%M-%S')}")
            print(f"coordinate check: {a.steps} steps at lr {a.lr}, params {','.join(a.params)}, widths {a.widths}, depths {a.depths}")
            run_jobs(a.params, a.widths, a.depths, a.steps, a.lr, a.seed, extra, folder)
        ok, text = summarize(folder, a.bound)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text + f"-> {folder} (coord.csv, coord.png, verdict.txt)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
