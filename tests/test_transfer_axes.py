"""The transfer report over any axis (batch size, steps, weight decay, two at once) on synthetic sweeps whose
optimum moves by a known exponent: the fitted exponent, its interval, the rules it holds, the base, the tables."""

import csv
import io
import math
import random

import pytest

from initnorm import transfer as tr
from initnorm.cli.console import summary_text

GRID = [float(x) for x in range(-10, -2)]  # log2 lr: 2^-10 ... 2^-3


def record(axis_values: dict, rate: float, seed: int, loss: float, rate_key: str = "lr", **extra) -> dict:
    swept = [*axis_values, rate_key, "seed"]
    return {"status": "finished", "seed": seed, "swept": swept, "summary_metrics": ["final_val_loss"], "diverged": False,
            "overrides": {**{k: str(v) for k, v in axis_values.items()}, rate_key: str(rate), "seed": str(seed)},
            "final_val_loss": loss, **extra}


def sweep(axis: str, values, optimum, seeds=(1, 2, 3), grid=GRID, sd=0.01, rate_key="lr", more=None, **extra) -> list[dict]:
    """A sweep whose seed-mean loss is a parabola in log2 rate around ``optimum(value)`` at each axis value."""
    rng, out = random.Random(5), []
    for v in values:
        for s in seeds:
            for x in grid:
                loss = 0.05 * (x - optimum(v)) ** 2 + 2.0 + rng.gauss(0, sd)
                out.append(record({**(more or {}), axis: v}, 2.0**x, s, loss, rate_key, **extra))
    return out


def sqrt_rule(b):
    return -7.0 + 0.5 * math.log2(b / 32)


def test_the_exponent_along_the_batch_is_recovered_and_read_against_the_rules():
    recs = sweep("batch_size", (8, 16, 32, 64, 128), sqrt_rule)
    rows = tr.transfer_table(recs)
    assert {r.axis for r in rows} == {"batch_size"} and [r.size for r in rows] == [8, 16, 32, 64, 128]
    e = rows[0].exponent
    assert e.value == pytest.approx(0.5, abs=0.05) and e.lo <= 0.5 <= e.hi and e.hi - e.lo < 0.3 and e.resamples == 10
    assert rows[-1].shift.value == pytest.approx(2.0, abs=0.2)  # from batch 8 to 128: four doublings x 0.5
    (line,) = tr.exponent_lines(rows)
    assert line.startswith(f"the sweep, optimal lr against batch size: exponent {e.value:+.2f} [")
    assert "none 0 (the rate held): outside" in line and "sqrt +0.50 (Malladi et al. 2022, Adam's SDE rule): inside" in line
    assert "linear +1.00 (Goyal et al. 2017, SGD): outside" in line
    md = tr.render_markdown(rows, "final_val_loss")
    assert "| setting | batch size | seeds | optimal log2 lr |" in md and "| shift from batch size 8 (log2) |" in md
    assert f"optimum rises {rows[-1].shift.value:.2f} octaves from batch size 8 to 128" in md
    table = list(csv.DictReader(io.StringIO(tr.render_csv(rows))))
    assert float(table[0]["exponent"]) == pytest.approx(e.value) and table[0]["rate"] == "lr"


