import csv

import pytest

from initnorm.cli.coord_check import main
from initnorm.errors import ConfigError
from initnorm.instruments.coord import coord_axis


def test_mup_logits_stay_put_while_sp_grows(tmp_path, capsys):
    # A small width range and 5 steps (the command's default is widths 16..256 and 10 steps).
    assert main(["--widths", "16,64", "--steps", "5", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Verdict: PASS" in out and "µP (under test): logits/output exponent" in out and "SP (baseline)" in out
    rows = list(csv.DictReader((tmp_path / "coord.csv").open()))
    assert set(rows[0]) == {"width", "depth", "param", "seed", "step", "layer", "role", "value"}
    logits = {(r["param"], int(r["width"])): float(r["value"]) for r in rows if r["layer"] == "logits" and r["step"] == "5"}
    mup, sp = logits["mup", 64] / logits["mup", 16], logits["sp", 64] / logits["sp", 16]
    assert 1 / 1.5 < mup < 1.5 and sp > 1.3 and sp > mup
    assert logits["mup", 16] == logits["sp", 16]  # µP is SP at the base width
    assert {int(r["step"]) for r in rows} == {1, 2, 3, 4, 5}
    # the attention's query and key are watched in every block (where the attention scale and a fixed ε act)
    assert {(r["layer"], r["role"]) for r in rows} >= {(f"block_0{b}", r) for b in (1, 2) for r in ("query", "key")}
    assert (tmp_path / "coord.png").stat().st_size > 0 and (tmp_path / "verdict.txt").is_file()


def test_one_axis_at_a_time():
    rows = [{"width": w, "depth": d} for w in (16, 32) for d in (2, 4)]
    with pytest.raises(ConfigError, match="one axis at a time"):
        coord_axis(rows)
    assert coord_axis([{"width": 64, "depth": d} for d in (2, 4)]) == "depth"


def test_depth_verdict_on_the_default_decoder(tmp_path, capsys):
    """CI-sized coordinate check across depth (width 16, 2 and 8 blocks, 10 steps): CompleteP's last
    residual stream and per-block update x depth have exponents on depth near 0, µP's last stream grows."""
    assert main(["--widths", "16", "--depths", "2,8", "--params", "mup,completep", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Verdict: PASS" in out and "CompleteP (under test): stream/last exponent" in out and ": depth-stable" in out
    assert "µP (baseline): stream/last exponent" in out and "grows (stream/last, blocks/update_x_depth)" in out
    assert "blocks/update_x_depth" in (tmp_path / "verdict.txt").read_text()
