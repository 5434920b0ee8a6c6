"""What the command line shows: --help, tab completion, -m with --cfg, a sweep's progress line."""

import importlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from initnorm.cli import console
from tests.conftest import ROOT, run_cli
from tests.inproc import run, run_module


def test_help_starts_with_what_it_does_the_common_commands_and_the_launchers(tmp_path):
    """In this process, as `python -m initnorm.train --help` runs (tests/inproc.py); the sweep's first line below is
    the real process, the one that shows the entry point's start-up."""
    helped = run_module("initnorm.train", ["--help"], cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr[-2000:]
    out = helped.stdout
    assert out.startswith("initnorm-train: train a tiny model")
    order = [out.index(s) for s in ("== Common commands ==", "hydra/launcher=local_parallel", "== Configuration groups (group=option) ==",
                                    "norm_type: layernorm, none, rmsnorm")]
    assert order == sorted(order)
    launchers = out[out.index("== Launchers"):out.index("== Configuration groups")]
    assert all(f"hydra/launcher={name}" in launchers for name in ("local_parallel", "vectorized", "slurm")), launchers
    own = out[out.index("== Your own"):out.index("== Configuration groups")]
    assert all(f"{group}=custom {group}." in own for group in ("optim", "model", "data", "init")), own


HELPED = ("initnorm.summarize", "initnorm.coord_check", "initnorm.probe", "initnorm.diagnose", "initnorm.reproduce", "initnorm.roles",
          "initnorm.cli.transfer")


def test_every_command_answers_help_with_its_usage(tmp_path):
    """``--help`` through each command's ``python -m`` entry (its module run as ``__main__``, in this process:
    tests/inproc.py); ``-h`` below through its ``main`` (the same parser)."""
    answers = {}
    for module in HELPED:
        ran = run_module(module, ["--help"], cwd=tmp_path)
        answers[module] = (ran.returncode, ran.stdout, ran.stderr)
    for module, (code, out, err) in answers.items():
        assert code == 0 and out.startswith("usage: python -m " + module), (module, out[:300], err[-300:])
        assert "error" not in out + err, (module, err[-300:])
    coord = answers["initnorm.coord_check"][1]
    assert "(default: 16,32,64,128,256)" in coord and "(default: 10)" in coord
    assert "Anything after -- is a training-config override" in coord


@pytest.mark.parametrize("module", HELPED)
def test_every_command_answers_the_short_help_flag(module, capsys):
    try:
        code = importlib.import_module(module).main(["-h"])  # initnorm-roles returns; the argparse commands exit
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    assert code in (0, None) and out.out.startswith("usage: python -m " + module), (out.out[:300], out.err[-300:])


def test_the_terminal_summary_ends_with_the_transfer_verdicts(tmp_path):
    table = ("| a |\n|---|\n| 1 |\n\n![x](x.png)\n\n## Learning-rate transfer\n\n- SP does not transfer: ...\n- µP borderline: ...\n\n"
             "| setting | width |\n|---|---|\n")
    text = console.summary_text(tmp_path, table)
    assert text.startswith("| a |") and "- SP does not transfer: ...\n- µP borderline: ..." in text
    assert "| setting |" not in text and "![" not in text


def test_tab_completion_installs_in_bash():
    # As the console script `initnorm-train` runs it (Hydra names the command from argv[0]), in this process; bash installs it.
    from initnorm.cli.train import main

    installer = run(main, ["initnorm-train", "--shell-completion", "install=bash"])
    assert installer.returncode == 0, installer.stderr[-2000:]
    script = installer.stdout
    assert "hydra_bash_completion" in script and script.rstrip().endswith("initnorm-train")
    installed = subprocess.run(["bash", "-c", f'{script}\ncomplete -p initnorm-train'], capture_output=True, text=True, timeout=60)
    assert installed.returncode == 0 and "-F hydra_bash_completion initnorm-train" in installed.stdout
    query = run(main, ["initnorm-train", "-sc", "query=bash"], env={"COMP_LINE": "initnorm-train norm_t", "COMP_POINT": "21"})
    assert query.returncode == 0 and "norm_type=" in query.stdout.split()  # what <TAB> offers


def test_cfg_with_multirun_is_one_line_saying_what_to_do(tmp_path):
    ran = run_module("initnorm.train", ["-m", "norm=pre,post", "seed=1,2", "--cfg", "job"], cwd=tmp_path)
    err = ran.stderr
    assert ran.returncode == 2 and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert "drop -m" in line and "`initnorm-train norm=pre seed=1 --cfg job`" in line


@pytest.mark.parametrize(("argv", "said"), [
    (["--config-dir", "/no/such/folder", "steps=5"], ["--config-dir '/no/such/folder' is not a folder", "leave --config-dir out"]),
    (["--config-name", "trian"], ["--config-name 'trian' is not a config of initnorm's (known: train)", "`--config-name train`"]),
])
def test_a_config_flag_naming_nothing_is_one_line(argv, said):
    """Hydra's own answers: a line and a HYDRA_FULL_ERROR hint (a missing --config-dir), a search path (a missing config)."""
    from initnorm.cli.argv import parse
    from initnorm.cli.preflight import check_config_flags
    from initnorm.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        check_config_flags(parse(argv))
    assert all(s in str(err.value) for s in said) and "\n" not in str(err.value)
    check_config_flags(parse(["--config-dir", str(ROOT / "conf"), "--config-name", "train"]))  # both there: nothing said


def ended_at(folder: Path, when: float, status: str = "finished") -> None:
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({"status": status}))
    os.utime(folder / "metrics.json", (when, when))


