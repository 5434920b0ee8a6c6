import csv

import pytest

from initnorm.cli.probe import main
from initnorm.instruments.probe import signal_per_layer

# Chapter 003, steps 1-2: act std L1, act std L30, grad std L1, grad std L30 as printed there.
CHAPTER_ROWS = [
    ("tanh", "xavier", (0.628, 0.123, 0.146, 0.987)),
    ("tanh", "small", (0.157, 1.16e-24, 7.28e-24, 1.00)),
    ("relu", "he", (0.827, 0.434, 0.541, 0.699)),
    ("relu", "xavier", (0.584, 1.32e-05, 2.34e-05, 0.699)),
]


@pytest.mark.parametrize("activation,init,expected", CHAPTER_ROWS)
def test_chapter_rows_reproduced(activation, init, expected):
    fwd, bwd = signal_per_layer(activation, init)  # depth 30, width 256, batch 512, seed 0
    assert (fwd[0], fwd[-1], bwd[0], bwd[-1]) == pytest.approx(expected, rel=5e-3)


def test_decoder_probe_table_for_a_tiny_config(tmp_path, capsys):
    assert main(["decoder", "--depth", "3", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "RMS of the residual stream entering each block" in text and "-> " in text
    rows = list(csv.DictReader((tmp_path / "probe_decoder.csv").open()))
    value = {(r["norm"], float(r["std"]), r["stat"], int(r["block"])): float(r["value"]) for r in rows}
    assert len(rows) == 4 * (4 + 3)  # 4 configurations x (3 blocks + out, 3 gradient norms)
    # The deck's pattern: pre-LN at 0.02 flat near 0.70; at 0.25 it grows; post-LN at RMS 1 after block 1.
    assert all(abs(value[("pre", 0.02, "stream_rms", b)] - 0.707) < 0.02 for b in range(1, 5))
    assert value[("pre", 0.25, "stream_rms", 4)] > 2 * value[("pre", 0.25, "stream_rms", 1)]
    assert all(abs(value[("post", s, "stream_rms", b)] - 1.0) < 0.01 for s in (0.02, 0.25) for b in range(2, 5))
    assert (tmp_path / "probe_decoder.png").stat().st_size > 0 and any((tmp_path / "tb").iterdir())


def test_bad_activation_is_one_line(tmp_path, capsys):
    assert main(["mlp", "--activations", "sigmoid", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --activations='sigmoid' is invalid") and "\n" not in err


def test_mlp_probe_takes_the_trainers_init_options(tmp_path, capsys):
    # The chapter's "He" for tanh is ReLU's gain, sqrt(2) (the trainer's init.nonlinearity=relu), not tanh's 5/3.
    tanh_gain, _ = signal_per_layer("tanh", "he", depth=3, width=64, batch=64)
    relu_gain, _ = signal_per_layer("tanh", "he", depth=3, width=64, batch=64, options={"nonlinearity": "relu"})
    assert relu_gain[0] != tanh_gain[0]
    assert main(["mlp", "--activations", "tanh", "--inits", "he", "--mlp-depth", "3", "--mlp-width", "64", "--batch", "64", "--out",
                 str(tmp_path), "--", "init.nonlinearity=relu"]) == 0
    assert "He (nonlinearity=relu)" in capsys.readouterr().out
    assert main(["mlp", "--out", str(tmp_path), "--", "width=32"]) == 2
    assert "init.<key>=<value>" in capsys.readouterr().err
