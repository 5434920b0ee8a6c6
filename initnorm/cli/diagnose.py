"""Why did the learning rate not transfer?
``python -m initnorm.diagnose SWEEP_DIR [--factor 2] [--lr 2^-7] [--stats sigma_dw,update_ratio]``

Reads the sweep folder's job records and TensorBoard events (``callbacks.stats`` and
``callbacks.diagnostics``), and names, per width (or depth), the layers whose statistic departs
from the smallest width's by more than ``--factor``, at the smallest width's optimal lr (or
``--lr``). Writes ``diagnose.md`` into the folder and prints it.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from initnorm.cli.disk import cannot_write
from initnorm.errors import ConfigError
from initnorm.instruments.diagnostics import FACTOR, STATS, departures, render
from initnorm.results import read_metrics, write_atomic


def _log2_lr(text: str) -> float:
    """``2^-7``, ``0.0078125`` or ``-7`` (a log2 value when negative and whole) -> log2 lr."""
    try:
        if text.startswith("2^"):
            return float(text[2:])
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--lr {text!r}: give a rate (0.0078125) or a power of two (2^-7)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"--lr {text!r}: a rate must be positive; give 0.0078125 or 2^-7")
    return math.log2(value)


def _factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 1:
        raise argparse.ArgumentTypeError(f"--factor {text!r}: a number above 1 (e.g. --factor 2)")
    return value


def _stats(text: str) -> tuple[str, ...]:
    names = tuple(s for s in text.split(",") if s)
    bad = [s for s in names if s not in STATS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"--stats {text!r}: choose from {','.join(STATS)} (e.g. --stats sigma_dw,update_ratio)")
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m initnorm.diagnose", description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("sweep_dir", type=Path)
    p.add_argument("--factor", type=_factor, default=FACTOR,
                   help=f"name a statistic that departs by more than this factor either way (default {FACTOR:g})")
    p.add_argument("--lr", type=_log2_lr, default=None, help="the learning rate to compare at (default: the smallest width's optimum)")
    p.add_argument("--stats", type=_stats, default=STATS, help=f"statistics to compare (default {','.join(STATS)})")
    args = p.parse_args(argv)
    if not args.sweep_dir.is_dir():
        print(f"error: sweep_dir {str(args.sweep_dir)!r} is not a folder; give a sweep folder (outputs/multirun/<time>_<id>)",
              file=sys.stderr)
        return 2
    try:
        axis, at, deps = departures(args.sweep_dir, args.factor, args.lr, args.stats)
    except (FileNotFoundError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if axis is None:
        print(f"error: {str(args.sweep_dir)!r} holds no finished sweep over lr and width (or depth); give such a sweep's folder "
              "(python -m initnorm.train -m experiment=mup_mlp_sweep)", file=sys.stderr)
        return 2
    if not at:
        print(f"error: the jobs in {str(args.sweep_dir)!r} logged no per-layer statistics ({','.join(args.stats)}); "
              "run the sweep with the default callbacks (callbacks=default), not callbacks=none", file=sys.stderr)
        return 2
    text = render(axis, at, deps, args.factor)
    finished = [r for r in read_metrics(args.sweep_dir) if r.get("status") == "finished"]
    if args.lr is None and finished and all(r.get("diverged") for r in finished):
        lrs = ", ".join(f"2^{x:g}" for x in at.values())
        text = (f"Every job of this sweep diverged ({len(finished)} of {len(finished)}): there is no optimal learning rate, "
                f"so the statistics below are compared at the middle of the lr grid ({lrs}); "
                "pick the rate with --lr 2^-7, or sweep smaller rates.\n\n") + text
    try:
        write_atomic(args.sweep_dir / "diagnose.md", f"# Diagnostics of {args.sweep_dir.name}\n\n{text}")
    except OSError as exc:  # a read-only folder, a full disk: where, and what to do
        print(f"error: {cannot_write(exc, args.sweep_dir)}", file=sys.stderr)
        return 1
    print(text, end="")
    return 0
