"""Reproduce the source documents: ``python -m initnorm.reproduce [--only KEY ...] [--ci]``.

Each experiment is one command of the framework (a Hydra multirun or an instrument command);
its output folder is read back and set beside the document's numbers in ``results/README.md``,
with the PNGs and CSVs copied next to it. ``--ci`` runs every experiment at a few steps into a
temporary folder so the commands cannot rot (tests/test_reproduce.py).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from initnorm import reference as ref
from initnorm.results import group_rows, mean_sd, read_metrics, write_atomic

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Experiment:
    key: str
    title: str
    module: str
    args: list[str]
    ci_args: list[str]
    compare: Callable[[Path], str]
    artifacts: tuple[str, ...] = ("summary.md", "summary.csv", "*.png", "*.csv")
    notes: str = ""
    folder_arg: str = "hydra.sweep.dir={}"


def _fmt(x: float) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def seed_table(folder: Path, keys: tuple[str, ...], reference: dict, metric: str = "final_val_loss", label: str = "Deck") -> str:
    """Our mean ± sd and per-seed values beside the document's, one row per configuration.

    A row agrees when the means differ by no more than the two seed spreads added together."""
    _, _, rows = group_rows(read_metrics(folder))
    ours = {tuple(str(r.get(k, "")) for k in keys): r for r in rows}
    lines = [
        "| " + " | ".join(keys) + f" | ours (mean ± sd) | ours per seed | {label} (mean ± sd) | {label} per seed | agreement |",
        "|" + "---|" * (len(keys) + 5),
    ]
    for key, theirs in reference.items():
        row = ours.get(key)
        mu, sd, n = mean_sd(row["values"][metric]) if row else (math.nan, math.nan, 0)
        per_seed = ", ".join("diverged" if v is None else _fmt(v) for v in row["values"][metric]) if row else "not run"
        if len(theirs) == 2:  # the document gives mean and sd only
            t_mu, t_sd, t_seeds = theirs[0], theirs[1], "—"
        else:
            t_mu, t_sd, _ = mean_sd(theirs)
            t_seeds = ", ".join(f"{v:.3f}" for v in theirs)
        if n == 0:
            verdict = "no result"
        elif abs(mu - t_mu) <= sd + t_sd:
            verdict = "within the seed spreads"
        else:
            verdict = f"differs by {mu - t_mu:+.3f}"
        lines.append(f"| {' | '.join(key)} | {_fmt(mu)} ± {_fmt(sd)} | {per_seed} | {t_mu:.3f} ± {t_sd:.3f} | {t_seeds} | {verdict} |")
    return "\n".join(lines) + "\n"


EXPERIMENTS: list[Experiment] = [
    Experiment(
        "deck_7b",
        "Deck §7b: pre-LN vs post-LN, with and without warmup (6 blocks, 1,500 steps, 3 seeds)",
        "initnorm.train",
        ["-m", "experiment=norm_warmup", "norm=pre,post", "warmup=0,200", "seed=1,2,3", "callbacks=none"],
        ["steps=20", "warmup=0,10", "trainer.val_check_interval=10"],
        lambda f: seed_table(f, ref.DECK_7B_KEYS, ref.DECK_7B),
    ),
    Experiment(
        "deck_7c",
        "Deck §7c: LayerNorm vs RMSNorm (the default Decoder, 1,500 steps, 3 seeds)",
        "initnorm.train",
        ["-m", "experiment=norm_type", "norm_type=layernorm,rmsnorm", "seed=1,2,3", "callbacks=none"],
        ["steps=20", "trainer.val_check_interval=10"],
        lambda f: seed_table(f, ref.DECK_7C_KEYS, ref.DECK_7C),
    ),
    Experiment(
        "deck_7e",
        "Deck §7e: width × learning rate × parameterisation (1,500 steps, 3 seeds)",
        "initnorm.train",
        ["-m", "experiment=mup_sweep", "width=16,64", "lr=0.01,0.03,0.1", "param=sp,mup", "seed=1,2,3", "callbacks=none"],
        ["steps=20", "trainer.val_check_interval=10", "lr=0.01", "seed=1"],
        lambda f: seed_table(f, ref.DECK_7E_KEYS, ref.DECK_7E),
    ),
]


def ci_argv(exp: Experiment) -> list[str]:
    """The experiment's arguments with the CI overrides replacing the same keys."""
    replaced = {a.split("=", 1)[0] for a in exp.ci_args}
    kept = [a for a in exp.args if a.split("=", 1)[0] not in replaced]
    return kept + exp.ci_args


def run(exp: Experiment, out: Path, ci: bool) -> float:
    """Run one experiment into ``out``; return its wall time in seconds."""
    argv = [sys.executable, "-m", exp.module, *(ci_argv(exp) if ci else exp.args), exp.folder_arg.format(out)]
    print(f"[{exp.key}] {' '.join(argv[1:])}", flush=True)
    start = time.perf_counter()
    subprocess.run(argv, check=True, cwd=ROOT)
    return time.perf_counter() - start


def collect(exp: Experiment, out: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for pattern in exp.artifacts:
        for f in out.glob(pattern):
            shutil.copy2(f, dest / f.name)


def write_report(results: Path, out: Path) -> Path:
    """``results/README.md`` from every experiment that has run into ``out`` (any subset, any order)."""
    sections, total = [], 0.0
    for exp in EXPERIMENTS:
        folder, timing = out / exp.key, results / exp.key / "timing.json"
        if not folder.is_dir() or not timing.is_file():
            continue
        seconds = json.loads(timing.read_text())["seconds"]
        total += seconds
        sections += [f"## {exp.title}\n", f"`python -m {exp.module} {' '.join(exp.args)}` took {seconds / 60:.1f} min here.\n", exp.compare(folder)]
        notes = results / exp.key / "NOTES.md"
        if notes.is_file():
            sections.append(notes.read_text(encoding="utf-8"))
    head = [
        "# Reproduction of the deck and the chapter\n",
        "Made by `make reproduce` (`python -m initnorm.reproduce`); every number below comes from the runs it made.",
        f"Wall time of the experiments below: {total / 60:.1f} min in all, on a 2-core CPU.\n",
    ]
    report = results / "README.md"
    write_atomic(report, "\n".join(head + sections) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", help=f"experiment keys: {', '.join(e.key for e in EXPERIMENTS)}")
    p.add_argument("--ci", action="store_true", help="a few steps per experiment, into --out")
    p.add_argument("--out", default=str(ROOT / "outputs" / "reproduce"), help="where the runs go")
    p.add_argument("--results", default=str(ROOT / "results"), help="where the report and artifacts go")
    a = p.parse_args(argv)
    chosen = [e for e in EXPERIMENTS if not a.only or e.key in a.only]
    unknown = set(a.only or []) - {e.key for e in EXPERIMENTS}
    if unknown:
        print(f"error: unknown experiment {', '.join(sorted(unknown))}; known: {', '.join(e.key for e in EXPERIMENTS)}", file=sys.stderr)
        return 2
    out, results = Path(a.out), Path(a.results)
    for exp in chosen:
        folder = out / exp.key
        seconds = run(exp, folder, a.ci)
        collect(exp, folder, results / exp.key)
        write_atomic(results / exp.key / "timing.json", json.dumps({"seconds": seconds, "ci": a.ci}) + "\n")
    print(f"report: {write_report(results, out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
