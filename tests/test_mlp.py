"""Chapter 003's MLP families, their data and their presets (models/mlp.py, data/, lit_mlp.py, plots.py)."""

import json
import math

import pytest
import torch

from initnorm.cli.train import train
from initnorm.config import to_plain
from initnorm.data.sampling import SampledBatches
from initnorm.data.windows import CharWindows
from initnorm.models.build import build_model
from initnorm.nn.roles import Role
from initnorm.training.optim import make_optimizer
from tests.conftest import compose_cfg
from tests.inproc import run_module

QUIET = ["callbacks=none", "trainer.enable_progress_bar=false", "checkpoint.every_n_steps=0"]


def built(*overrides, vocab):
    c = to_plain(compose_cfg(*overrides))
    torch.manual_seed(0)
    return build_model(c["model"], c["init"], c["param"], vocab)


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_parameter_counts():
    # The chapter prints 494,681 for its char MLP on Tiny Shakespeare's 65 symbols.
    assert n_params(built("experiment=regularization", vocab=65).model) == 494_681
    # Deep MLP: 32 -> 128, 29 x (128 -> 128), head 128 -> 8, all with bias.
    assert n_params(built("experiment=deep_mlp_train", vocab=8).model) == (32 * 128 + 128) + 29 * (128 * 128 + 128) + (128 * 8 + 8)
    # Wide MLP at width w: embedding, input layer 8 x 16 -> w, two w x w, readout without bias.
    for w in (64, 256):
        expected = 65 * 16 + (128 * w + w) + 2 * (w * w + w) + w * 65
        assert n_params(built("experiment=mup_mlp_sweep", f"width={w}", vocab=65).model) == expected


def test_roles_name_every_parameter():
    roles = built("experiment=mup_mlp_sweep", vocab=65).roles
    assert roles["emb.weight"] == Role.EMBEDDING and roles["layers.0.weight"] == Role.INPUT
    assert roles["layers.1.weight"] == roles["layers.2.weight"] == Role.HIDDEN and roles["out.weight"] == Role.READOUT
    assert "out.bias" not in roles


def test_chapter_he_uses_relu_gain_and_a_xavier_head_for_tanh():
    # Chapter 003 step 2: kaiming_normal_(nonlinearity="relu") for tanh too; the head is always Xavier.
    model = built("experiment=deep_mlp_train", "model.activation=tanh", "init=he", vocab=8).model
    hidden = torch.cat([layer.weight.flatten() for layer in model.layers[1:]])
    assert hidden.std().item() == pytest.approx(math.sqrt(2 / 128), rel=0.01)
    assert model.head.weight.std().item() == pytest.approx(math.sqrt(2 / (128 + 8)), rel=0.1)
    assert all(float(layer.bias.abs().max()) == 0.0 for layer in model.layers)


def test_mup_at_base_width_is_sp_but_for_the_zero_readout():
    """µP (the chapter's: fan-in init kept, zero readout, hidden and readout lr x 64/width) at
    width 64 differs from SP in one thing only: the readout starts at zero instead of N(0, 1/64)."""
    sp = built("experiment=mup_mlp_sweep", "param=sp", vocab=65)
    mup = built("experiment=mup_mlp_sweep", "param=mup", vocab=65)
    for (name, a), (_, b) in zip(sp.model.named_parameters(), mup.model.named_parameters()):
        if name == "out.weight":
            assert float(b.abs().max()) == 0.0 and a.std().item() == pytest.approx(64**-0.5, rel=0.1)
        else:
            assert torch.equal(a, b), name

    def lr_of(b):
        opt = make_optimizer(b.model, b.roles, b.table, 0.01, {"name": "adam"})
        return {n: g["lr"] for g in opt.param_groups for n in g["names"]}

    assert lr_of(sp) == lr_of(mup) and set(lr_of(sp).values()) == {0.01}
    wide = lr_of(built("experiment=mup_mlp_sweep", "param=mup", "width=256", vocab=65))
    assert wide["layers.1.weight"] == wide["out.weight"] == pytest.approx(0.01 / 4)
    assert wide["layers.0.weight"] == wide["emb.weight"] == wide["layers.1.bias"] == 0.01


def test_batches_are_a_function_of_seed_and_step():
    x, y = torch.arange(100).view(50, 2), torch.arange(50)
    full = iter(SampledBatches(x, y, 4, seed=2))
    batches = [next(full) for _ in range(6)]
    resumed = next(iter(SampledBatches(x, y, 4, seed=2, start_step=5)))
    assert torch.equal(resumed[1], batches[5][1])
    # The chapter's loop: one Generator(seed), randint(n, (batch,)) per step.
    gen = torch.Generator().manual_seed(2)
    assert all(torch.equal(b[1], torch.randint(50, (4,), generator=gen)) for b in batches)


