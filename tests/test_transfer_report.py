"""initnorm.transfer_report (issue 35): the transfer report of a table of runs made anywhere; on a sweep's runs.csv it
is the report initnorm's own summary writes, since it is that report (initnorm/own_runs.py over initnorm/transfer/)."""

from __future__ import annotations

import math
import runpy
import shutil

import pandas as pd
import pytest

from initnorm import transfer
from initnorm.errors import ConfigError
from initnorm.own_runs import transfer_report
from initnorm.results import read_sweep
from tests.conftest import ROOT

RUNS = ROOT / "results" / "own_model" / "transfer" / "runs.csv"  # examples/nanogpt.py: SP and µP, widths 64-256, 3 seeds


def test_a_sweeps_runs_csv_gives_the_report_initnorms_summary_gives(tmp_path):
    shutil.copy(RUNS, tmp_path / "runs.csv")
    records, from_csv = read_sweep(tmp_path)
    assert from_csv
    theirs = transfer.transfer_table(records)
    report = transfer_report(pd.read_csv(RUNS), axis="width", lr="lr", metric="final_val_loss", seed="seed", by="param")
    assert report.markdown == transfer.render_markdown(theirs, "final_val_loss") and report.csv == transfer.render_csv(theirs)
    assert [v.split(":")[0] for v in report.verdicts] == ["SP does not transfer", "µP does not transfer"]
    table = report.table()
    assert list(table["size"]) == [64, 128, 256] * 2 and table.loc[(table["param"] == "mup") & (table["size"] == 256), "shift"].item() > 0.5
    assert report.png()[:4] == b"\x89PNG"


def runs(shift_per_doubling: float) -> list[dict]:
    """A table exported from elsewhere: loss = 2 + 0.1 (log2 lr - optimum)^2 + a seed's offset, the optimum at 2^-6
    at width 64 and moving ``shift_per_doubling`` octaves per doubling of the width; the largest rate diverges."""
    out = []
    for width in (64, 128, 256):
        best = -6 + shift_per_doubling * math.log2(width / 64)
        for seed in (1, 2, 3):
            for k in range(-10, -1):
                loss = math.inf if k == -2 else 2 + 0.1 * (k - best) ** 2 + 0.01 * seed
                out.append({"width": width, "learning_rate": 2.0**k, "eval_loss": loss, "run_seed": seed})
    return out


def test_a_table_of_ones_own():
    table = [{**r, "param": "sp"} for r in runs(-1.0)] + [{**r, "param": "mup"} for r in runs(0.0)]
    report = transfer_report(table, axis="width", lr="learning_rate", metric="eval_loss", seed="run_seed")
    shifts = {(dict(r.setting)["param"], r.size): r.shift.value for r in report.rows}
    assert shifts["sp", 256] == pytest.approx(-2.0, abs=1e-9) and shifts["mup", 256] == pytest.approx(0.0, abs=1e-9)
    assert report.verdicts[0].startswith("SP does not transfer") and report.verdicts[1].startswith("µP transfers")


def test_a_table_over_batch_size_reads_the_batch_exponent():
    """Any axis the transfer report reads, not width and depth alone: the optimum rising half an octave per doubling of
    the batch is an exponent of +0.5, the square-root rule's (it raised "axis='batch_size' is invalid" before)."""
    table = [{("batch_size" if k == "width" else k): (v // 8 if k == "width" else v) for k, v in r.items()} for r in runs(0.5)]
    report = transfer_report(table, axis="batch_size", lr="learning_rate", metric="eval_loss", seed="run_seed")
    assert report.rows[0].axis == "batch_size" and [r.size for r in report.rows] == [8, 16, 32]
    assert report.rows[-1].exponent.value == pytest.approx(0.5, abs=1e-9) and "sqrt" in report.markdown


def test_what_it_refuses():
    with pytest.raises(ConfigError, match=r"metric='val_loss': the table has no such column \(its columns: width, learning_rate"):
        transfer_report(runs(0.0), axis="width", lr="learning_rate", metric="val_loss", seed="run_seed")
    with pytest.raises(ConfigError, match="axis='heads' is invalid: one of width, depth, batch_size, steps"):
        transfer_report(runs(0.0), axis="heads", lr="learning_rate", metric="eval_loss", seed="run_seed")
    one_width = [r for r in runs(0.0) if r["width"] == 64]
    with pytest.raises(ConfigError, match="1 value\\(s\\) of width and 9 learning rate\\(s\\)"):
        transfer_report(one_width, axis="width", lr="learning_rate", metric="eval_loss", seed="run_seed")
    with pytest.raises(ConfigError, match="learning_rate \\(the learning rate\\)=0"):
        transfer_report([{**runs(0.0)[0], "learning_rate": 0}], axis="width", lr="learning_rate", metric="eval_loss", seed=None)


def test_the_pages_example_runs(tmp_path, monkeypatch, capsys):
    """docs/library.md's transfer report example, as the page shows it, in a folder that holds the sweep's runs.csv."""
    page = (ROOT / "docs" / "library.md").read_text(encoding="utf-8")
    block = page.split("## The transfer report of your own runs")[1].split("```python\n")[1].split("```")[0]
    (tmp_path / RUNS.relative_to(ROOT)).parent.mkdir(parents=True)
    shutil.copy(RUNS, tmp_path / RUNS.relative_to(ROOT))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "example.py").write_text("import initnorm\n" + block, encoding="utf-8")
    runpy.run_path(str(tmp_path / "example.py"))
    assert capsys.readouterr().out.startswith("SP does not transfer: optimum falls at least 1.77 octaves from width 64 to 256")
    assert (tmp_path / "lr_transfer.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_run_that_diverged_is_evidence_against_its_rate_and_said(bad):
    """Issue 48, N40: a run whose loss is NaN or inf was dropped from its rate's mean over seeds (the other seeds' mean
    stood, so the verdict moved as if it had not run): it diverged, so its rate is no optimum, and the report says how many.
    Here seed 1 diverges at µP's optimum (2^-6) at width 256: the optimum there moves off 2^-6."""
    table = [{**r, "param": "mup"} for r in runs(0.0)]
    for r in table:
        if r["width"] == 256 and r["learning_rate"] == 2.0**-6 and r["run_seed"] == 1:
            r["eval_loss"] = bad
    report = transfer_report(table, axis="width", lr="learning_rate", metric="eval_loss", seed="run_seed")
    at_256 = next(r for r in report.rows if r.size == 256)
    assert at_256.optimum.value != pytest.approx(-6.0, abs=0.25)  # dropping the run left the optimum at 2^-6
    said = "10 of 81 runs diverged (eval_loss NaN or infinite)"  # the largest rate's 9, and this one
    assert report.verdicts[-1].startswith(said) and said in report.markdown


def test_a_loss_that_is_no_number_is_refused_naming_its_row():
    """N40: a loss written as text (an export's "diverged", an empty cell) was read as a divergence without a word."""
    table = runs(0.0)
    table[5]["eval_loss"] = "diverged"
    with pytest.raises(ConfigError, match=r"^row 5 \(learning_rate=0\.0\d+, width=64\): eval_loss='diverged' is not a number; "):
        transfer_report(table, axis="width", lr="learning_rate", metric="eval_loss", seed="run_seed")
