"""The preflight owns every piece the user brings (issue 34): a model of one's own, a data module of one's own,
callbacks and tracker URIs are each checked before any folder exists, each wrong one a line naming the value and the
fix, and an exception raised in the user's code named as theirs, never as a bug in initnorm's checks."""

from __future__ import annotations

import re

import pytest

from initnorm.cli.preflight import check_command_line
from initnorm.errors import ConfigError

MODEL = ["model=custom", "model.width_arg=width", "model.vocab_arg=vocab_size", "width=32", "model.base_width=16", "steps=2"]
DATA = ["data=custom", *MODEL, "model._target_=tests.own_bad.Net"]


def refused(tmp_path, *overrides: str) -> str:
    run = tmp_path / "run"
    with pytest.raises(ConfigError) as err:
        check_command_line([*overrides, f"hydra.run.dir={run}"])
    assert "\n" not in str(err.value) and "bug in initnorm" not in str(err.value) and not run.exists()
    return str(err.value)


@pytest.mark.parametrize("target, line", [
    ("not_a_module", "model._target_=tests.own_bad.not_a_module returned a dict, not a torch.nn.Module"),
    ("raises", "model._target_=tests.own_bad.raises (built at width 16) raised ValueError: no model at width 16 (in your code"),
    ("Dict", "returned a dict (keys logits), not logits; return the logits tensor ([2, 8, 28])"),
    ("LossLogits", "returned a tuple whose first element is a scalar (a loss?) for inputs of [2, 8]; the task needs logits of [2, 8, 28]"),
    ("Wrong", "returned logits of [2, 8, 31] for inputs of [2, 8]; the task needs logits of [2, 8, 28] (28 = the data's vocabulary"),
])
def test_a_model_of_ones_own_is_built_and_run_on_one_tiny_batch(tmp_path, target, line):
    assert line in refused(tmp_path, *MODEL, f"model._target_=tests.own_bad.{target}")


@pytest.mark.parametrize("target, line", [
    ("SetupRaises", "data._target_=tests.own_bad.SetupRaises: its setup('fit') raised FileNotFoundError: my_corpus.txt (in your code"),
    ("OutOfRange", "its training batch's x holds 11..21, outside the vocabulary (0..10, vocab_size=11)"),
    ("Floats", "its training batch's x holds NaN or infinite values"),
])
def test_a_data_module_of_ones_own_sets_up_and_gives_a_sound_batch(tmp_path, target, line):
    assert line in refused(tmp_path, *DATA, f"data._target_=tests.own_bad.{target}")


@pytest.mark.parametrize("target, line", [
    ("Nope", "callbacks.mine._target_='tests.own_bad.Nope': tests.own_bad has no callable 'Nope'"),
    ("NotACallback", "made a NotACallback, not a Lightning Callback; fix it with"),
    ("CallbackRaises", "callbacks.mine (tests.own_bad.CallbackRaises) raised RuntimeError: my callback cannot start (in your code"),
])
def test_a_callback_of_ones_own_imports_builds_and_is_a_callback(tmp_path, target, line):
    assert line in refused(tmp_path, f"+callbacks.mine._target_=tests.own_bad.{target}")


@pytest.mark.parametrize("uri, line", [
    ("bogus://x", "'bogus://x': bogus scheme, which MLflow does not know"),
    ("/proc/x.db", "'/proc/x.db': cannot write in /proc"),
    ("http://127.0.0.1:1", "no server answers at 127.0.0.1:1 (Connection refused within 2 s)"),
])
def test_a_tracker_uri_that_cannot_work_is_one_line(tmp_path, uri, line):
    assert line in refused(tmp_path, "logger=mlflow", f"logger.mlflow.tracking_uri={uri}")


