import csv

import pytest

from initnorm.cli.coord_check import main
from initnorm.errors import ConfigError
from initnorm.instruments.coord import coord_axis


def test_mup_logits_stay_put_while_sp_grows(tmp_path, capsys):
    # A small width range and 5 steps (the command's default is widths 16..256 and 10 steps).
    assert main(["--widths", "16,64", "--steps", "5", "--out", str(tmp_path)]) == 0
    assert "Verdict: PASS" in capsys.readouterr().out
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
    residual stream and per-block update x depth stay within 1.5x, µP's last stream grows by more."""
    assert main(["--widths", "16", "--depths", "2,8", "--params", "mup,completep", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Verdict: PASS" in out and "CompleteP: last stream max/min" in out and "(flat: bound 1.5)" in out
    assert "blocks/update_x_depth" in (tmp_path / "verdict.txt").read_text()


def test_depth_verdict_fails_where_a_depth_variant_is_not_flat():
    from initnorm.instruments.coord import BLOCK_UPDATE, depth_verdict

    flat = {d: 3.5 for d in (2, 4, 8)}
    grows = {2: 3.3, 4: 5.6, 8: 7.4}
    ok, line = depth_verdict({"mup": {"stream/last": grows}, "completep": {"stream/last": flat, BLOCK_UPDATE: flat}}, 1.5)
    assert ok and "Verdict: PASS (rule: a depth-stable parameterisation" in line
    ok, line = depth_verdict({"mup": {"stream/last": grows},
                              "depth_mup": {"stream/last": {2: 3.6, 4: 2.7, 8: 2.0}, BLOCK_UPDATE: flat}}, 1.5)
    assert not ok and "depth-µP: last stream max/min 1.80" in line and "NOT flat" in line
    ok, line = depth_verdict({"mup": {"stream/last": flat}, "completep": {"stream/last": flat, BLOCK_UPDATE: flat}}, 1.5)
    assert not ok and "does NOT grow" in line


def test_the_width_verdict_states_its_rule_and_flat_and_grows_never_meet():
    """Issue 36: SP's logits at max/min 1.48 (inside the 1.5 'flat' bound) counted as growing as long as µP's ratio
    was smaller. Now one bound splits the two words, and the verdict line says the rule."""
    from initnorm.instruments.coord import verdict

    mup = {"logits/output": {16: 1.0, 256: 1.1}}
    ok, line = verdict({"sp": {"logits/output": {16: 1.0, 256: 1.48}}, "mup": mup}, "width", 1.5)
    assert not ok and "SP max/min 1.48 <= 1.5: flat, does NOT grow" in line and "Verdict: FAIL (rule: " in line
    assert "within max/min 1.5 across widths is flat, a baseline's above 1.5 and larger at the widest grows" in line
    ok, line = verdict({"sp": {"logits/output": {16: 1.0, 256: 2.1}}, "mup": mup}, "width", 1.5)
    assert ok and "µP max/min 1.10 <= 1.5: flat; SP max/min 2.10 > 1.5, larger at the widest: grows)" in line
    ok, line = verdict({"sp": {"logits/output": {16: 2.0, 256: 1.0}}, "mup": mup}, "width", 1.5)
    assert not ok and "smaller at the widest: does NOT grow" in line