def test_sweep_progress_counts_finished_jobs_in_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(console.TOTAL_ENV, "4")
    monkeypatch.setenv(console.START_ENV, "1000")
    ended_at(tmp_path / "0", 1030)
    ended_at(tmp_path / "1", 1045, "failed")
    (tmp_path / "2").mkdir()
    (tmp_path / "2" / "metrics.json").write_text(json.dumps({"status": "running"}))
    # the rate from the first end on: one job ended in the 15 s since, two left
    assert console.sweep_progress(tmp_path, now=1060) == "2/4 done, about 30s left"
    assert console.duration(3725) == "1h02m" and console.duration(45) == "45s"
    # A group that still needs 5 minutes by its own step time: the sweep does not end before it (a rate from small
    # first jobs said 48 s beside a group's own 1m22s in make reproduce's §7e).
    assert console.sweep_progress(tmp_path, now=1060, at_least=300) == "2/4 done, about 5m00s left"
    assert console.sweep_progress(tmp_path, now=1060, at_least=10) == "2/4 done, about 30s left"


def test_time_left_counts_no_start_up_and_says_estimating_until_it_can_tell(tmp_path, monkeypatch):
    """The rate ran from the sweep's start, its imports, checks and compiling counted as training: a canonical sweep's
    first estimate said "about 11m51s left" and it took 2m32s."""
    monkeypatch.setenv(console.TOTAL_ENV, "8")
    monkeypatch.setenv(console.START_ENV, "1000")
    assert console.sweep_progress(tmp_path, now=1100) == "0/8 done, estimating time left"  # nothing ended: no rate yet
    for i in range(2):  # a group of two ends 100 s in: start-up, and one group's training
        ended_at(tmp_path / f"a{i}", 1100)
    assert console.sweep_progress(tmp_path, now=1100.5) == "2/8 done, estimating time left"  # none ended since
    for i in range(2):
        ended_at(tmp_path / f"b{i}", 1110)
    assert console.sweep_progress(tmp_path, now=1110) == "4/8 done, about 20s left"  # 2 jobs in 10 s; from the start: 1m50s
    ended_at(tmp_path / "old", 500)  # a resumed sweep's job, finished before this command: no part of the rate
    monkeypatch.setenv(console.TOTAL_ENV, "9")
    assert console.sweep_progress(tmp_path, now=1110) == "5/9 done, about 20s left"


def test_time_left_waits_for_a_whole_cycle_of_jobs_side_by_side(tmp_path, monkeypatch):
    """Two workers' first jobs end 3 s apart: 1 job in 3 s read as the rate made a canonical sweep "about 23s left"."""
    monkeypatch.setenv(console.TOTAL_ENV, "12")
    monkeypatch.setenv(console.START_ENV, "1000")
    for name, when in (("a", 1060), ("b", 1063)):
        ended_at(tmp_path / name, when)
        record = json.loads((tmp_path / name / "metrics.json").read_text()) | {"wall_s": 55.0}
        (tmp_path / name / "metrics.json").write_text(json.dumps(record))
        os.utime(tmp_path / name / "metrics.json", (when, when))
    assert console.sweep_progress(tmp_path, now=1064) == "2/12 done, estimating time left"


def test_end_lines_count_one_by_one_whichever_process_prints_them(tmp_path, monkeypatch, capsys):
    """A vectorised group's members print their end lines after every record is written, beside another group ending:
    the first group's six lines read 7, 7, 8, 8, 8, 8 of 12, counted from the records in the folder."""
    monkeypatch.setenv(console.TOTAL_ENV, "12")
    monkeypatch.setenv(console.START_ENV, "1000")
    for i in range(12):
        ended_at(tmp_path / str(i), 1100)
    record = {"status": "finished", "final_val_loss": 2.0, "steps": 10, "ms_per_step": 1.0}
    for i in range(6):
        console.job_finished(f"seed={i}", record, tmp_path / str(i), tmp_path)
    counts = [line.split("[")[1].split(" done")[0] for line in capsys.readouterr().out.splitlines()]
    assert counts == [f"{k}/12" for k in range(1, 7)]
    monkeypatch.setenv(console.START_ENV, "2000")  # the next command in the same folder counts from one again
    console.job_finished("seed=0", record, tmp_path / "0", tmp_path)
    assert "[1/12 done" in capsys.readouterr().out