def test_a_sweep_checks_each_piece_once(tmp_path, monkeypatch):
    # a 1,000-job sweep must not build the user's model 1,000 times: once per distinct model (and data), here 1 for 6 jobs
    from initnorm.models import own

    built = []
    real = own.build
    monkeypatch.setattr(own, "build", lambda *a, **k: built.append(a[0]["width"]) or real(*a, **k))
    jobs = check_command_line(["-m", *MODEL, "model._target_=tests.own_bad.Net", "lr=0.01,0.02,0.03", "seed=1,2",
                               f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert len(jobs) == 6 and built.count(16) == 1, built


SEARCH = ["-m", "hparams_search=lr_base", "steps=2"]


@pytest.mark.parametrize("override, line", [
    ("hydra.sweeper.n_trials=0", "hydra.sweeper.n_trials=0 is invalid: a positive integer; fix it with `hydra.sweeper.n_trials=4`"),
    ("hydra.sweeper.n_trials=-1", "hydra.sweeper.n_trials=-1 is invalid"),
    ("hydra.sweeper.n_trials=abc", "hydra.sweeper.n_trials='abc' is invalid"),
    ("hydra.sweeper.seeds=[]", "hydra.sweeper.seeds=[] is invalid: a list of at least one seed"),
    ('hydra.sweeper.params.lr="interval(-1,0.1)"', "hydra.sweeper.params.lr='interval(-1,0.1)' could ask -1.0: lr=-1.0 is invalid"),
    ('+hydra.sweeper.params.warmup="choice(-5,0)"', "could ask -5: warmup=-5 is invalid: an integer from 0 to steps=2"),
])
def test_a_search_space_and_its_counts_are_checked_before_the_search_starts(tmp_path, override, line):
    pytest.importorskip("optuna")
    sweep = tmp_path / "search"
    with pytest.raises(ConfigError) as err:
        check_command_line([*SEARCH, override, f"hydra.sweep.dir={sweep}"])
    assert line in str(err.value) and "\n" not in str(err.value) and not sweep.exists()


def test_transfer_to_a_width_the_preflight_refuses_is_its_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    # initnorm-transfer FOLDER width=15 printed the preflight's line, then a warning, then a traceback, exit 1
    from initnorm.cli import transfer

    monkeypatch.setattr(transfer, "load", lambda folder: {"seeds": [1]})
    monkeypatch.setattr(transfer, "overrides_for", lambda *a: ["lr=0.01", "seed=1", "steps=2", "width=15"])
    monkeypatch.setattr(transfer, "search_param", lambda folder: "sp")
    monkeypatch.setattr(transfer, "metric_of_search", lambda summary: "final_val_loss")
    assert transfer.main([str(tmp_path / "s"), "width=15"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "width" in err[0], err
    assert not (tmp_path / "s_transfer").exists()


BROKEN = "import torch\n\n\nraise RuntimeError('my module is broken')\n"  # a module of the user's that raises on import


@pytest.mark.parametrize("override", ["model._target_=mine_broken.Net", "+callbacks.mine._target_=mine_broken.CB",
                                      "model.family=mine_broken.Family", "init.fn=mine_broken.fancy"])
def test_a_users_own_error_is_named_as_theirs_with_its_file_and_line(tmp_path, monkeypatch, override):
    """Issue 48, D1b/E3a/D14c: whatever the config names of the user's (a model, a callback, a family, an init scheme)
    raising in their code is one line naming it as theirs, with the file and line, never "a bug in initnorm's checks"."""
    (tmp_path / "mine_broken.py").write_text(BROKEN)
    monkeypatch.syspath_prepend(str(tmp_path))
    extra = [*MODEL] if override.startswith("model._target_") else ["init=custom"] if override.startswith("init.fn") else []
    line = refused(tmp_path, *extra, override)
    assert "RuntimeError: my module is broken (in your code at " in line and "mine_broken.py:4" in line, line


def test_the_library_names_a_users_error_as_the_command_line_does(tmp_path):
    """The checks live beside models/own.py and data/own.py: ``initnorm.parameterize`` and a data module of one's own
    outside any command refuse in the command line's lines (a TypeError inside a constructor is the user's error, not a
    refusal of its arguments)."""
    import initnorm
    from initnorm.data.own import make
    from initnorm.own_errors import YourError
    from tests.conftest import compose_cfg
    from tests.own_bad import raises

    with pytest.raises(YourError, match=r"raised ValueError: no model at width 16 \(in your code at .*tests/own_bad.py:\d+"):
        initnorm.parameterize(raises, width=32, base_width=16, vocab_size=11)
    from initnorm.config import to_plain

    for target, line in (("InitRaises", "raised TypeError: my data module cannot start (in your code at"),
                         ("BadBatch", "its training batch is x [2, 4], y [3]; y must have the shape x's")):
        c = to_plain(compose_cfg(*DATA, f"data._target_=tests.own_bad.{target}"))
        with pytest.raises(ConfigError, match=re.escape(line)):
            make(c).setup("fit")
