"""Every command in README.md's and docs/'s fenced shell blocks runs, at a tiny size.

Each block's lines are read as a reader would paste them (``\\`` joins a continued line, ``#`` starts a
comment). What a command needs but the page leaves to the reader (``<time>_<id>``, ``<folder holding
both>``) is filled in with a folder an earlier command of this test made. A command that cannot run
here says why in ``NOT_HERE`` (a cluster, a server, an install, minutes of training), and the list
must name every one of those that the pages hold, so a new page's command is either run or
explained. The commands are split round-robin into ``SHARDS`` tests that the suite's workers share (a
placeholder's folder is made in the shard when no earlier command of it made one). To stay within
about a minute on two cores: a training command's every job is composed
and checked in this process (the preflight every ``initnorm-train`` runs first; a sweep's seeds
once, with its first seed: a seed changes no rule the preflight checks), and its first job trains
for two steps in its own folder (copied where a command before it trained the same job: pages repeat a
sweep under another launcher); the other commands run in this process at the sizes ``SMALL`` gives them.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TINY = {"steps": "2", "trainer.val_check_interval": "2", "log_every": "1", "callbacks": "none", "trainer.enable_progress_bar": "false",
        "checkpoint.every_n_steps": "0"}
SMALL = {  # appended to a command's own options (argparse: the last one wins)
    "initnorm.probe": ["--batch", "16", "--mlp-width", "32", "--mlp-depth", "6", "--depth", "4"],
    "initnorm.coord_check": ["--steps", "1", "--widths", "16,32", "--depths", "2"],
}
NOT_HERE = {  # the start of a command -> why this test does not run it
    "pip install": "an install: tests/test_package.py installs the wheel, with and without the launchers extra",
    "make ": "a fresh .venv and an install (minutes); `make test` is this suite",
    "tensorboard --logdir": "a server; tests/test_tb.py reads the event files it shows",
    "eval ": "a shell's completion: tests/test_console.py installs it in bash",
    "python -m initnorm.reproduce": "every experiment at full size (an hour); tests/test_reproduce.py runs each with --ci at a few steps",
    "python -m initnorm.bench": "the benchmark: timings, not for a shared machine (tests/test_bench.py checks its parts)",
    "export ": "lines of a SLURM batch script (docs/slurm.md), not commands",
    "apt-get ": "installs a system package",
    "source ": "activates the .venv an install made: the shell's state, not a command to run",
    "python scripts/tb_screenshot.py": "needs Chromium and a TensorBoard server",
    "python -m initnorm.diagnose": "needs the events of an lr x width sweep: tests/test_transfer.py runs it on a small real one",
    "initnorm-transfer": "needs a finished search's folder: tests/test_search.py runs it on a tiny one",
    "python examples/": "a worked example of docs/library.md: tests/test_library.py runs each as the page shows it",
    "mlflow ui": "a server; tests/test_trackers.py reads the store it shows",
    "wandb sync": "an upload to W&B's servers; tests/test_trackers.py reads the offline runs it would send",
}
NEEDS_CLUSTER = "hydra/launcher=slurm"  # tests/test_launchers.py runs it on a stand-in SLURM


def shell_blocks(path) -> list[str]:
    """The commands of ``path``'s fenced shell blocks (``bash``, or unlabelled ones of commands), one per line."""
    commands, lang, lines = [], None, []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            if lang is None:
                lang, lines = line[3:].strip() or "text", []
                continue
            if lang in ("bash", "sh", "text"):
                joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
                for cmd in joined.splitlines():
                    cmd = re.sub(r"\s+#.*$", "", cmd).strip()
                    if cmd and not cmd.startswith("#") and (lang == "bash" or cmd.startswith(("python -m",
                                                                                              "initnorm-", "python scripts", "make"))):
                        commands.append(cmd)
            lang = None
        elif lang is not None:
            lines.append(line)
    return commands


def every_command() -> list[tuple[str, str]]:
    """Each page's commands, without a leading ``VAR=value`` (``PYTHONPATH=.``: the checkout, which this test has on its path)."""
    return [(p.relative_to(ROOT).as_posix(), re.sub(r"^(?:[A-Z_]+=\S*\s+)+", "", c)) for p in PAGES for c in shell_blocks(p)]


def module_of(cmd: str) -> tuple[str, list[str]]:
    """``initnorm-train a=b`` / ``python -m initnorm.train a=b`` -> ("initnorm.train", ["a=b"])."""
    words = shlex.split(cmd)
    if words[:2] == ["python", "-m"]:
        return words[2], words[3:]
    return "initnorm." + words[0].removeprefix("initnorm-").replace("-", "_"), words[1:]


def merged(overrides: list[str], extra: dict[str, str]) -> list[str]:
    """``overrides`` with ``extra``'s keys set (replacing the same key, so a value is never given twice)."""
    return [o for o in overrides if o.partition("=")[0].lstrip("+~") not in extra] + [f"{k}={v}" for k, v in extra.items()]


def why_not(cmd: str) -> str | None:
    if NEEDS_CLUSTER in cmd:
        return "needs a SLURM cluster: tests/test_launchers.py runs its sweeps on a stand-in SLURM (tests/fake_slurm.py)"
    return next((why for start, why in NOT_HERE.items() if cmd.startswith(start)), None)


