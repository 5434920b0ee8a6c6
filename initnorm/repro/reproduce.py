"""Reproduce the source documents: ``python -m initnorm.reproduce [--only KEY ...] [--ci]``.

Each experiment is one command of the framework (a Hydra multirun or an instrument command);
its output folder is read back and set beside the document's numbers in ``results/README.md``,
with the PNGs and CSVs copied next to it. ``--ci`` runs every experiment at a few steps into a
temporary folder so the commands cannot rot (tests/test_reproduce.py).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from initnorm.repro import compare, index
from initnorm.repro import reference as ref
from initnorm.repro.compare import seed_table
from initnorm.results import write_atomic

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Experiment:
    key: str
    title: str
    module: str
    args: list[str]
    ci_args: list[str]
    compare: Callable[[Path], str]
    artifacts: tuple[str, ...] = ("summary.md", "summary.csv", "*.png", "*.svg", "*.csv")
    notes: str = ""
    folder_arg: str = "hydra.sweep.dir={}"
    # Exit statuses that are results, not breakage, and what they mean (the report says so).
    exit_meaning: dict[int, str] = field(default_factory=lambda: {1: "a job of the sweep failed (its row in the table says which)"})
    expected_exit: tuple[int, ...] = (0,)
    # Beyond the documents and hours long at full size: run only when named (--only KEY)
    extra: bool = False


# Full-size sweeps train as stacked groups on every core (hydra/launcher=vectorized, docs/vectorized.md):
# measured faster than one job per core (local_parallel) for every sweep here (bench/RESULTS.md);
# the jobs that cannot stack (dropout) run alone inside the same launcher. CI runs are a few jobs
# of a few steps, where starting workers would cost more than it saves: the same launcher runs their
# groups one after another in the command's own process (engine=sequential), each job composed once
# per distinct choice of config groups (Hydra's basic launcher composed every job again: 40% of a CI run).
PARALLEL, SEQUENTIAL = "hydra/launcher=local_parallel", "hydra.launcher.engine=sequential"
VECTORIZED = "hydra/launcher=vectorized"
PROBE_FILES = ("probe.txt", "*.png", "*.csv")
COORD_FILES = ("verdict.txt", "coord.png", "coord.csv")
COORD_EXIT = {1: "the coordinate check's verdict failed (the verdict is below)"}

EXPERIMENTS: list[Experiment] = [
    Experiment(
        "deck_7a",
        "Deck §7a: signal and gradients through depth at initialisation (8 blocks, pre-LN vs post-LN, std 0.02 and 0.25)",
        "initnorm.probe",
        ["decoder", "--depth=8", "--norms=pre,post", "--stds=0.02,0.25", "--seed=1"],
        ["--depth=2"],
        compare.deck_7a,
        artifacts=PROBE_FILES,
        folder_arg="--out={}",
    ),
    Experiment(
        "deck_7b",
        "Deck §7b: pre-LN vs post-LN, with and without warmup (6 blocks, 1,500 steps, 3 seeds)",
        "initnorm.train",
        ["-m", "experiment=norm_warmup", "norm=pre,post", "warmup=0,200", "seed=1,2,3", "callbacks=none", VECTORIZED],
        ["steps=20", "warmup=0,10", "seed=1", "trainer.val_check_interval=10", SEQUENTIAL],
        lambda f: seed_table(f, ref.DECK_7B_KEYS, ref.DECK_7B) + compare.sweep_figures(f),
    ),
    Experiment(
        "deck_7c",
        "Deck §7c: LayerNorm vs RMSNorm (the default Decoder, 1,500 steps, 3 seeds)",
        "initnorm.train",
        ["-m", "experiment=norm_type", "norm_type=layernorm,rmsnorm", "seed=1,2,3", "callbacks=none", VECTORIZED],
        ["steps=20", "seed=1", "trainer.val_check_interval=10", SEQUENTIAL],
        lambda f: seed_table(f, ref.DECK_7C_KEYS, ref.DECK_7C) + compare.sweep_figures(f),
    ),
    Experiment(
        "deck_7d",
        "Deck §7d: the µP coordinate check (widths 16 to 256, SP vs µP, 10 AdamW steps at 0.01)",
        "initnorm.coord_check",
        ["--widths=16,32,64,128,256", "--params=sp,mup", "--steps=10", "--lr=0.01", "--seed=1"],
        ["--widths=16,32", "--steps=2"],
        compare.deck_7d,
        artifacts=COORD_FILES,
        folder_arg="--out={}",
        exit_meaning=COORD_EXIT,
        expected_exit=(0, 1),
    ),
    Experiment(
        "deck_7d_depth",
        "Beside deck §7d: the coordinate check across depth (2 to 32 blocks at width 64), µP vs depth-µP vs CompleteP",
        "initnorm.coord_check",
        ["--widths=64", "--depths=2,4,8,16,32", "--params=mup,depth_mup,completep", "--steps=10", "--lr=0.01", "--seed=1"],
        ["--widths=16", "--depths=2,4", "--steps=2"],
        compare.deck_7d_depth,
        artifacts=COORD_FILES,
        folder_arg="--out={}",
        exit_meaning=COORD_EXIT,
        expected_exit=(0, 1),
    ),
    Experiment(
        "deck_7e",
        "Deck §7e: width × learning rate × parameterisation (1,500 steps, 3 seeds)",
        "initnorm.train",
        ["-m", "experiment=mup_sweep", "width=16,64", "lr=0.01,0.03,0.1", "param=sp,mup", "seed=1,2,3", "callbacks=none", VECTORIZED],
        ["steps=20", "trainer.val_check_interval=10", "lr=0.01", "seed=1", SEQUENTIAL],
        lambda f: seed_table(f, ref.DECK_7E_KEYS, ref.DECK_7E) + compare.sweep_figures(f),
    ),
    Experiment(
        "depth_transfer",
        "Learning-rate transfer across depth: the Decoder at width 64, depths 2-16, µP vs depth-µP vs CompleteP (issue 15)",
        "initnorm.train",
        ["-m", "experiment=depth_transfer", "callbacks=none", VECTORIZED],
        ["steps=10", "depth=2,4", "lr=0.0078125,0.015625", "seed=1", SEQUENTIAL],
        compare.depth_transfer,
        extra=True,
    ),
    Experiment(
        "chapter_probe",
        "Chapter steps 1-2: the 30-layer MLP probe at initialisation (tanh and ReLU, width 256, seed 0)",
        "initnorm.probe",
        ["mlp", "--mlp-depth=30", "--mlp-width=256", "--batch=512", "--mlp-seed=0"],
        ["--mlp-depth=4", "--mlp-width=32", "--batch=32"],
        compare.chapter_probe,
        artifacts=PROBE_FILES,
        folder_arg="--out={}",
    ),
    Experiment(
        "chapter_deep_mlp",
        "Chapter step 2: training the 30-layer MLP, tanh and ReLU × four inits (400 steps, seeds 0, 1, 2)",
        "initnorm.train",
        ["-m", "experiment=deep_mlp_train", "seed=0,1,2", "callbacks=none", VECTORIZED],
        ["seed=0", "steps=5", "init=xavier,he", SEQUENTIAL],
        compare.chapter_deep_mlp,
    ),
    Experiment(
        "chapter_regularization",
        "Chapter step 3: dropout and weight decay on the char MLP (1,500 steps, seeds 0, 1, 2)",
        "initnorm.train",
        ["-m", "experiment=regularization", "seed=0,1,2", "callbacks=none", VECTORIZED],
        ["seed=0", "steps=20", "trainer.val_check_interval=10", "regularizer=none,dropout_0.5", SEQUENTIAL],
        compare.chapter_regularization,
    ),
    Experiment(
        "chapter_mup",
        "Chapter step 4: µP on the wide MLP, widths 64 / 256 / 1024 × lr 2^-12 ... 2^-4 × SP / µP (250 steps, seeds 0, 1, 2)",
        "initnorm.train",
        ["-m", "experiment=mup_mlp_sweep", "seed=0,1,2", "callbacks=none", VECTORIZED],
        ["seed=0", "steps=10", "width=64", "lr=0.0078125,0.015625", SEQUENTIAL],
        compare.chapter_mup,
    ),
]


def ci_argv(exp: Experiment) -> list[str]:
    """The experiment's arguments with the CI overrides replacing the same keys."""
    replaced = {a.split("=", 1)[0] for a in exp.ci_args}
    kept = [a for a in exp.args if a.split("=", 1)[0] not in replaced]
    return kept + exp.ci_args


