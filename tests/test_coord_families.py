"""The coordinate check on every built-in MLP family (issue 24): their data modules return a list of
evaluation loaders, which the check once indexed as a batch (``TypeError: 'DataLoader' object is not
subscriptable``). Two widths, two steps, in process: each family's coord.csv holds both widths, and its verdict is the one
these seeded steps give: µP's logits have an exponent on width within the 0.25 tolerance of 0 on all three (wide_mlp's
+0.24 at the edge: one octave, two steps), SP's grow on all three (char_mlp's by +0.40, which the max/min bound of 1.5 read
as flat and failed the check)."""

import csv

import pytest

from initnorm.cli.coord_check import main

WINDOWS = ["data=char_windows", "data.train_chars=4000", "data.val_chars=600"]
FAMILIES = {  # char_windows with and without a training-sample loader before "val"
    "wide_mlp": ["model=wide_mlp", *WINDOWS, "data.train_eval=0"],
    "char_mlp": ["model=char_mlp", *WINDOWS],
    "deep_mlp": ["model=deep_mlp", "data=clusters", "data.n_train=256", "data.n_val=64"],
}
# the exit status, and what the verdict says of µP's and SP's logits (their exponent on width from 32 to 64)
OUTCOME = {
    "wide_mlp": (0, "Verdict: PASS", "µP (under test): logits/output exponent +0.24 (expected +0.00): width-stable",
                 "SP (baseline): logits/output exponent +0.86 (expected +1.00): grows"),
    "char_mlp": (0, "Verdict: PASS", "µP (under test): logits/output exponent -0.00 (expected +0.00): width-stable",
                 "SP (baseline): logits/output exponent +0.40 (expected +1.00): grows"),
    "deep_mlp": (0, "Verdict: PASS", "µP (under test): logits/output exponent +0.07 (expected +0.00): width-stable",
                 "SP (baseline): logits/output exponent +1.33 (expected +1.00): grows"),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_coord_check_runs_on_each_builtin_family(family, tmp_path):
    out = tmp_path / family
    overrides = [*FAMILIES[family], "model.mup.base_width=32", "batch_size=16"]
    rc = main(["--widths", "32,64", "--depths", "3", "--steps", "2", "--out", str(out), "--", *overrides])
    code, *words = OUTCOME[family]
    text = (out / "verdict.txt").read_text()
    assert rc == code and all(w in text for w in words), (rc, text)
    rows = [row for f in out.rglob("coord.csv") for row in csv.DictReader(f.open())]
    assert {int(r["width"]) for r in rows} == {32, 64}
    assert {r["param"] for r in rows} == {"sp", "mup"}
    assert any(r["layer"] == "logits" for r in rows)
