"""The coordinate check on every built-in MLP family (issue 24): their data modules return a list of
evaluation loaders, which the check once indexed as a batch (``TypeError: 'DataLoader' object is not
subscriptable``). Two widths, two steps, in process: each family's coord.csv holds both widths, and its verdict is the one
these seeded steps give: after two steps SP's logits on char_mlp have not yet grown by 1.5x from width 32 to 64, so its
check fails (exit 1) where wide_mlp's and deep_mlp's pass (exit 0); µP's stay flat on all three."""

import csv

import pytest

from initnorm.cli.coord_check import main

WINDOWS = ["data=char_windows", "data.train_chars=4000", "data.val_chars=600"]
FAMILIES = {  # char_windows with and without a training-sample loader before "val"
    "wide_mlp": ["model=wide_mlp", *WINDOWS, "data.train_eval=0"],
    "char_mlp": ["model=char_mlp", *WINDOWS],
    "deep_mlp": ["model=deep_mlp", "data=clusters", "data.n_train=256", "data.n_val=64"],
}
# the exit status, and what the verdict says of µP's and SP's logits (their max/min from width 32 to 64)
OUTCOME = {
    "wide_mlp": (0, "Verdict: PASS", "µP max/min 1.18 <= 1.5: flat", "SP max/min 1.82 > 1.5, larger at the widest: grows"),
    "char_mlp": (1, "Verdict: FAIL", "µP max/min 1.00 <= 1.5: flat", "SP max/min 1.32 <= 1.5: flat, does NOT grow"),
    "deep_mlp": (0, "Verdict: PASS", "µP max/min 1.05 <= 1.5: flat", "SP max/min 2.52 > 1.5, larger at the widest: grows"),
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
