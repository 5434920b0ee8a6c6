"""A new parameterisation and a new model family are one file each (tests/own_param.py,
tests/own_family.py), outside the package, named by dotted path: trained through `python -m
initnorm.train` (its main, in this process) and through a composed config, their own config keys known to the schema (and
every other key refused), the coordinate check judging them by their declared kind; init schemes
and norms take dotted paths too, and every registry says in one line what it knows."""

from __future__ import annotations

import importlib
import json
import math

import pytest
import torch

from initnorm.cli.coord_check import main as coord_check
from initnorm.cli.train import train
from initnorm.config import to_plain, validate
from initnorm.errors import ConfigError
from initnorm.instruments.coord import judge
from initnorm.models.build import build_model
from tests.conftest import ROOT, compose
from tests.inproc import command

OWN_PARAM = "tests.own_param:mup_lr_power"
OWN = ["model=wide_mlp", "data=char_windows", "model.family=tests.own_family:FAMILY", "+model.residual=true", "param=mup", "width=128"]
SHORT = ["steps=6", "trainer.val_check_interval=3", "log_every=2", "callbacks=none",
         "trainer.enable_progress_bar=false", "data.train_eval=0"]


def checked(*overrides):
    return validate(to_plain(compose(*overrides)))


def test_own_family_and_table_train_from_the_command_line(tmp_path):
    run = tmp_path / "run"
    # the command's main, its checks and Hydra's run, in this process (tests/inproc.py; a process spent seconds importing torch)
    p = command(*OWN, f"param.name={OWN_PARAM}", "+param.lr_power=0.5", *SHORT, f"hydra.run.dir={run}", cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    metrics = json.loads((run / "metrics.json").read_text())
    assert math.isfinite(metrics["final_val_loss"])
    config = (run / ".hydra" / "config.yaml").read_text()
    assert "family: tests.own_family:FAMILY" in config and f"name: {OWN_PARAM}" in config and "lr_power: 0.5" in config


def test_own_table_is_mup_at_its_default_and_its_key_changes_training(tmp_path):
    mup = train(compose(*OWN, *SHORT), tmp_path / "mup")["val_history"]
    own = train(compose(*OWN, f"param.name={OWN_PARAM}", *SHORT), tmp_path / "own")["val_history"]
    half = train(compose(*OWN, f"param.name={OWN_PARAM}", "+param.lr_power=0.5", *SHORT), tmp_path / "half")["val_history"]
    assert own == mup  # lr_power 1: µP's table, bit for bit, through the user's own family
    assert half != mup


def test_own_entries_bring_their_keys_and_nothing_else_passes():
    c = checked(*OWN, f"param.name={OWN_PARAM}", "+param.lr_power=0.5")
    assert c["model"]["residual"] is True and c["param"]["lr_power"] == 0.5
    refused = {
        ("+param.lr_power=3",): "param.lr_power=3 is invalid: a number in [0, 2] (1: µP)",
        ("+param.bogus=2",): f"param.bogus is not a key initnorm reads (the keys of param for param.name={OWN_PARAM}: attn_mult, "
                             "base_depth, base_width, depth_alpha, lr_power,",
        ("model.residual=maybe",): "model.residual='maybe' is invalid: true or false",
        ("+model._target_=x",): "model._target_ is not a key initnorm reads",
    }
    for extra, says in refused.items():
        with pytest.raises(ConfigError) as err:
            checked(*OWN, f"param.name={OWN_PARAM}", *extra)
        assert says in str(err.value) and "\n" not in str(err.value)
    # the same keys are no one's under the shipped family and table
    with pytest.raises(ConfigError, match=r"model.residual is not a key initnorm reads \(the keys of model for model.family=wide_mlp: "):
        checked("experiment=mup_mlp_sweep", "+model.residual=true")
    with pytest.raises(ConfigError,
                       match=r"param.lr_power is not a key .* for param.name=mup: .*drop `\+param.lr_power=.*`, or declare it"):
        checked("param=mup", "+param.lr_power=0.5")


@pytest.mark.parametrize("override,says", [
    ("+model._target_=mymodels.TinyGPT", ("a model of your own is named by its constructor under model=custom: "
                                          "`model=custom model._target_=mypkg.models.Net`")),
    ("+model.foo=1", "model.foo is not a key initnorm reads (the keys of model for model.family=decoder: "),
    ("+param.bogus=2", ("param.bogus is not a key initnorm reads (the keys of param for param.name=sp: base_width, name); fix it: drop "
                        "`+param.bogus=2`")),
    ("+init.std=0.5", "init.std is not a key initnorm reads"),
])
def test_unknown_keys_are_one_line_never_ignored(override, says):
    extra = ["init=xavier"] if override.startswith("+init") else []  # xavier reads no std
    with pytest.raises(ConfigError) as err:
        checked(*extra, override)
    assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("override,known", [
    ("model.family=tests.nowhere:FAMILY", ("known: char_mlp, custom, decoder, deep_mlp, wide_mlp, or your own as a dotted path "
                                           "(`model.family=mypkg.module:Thing`)")),
    ("model.family=transformer", "known: char_mlp, custom, decoder, deep_mlp, wide_mlp, or your own"),
    ("param.name=tests.own_param:nothing", ("known: completep, depth_mup, mup, sp, umup, or your own as a dotted path "
                                            "(`param.name=mypkg.module:Thing`)")),
    ("param.name=ntk", "unknown parameterisation param='ntk'; known: completep, depth_mup, mup, sp, umup, or your own"),
    ("init.name=nowhere.inits.fancy", "(`init.name=mypkg.module:Thing`)"),
    ("norm_type.name=batchnorm", "known: layernorm, none, rmsnorm, or your own as a dotted path (`norm_type.name=mypkg.module:Thing`)"),
    ("model.family=tests.own_param:mup_lr_power", ("tests.own_param has no Family (initnorm.models.build.Family) 'mup_lr_power' (it is a "
                                                   "function)")),
])
def test_an_unknown_name_or_a_path_that_does_not_import_is_one_line(override, known):
    with pytest.raises(ConfigError) as err:
        checked(override)
    line = str(err.value)
    assert known in line and "\n" not in line and "fix it with `" in line


def test_init_schemes_and_norms_take_dotted_paths_too():
    def built(*overrides):
        c = checked(*overrides)
        torch.manual_seed(0)
        return build_model(c["model"], c["init"], c["param"], 28).model.state_dict()

    for named, dotted in ((["init=orthogonal"], ["init=orthogonal", "init.name=initnorm.nn.init.orthogonal"]),
                          (["norm_type=rmsnorm"], ["norm_type=rmsnorm", "norm_type.name=initnorm.nn.norms:RMSNorm"])):
        a, b = built(*named), built(*dotted)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_transfer_report_prints_the_display_name():
    from initnorm.transfer import setting_label

    importlib.import_module("tests.own_param")  # a label over records looks an entry up without importing it
    assert setting_label((("param.name", OWN_PARAM),)) == "µP, hidden lr x m^-p"
    assert setting_label((("param", "depth_mup"), ("norm", "post"))) == "depth-µP, norm=post"


def test_the_coordinate_check_reads_the_declared_kind_not_the_name(tmp_path, capsys):
    def rows(param, growth):  # one seed, two widths: the logits' change x growth from width 16 to 64
        return [{"width": w, "depth": 2, "param": param, "seed": 1, "step": 1, "layer": "logits", "role": "output",
                 "value": growth if w == 64 else 1.0} for w in (16, 64)]

    importlib.import_module("tests.own_param")  # a report over records looks an entry up without importing it
    report = judge(rows("tests.own_param:plain", 3.0) + rows(OWN_PARAM, 1.1))
    assert report.ok and "µP, hidden lr x m^-p (under test): logits/output exponent +0.07" in report.text
    assert "my SP (baseline): logits/output exponent +0.79: grows" in report.text
    assert not judge(rows("tests.own_param:plain", 1.1) + rows(OWN_PARAM, 3.0)).ok
    # the real command, with both named by their paths: the table's kind makes it the width-stable one
    assert coord_check(["--widths", "16,64", "--steps", "5", "--params", f"tests.own_param:plain,{OWN_PARAM}", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Verdict: PASS" in out and "my SP (baseline)" in out and ": grows (" in out