def test_the_pages_hold_commands_and_every_one_that_is_not_run_says_why():
    commands = every_command()
    assert len(commands) > 40, commands
    unknown = [c for _, c in commands if why_not(c) is None and not c.startswith(("python -m initnorm.", "initnorm-"))]
    assert not unknown, f"commands that neither run here nor say why (add them to NOT_HERE): {unknown}"
    assert all(any(c.startswith(start) for _, c in commands) for start in NOT_HERE), "a reason for a command no page holds any more"


SHARDS = 3  # the commands split round-robin into this many tests, so that the suite's workers share them


def runnable() -> list[tuple[str, str]]:
    return [(page, cmd) for page, cmd in every_command() if not why_not(cmd)]


TRAINED: dict[tuple[str, ...], Path] = {}  # a first job's overrides -> its finished run, in this test process


def train_first_job(args: list[str], folder, where: str = "") -> None:
    """Compose and check every job of ``args`` (as the command does before it trains); train the first for two steps,
    unless a command before it in this process trained the same job (``TRAINED``). The first job's config is the conftest
    Composer's (Hydra composes once per choice of config groups; tests/test_composer.py holds it equal to Hydra's own):
    Hydra's composition of each first job cost ~0.1 s of CPU, ~5 s over the shards."""
    from initnorm.cli.preflight import check_command_line
    from initnorm.cli.train import train
    from tests.conftest import compose

    multirun = "-m" in args
    overrides = [re.sub(r"^seed=([^,]+),.*$", r"seed=\1", a) for a in args if a != "-m"]
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    jobs = check_command_line((["-m"] if multirun else []) + merged(overrides, {key: str(folder)}))
    assert jobs, where
    tiny = TINY | ({"warmup": "1"} if any(o.startswith("warmup=") for o in jobs[0].overrides) else {})
    first = tuple(o for o in merged(jobs[0].overrides, tiny) if not o.lstrip("+~").startswith("hydra"))
    if first in TRAINED:  # the same job on another page or launcher (the launcher is hydra/...): its run is copied
        shutil.copytree(TRAINED[first], folder / "first")
        return
    assert train(compose(*first), folder / "first")["status"] == "finished", where
    TRAINED[first] = folder / "first"


def test_the_commands_are_shared_by_the_shards():
    commands = runnable()
    assert sum(len(commands[k::SHARDS]) for k in range(SHARDS)) == len(commands) >= 25


@pytest.mark.parametrize("shard", range(SHARDS))
def test_every_command_of_the_pages_runs_at_a_tiny_size(tmp_path, monkeypatch, capsys, shard):
    monkeypatch.chdir(tmp_path)  # a command's default folders (outputs/...) land here
    made: dict[str, str] = {}  # what a later command's placeholder stands for

    def folder_for(what: str) -> str:
        """The folder a placeholder stands for, made here when no earlier command of this shard made one."""
        if what not in made:
            if what == "sweep":
                train_first_job(["-m", "seed=1"], tmp_path / "made_sweep")
                made[what] = str(tmp_path / "made_sweep")
            else:
                out_dir = str(tmp_path / "made_coord")
                from initnorm.cli.coord_check import main as coord_main
                assert coord_main(SMALL["initnorm.coord_check"] + ["--out", out_dir]) in (0, 1)
                made[what] = out_dir
        return made[what]

    ran = []
    for page, cmd in runnable()[shard::SHARDS]:
        module, args = module_of(cmd)
        where = f"{page}: {cmd}"
        if module == "initnorm.train":
            folder = tmp_path / f"run{len(ran)}"
            train_first_job(args, folder, where)
            if "-m" in args:
                made.setdefault("sweep", str(folder))  # a folder of job records, for initnorm-summarize
            ran.append(where)
            continue
        if "<" in " ".join(args) or any(a.startswith("outputs/multirun/") for a in args):  # a placeholder, or a folder named
            # by an earlier command of the page (whose folder this test moved): a folder an earlier command of this test made
            if module == "initnorm.coord_check":  # --from: the job folders of a coordinate check
                args = ["--from", folder_for("coord check")]
            else:
                sweep = folder_for("sweep")
                args = [sweep if a.startswith(("<", "outputs/multirun/")) else a for a in args if a not in ("holding", "both>")]
        if module in SMALL and "--from" not in args:
            cut = args.index("--") if "--" in args else len(args)
            out_dir = str(tmp_path / f"out{len(ran)}")
            args = args[:cut] + SMALL[module] + ["--out", out_dir] + args[cut:]
            if module == "initnorm.coord_check":
                made.setdefault("coord check", out_dir)
        main = __import__(f"initnorm.cli.{module.split('.')[1]}", fromlist=["main"]).main
        code = main(args)
        out = capsys.readouterr()
        allowed = (0, 1) if module == "initnorm.coord_check" else (0,)
        assert code in allowed, f"{where}: exit {code}\n{out.out[-1500:]}\n{out.err[-1500:]}"
        assert "error" not in out.err.lower(), f"{where}: {out.err[-1500:]}"
        ran.append(where)
    assert ran
