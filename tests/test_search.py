"""hparams_search=lr_base (initnorm/cli/search.py): a tiny seeded search reruns to the same trials, a resumed one
continues its study (one journal file) without training its finished trials again, a diverged trial is pruned, a missing extra is one line;
initnorm-transfer (initnorm/cli/transfer.py) trains the best trial at a target width."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from initnorm.results import read_metrics
from tests.inproc import Ran, command, run

pytest.importorskip("optuna")

SEARCH = ["-m", "hparams_search=lr_base", "steps=5", "trainer.val_check_interval=5", "callbacks=none", "logger=csv",
          "summary.plots=[]", "hydra.sweeper.seeds=[1]", "hydra.sweeper.n_jobs=2"]


def run_search(folder: Path, n_trials: int, overrides: tuple[str, ...] = ("width=8",)) -> Ran:
    """The search, run in this process (tests/inproc.py: a subprocess would spend its time importing torch)."""
    return command(*SEARCH, *overrides, f"hydra.sweeper.n_trials={n_trials}", f"hydra.sweep.dir={folder}", cwd=folder.parent)


def search(folder: Path, n_trials: int, overrides: tuple[str, ...] = ("width=8",)) -> dict:
    """The search run in this process, finished; its search.json."""
    ran = run_search(folder, n_trials, overrides)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return json.loads((folder / "search.json").read_text())


def lrs(summary: dict) -> list[float]:
    return [t["params"]["lr"] for t in summary["trials"]]


def test_search_reruns_to_the_same_best_trial_and_resumes_its_study(tmp_path):
    first = search(tmp_path / "a", 3)
    again = search(tmp_path / "b", 3)
    assert [t["state"] for t in first["trials"]] == ["COMPLETE"] * 3
    assert lrs(again) == lrs(first) and again["best"] == first["best"]
    assert all(1e-4 <= lr <= 1e-1 for lr in lrs(first)) and first["log_scale"] == ["lr"]  # the figure's log axes
    assert (tmp_path / "a" / "search.png").stat().st_size > 0 and "Best: trial" in (tmp_path / "a" / "search.md").read_text()

    done = {p: p.stat().st_mtime_ns for p in (tmp_path / "a").rglob("metrics.json")}
    resumed = search(tmp_path / "a", 4)
    assert lrs(resumed)[:3] == lrs(first) and len(resumed["trials"]) == 4
    assert len(set(lrs(resumed))) == 4  # the resumed sampler does not ask its first trials' values again
    assert {p: p.stat().st_mtime_ns for p in done} == done  # finished trials are not trained again
    assert len(list((tmp_path / "a").rglob("metrics.json"))) == 4

    from initnorm.cli import transfer

    # one job: the best trial at width 12, seed 1
    moved = run(transfer.main, ["initnorm-transfer", str(tmp_path / "a"), "width=12"], tmp_path)
    assert moved.returncode == 0, moved.stderr[-3000:]
    [job] = read_metrics(tmp_path / "a_transfer")
    assert job["config"]["width"] == 12 and job["config"]["lr"] == resumed["best"]["params"]["lr"]
    row = f"| 12 | {job['final_val_loss']:.4f} | {resumed['best']['loss']:.4f} |"
    assert row in (tmp_path / "a_transfer" / "transfer_report.md").read_text()

    # --grid: width 12's own curve read from a results folder's runs.csv (2 + 0.1 (x - x0)^2 per seed, x0 one octave
    # above the transferred lr): its optimum, the shift +1 and the penalty 0.1 with intervals; the job trained above is reused.
    x0 = math.log2(resumed["best"]["params"]["lr"]) + 1
    write_grid(tmp_path / "grid", x0, "final_val_loss")
    moved = run(transfer.main, ["initnorm-transfer", str(tmp_path / "a"), "width=12", "--grid", str(tmp_path / "grid")], tmp_path)
    assert moved.returncode == 0, moved.stderr[-3000:]
    text = (tmp_path / "a_transfer" / "transfer_report.md").read_text()
    assert f"{row} {2 ** x0:.4g} | [{2 ** x0:.4g}, {2 ** x0:.4g}] | +1.00 | [+1.00, +1.00] | 0.1000 | [0.1000, 0.1000] |" in text
    assert "Every loss here is final_val_loss" in text and len(read_metrics(tmp_path / "a_transfer")) == 1


def write_grid(folder: Path, x0: float, metric: str) -> None:
    """A results folder keeping only runs.csv: param sp at width 12, five lrs an octave apart around 2^x0, seeds 1 and 2."""
    from initnorm.results import render_runs_csv

    folder.mkdir()
    records = [{"_dir": f"lr={2 ** (x0 + k)!r}/seed={s}", "job_num": i, "status": "finished", "seed": s, "diverged": False,
                "overrides": {"param": "sp", "width": 12, "lr": 2 ** (x0 + k), "seed": s}, "swept": ["param", "width", "lr", "seed"],
                "summary_metrics": [metric], metric: 2 + 0.1 * k * k + 0.01 * s}
               for i, (k, s) in enumerate((k, s) for k in range(-2, 3) for s in (1, 2))]
    (folder / "runs.csv").write_text(render_runs_csv(records))


def test_the_report_says_what_the_searchs_rate_was_carried_to_not_a_check_grids_other_rates(tmp_path):
    """``initnorm-transfer SEARCH depth=4 --check`` trains the transferred rate and a grid around it in one folder; the
    line that says where the rules carried the rate read every job and named the grid's highest (4x) as the carried one."""
    from initnorm.transfer.grid import report

    for k, lr in enumerate((0.001, 0.002, 0.004, 0.008)):  # the search's rate is 0.002; a rule halves every rate at depth 4
        job = tmp_path / f"lr={lr}" / "seed=1"
        job.mkdir(parents=True)
        record = {"status": "finished", "seed": 1, "job_num": k, "overrides": {"lr": str(lr), "depth": "4", "seed": "1"},
                  "config": {"lr": lr, "depth": 4}, "final_val_loss": 2.0 + k / 10,
                  "resolved": {"applied": {"from": {"depth": 2}, "lr_factor": 0.5}, "lr": lr / 2}}
        (job / "metrics.json").write_text(json.dumps(record))
    summary = {"best": {"params": {"lr": 0.002}, "loss": 2.05}, "objective": "mean final_val_loss over seeds [1]"}
    text = report(summary, tmp_path, "depth", 2, None, "")
    assert "The rules carried the lr to 0.001 at depth 4 " in text and "| 4 | 2.1000 | 2.0500 |" in text


