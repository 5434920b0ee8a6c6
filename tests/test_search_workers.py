"""hydra.sweeper.workers=N (initnorm/cli/search_workers.py, initnorm/search/workers.py, worker.py): workers that each ask their next trial
from one journal file; a worker killed mid-trial leaves its trial to be asked again; a rerun resumes; one worker asks
what the batches ask; the median pruner prunes a trial at a validation point and its job is recorded pruned.

The sweep runs in this process (tests/inproc.py); its workers are processes, which is the point: each forked from
the fork server that imported torch once (launch/workers.py), kept for the whole test session."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from initnorm.results import read_metrics
from tests.inproc import command

pytest.importorskip("optuna")

SEARCH = ["-m", "hparams_search=lr_base", "width=8", "steps=5", "trainer.val_check_interval=5", "callbacks=none", "logger=csv",
          "summary.plots=[]", "hydra.sweeper.seeds=[1]"]


def search(folder: Path, *overrides: str):
    ran = command(*SEARCH, *overrides, f"hydra.sweep.dir={folder}", cwd=folder.parent)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    return json.loads((folder / "search.json").read_text()), ran


def study_of(folder: Path):
    from initnorm.search import study as search_study

    return search_study.existing(folder)


def signal_first_worker(folder: Path, signum: int, seen: list, stop: threading.Event) -> None:
    """Send ``signum`` to the worker of the first trial asked, while it runs (before it is told); record its trial as
    (number, lr, pid)."""
    from optuna.trial import TrialState

    while not stop.is_set():
        study = study_of(folder) if (folder / "search.journal").is_file() else None
        running = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)) if "worker" in t.user_attrs] if study else []
        if running:
            pid = running[0].user_attrs["worker"]["pid"]
            os.kill(pid, signum)
            seen.append((running[0].number, running[0].params["lr"], pid))
            return
        time.sleep(0.05)


def test_two_workers_survive_a_killed_one_and_a_rerun_resumes_the_search(tmp_path):
    folder = tmp_path / "s"
    killed: list[tuple] = []
    stop = threading.Event()
    watcher = threading.Thread(target=signal_first_worker, args=(folder, signal.SIGKILL, killed, stop), daemon=True)
    watcher.start()
    try:
        summary, ran = search(folder, "hydra.sweeper.workers=2", "hydra.sweeper.n_trials=3")
    finally:
        stop.set()
        watcher.join()
    assert (folder / "search.journal").is_file() and not (folder / "search.db").exists()
    states = [(t["state"], t["params"]["lr"]) for t in summary["trials"]]
    assert len(killed) == 1 and ("FAIL", killed[0][1]) in states, states
    assert [s for s, lr in states].count("COMPLETE") == 3 and ("COMPLETE", killed[0][1]) in states  # asked again, with its value
    assert "in trial" in ran.stderr and "asked again with its values" in ran.stderr, ran.stderr[-2000:]
    assert "(2 workers, local processes, each asking its next trial as its last one ends)" in ran.stdout, ran.stdout[:2000]
    assert len(read_metrics(folder)) == 3 and all(j["status"] == "finished" for j in read_metrics(folder))

    done = {p: p.stat().st_mtime_ns for p in folder.rglob("metrics.json")}
    resumed, _ = search(folder, "hydra.sweeper.workers=2", "hydra.sweeper.n_trials=4")
    assert [(t["state"], t["params"]["lr"]) for t in resumed["trials"]][: len(states)] == states
    assert [t["state"] for t in resumed["trials"]].count("COMPLETE") == 4
    assert {p: p.stat().st_mtime_ns for p in done} == done  # the finished trials are not trained again
    assert len(read_metrics(folder)) == 4


def test_one_worker_asks_the_trials_the_batches_of_one_ask(tmp_path):
    """Asynchrony lets workers ask in any order; one worker asks, trial for trial, what the default search asks with
    n_jobs=1 given the same losses (replayed here in memory, each ask as SearchSweeper asks it), so the same seed asks
    the same trials run after run (the default's seeded rerun: test_search.py)."""
    import optuna

    from initnorm.cli.search import SearchSweeper
    from initnorm.cli.search_plan import distributions

    worker, _ = search(tmp_path / "w", "hydra.sweeper.workers=1", "hydra.sweeper.n_trials=3")
    assert [t["state"] for t in worker["trials"]] == ["COMPLETE"] * 3
    batches, study = SearchSweeper(seed=0, n_jobs=1), optuna.create_study()
    space = distributions({"lr": "tag(log, interval(1e-4, 1e-1))"})
    for trial in worker["trials"]:
        asked = batches.ask(study, space)
        assert asked.params["lr"] == trial["params"]["lr"]
        study.tell(asked.number, trial["loss"])


def test_the_median_pruner_stops_a_trial_at_a_validation_point_and_its_job_says_pruned(tmp_path):
    """Two trials already told with a validation loss of 0.5 at step 5 (no 8-wide model gets there in 5 steps): the
    median pruner stops the next trial at its step-5 validation, of 10 steps; the trial is PRUNED, its job's record
    says pruned (not failed, not stopped), and the command ends 0."""
    import optuna

    from initnorm.search import study as search_study

    folder = tmp_path / "p"
    folder.mkdir()
    study = search_study.open_study(folder)
    lr = optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)
    for value in (0.01, 0.02):
        study.add_trial(optuna.create_trial(params={"lr": value}, distributions={"lr": lr}, value=0.5,
                                            intermediate_values={5: 0.5}))
    summary, ran = search(folder, "steps=10", "hydra.sweeper.workers=1", "hydra.sweeper.n_trials=3",
                          "hydra.sweeper.pruner=median", "hydra.sweeper.startup_trials=1")
    assert [t["state"] for t in summary["trials"]] == ["COMPLETE", "COMPLETE", "PRUNED"]
    [job] = read_metrics(folder)
    assert job["status"] == "pruned" and job["steps"] == 5 and "stopped" not in job
    assert job["pruned"].startswith("the search's median pruner stopped it at step 5 (validation loss ")
    assert "did not finish" not in ran.stdout and "1 pruned" in (folder / "search.md").read_text()
    assert "| Pruned |" in (folder / "summary.md").read_text() and "seed 1 at step 5" in (folder / "summary.md").read_text()


