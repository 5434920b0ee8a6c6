"""The CI-sized `make reproduce`: every experiment's command runs at a few steps and lands in the report."""

from initnorm.reproduce import EXPERIMENTS, main


def test_every_experiment_runs_and_is_reported(tmp_path):
    assert main(["--ci", "--out", str(tmp_path / "out"), "--results", str(tmp_path / "results")]) == 0
    report = (tmp_path / "results" / "README.md").read_text()
    for exp in EXPERIMENTS:
        assert f"## {exp.title}" in report
        assert (tmp_path / "results" / exp.key / "timing.json").is_file()


def test_unknown_experiment_is_refused(capsys):
    assert main(["--only", "nope"]) == 2
    assert "known:" in capsys.readouterr().err