def test_a_sweep_says_so_before_it_checks_its_jobs(tmp_path):
    """The first line comes from the command's first module, before torch's import and the checks (seconds for a
    sweep of thousands); here a bad value in the sweep's last job still finds it printed."""
    proc = run_cli("-m", "seed=1,2", "steps=2,oops", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout.splitlines()[0] == "sweep: composing and checking every job before any trains"
    assert "steps" in proc.stderr and not (tmp_path / "outputs").exists()


def test_checking_a_sweep_shows_its_progress_every_few_seconds(capsys):
    clock = iter([0.0, 0.0, 1.0, 3.5, 4.0, 7.0, 8.0]).__next__
    progress = console.CheckProgress(every=3.0, clock=clock)
    for done in range(6):
        progress(done, 5)
    assert capsys.readouterr().out.splitlines() == ["checked 2 of 5 jobs", "checked 4 of 5 jobs", "checked 5 jobs in 8s"]
    quick = console.CheckProgress(every=3.0, clock=iter([0.0, 0.0, 0.1, 0.2]).__next__)
    for done in range(3):
        quick(done, 2)
    assert capsys.readouterr().out == ""  # checked within the interval: the plan follows at once


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_check_count_is_one_line_that_updates():
    """A log gets a line every few seconds; a terminal one line rewritten in place, often, ending on the time taken."""
    screen = Terminal()
    progress = console.CheckProgress(every=3.0, clock=iter([0.0, 0.0, 0.3, 0.4, 0.7, 1.0]).__next__, stream=screen)
    for done in (0, 100, 200, 300, 1000):
        progress(done, 1000)
    # padded: the last text is shorter than the one it overwrites
    assert screen.getvalue() == "\rchecked 100 of 1,000 jobs\rchecked 300 of 1,000 jobs\rchecked 1,000 jobs in 1s \n"
    cut = Terminal()
    progress = console.CheckProgress(every=3.0, clock=iter([0.0, 0.0, 0.5]).__next__, stream=cut)
    progress(0, 9), progress(1, 9)
    progress.end()  # a bad value in job 2: its error line starts on a line of its own
    assert cut.getvalue() == "\rchecked 1 of 9 jobs\n"
    progress.end()
    assert cut.getvalue().count("\n") == 1


def test_the_vectorised_plan_counts_groups_by_size():
    line = console.groups_line(10_000, [12] * 833 + [4], 0)
    assert line == "vectorized: 10,000 jobs in 834 stacked groups (833 of 12, 1 of 4) and 0 alone"
    assert console.groups_line(1, [], 1) == "vectorized: 1 job in 0 stacked groups and 1 alone"


def test_single_runs_are_named_by_what_sets_them_apart():
    from initnorm.cli.sweep import run_name, what_sets_apart

    overrides = ["norm=post", "trainer.enable_progress_bar=false", "threads=2", "data.path=/my text.txt"]
    assert what_sets_apart(overrides) == ["norm", "data.path"]
    assert run_name(overrides) == "norm=post,data.path=_my_text.txt" and run_name([]) == "default"
    # A long command line (issue 36: cut at 120 characters, mid-value: ...context_arg=block_): whole overrides, then
    # how many more and a hash of them all, so two such commands never share a name.
    own = ["model=custom", "model._target_=mymodels.TinyGPT", "model.width_arg=n_embd", "model.depth_arg=n_layer",
           "+model.n_head=2", "model.context_arg=block_size", "model.vocab_arg=vocab_size", "param=mup", "width=64"]
    name = run_name(own)
    head, _, rest = name.rpartition(",")
    kept = head.split(",")
    assert len(name) <= 120 and set(kept) <= {o.lstrip("+") for o in own} and rest.startswith(f"+{9 - len(kept)}_more_")
    assert run_name([*own[:-1], "width=128"]) != name
    assert run_name(["model._target_=" + "x" * 200, "width=64"]).startswith("model._target_,+2_more_")


def test_the_readme_commands_table_names_every_console_script():
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Commands"):readme.index("### Tab completion")]
    assert all(f"| `{name}" in table for name in scripts), [n for n in scripts if f"| `{n}" not in table]


def test_the_done_line_prints_the_metric_the_table_scores_named(tmp_path, capsys):
    """Issue 36: under experiment=mup_mlp_sweep each done line printed the validation loss (2.5382) while the table
    scores the training tail's (2.607)."""
    record = {"summary_metrics": ["final_loss"], "final_loss": 2.607, "final_val_loss": 2.5382, "steps": 250, "ms_per_step": 3.0,
              "config": {"summary": {"tail_steps": 50}}}
    console.job_finished("lr=0.01 seed=0", record, tmp_path, None)
    console.job_finished("seed=1", {"summary_metrics": ["final_val_loss"], "final_val_loss": 1.8157, "steps": 1500, "ms_per_step": 6.5},
                         tmp_path, None)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("final loss (mean of the last 50 training batches) 2.6070 (250 steps") and "2.5382" not in out[0]
    assert out[1].startswith("final validation loss 1.8157 (1500 steps")


def test_the_done_line_says_early_stopped_pruned_or_diverged(tmp_path, capsys):
    """A fit a callback stopped early writes ``early_stopped`` (training/fit.py); the done line says so, as train.log's."""
    base = {"summary_metrics": ["final_val_loss"], "final_val_loss": 1.9021, "steps": 60, "ms_per_step": 6.5, "status": "finished"}
    console.job_finished("lr=0.01 seed=0", base | {"early_stopped": "a callback stopped the fit at step 60 of 200"}, tmp_path, None)
    console.job_finished("lr=0.02 seed=0", base | {"status": "pruned", "pruned": "worse than the median at step 40"}, tmp_path, None)
    console.job_finished("lr=0.03 seed=0", base | {"diverged": True, "diverged_step": 12}, tmp_path, None)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("early-stopped (a callback stopped the fit at step 60 of 200): final validation loss 1.9021 (60 steps")
    assert out[1].startswith("pruned: worse than the median at step 40 (60 steps")
    assert out[2].startswith("diverged at step 12 (60 steps")


def test_only_rank_0_of_a_run_across_processes_prints_the_end_line(tmp_path, capsys, monkeypatch):
    """Under trainer.devices=2 +trainer.strategy=ddp Lightning starts rank 1 as a second run of the command (LOCAL_RANK=1):
    its end line printed the run's loss a second time (tests/test_ddp.py runs the two processes)."""
    record = {"summary_metrics": ["final_val_loss"], "final_val_loss": 1.8158, "steps": 1500, "ms_per_step": 6.5}
    monkeypatch.setenv("LOCAL_RANK", "1")
    console.job_finished("seed=1", record, tmp_path, None)
    assert capsys.readouterr().out == ""
    monkeypatch.setenv("LOCAL_RANK", "0")
    console.job_finished("seed=1", record, tmp_path, None)
    assert capsys.readouterr().out.startswith("final validation loss 1.8158 (1500 steps")


def test_sweep_progress_reads_an_ended_record_once(tmp_path, monkeypatch):
    """Every member's end line counts the sweep's ended jobs: a record once found finished or failed is not read again
    (each line read every record: a sweep of 1,000 jobs spent ~100 s on it)."""
    monkeypatch.setenv(console.TOTAL_ENV, "4")
    for i, status in enumerate(["finished", "failed", "running"]):
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "metrics.json").write_text(json.dumps({"status": status}))
    reads, read = [], console.read_bounded
    monkeypatch.setattr(console, "read_bounded", lambda path, most: reads.append(Path(path).parent.name) or read(path, most))
    assert console.sweep_progress(tmp_path) == "2/4 done"
    (tmp_path / "3").mkdir()
    (tmp_path / "3" / "metrics.json").write_text(json.dumps({"status": "finished"}))
    assert console.sweep_progress(tmp_path) == "3/4 done"
    assert sorted(reads) == ["0", "1", "2", "2", "3"]  # the running job's record read again, the ended ones once


def test_the_sweep_header_names_the_launcher_by_what_it_is_not_by_its_class_name(monkeypatch):
    from hydra_plugins.initnorm_vectorized.vectorized_launcher import ParallelLauncher
    from initnorm.cli.launchers import kind

    class Spread(ParallelLauncher):  # a launcher of one's own whose name says nothing: local_parallel by its base
        pass

    monkeypatch.setattr(sys.modules[__name__], "Spread", Spread, raising=False)
    launcher = kind({"_target_": f"{__name__}.Spread"})
    monkeypatch.delenv(console.TOTAL_ENV, raising=False)
    assert console.sweep_header("S", launcher, 2) == "sweep of the jobs -> S (local_parallel, 2 at a time)"
    assert console.sweep_header("S", "basic", None).endswith("(one job after another)")
