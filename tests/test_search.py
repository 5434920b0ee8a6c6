"""hparams_search=lr_base (initnorm/cli/search.py): a tiny seeded search reruns to the same trials, a resumed one
continues its study without training its finished trials again, a diverged trial is pruned, a missing extra is one line."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("optuna")

SEARCH = ["-m", "hparams_search=lr_base", "steps=5", "trainer.val_check_interval=5", "width=8", "callbacks=none", "logger=csv",
          "summary.plots=[]", "hydra.sweeper.seeds=[1]", "hydra.sweeper.n_jobs=2"]


def search(monkeypatch, folder: Path, n_trials: int) -> dict:
    """Run the search in this process (a subprocess would spend its time importing torch) and read its search.json."""
    from initnorm.cli import console, sweep
    from initnorm.cli.train import main

    for name in (sweep.SWEPT_ENV, console.TOTAL_ENV, console.START_ENV):
        monkeypatch.delenv(name, raising=False)  # the callbacks set them for the jobs; monkeypatch restores them after
    monkeypatch.setattr(sys, "argv", ["initnorm.train", *SEARCH, f"hydra.sweeper.n_trials={n_trials}", f"hydra.sweep.dir={folder}"])
    main()
    return json.loads((folder / "search.json").read_text())


def lrs(summary: dict) -> list[float]:
    return [t["params"]["lr"] for t in summary["trials"]]


def test_search_reruns_to_the_same_best_trial_and_resumes_its_study(tmp_path, monkeypatch):
    first = search(monkeypatch, tmp_path / "a", 3)
    again = search(monkeypatch, tmp_path / "b", 3)
    assert [t["state"] for t in first["trials"]] == ["COMPLETE"] * 3
    assert lrs(again) == lrs(first) and again["best"] == first["best"]
    assert all(1e-4 <= lr <= 1e-1 for lr in lrs(first))
    assert (tmp_path / "a" / "search.png").stat().st_size > 0 and "Best: trial" in (tmp_path / "a" / "search.md").read_text()

    done = {p: p.stat().st_mtime_ns for p in (tmp_path / "a").rglob("metrics.json")}
    resumed = search(monkeypatch, tmp_path / "a", 4)
    assert lrs(resumed)[:3] == lrs(first) and len(resumed["trials"]) == 4
    assert len(set(lrs(resumed))) == 4  # the resumed sampler does not ask its first trials' values again
    assert {p: p.stat().st_mtime_ns for p in done} == done  # finished trials are not trained again
    assert len(list((tmp_path / "a").rglob("metrics.json"))) == 4


def test_a_diverged_seed_prunes_the_trial_and_a_crash_fails_it():
    import optuna

    from initnorm.cli.search import SearchSweeper

    study = optuna.create_study()
    numbers = [study.ask({"lr": optuna.distributions.FloatDistribution(1e-4, 1.0, log=True)}).number for _ in range(3)]
    SearchSweeper.tell(study, numbers[0], [(2.0, ""), (3.0, "")])
    SearchSweeper.tell(study, numbers[1], [(2.0, ""), (None, "diverged")])
    SearchSweeper.tell(study, numbers[2], [(None, "failed"), (None, "diverged")])
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "PRUNED", "FAIL"]
    assert math.isclose(trials[0].value, 2.5)


def test_a_search_without_optuna_is_one_line_naming_the_extra(monkeypatch):
    from initnorm.cli import preflight, search
    from initnorm.errors import ConfigError

    monkeypatch.setattr(search, "installed", lambda module: module != "optuna")
    with pytest.raises(ConfigError, match=r"hparams_search needs Optuna .*pip install 'initnorm\[search\]'"):
        preflight.check_command_line(["-m", "hparams_search=lr_base", "hydra.sweep.dir=/tmp/unused"])
