"""The coordinate check on every built-in MLP family (issue 24): their data modules return a list of
evaluation loaders, which the check once indexed as a batch (``TypeError: 'DataLoader' object is not
subscriptable``). Two widths, two steps, in process: each family's coord.csv holds both widths and a verdict."""

import csv

import pytest

from initnorm.cli.coord_check import main

WINDOWS = ["data=char_windows", "data.train_chars=4000", "data.val_chars=600"]
FAMILIES = {  # char_windows with and without a training-sample loader before "val"
    "wide_mlp": ["model=wide_mlp", *WINDOWS, "data.train_eval=0"],
    "char_mlp": ["model=char_mlp", *WINDOWS],
    "deep_mlp": ["model=deep_mlp", "data=clusters", "data.n_train=256", "data.n_val=64"],
}


@pytest.mark.parametrize("family", FAMILIES)
def test_coord_check_runs_on_each_builtin_family(family, tmp_path):
    out = tmp_path / family
    overrides = [*FAMILIES[family], "model.mup.base_width=32", "batch_size=16"]
    rc = main(["--widths", "32,64", "--depths", "3", "--steps", "2", "--out", str(out), "--", *overrides])
    assert rc in (0, 1)  # ran and judged (2 steps at two widths need not pass)
    rows = [row for f in out.rglob("coord.csv") for row in csv.DictReader(f.open())]
    assert {int(r["width"]) for r in rows} == {32, 64}
    assert {r["param"] for r in rows} == {"sp", "mup"}
    assert any(r["layer"] == "logits" for r in rows)
    assert (out / "verdict.txt").read_text().strip()
