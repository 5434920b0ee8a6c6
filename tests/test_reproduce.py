"""The CI-sized `make reproduce`: every experiment's command runs at a few steps and lands in the report."""

import csv
import json

import pytest

from initnorm.repro import compare, reproduce
from initnorm.repro import reference as ref
from initnorm.repro.reproduce import EXPERIMENTS, INDEX_TITLE, Experiment, main

# The experiments whose comparison has no column against the documents (ours beside nothing to agree with).
NO_AGREEMENT_COLUMN = {"deck_7d_depth", "depth_transfer"}


@pytest.mark.parametrize("key", [e.key for e in EXPERIMENTS])  # the extras (depth transfer) too, which a plain run leaves out
def test_every_experiment_runs_and_is_reported(tmp_path, key, monkeypatch):
    """One experiment per test, so that the suite's workers share them. Each command runs in this process
    (tests/inproc.py: ``reproduce.run`` builds and times the same command line; only the interpreter is not started
    again); the failing command below runs as a process of its own, the path of every experiment of a real run."""
    from tests.inproc import in_process_subprocess

    monkeypatch.setattr(reproduce, "subprocess", in_process_subprocess())
    exp = next(e for e in EXPERIMENTS if e.key == key)
    assert main(["--ci", "--only", key, "--out", str(tmp_path / "out"), "--results", str(tmp_path / "results")]) == 0
    report = (tmp_path / "results" / "README.md").read_text()
    assert f"## {exp.title}" in report
    assert (tmp_path / "results" / key / "timing.json").is_file()
    assert "No table:" not in report  # the compare function read what its command wrote
    assert ("| agreement |" in report or "| difference" in report) != (key in NO_AGREEMENT_COLUMN), report


def test_unknown_experiment_is_refused(capsys):
    assert main(["--only", "nope"]) == 2
    assert "known:" in capsys.readouterr().err


def test_a_failing_command_is_recorded_not_fatal(tmp_path, monkeypatch):
    """coord_check --from an empty folder exits 2: unexpected here, so main returns 1 after the report. The command
    runs as a process of its own here (the status is the process's); once that is shown, the same command with its
    status expected runs in this process."""
    from tests.inproc import in_process_subprocess

    empty = tmp_path / "empty"
    empty.mkdir()
    exp = Experiment("broken", "A command that fails", "initnorm.coord_check", [f"--from={empty}"], [],
                     compare.deck_7d_depth, folder_arg="--out={}")
    monkeypatch.setattr("initnorm.repro.reproduce.EXPERIMENTS", [exp])
    assert main(["--out", str(tmp_path / "out"), "--results", str(tmp_path / "results")]) == 1
    report = (tmp_path / "results" / "README.md").read_text()
    assert "It exited with status 2" in report and "No table:" in report
    assert json.loads((tmp_path / "results" / "broken" / "timing.json").read_text())["exit_status"] == 2
    exp.expected_exit = (0, 2)
    monkeypatch.setattr(reproduce, "subprocess", in_process_subprocess())
    assert main(["--out", str(tmp_path / "out"), "--results", str(tmp_path / "results")]) == 0


def test_extras_run_only_when_named_and_a_section_without_its_runs_is_kept(tmp_path, monkeypatch):
    from tests.inproc import in_process_subprocess

    monkeypatch.setattr(reproduce, "subprocess", in_process_subprocess())  # an extra that ran would fail its import here
    empty = tmp_path / "empty"
    empty.mkdir()
    ok = Experiment("ok", "An experiment", "initnorm.coord_check", [f"--from={empty}"], [], compare.deck_7d_depth,
                    folder_arg="--out={}", expected_exit=(2,))
    extra = Experiment("long", "A long extra", "initnorm.nothing_of_the_sort", [], [], compare.deck_7d_depth, extra=True)
    monkeypatch.setattr("initnorm.repro.reproduce.EXPERIMENTS", [ok, extra])
    results = tmp_path / "results"
    results.mkdir()
    (results / "long").mkdir()
    (results / "long" / "timing.json").write_text(json.dumps({"command": "python -m x", "seconds": 60.0}))
    (results / "README.md").write_text("# old\n\n## A long extra\n\nthe table from an earlier run\n\n"
                                       f"## {INDEX_TITLE}\n\n- [a folder](a/README.md): written by hand\n")
    assert main(["--out", str(tmp_path / "out"), "--results", str(results)]) == 0  # the extra's module does not exist: it must not run
    report = (results / "README.md").read_text()
    assert "the table from an earlier run" in report and "## An experiment" in report
    assert report.endswith(f"## {INDEX_TITLE}\n\n- [a folder](a/README.md): written by hand\n\n")  # the hand-written index, kept last
    assert not (tmp_path / "out" / "long").exists()


def test_probe_comparison_reads_the_chapters_own_numbers_as_agreeing(tmp_path):
    with (tmp_path / "probe_mlp.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["activation", "init", "layer", "act_std", "grad_std"])
        for (act, init), (a1, a30, g1, g30) in ref.CHAPTER_PROBE.items():
            for layer in range(1, 31):
                w.writerow([act, init, layer, a1 if layer == 1 else a30, g1 if layer == 1 else g30])
    table = compare.chapter_probe(tmp_path)
    assert table.count("same to the 3 printed digits") == len(ref.CHAPTER_PROBE)


def test_seed_rows_judge_agreement_by_the_seed_spreads():
    label = "ReLU, He: val accuracy"  # chapter: 0.984 ± 0.004
    near = compare.three_seed_rows({label: {0: 0.980, 1: 0.985, 2: 0.990}})
    far = compare.three_seed_rows({label: {0: 0.90, 1: 0.90, 2: 0.90}})
    assert "within the seed spreads" in near
    assert "differs by -0.084" in far


def test_dropout_row_is_compared_with_the_final_train_loss():
    # the chapter prints step 3's final *train* loss in its "Dropout 0.5, final val" row
    assert compare.REGULARIZATION_SEEDS["Dropout 0.5, final val"] == ("dropout_0.5", "final_train_loss")


def test_every_folder_of_results_is_in_its_index_and_the_readme_links_it():
    """Issue 36: results/README.md indexed the documents' experiments only; u-µP, own-model, search-and-transfer and
    depth results were reachable only from docs pages. Every folder (and sub-folder) below results/ is a link of its
    index, each row has a command and a time, and the project README points at the index."""
    from initnorm.repro.index import ELSEWHERE, reading
    from tests.conftest import ROOT

    results = ROOT / "results"
    text = (results / "README.md").read_text(encoding="utf-8")
    index = text.partition("## Every folder of results/")[2].partition("\n## ")[0]
    rows = [line for line in index.splitlines() if line.startswith("| [")]
    folders = sorted(str(p.relative_to(results)) for p in results.rglob("*") if p.is_dir())
    missing = [f for f in folders if f"]({f}/" not in index]
    assert folders and not missing, missing
    assert len(rows) == len([p for p in results.iterdir() if p.is_dir()])  # a row per top-level folder
    assert all(len(row.split(" | ")) == 5 and all(cell.strip() for cell in row.split(" | ")) for row in rows), rows
    assert {e.key for e in ELSEWHERE} | {e.key for e in EXPERIMENTS} >= {p.name for p in results.iterdir() if p.is_dir()}
    assert "(results/README.md)" in (ROOT / "README.md").read_text(encoding="utf-8").partition("## Contents")[0]
    assert reading("**Reading.** Under µP it holds (2^-7 at 64). Under SP it does not.\n", 1) == "Under µP it holds (2^-7 at 64)."
