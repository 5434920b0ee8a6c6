"""A vectorised group's members are set up without Hydra's ``run_job`` (initnorm/cli/member_setup.py), and their folders
hold what ``run_job`` leaves there: the same ``.hydra/`` files byte for byte, the same ``train.log`` lines, the same
records. The sweeps run in this process (the sequential engine), once each way: through ``run_job`` (as where a Hydra
callback asks for each job's start) and without it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hydra.experimental.callback import Callback

from initnorm.cli import run
from tests.inproc import command

# no summary figure: 0.5 s of CPU a sweep, and what these tests compare is the job folders (test_mlp checks the figures)
SWEEP = ["steps=2", "trainer.val_check_interval=1", "callbacks=none", "trainer.enable_progress_bar=false", "checkpoint.every_n_steps=0",
         "summary.plots=[]", "hydra/launcher=vectorized", "hydra.launcher.engine=sequential", "hydra.launcher.max_group=4",
         "hydra.sweep.dir=sweep"]
CASES = {
    # a seed, a value and a config group (init: each member its own composition) swept: the overrides set in place
    "in place": ["-m", "seed=1,2", "lr=0.01,0.02", "init=normal,xavier"],
    # a key added: every job composed as Hydra composes it (Composer.job_config), its files saved from that
    "composed": ["-m", "seed=1,2", "+trainer.benchmark=false"],
}
TIME = re.compile(r"^\[[^\]]*\]")  # a log line's time
MS = re.compile(r"[\d.]+ ms")  # a fit's step time


def folder_files(sweep: Path, cwd: Path) -> dict[str, str]:
    """Every job folder's .hydra/ files (the launch folder's path written as CWD), train.log lines (times and step times
    taken out) and records' validation losses, by path below the sweep folder."""
    out = {}
    for job in sorted(p.parent for p in sweep.rglob("metrics.json")):
        rel = job.relative_to(sweep)
        for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):
            out[f"{rel}/.hydra/{name}"] = (job / ".hydra" / name).read_text().replace(str(cwd), "CWD")
        out[f"{rel}/train.log"] = MS.sub("X ms", "\n".join(TIME.sub("", line) for line in (job / "train.log").read_text().splitlines()))
        out[f"{rel}/val_history"] = json.dumps(json.loads((job / "metrics.json").read_text())["val_history"])
    return out


@pytest.mark.parametrize("case", CASES)
def test_a_members_folder_is_what_hydras_run_job_leaves_without_it(tmp_path, monkeypatch, case):
    args = [*CASES[case], *SWEEP]
    with monkeypatch.context() as m:
        m.setattr(run, "_job_callbacks", lambda hydra_context: True)  # every member through run_job
        (tmp_path / "hydra").mkdir()
        theirs = command(*args, cwd=tmp_path / "hydra")
    assert theirs.returncode == 0, theirs.stdout[-2000:] + theirs.stderr[-3000:]

    calls = []
    monkeypatch.setattr(run, "run_job", lambda *a, **k: calls.append(k) or pytest.fail("a member went through run_job"))
    (tmp_path / "cheap").mkdir()
    ours = command(*args, cwd=tmp_path / "cheap")
    assert ours.returncode == 0 and not calls, ours.stdout[-2000:] + ours.stderr[-3000:]

    expected = folder_files(tmp_path / "hydra" / "sweep", tmp_path / "hydra")
    got = folder_files(tmp_path / "cheap" / "sweep", tmp_path / "cheap")
    assert len(got) == 5 * (8 if case == "in place" else 2) and set(got) == set(expected)
    for key, text in expected.items():
        assert got[key] == text, key
    assert [ln for ln in ours.stdout.splitlines() if ln.startswith("start ")] == \
        [ln for ln in theirs.stdout.splitlines() if ln.startswith("start ")]


class CountJobs(Callback):
    """A Hydra callback of one's own, told of each job's start and end: it writes them into the launch folder's told.txt
    (a file: Hydra imports this module by its dotted path, which may not be the test's own module object)."""

    def on_job_start(self, config, **kwargs) -> None:
        self._tell("start", config)

    def on_job_end(self, config, job_return, **kwargs) -> None:
        self._tell("end", config)

    @staticmethod
    def _tell(what: str, config) -> None:
        with open(Path(config.hydra.runtime.cwd) / "told.txt", "a") as f:
            f.write(f"{what} {config.hydra.job.num}\n")


def test_a_hydra_callback_of_ones_own_is_told_of_every_members_start_and_end(tmp_path):
    ran = command("-m", "seed=1,2", "lr=0.01,0.02", *SWEEP, "+hydra.callbacks.count._target_=tests.test_member_setup.CountJobs",
                   cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    told = sorted((tmp_path / "told.txt").read_text().splitlines())
    assert told == sorted(f"{what} {num}" for what in ("start", "end") for num in range(4))
    records = [json.loads(p.read_text()) for p in (tmp_path / "sweep").rglob("metrics.json")]
    assert len(records) == 4 and all(r["group"]["size"] == 4 for r in records)


def test_a_member_whose_set_up_fails_is_recorded_failed_and_the_others_train(tmp_path, monkeypatch):
    from initnorm.cli.member_setup import MemberSetup

    ready = MemberSetup.member

    def member(self, job):
        if "seed=2" in job.overrides:
            raise RuntimeError("this member's set-up broke")
        return ready(self, job)

    monkeypatch.setattr(MemberSetup, "member", member)
    ran = command("-m", "seed=1,2,3", *SWEEP, cwd=tmp_path)
    assert ran.returncode == 1 and "error: job 1 failed: RuntimeError: this member's set-up broke" in ran.stderr, ran.stderr[-3000:]
    records = {p.parent.name: json.loads(p.read_text()) for p in (tmp_path / "sweep").rglob("metrics.json")}
    assert {k: r["status"] for k, r in records.items()} == {"seed=1": "finished", "seed=2": "failed", "seed=3": "finished"}
    assert records["seed=1"]["group"]["size"] == 2
