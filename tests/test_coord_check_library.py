"""initnorm.coord_check (issue 35): the coordinate check of a model of one's own in a plain loop gives the numbers,
the verdict and the figure initnorm-coord-check gives on the same model (both judged by analysis.judge)."""

from __future__ import annotations

import csv

import pytest
import torch.nn.functional as F

from initnorm import schema
from initnorm.config import to_plain
from initnorm.errors import ConfigError
from initnorm.instruments.coord import coord_check, fixed_windows
from initnorm.training.tasks import TASKS
from tests.conftest import compose
from tests.test_own_model import GPT

NANOGPT = {"width_arg": "n_embd", "depth": 2, "depth_arg": "n_layer", "blocks": "h", "attn_mult_attr": "attn_mult", "n_head": 2,
           "block_size": 32}


def next_token_loss(model, batch):
    x, y = batch
    logits, _ = model(x)  # examples/nanogpt.py returns (logits, loss)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def test_the_same_numbers_verdict_and_figure_as_the_command(tmp_path, capsys):
    from examples.nanogpt import GPT as Net
    from initnorm.cli.coord_check import main

    overrides = [*GPT, "batch_size=8"]
    assert main(["--widths", "16,64", "--steps", "3", "--out", str(tmp_path / "cli"), "--", *overrides]) == 0
    with (tmp_path / "cli" / "coord.csv").open() as f:
        theirs = {(int(r["width"]), r["param"], int(r["step"]), r["layer"], r["role"]): float(r["value"]) for r in csv.DictReader(f)}

    c = schema.check(to_plain(compose(*overrides, "experiment=coord_check")))  # each of the command's jobs: its data
    data = TASKS.get("char_lm").make_data(c)
    data.setup("fit")
    report = coord_check(Net, data.train_dataloader(), next_token_loss, widths=[16, 64], steps=3, inputs=fixed_windows(data, 16),
                         base_width=16, vocab_size=data.vocab_size, **NANOGPT)
    ours = {(r["width"], r["param"], r["step"], r["layer"], r["role"]): r["value"] for r in report.records}
    assert ours == theirs and len(ours) == 2 * 2 * 3 * 5  # widths x params x steps x (embedding, 2 block outputs, logits, stream)
    assert {r["statistic"] for r in report.records} == {"coord_delta_rms"}
    assert report.ok and report.text == (tmp_path / "cli" / "verdict.txt").read_text()
    report.save(tmp_path / "lib")
    assert (tmp_path / "lib" / "coord.png").read_bytes() == (tmp_path / "cli" / "coord.png").read_bytes()
    assert report.png()[:4] == b"\x89PNG"


def test_batches_inputs_and_keywords_it_refuses():
    from examples.nanogpt import GPT as Net

    c = schema.check(to_plain(compose(*GPT, "batch_size=4")))
    data = TASKS.get("char_lm").make_data(c)
    data.setup("fit")
    two = [b for _, b in zip(range(2), data.train_dataloader())]
    with pytest.raises(ConfigError, match="batches gave 2 batches, and the coordinate check takes 3 steps.*`steps=2`"):
        coord_check(Net, two, next_token_loss, widths=[16, 32], steps=3, base_width=16, vocab_size=28, **NANOGPT)
    with pytest.raises(TypeError, match="widths="):
        coord_check(Net, two, next_token_loss, width=16, steps=2, base_width=16, vocab_size=28, **NANOGPT)
    for bad, said in (({"widths": [16]}, r"widths=\[16\] is invalid: two widths or more"),
                      ({"widths": [16, 32], "seeds": [1, 1]}, r"`seeds=\[1\]`"), ({"widths": [16, 32], "steps": 0}, "steps=0"),
                      ({"widths": [16, 32], "lr": float("nan")}, "lr=nan is invalid"),
                      ({"widths": [16, 32], "params": ["sp", "bogus"]}, r"'bogus' is neither; fix it with `params=\['sp'\]`")):
        with pytest.raises(ConfigError, match=said):  # as initnorm-coord-check refuses them, before any job trains
            coord_check(Net, two, next_token_loss, **({"steps": 2} | bad), base_width=16, vocab_size=28, **NANOGPT)
    with pytest.raises(TypeError, match="pass inputs="):
        coord_check(Net, [object()] * 2, next_token_loss, widths=[16, 32], steps=2, base_width=16, vocab_size=28, **NANOGPT)
    # the first batch's inputs by default, and a table handed over as a function: shown, not judged (no declared kind)
    from initnorm.nn.param import standard

    report = coord_check(Net, two, next_token_loss, widths=[16, 32], params=[standard], steps=2, base_width=16, vocab_size=28,
                         **NANOGPT)
    assert {r["param"] for r in report.records} == {"initnorm.nn.param:standard"} and "no verdict" in report.text