def test_a_fixed_token_sweeps_steps_follow_the_batch_and_are_no_setting():
    recs = sweep("batch_size", (8, 32, 128), sqrt_rule)
    for r in recs:
        r["overrides"]["steps"] = str(4096 // int(r["overrides"]["batch_size"]))
        r["swept"] = ["batch_size", "steps", "lr", "seed"]
    assert tr.sweep_axes(recs) == ["batch_size"]
    rows = tr.transfer_table(recs)
    assert {r.setting for r in rows} == {()} and len(rows) == 3


def test_a_rule_the_runs_applied_already_is_taken_off_each_rules_exponent():
    # Rates tuned at batch 32 and carried by the sqrt rule: the swept (tuned) rate's optimum stays put,
    # and the records say the resolved rate was lr x sqrt(b / 32).
    recs = sweep("batch_size", (8, 32, 128), lambda b: -7.0)
    for r in recs:
        b, lr = int(r["overrides"]["batch_size"]), float(r["overrides"]["lr"])
        r["resolved"] = {"lr": lr * math.sqrt(b / 32)}
        r["config"] = {"transfer": {"applied": {"from": {"batch_size": 32}}}}
    rows = tr.transfer_table(recs)
    assert rows[0].applied == pytest.approx(0.5) and [r.base for r in rows] == [False, True, False]
    (line,) = tr.exponent_lines(rows)
    assert "less the +0.50 the runs' own rule applied" in line and "sqrt 0 (Malladi et al. 2022, Adam's SDE rule): inside" in line
    assert "none -0.50 (the rate held): outside" in line
    md = tr.render_markdown(rows)
    assert "| shift from batch size 32 (log2) |" in md and "- the sweep transfers: optimum " in md
    assert " octaves from batch size 32 to " in md


def test_the_weight_decay_tuned_along_the_horizon():
    # lr held, weight decay swept: its optimum falls as 1/steps (the timescale a fixed fraction of the run).
    wd_grid = [float(x) for x in range(-9, 1)]
    recs = sweep("steps", (375, 750, 1500, 3000), lambda s: -4.0 - math.log2(s / 375), grid=wd_grid, rate_key="optim.weight_decay")
    assert tr.tuned_rate(recs) == "optim.weight_decay"
    rows = tr.transfer_table(recs)
    assert rows[0].rate == "optim.weight_decay" and rows[0].exponent.value == pytest.approx(-1.0, abs=0.06)
    (line,) = tr.exponent_lines(rows)
    assert "optimal wd against steps" in line and "fraction -1.00 (tau a fixed fraction of the run: Wang & Aitchison 2024): inside" in line
    md = tr.render_markdown(rows)
    assert "| steps | seeds | optimal log2 wd |" in md
    # its section says which rate was tuned, and the terminal's summary finds it as it finds a learning-rate one
    assert md.startswith("\n## Weight-decay transfer\n") and "Learning-rate" not in md
    shown = summary_text("/nonexistent", "| a |\n|---|\n| 1 |\n" + md)
    assert "\n\nWeight-decay transfer (the table in summary.md and transfer.csv):\n- " in shown and "| steps |" not in shown


def test_an_optimum_on_the_grid_edge_is_left_out_of_the_exponent():
    recs = sweep("batch_size", (8, 32, 128, 512), lambda b: -2.0 if b == 512 else sqrt_rule(b))  # 512's sits above the grid
    rows = tr.transfer_table(recs)
    assert rows[-1].edge == "highest" and rows[0].fitted == (8, 32, 128)
    assert rows[0].exponent.value == pytest.approx(0.5, abs=0.06)
    (line,) = tr.exponent_lines(rows)
    assert "(8-128, 3 values; 512 left out: an optimum on the grid's edge or no positive value)" in line


def test_two_axes_give_the_optimum_at_every_pair_and_the_exponent_along_the_second():
    recs = sweep("batch_size", (8, 32, 128), sqrt_rule, more={"width": 64}) + sweep("batch_size", (8, 32, 128),
                                                                                   lambda b: sqrt_rule(b) - 1, more={"width": 256})
    assert tr.sweep_axes(recs) == ["width", "batch_size"]
    main = tr.transfer_table(recs)
    assert {r.axis for r in main} == {"width"} and {dict(r.setting)["batch_size"] for r in main} == {"8", "32", "128"}
    assert main[0].exponent.value == pytest.approx(-0.5, abs=0.06)  # one octave down per 4x the width
    text = tr.render_two_axes(tr.transfer_table(recs, axis="batch_size"), "width")
    assert "## The optimum over two axes: width x batch size" in text
    assert "| width | batch size 8 | batch size 32 | batch size 128 | exponent along batch size | 95% interval |" in text
    cells = next(line for line in text.splitlines() if line.startswith("| 64 |")).split(" | ")
    assert float(cells[2].split()[0]) == pytest.approx(-7.0, abs=0.15) and float(cells[4]) == pytest.approx(0.5, abs=0.06)


def test_the_summary_of_a_batch_sweep_draws_the_optimum_and_the_two_axis_table(tmp_path):
    from initnorm.results import write_metrics
    from initnorm.summary import summarize

    recs = sweep("batch_size", (8, 32, 128), sqrt_rule, more={"width": 64}) + sweep("batch_size", (8, 32, 128),
                                                                                   lambda b: sqrt_rule(b) - 1, more={"width": 256})
    for i, r in enumerate(recs):
        write_metrics(tmp_path / f"job{i:03d}", {**r, "job_num": i, "summary_plots": ["lr_transfer"]})
    md = summarize(tmp_path)
    assert "## The optimum over two axes: width x batch size" in md and "![the optimal lr against width x batch size](lr_optimum.png)" in md
    assert (tmp_path / "lr_optimum.png").is_file() and (tmp_path / "lr_transfer.png").is_file()
    assert "- batch_size=8, optimal lr against width: exponent -0." in md


def test_the_verdict_and_the_rules_agree_in_words_and_say_what_an_interval_and_a_protocol_rest_on():
    """A batch sweep said "transfers" above a line where the rate held was "outside"; with 2 seeds its 95% intervals
    rested on 3 resamples, unsaid; a fixed-steps batch sweep was read against the sqrt rule without a word."""
    recs = sweep("batch_size", (8, 16, 32), lambda b: -7.0 + 0.12 * math.log2(b / 8), seeds=(1, 2), sd=0.0)
    for r in recs:  # fixed steps: the tokens grow with the batch
        r["config"] = {"steps": 100, "batch_size": int(r["overrides"]["batch_size"]), "data": {"kind": "char_lm", "context": 32}}
    rows = tr.transfer_table(recs)
    (verdict,) = tr.verdicts(rows)
    (line,) = tr.exponent_lines(rows)
    assert verdict.startswith("the sweep transfers: optimum rises")
    assert "none 0 (the rate held): outside" in line
    assert "the optimum still moves (its exponent's interval excludes 0), by less than ±0.5 octave" in verdict
    assert "rests on 3 distinct resamples of 2 seeds" in verdict and "rests on 3 distinct resamples of 2 seeds" in line
    assert "a fixed-steps sweep is not the rules' protocol, which holds the tokens fixed" in line
    for r in recs:  # fixed tokens: steps x batch constant
        r["config"]["steps"] = 1600 // r["config"]["batch_size"]
    assert "(fixed tokens: the rules' protocol)" in tr.exponent_lines(tr.transfer_table(recs))[0]


def test_tokens_are_what_the_steps_mean():
    r = {"overrides": {"steps": "128"}, "config": {"steps": 128, "batch_size": 32, "data": {"kind": "char_lm", "context": 32}}}
    assert tr.axis_value(r, "tokens") == 128 * 32 * 32 and tr.axis_value(r, "steps") == 128
    r["config"]["data"] = {"kind": "char_windows", "context": 8}  # a classifier: one target a sample
    assert tr.axis_value(r, "tokens") == 128 * 32