def run(exp: Experiment, out: Path, ci: bool) -> dict:
    """Run one experiment into ``out``; return the command, its wall time in seconds and its exit status.

    A non-zero status does not stop the reproduction: it is recorded and the report says what it
    means (the coordinate check exits with 1 when its verdict fails; a sweep, when a job failed)."""
    args = ci_argv(exp) if ci else exp.args
    argv = [sys.executable, "-m", exp.module, *args, exp.folder_arg.format(out)]
    print(f"[{exp.key}] {' '.join(argv[1:])}", flush=True)
    start = time.perf_counter()
    status = subprocess.run(argv, cwd=ROOT, check=False).returncode
    return {"command": f"python -m {exp.module} {' '.join(args)}", "seconds": time.perf_counter() - start, "ci": ci, "exit_status": status}


def collect(exp: Experiment, out: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for pattern in exp.artifacts:
        for f in out.glob(pattern):
            shutil.copy2(f, dest / f.name)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 60 else f"{seconds / 60:.1f} min"


def _sections(report: Path) -> dict[str, str]:
    """The sections of an existing report by title (``## title`` up to the next one)."""
    if not report.is_file():
        return {}
    parts = re.split(r"^## ", report.read_text(encoding="utf-8"), flags=re.MULTILINE)[1:]
    return {p.split("\n", 1)[0].strip(): ("## " + p).rstrip("\n") + "\n" for p in parts}


# The one section of results/README.md written by hand: the results folders no experiment here makes (sweeps run for an
# issue, each folder with its own README), kept as it is at the end of every report.
INDEX_TITLE = "Other results (not run by make reproduce)"


def write_report(results: Path, out: Path) -> Path:
    """``results/README.md`` from every experiment that has run into ``out`` (any subset, any order), then the
    hand-written index of the other results folders (``INDEX_TITLE``) as it was."""
    sections, total, extra = [], 0.0, 0.0
    kept = _sections(results / "README.md")
    for exp in EXPERIMENTS:
        folder, timing = out / exp.key, results / exp.key / "timing.json"
        if not timing.is_file():  # not run into this results folder
            continue
        t = json.loads(timing.read_text())
        if exp.extra:
            extra += t["seconds"]
        else:
            total += t["seconds"]
        if not folder.is_dir() and exp.title in kept:  # its runs are not here (another machine, a cleaned outputs/): keep its section
            sections.append(kept[exp.title])
            continue
        size = " (CI-sized: `--ci`)" if t.get("ci") else ""
        command = t.get("command", f"python -m {exp.module} {' '.join(exp.args)}")
        sections += [f"## {exp.title}\n", f"`{command}` took {_duration(t['seconds'])} here{size}.\n"]
        status = t.get("exit_status", 0)
        if status:
            sections.append(f"It exited with status {status}: "
                            f"{exp.exit_meaning.get(status, 'the command failed; its output above the report says why')}.\n")
        try:
            # The report sits one folder above each experiment's PNGs: point the links there.
            sections.append(re.sub(r"\]\(([^)/]+\.png)\)", rf"]({exp.key}/\1)", exp.compare(folder)))
        except Exception as exc:  # a run that wrote nothing readable must not hide the other sections
            sections.append(f"No table: the comparison could not read {folder} ({type(exc).__name__}: {exc}).\n")
        notes = results / exp.key / "NOTES.md"
        if notes.is_file():
            sections.append(notes.read_text(encoding="utf-8"))
    head = [
        "# Reproduction of the deck and the chapter, and every other result\n",
        "Made by `make reproduce` (`python -m initnorm.reproduce`); every number below comes from the runs it made.",
        f"Wall time of the documents' experiments below (what `make reproduce` runs): {_duration(total)} in all, on a 2-core CPU"
        + (f"; the extras, run when named: {_duration(extra)}.\n" if extra else ".\n"),
        "## Every folder of results/\n",
        ("What each is, the command that made it, how long it took and what it shows in one line (the documents' experiments "
         "read it from their NOTES.md; the ones beyond the documents were run by hand, several commands each, listed on "
         "their own page). The documents' experiments follow, one section each.\n"),
        "\n".join(index.rows(results, EXPERIMENTS)) + "\n",
    ]
    if INDEX_TITLE in kept:
        sections.append(kept[INDEX_TITLE])
    report = results / "README.md"
    write_atomic(report, "\n".join(head + sections) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m initnorm.reproduce", description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", help=f"experiment keys: {', '.join(e.key for e in EXPERIMENTS)} "
                   f"(default: all but {', '.join(e.key for e in EXPERIMENTS if e.extra)}, which run only when named)")
    p.add_argument("--ci", action="store_true", help="a few steps per experiment, into --out")
    p.add_argument("--out", default=str(ROOT / "outputs" / "reproduce"), help="where the runs go")
    p.add_argument("--results", default=str(ROOT / "results"), help="where the report and artifacts go")
    a = p.parse_args(argv)
    chosen = [e for e in EXPERIMENTS if (e.key in a.only if a.only else not e.extra)]
    unknown = set(a.only or []) - {e.key for e in EXPERIMENTS}
    if unknown:
        print(f"error: unknown experiment {', '.join(sorted(unknown))}; known: {', '.join(e.key for e in EXPERIMENTS)}", file=sys.stderr)
        return 2
    out, results = Path(a.out), Path(a.results)
    broken = []
    for exp in chosen:
        folder = out / exp.key
        timing = run(exp, folder, a.ci)
        if timing["exit_status"] not in exp.expected_exit:
            broken.append(f"{exp.key} (exit status {timing['exit_status']})")
        collect(exp, folder, results / exp.key)
        write_atomic(results / exp.key / "timing.json", json.dumps(timing) + "\n")
    print(f"report: {write_report(results, out)}")
    if broken:
        print(f"error: {', '.join(broken)} did not finish as expected; the report says what each gave", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