def test_char_windows_match_the_chapter():
    d = CharWindows("shakespeare", 16, 128, seed=0, train_chars=20_000, val_chars=4016, train_eval=4000)
    d.setup()
    x, y = d.train_xy
    assert len(y) == 19_984 and len(d.val_xy[1]) == 4000 and d.vocab_size == 65
    ids = d.corpus.train
    assert torch.equal(x[123], ids[123:139]) and y[123] == ids[139]
    train_eval, _val = d.val_dataloader()
    assert sum(len(b[1]) for b in train_eval) == 4000 and d.eval_names == ("train", "val")


def test_relu_with_unit_normal_is_recorded_as_diverged(tmp_path):
    m = train(compose_cfg("experiment=deep_mlp_train", "model.activation=relu", "init=unit_normal", "steps=5", *QUIET), tmp_path)
    # The chapter: first loss ~1e27, then NaN.
    assert m["diverged"] and m["diverged_step"] == 1 and m["first_loss"] > 1e20
    assert math.isnan(m["final_loss"]) and math.isnan(m["val_acc"])
    assert json.loads((tmp_path / "metrics.json").read_text())["diverged"] is True


def test_tanh_xavier_learns_where_relu_xavier_stays_at_chance(tmp_path):
    # Chapter 003 step 2 in miniature: Xavier's halving per ReLU layer leaves 30 layers at chance (ln 8).
    run = lambda act: train(compose_cfg("experiment=deep_mlp_train", f"model.activation={act}", "init=xavier", "steps=60",
                                        "summary.tail_steps=5", *QUIET), tmp_path / act)
    tanh, relu = run("tanh"), run("relu")
    assert tanh["final_loss"] < 0.5 and tanh["val_acc"] > 0.9
    assert relu["final_loss"] == pytest.approx(math.log(8), abs=0.01) and relu["val_acc"] < 0.2
    assert tanh["val_history"][0][0] == 0 and tanh["val_history"][-1][0] == 60  # step 0 is scored too


PRESETS = {
    # preset -> (tiny overrides, 2 jobs; expected summary rows). What is checked is the command's folder, table and figure,
    # not learning: a few steps (unit_normal diverges at step 1; 20 steps each, a validation every 10, cost ~0.5 s of CPU
    # more over the two). µP's MLP needs its 10 steps for both losses to fall below 4.
    "deep_mlp_train": (["model.activation=relu", "init=unit_normal,he", "steps=5"], ["| unit_normal | diverged", "| he |"]),
    "regularization": (["regularizer=none,dropout_0.5", "steps=4", "trainer.val_check_interval=2"], ["| none |", "| dropout_0.5 |"]),
    "mup_mlp_sweep": (["param=sp,mup", "width=64", "lr=0.0078125", "steps=10"], ["| sp | 3.", "| mup | 3."]),
}
PLOT_FILES = {"deep_mlp_train": "train_curves.png", "regularization": "train_val_curves.png", "mup_mlp_sweep": "lr_transfer.png"}


@pytest.mark.parametrize("preset", list(PRESETS))
def test_tiny_preset_runs_as_one_command(tmp_path, preset):
    """The command's sweep, then initnorm-summarize, each run in this process as `python -m` runs it (tests/inproc.py)."""
    overrides, rows = PRESETS[preset]
    sweep = tmp_path / "sweep"
    ran = run_module("initnorm.train", ["-m", f"experiment={preset}", *overrides, *QUIET, f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-2000:]
    md = (sweep / "summary.md").read_text()
    assert "2 jobs" in md and all(any(line.startswith(r) for line in md.splitlines()) for r in rows), md
    if preset in PLOT_FILES:
        png = sweep / PLOT_FILES[preset]
        assert png.read_bytes()[:4] == b"\x89PNG"
        png.unlink()  # a plot is a function of the folder: summarize draws it again
        assert run_module("initnorm.summarize", [str(sweep)], cwd=tmp_path).returncode == 0 and png.is_file()
    if preset == "mup_mlp_sweep":
        assert "| sp | 64 | 0.0078125 | -7 |" in md and "Best learning rate per width" in md


def test_resumed_run_keeps_the_classifier_records(tmp_path):
    overrides = ["experiment=deep_mlp_train", "model.activation=tanh", "init=xavier", "steps=40", "trainer.val_check_interval=20",
                 "checkpoint.every_n_steps=30", *QUIET[:2]]
    whole = train(compose_cfg(*overrides), tmp_path / "whole")
    cut = tmp_path / "cut"
    train(compose_cfg(*overrides), cut)
    (cut / "metrics.json").unlink()  # as if killed after the checkpoint at step 30
    resumed = train(compose_cfg(*overrides), cut)
    assert resumed["resumed_from_step"] == 30
    for key in ("train_losses", "first_loss", "final_loss", "val_acc"):
        assert resumed[key] == whole[key], key
    assert json.loads(json.dumps(resumed["eval_history"])) == json.loads(json.dumps(whole["eval_history"]))