def test_transfer_refuses_a_grid_the_search_did_not_score_and_a_missing_target(tmp_path):
    from initnorm.cli.transfer import grid_curves
    from initnorm.errors import ConfigError
    from initnorm.results import read_sweep

    write_grid(tmp_path / "grid", -7.0, "final_loss")
    records, from_csv = read_sweep(tmp_path / "grid")
    assert from_csv and len(records) == 10
    with pytest.raises(ConfigError, match="scores final_loss .* but the search scored final_val_loss"):
        grid_curves(records, "grid", "width", "sp", "final_val_loss", [12])
    with pytest.raises(ConfigError, match="holds no lr x width sweep for param=mup"):
        grid_curves(records, "grid", "width", "mup", "final_loss", [12])
    with pytest.raises(ConfigError, match="no width 256 for param=sp"):
        grid_curves(records, "grid", "width", "sp", "final_loss", [12, 256])
    assert sorted(grid_curves(records, "grid", "width", "sp", "final_loss", [12])[12]) == [1, 2]


def test_a_search_scores_the_experiments_metric_with_the_preset_grid_fixed_by_the_command_line(tmp_path):
    """experiment=mup_mlp_sweep merges its own grid (param, width, lr) into the space: param=mup and width=64 fix them,
    and each trial's loss is the chapter's score (final_loss, the mean of the last training batches), not final_val_loss."""
    overrides = ["experiment=mup_mlp_sweep", "param=mup", "width=64", "steps=4", "summary.tail_steps=2", "data.val_chars=1000"]
    summary = search(tmp_path, 2, overrides)
    assert summary["metric"] == "final_loss" and summary["objective"] == "mean final_loss over seeds [1]"
    jobs = read_metrics(tmp_path)
    assert {(j["config"]["width"], j["config"]["param"]["name"]) for j in jobs} == {(64, "mup")}
    assert sorted(t["loss"] for t in summary["trials"]) == sorted(j["final_loss"] for j in jobs)
    assert all(j["final_loss"] != j["final_val_loss"] for j in jobs)