@pytest.mark.parametrize("overrides, line", [
    (["hydra.sweeper.workers=0"], r"hydra.sweeper.workers=0 is invalid: a positive integer, or null .* `hydra.sweeper.workers=2`"),
    (["hydra.sweeper.pruner=median"], r"hydra.sweeper.pruner=median stops a trial inside its worker; fix it with `hydra.sweeper.wo"),
    (["hydra.sweeper.workers=2", "hydra.sweeper.hang_timeout_s=0"],
     r"hydra.sweeper.hang_timeout_s=0 is invalid: seconds > 0 .* or null for never; fix it with `hydra.sweeper.hang_timeout_s=900`"),
    (["hydra.sweeper.workers=2", "hydra.sweeper.retries=-1"], r"hydra.sweeper.retries=-1 is invalid: an integer from 0; fix it with `h"),
    (["hydra.sweeper.workers=2", "hydra.sweeper.pruner=hyperband"], r"hydra.sweeper.pruner='hyperband' is invalid: one of none, median"),
    (["hydra.sweeper.workers=2", "hydra/launcher=vectorized"],
     r"hydra.sweeper.workers=2 trains each trial in its worker .* not through VectorizedLauncher; fix it with `hydra/launcher=basic`"),
])
def test_a_bad_worker_setting_is_one_line_before_hydra_starts(overrides, line):
    from initnorm.cli import preflight
    from initnorm.errors import ConfigError

    with pytest.raises(ConfigError, match=line):
        preflight.check_command_line(["-m", "hparams_search=lr_base", *overrides, "hydra.sweep.dir=/tmp/unused"])


def test_a_journal_that_is_not_a_study_is_one_line(tmp_path):
    from initnorm.cli.search import SearchSweeper
    from initnorm.errors import ConfigError

    (tmp_path / "search.journal").write_text("not a journal\n" * 10)
    with pytest.raises(ConfigError, match=r"search.journal is not a study initnorm wrote \(JSONDecodeError\); delete it"):
        SearchSweeper().study(tmp_path)


@pytest.mark.matrix  # a real signal to a search's worker from outside, and its hang timeout waited out: `make test-signals`
def test_a_stopped_worker_is_named_ended_after_the_timeout_and_its_trial_asked_again(tmp_path):
    folder = tmp_path / "h"
    stopped: list[tuple] = []
    stop = threading.Event()
    watcher = threading.Thread(target=signal_first_worker, args=(folder, signal.SIGSTOP, stopped, stop), daemon=True)
    watcher.start()
    try:
        summary, ran = search(folder, "hydra.sweeper.workers=2", "hydra.sweeper.n_trials=3", "hydra.sweeper.hang_timeout_s=8")
    finally:
        stop.set()
        watcher.join()
    [(number, lr, pid)] = stopped
    states = [(t["state"], t["params"]["lr"]) for t in summary["trials"]]
    assert ("FAIL", lr) in states and ("COMPLETE", lr) in states, states  # asked again with its values
    assert [s for s, _ in states].count("COMPLETE") == 3, states
    assert re.search(rf"warning: search worker [01] \(pid {pid}, trial {number}\) has spent no CPU for", ran.stderr), ran.stderr[-3000:]
    assert f"(stopped by SIGSTOP or SIGTSTP: `kill -CONT {pid}` resumes it)" in ran.stderr, ran.stderr[-3000:]
    assert "ended as hung (hydra.sweeper.hang_timeout_s=8)" in ran.stderr and "asked again with its values" in ran.stderr


def test_the_watch_names_a_still_worker_then_ends_it(tmp_path):
    """The heartbeat's arithmetic on a clock of the test's own: a number that moves keeps a worker alive; one that stands
    still is named at half the timeout and ended at the timeout; a worker with no beat yet (starting, or a SLURM task in
    the queue) is never hung."""
    from initnorm.search import hang as search_hang

    watch = search_hang.Watch(tmp_path, timeout_s=20)
    beat = search_hang.beat_file(tmp_path, "0.1")
    beat.parent.mkdir()
    beat.write_text("7.000\n")  # left by a run before: removed at the start
    watch.started("0.1")
    assert not beat.exists() and watch.verdict("0.1", now=1000) is None  # no beat yet: starting, or in SLURM's queue
    beat.write_text("1.000\n")
    assert watch.verdict("0.1", now=10) is None  # its first beat: a change
    beat.write_text("2.500\n")
    assert watch.verdict("0.1", now=19) is None  # moved: still from 19
    assert watch.verdict("0.1", now=28) is None and watch.verdict("0.1", now=29) == "name"
    assert watch.verdict("0.1", now=35) is None and watch.verdict("0.1", now=39) == "end"
    done = search_hang.start_beating(tmp_path, "2.1")
    try:
        deadline = time.monotonic() + 10
        while not search_hang.beat_file(tmp_path, "2.1").is_file() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert float(search_hang.beat_file(tmp_path, "2.1").read_text()) >= 0
    finally:
        done.set()