def test_a_trial_a_killed_search_left_running_is_relaunched_with_its_value_from_an_earlier_search_db(tmp_path):
    """The study of an earlier initnorm (SQLite, search.db) is read into the journal file, its running trial included."""
    import optuna

    from initnorm.search.study import LEGACY_FILE, STUDY_FILE, STUDY_NAME

    folder = tmp_path / "killed"
    folder.mkdir()
    study = optuna.create_study(study_name=STUDY_NAME, storage=f"sqlite:///{folder / LEGACY_FILE}")
    study.enqueue_trial({"lr": 0.0123})
    study.ask({"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)})  # asked, never told: the run was killed
    before = (folder / LEGACY_FILE).read_bytes()
    ran = run_search(folder, 1)
    assert ran.returncode == 0, ran.stderr[-3000:]
    summary = json.loads((folder / "search.json").read_text())
    assert [(t["state"], t["params"]["lr"]) for t in summary["trials"]] == [("COMPLETE", 0.0123)]
    [job] = read_metrics(folder)
    assert job["config"]["lr"] == 0.0123
    assert f"read the study of {folder / LEGACY_FILE} into {folder / STUDY_FILE}" in ran.stdout
    assert (folder / LEGACY_FILE).read_bytes() == before and (folder / STUDY_FILE).is_file()


def test_transfer_trains_the_best_trial_with_the_searchs_overrides_and_seeds():
    from initnorm.cli.transfer import overrides_for
    from initnorm.errors import ConfigError

    summary = {"best": {"params": {"lr": 0.01}, "loss": 2.0}, "seeds": [1, 2],
               "overrides": ["hparams_search=lr_base", "param=mup", "width=64", "lr=0.5", "steps=20"]}
    assert overrides_for(summary, ["width=256,1024"], check=False) == ["param=mup", "steps=20", "lr=0.01", "seed=1,2", "width=256,1024"]
    checked = overrides_for(summary, ["width=256", "seed=3"], check=True)
    assert checked == ["param=mup", "steps=20", "lr=0.0025,0.005,0.01,0.02,0.04", "width=256", "seed=3"]
    with pytest.raises(ConfigError, match="width=256,1024"):
        overrides_for(summary, ["seed=3"], check=False)
    with pytest.raises(ConfigError, match=r"^lr is what the search found \(0.01\).*drop `lr=0.5`"):  # trained, reported as 0.01
        overrides_for(summary, ["width=256", "lr=0.5"], check=False)
    # Any axis: the search's own point becomes transfer.base, so a rule named on the command line carries its numbers.
    at = {"width": 64, "depth": 2, "batch_size": 32, "steps": 20}
    carried = overrides_for(summary, ["batch_size=128", "transfer.batch_rule=sqrt"], check=False, tuned_at=at)
    assert carried == ["param=mup", "width=64", "steps=20", "lr=0.01", "seed=1,2", "transfer.base.width=64", "transfer.base.depth=2",
                       "transfer.base.batch_size=32", "transfer.base.steps=20", "batch_size=128", "transfer.batch_rule=sqrt"]


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


def test_the_search_figure_and_table_call_a_pruned_trial_pruned(monkeypatch):
    """A PRUNED trial is one the pruner stopped or one with a diverged seed (search/pruning.py, search/study.py): the
    figure's legend and search.md say pruned, not diverged."""
    from initnorm import plots, search_report

    drawn = []
    monkeypatch.setattr(plots, "png", lambda fig: drawn.append(fig) or b"png")
    trials = [{"number": 0, "state": "COMPLETE", "params": {"lr": 0.01}, "loss": 2.0},
              {"number": 1, "state": "PRUNED", "params": {"lr": 0.5}, "loss": None}]
    assert search_report.figure(trials, trials[0], "final_val_loss", ["lr"]) == b"png"
    labels = [t.get_text() for t in drawn[0].axes[0].get_legend().get_texts()]
    assert labels == ["trial", "pruned", "best"]
    table = search_report.markdown({"best": trials[0], "trials": trials, "overrides": [], "objective": "x"}, {})
    assert "| 1 | pruned |" in table and "diverged" not in table


def test_a_search_without_optuna_is_one_line_naming_the_extra(monkeypatch):
    from initnorm.cli import preflight, search
    from initnorm.errors import ConfigError

    monkeypatch.setattr(search, "installed", lambda module: module != "optuna")
    with pytest.raises(ConfigError, match=r"hparams_search needs Optuna .*pip install 'initnorm\[search\]'"):
        preflight.check_command_line(["-m", "hparams_search=lr_base", "hydra.sweep.dir=/tmp/unused"])


@pytest.mark.parametrize("override, line", [
    ("seed=3", r"'seed=3': a search trains every trial at each seed of hydra.sweeper.seeds; fix it with `hydra.sweeper.seeds=\[3\]`"),
    ('hydra.sweeper.params.lr="range(1,3)"', r"hydra.sweeper.params.lr='range\(1,3\)' is not a search space; allowed: interval"),
])
def test_a_bad_search_is_one_line_before_hydra_starts(override, line):
    from initnorm.cli import preflight
    from initnorm.errors import ConfigError

    with pytest.raises(ConfigError, match=line):
        preflight.check_command_line(["-m", "hparams_search=lr_base", override, "hydra.sweep.dir=/tmp/unused"])


def test_a_preset_grid_left_in_the_space_is_refused_at_its_width():
    from initnorm.cli import preflight
    from initnorm.errors import ConfigError

    with pytest.raises(ConfigError, match=r"hydra.sweeper.params.width='64,256,1024': a search runs at one width .* `width=64`"):
        preflight.check_command_line(["-m", "hparams_search=lr_base", "experiment=mup_mlp_sweep", "param=mup",
                                      "hydra.sweep.dir=/tmp/unused"])


def test_mup_mults_searches_lr_and_both_multipliers_and_each_trial_job_gets_them(tmp_path, monkeypatch):
    """hparams_search=mup_mults: lr and µP's output_mult and attn_mult, every value handed to the trial's jobs (a stand-in
    launcher records them; nothing trains); a multiplier the command line sets leaves the space; param=sp is refused."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from initnorm import search_report
    from initnorm.cli import preflight
    from initnorm.cli.compose import CONF_DIR
    from initnorm.cli.search import SearchSweeper, space_of
    from initnorm.errors import ConfigError

    monkeypatch.setattr(search_report, "figure", lambda *a: None)  # drawn in the test above; a second of matplotlib here
    monkeypatch.chdir(tmp_path)  # the merge below resolves hydra.sweep.dir, whose resolver makes the folder: here, not in the checkout
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="train", overrides=["hparams_search=mup_mults", "param=mup", "width=64"], return_hydra_config=True)
    GlobalHydra.instance().clear()
    params = OmegaConf.to_container(cfg.hydra.sweeper, resolve=True)
    assert set(params["params"]) == {"lr", "param.output_mult", "param.attn_mult"}

    class Recorder:
        def __init__(self):
            self.jobs: list[list[str]] = []

        def launch(self, jobs, initial_job_idx):
            self.jobs += jobs
            return [type("Ret", (), {"working_dir": None})() for _ in jobs]  # no folder: each trial fails, nothing trains

    sweeper = SearchSweeper(**{k: v for k, v in params.items() if k != "_target_"} | {"n_trials": 2, "n_jobs": 2})
    sweeper.config, sweeper.launcher = OmegaConf.merge(cfg, {"hydra": {"sweep": {"dir": str(tmp_path)}}}), Recorder()
    sweeper.sweep(["param=mup", "width=64"])
    jobs = sweeper.launcher.jobs
    for job in jobs:  # 2 trials x the preset's 2 seeds
        values = dict(o.split("=", 1) for o in job)
        assert 1e-4 <= float(values["lr"]) <= 0.1 and 1 / 16 <= float(values["param.output_mult"]) <= 16
        assert 1 / 8 <= float(values["param.attn_mult"]) <= 8 and values["param"] == "mup"
    assert len(jobs) == 4 and len({j[-2] for j in jobs}) == 2
    assert set(space_of(["param=mup", "param.attn_mult=1.0"], params["params"])) == {"lr", "param.output_mult"}  # an MLP's
    with pytest.raises(ConfigError, match=r"param.output_mult is not a key of this config \(param=sp has .*`param=mup`"):
        preflight.check_command_line(["-m", "hparams_search=mup_mults", "hydra.sweep.dir=/tmp/unused"])
    preflight.check_command_line(["-m", "hparams_search=umup_mults", "param=umup", "hydra.sweep.dir=/tmp/unused"])  # u-µP's keys exist


def _asked(folder: Path, batches: int, told_last: bool = True) -> list[float]:
    """The learning rates a search in ``folder`` asks over ``batches`` batches of 2 (Optuna in process, a quadratic
    for the loss), as SearchSweeper.sweep asks them: the trials a killed run left running first, then new ones;
    ``told_last=False``: the last batch is asked and never told (the run was killed while it trained)."""
    from optuna.trial import TrialState

    from initnorm.cli.search import SearchSweeper
    from initnorm.cli.search_plan import distributions
    from initnorm.search.study import resumed_trials

    sweeper = SearchSweeper(seed=0, n_trials=100, n_jobs=2, params={"lr": "tag(log, interval(1e-4, 1.0))"})
    space = distributions({"lr": "tag(log, interval(1e-4, 1.0))"})
    study = sweeper.study(folder)
    pending = resumed_trials(study, space, folder / "search.journal")
    for b in range(batches):
        batch = pending[:2] if b == 0 else []
        batch += [(t.number, t.params) for t in (sweeper.ask(study, space) for _ in range(2 - len(batch)))]
        if b < batches - 1 or told_last:
            for number, values in batch:
                study.tell(number, (math.log10(values["lr"]) + 2) ** 2)
    return [t.params["lr"] for t in study.get_trials(deepcopy=False) if t.state in (TrialState.COMPLETE, TrialState.RUNNING)]


def test_a_resumed_search_asks_the_trials_the_uninterrupted_one_asks(tmp_path):
    """The sampler is seeded from the study's state at every ask: killed after batch 2 was asked (not told) and rerun,
    the search asks, trial for trial, what the uninterrupted search asked (seeded once at load, it asked other values)."""
    (tmp_path / "whole").mkdir()
    (tmp_path / "cut").mkdir()
    whole = _asked(tmp_path / "whole", 4)
    _asked(tmp_path / "cut", 2, told_last=False)
    resumed = _asked(tmp_path / "cut", 3)  # batch 2 launched again, then batches 3 and 4 asked
    assert len(whole) == len(resumed) == 8 and resumed == whole


def test_a_search_db_that_is_not_a_study_is_one_line(tmp_path):
    from initnorm.cli.search import SearchSweeper
    from initnorm.errors import ConfigError

    (tmp_path / "search.db").write_text("not a database\n" * 100)
    with pytest.raises(ConfigError, match=r"search.db is not a study initnorm wrote \(DatabaseError\); delete it"):
        SearchSweeper().study(tmp_path)


def test_a_search_prints_its_progress_and_its_rates_to_the_digits_that_tell_them_apart(tmp_path):
    """Issue 36: it printed `sweep of the jobs`, `(job 1)` with no total and no time left, and a table of unsorted
    18-digit rates. Now: trials x seeds as the total, every sweep's progress, rates as short as keeps them apart, in order."""
    import re

    ran = run_search(tmp_path, 3)
    assert ran.returncode == 0, ran.stderr[-3000:]
    summary, out = json.loads((tmp_path / "search.json").read_text()), ran.stdout
    assert "search of 3 trials x 1 seed = 3 jobs" in out and "(job 1 of 3)" in out and "(job 3 of 3)" in out, out
    # time left once the jobs' ends tell a rate, "estimating" before (cli/console.py: start-up is not a job's time)
    assert re.search(r"\[1/3 done, (about \S+ left|estimating time left)\]", out) and "[3/3 done]" in out, out
    assert not any(repr(lr) in out for lr in lrs(summary)), out  # the start, done and summary lines
    shown = re.findall(r"^\| (\d\.\d+(?:e-\d+)?) \|", (tmp_path / "summary.md").read_text(), re.MULTILINE)
    assert len(shown) == 3 and [float(x) for x in shown] == sorted(float(x) for x in shown)
    assert all(len(x.partition("e")[0].replace(".", "").lstrip("0")) <= 4 for x in shown) and len(set(shown)) == 3


def test_labels_tables_and_legends_round_a_searchs_rates_only_as_far_as_they_stay_apart():
    from initnorm.plots import PLOTS
    from initnorm.results import group_rows, render_markdown, short_values
    from initnorm.tb import run_label

    assert short_values(["0.004430375245218269", "0.004430575245218269", "0.01", "3e-4"]) == {
        "0.004430375245218269": "0.00443", "0.004430575245218269": "0.004431", "0.01": "0.01", "3e-4": "3e-4"}
    assert run_label({"lr": "0.013981961408994055", "norm": "pre", "seed": "1"}, ["lr", "norm"], 1) == "lr=0.01398 norm=pre seed=1"
    recs = [{"status": "finished", "seed": 1, "swept": ["lr", "seed"], "overrides": {"lr": lr, "seed": "1"}, "final_val_loss": loss,
             "val_history": [[0, 3.3], [10, loss]], "config": {}}
            for lr, loss in (("0.013981961408994055", 3.0), ("0.004430375245218269", 3.2), ("0.0009931205580412234", 3.3))]
    table = render_markdown(*group_rows(recs))
    assert [line.split(" | ")[0] for line in table.splitlines()[2:]] == ["| 0.0009931", "| 0.00443", "| 0.01398"]
    svg = PLOTS.get("val_curves")(recs).files["val_curves.svg"].decode()
    assert "lr 0.0009931: 3.300" in svg and "0.004430375245218269" not in svg
