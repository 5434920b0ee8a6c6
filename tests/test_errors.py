"""Bad input gets one line before any training: the bad value, what is allowed, the override that fixes it.

Most cases go through ``preflight.check_command_line`` in-process (the exact code ``python -m
initnorm.train`` runs first, Hydra's composition included); a few go through the real command to
prove the exit status, the single line and the absent traceback.
"""

import urllib.request

import pytest

from initnorm.cli.preflight import check_command_line
from initnorm.cli.train import main as cli
from initnorm.errors import ConfigError
from tests.conftest import TINY, run_cli
from tests.inproc import command, run

MLP = ["model=char_mlp", "data=char_windows"]

# (command line, pieces the one line must contain: the bad value, what is allowed, the fix)
CASES = {
    "unknown init": (["init=xavir"], ["init='xavir'", "known: ", "xavier", "`init=xavier`"]),
    "unknown init name": (["init.name=xavir"], ["init='xavir'", "he, lecun", "`init=xavier`"]),
    "unknown norm type": (["norm_type=rms"], ["norm_type='rms'", "layernorm, none, rmsnorm", "`norm_type=rmsnorm`"]),
    "unknown placement": (["norm=mid"], ["norm='mid'", "one of pre, post", "`norm=pre`"]),
    "unknown param": (["param=mu"], ["param='mu'", "mup, sp", "`param=mup`"]),
    "unknown model": (["model=decodr"], ["model='decodr'", "known: ", "`model=decoder`"]),
    "unknown model family": (["model.family=decodr"], ["model='decodr'", "decoder", "`model=decoder`"]),
    "unknown dataset": (["data=alic"], ["data='alic'", "shakespeare", "`data=alice`"]),
    "unknown corpus": (["data.name=alicee"], ["data.name='alicee'", "alice, shakespeare", "`data.name=alice`"]),
    "unknown optimiser": (["optim=adamm"], ["optim='adamm'", "adam, adamax, adamw", "muon", "sgd", "`optim=adam`"]),
    "unknown experiment": (["experiment=nope"], ["experiment='nope'", "norm_warmup", "`experiment="]),
    "width not divisible by heads": (["width=15"], ["width=15", "multiple of model.n_heads=2", "`width=14`"]),
    "width below µP base": (["param=mup", "width=8"], ["width=8", "param.base_width=16", "`param.base_width=8`"]),
    "lr zero": (["lr=0"], ["lr=0", "positive number", "`lr="]),
    "lr negative": (["lr=-0.1"], ["lr=-0.1", "positive number", "`lr="]),
    "steps zero": (["steps=0"], ["steps=0", "positive integer", "`steps="]),
    "warmup above steps": (["steps=100", "warmup=200"], ["warmup=200", "0 to steps=100", "`warmup=100`"]),
    "batch zero": (["batch_size=0"], ["batch_size=0", "positive integer", "`batch_size="]),
    "unknown compile": (["compile=maybe"], ["compile='maybe'", "auto, true, false", "`compile=auto`"]),
    "dropout negative": ([*MLP, "model.dropout=-0.1"], ["model.dropout=-0.1", "[0, 1)", "`model.dropout=0.2`"]),
    "dropout one": ([*MLP, "model.dropout=1.0"], ["model.dropout=1.0", "[0, 1)", "`model.dropout=0.2`"]),
    "user init does not import": (["init=custom", "init.fn=nowhere.inits.fancy"],
                                  ["init.fn='nowhere.inits.fancy'", "does not import", "`init.fn=module.function`"]),
    "user init not callable": (["init=custom", "init.fn=math.pi"], ["init.fn='math.pi'", "no callable 'pi'", "`init.fn=module.function`"]),
    "corpus path missing": (["data.path=/no/such/text.txt"], ["data.path='/no/such/text.txt'", "does not exist", "`data.path="]),
    "context beyond position table": (["data.context=100"], ["data.context=100", "model.max_context=64", "`model.max_context=100`"]),
    "bad checkpoint interval": (["checkpoint.every_n_steps=-5"], ["checkpoint.every_n_steps=-5", ">= 0", "`checkpoint.every_n_steps=250`"]),
    "bad value in a sweep's job": (["-m", "lr=0.01,0", "seed=1,2"], ["job lr=0 seed=1: lr=0", "positive number", "`lr="]),
    "unknown option in a sweep": (["-m", "init=xavier,xavir"], ["init='xavir'", "`init=xavier`"]),
    # Hydra's own refusals, restated in the same style (cli/bad_override.py): a typo'd key with or without its +, a key
    # the config lacks, an option inside a list, a name close to none (its default, not an arbitrary one)
    "typo'd key": (["nrom=post"], ["nrom is not a key initnorm reads", "the top-level keys: batch_size", "the closest: norm",
                                   "`norm=post`"]),
    "typo'd key with its +": (["+nrom=post"], ["nrom is not a key", "the closest: norm", "`norm=post`"]),
    "typo'd key of a group": (["model.widht=16"], ["model.widht is not a key", "the closest: width", "`model.width=16`"]),
    "typo'd trainer key": (["trainer.acelerator=cpu"], ["not a key Lightning's Trainer reads", "the closest: accelerator",
                                                        "`trainer.accelerator=cpu`"]),
    "trainer key without its +": (["trainer.strategy=ddp"], ["not in the trainer config (accelerator,", "Trainer takes strategy",
                                                            "`+trainer.strategy=ddp`"]),
    "unknown logger in a list": (["logger=[tensorboard,mlfow]"], ["logger='mlfow'", "known: csv, mlflow, tensorboard, wandb",
                                                                  "the closest: mlflow", "`logger=[tensorboard,mlflow]`"]),
    "unknown option close to none": (["optim=quux"], ["optim='quux'", "known: adadelta", "muon",
                                     "no option is close to 'quux', the default: adamw",
                                                      "`optim=adamw`", "or your own: `optim=custom optim._target_=<module>.<name>`"]),
    "unknown registered name close to none": (["param.name=ntk"], ["param='ntk'", "no known name is close to 'ntk'"]),
    "bad choice close to none": (["norm=mid"], ["norm='mid'", "one of pre, post", "`norm=pre`"]),
    "a group's key named by a part of it": (["model.heads=4"], ["model.heads is not a key", "the closest: n_heads",
                                                               "`model.n_heads=4`"]),
    "a search range in a grid sweep": (["-m", "lr=interval(0.001,0.1)"], ["lr=interval(0.001,0.1) is a range to search",
                                                                          "`lr=0.001,0.1`", "hparams_search=lr_base"]),
    "a search range in one run": (["lr=interval(0.001,0.1)"], ["lr=interval(0.001,0.1) is a range to search"]),
    "several values without -m": (["seed=1,2", "steps=5"], ["seed=1,2 gives 2 values to one run",
                                                           "`initnorm-train -m seed=1,2 steps=5`", "one value: `seed=1`"]),
    "several values without -m, for a list key": (["summary.plots=val_curves,train_curves"],
                                                   ["one value: `summary.plots=val_curves`",
                                                    "a list: `summary.plots=[val_curves,train_curves]`"]),
    "a top-level key under a group": (["optim.lr=0.02"], ["optim.lr is not a key", "lr is a top-level key: fix it with `lr=0.02`"]),
    "a top-level key under a group, with its +": (["+data.batch_size=8"], ["batch_size is a top-level key", "`batch_size=8`"]),
    "a top-level key under a group, in a sweep": (["-m", "seed=1,2", "optim.lr=0.1"], ["lr is a top-level key", "`lr=0.1`"]),
    "typo'd key in a sweep": (["-m", "seed=1,2", "nrom=post"], ["the closest: norm", "fix it with `norm=post`"]),  # no + there
    "unknown init close to none: one's own named": (["init=fancy"], ["init='fancy'", "or your own: `init=custom init.fn=<module>.<name>`"]),
}


def one_line_error(argv) -> str:
    with pytest.raises(ConfigError) as info:
        check_command_line(list(argv))
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name", list(CASES))
def test_each_bad_value_is_one_line_with_the_fix(name):
    argv, pieces = CASES[name]
    message = one_line_error(argv)
    for piece in pieces:
        assert piece in message, f"{name}: {piece!r} not in {message!r}"


def test_a_good_sweep_passes_every_job(tmp_path):
    jobs = check_command_line(["-m", "norm=pre,post", "seed=1,2", f"hydra.sweep.dir={tmp_path}"])
    assert [j.folder.relative_to(tmp_path).as_posix() for j in jobs] == ["norm=pre/seed=1", "norm=pre/seed=2",
                                                                         "norm=post/seed=1", "norm=post/seed=2"]
    assert all(j.prior.finished is None and j.prior.checkpoint is None for j in jobs)


def test_checksum_mismatch(tmp_path, monkeypatch):
    (tmp_path / "alice_pg11.txt").write_text("not alice")
    monkeypatch.setenv("INITNORM_DATA_DIR", str(tmp_path))
    message = one_line_error([])
    assert "sha256" in message and "expected 675dcebbb8d3" in message and "`data.path=" in message


def test_no_corpus_and_no_network(tmp_path, monkeypatch):
    monkeypatch.delenv("INITNORM_DATA_DIR")
    monkeypatch.setenv("INITNORM_CACHE", str(tmp_path))

    def offline(*args, **kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    message = one_line_error(["data=shakespeare"])
    assert "no copy of tinyshakespeare.txt and no network" in message and str(tmp_path) in message and "`data.path=" in message


def test_cli_exit_status_one_line_no_traceback(tmp_path):
    """Through the real command, as a process (its exit status and all it prints are the point): an unknown group
    option (Hydra's composition). A bad value in one job of a sweep goes through the command's main in this process
    (tests/inproc.py): the same exit status and line, and nothing trains (no job folder appears)."""
    unknown = run_cli("init=xavir", *TINY, f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert unknown.returncode == 2
    assert unknown.stderr.strip().splitlines() == [unknown.stderr.strip()]
    assert unknown.stderr.startswith("error: unknown option init='xavir'; known: custom, gpt2,")
    assert "Traceback" not in unknown.stderr + unknown.stdout and not (tmp_path / "run").exists()

    sweep = command("-m", "lr=0.01,0", "seed=1,2", *TINY, f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path)
    assert sweep.returncode == 2 and "Traceback" not in sweep.stderr
    assert sweep.stderr.strip() == "error: job lr=0 seed=1: lr=0 is invalid: a finite positive number; fix it with `lr=0.01`"
    assert not (tmp_path / "sweep").exists()  # checked before Hydra made any job folder


def test_full_error_gives_the_traceback(tmp_path):
    # The command's main in this process (tests/inproc.py): the signal handlers, filters and loggers it sets are put back.
    refused = run(cli, ["initnorm.train", "lr=0"], tmp_path)
    assert refused.returncode == 2 and refused.stderr == "error: lr=0 is invalid: a finite positive number; fix it with `lr=0.01`\n"
    raised = run(cli, ["initnorm.train", "lr=0"], tmp_path, env={"HYDRA_FULL_ERROR": "1"})  # raised: Python prints the traceback
    assert raised.returncode == 1 and "Traceback" in raised.stderr and "ConfigError: lr=0 is invalid" in raised.stderr, raised.stderr


def test_a_model_with_the_wrong_data_names_the_data_to_pick():
    message = one_line_error(["model=deep_mlp"])
    assert "data.dim" in message and "fix it with `data=clusters`" in message and "\n" not in message


def test_a_handler_left_on_a_closed_stream_is_taken_away_before_the_next_test(capsys):
    # test_docs_commands failed by test order: an in-process command of an earlier test left a handler on that test's
    # captured stream, closed since, and the next log line wrote "--- Logging error ---" to this test's stderr.
    import io
    import logging

    from tests.conftest import drop_closed_handlers

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("initnorm.test_closed_stream")
    logger.addHandler(handler)
    stream.close()
    assert drop_closed_handlers() == [handler] and handler not in logger.handlers
    logger.warning("a line after the stream closed")
    assert "Logging error" not in capsys.readouterr().err


def test_version_names_initnorm_then_its_frameworks(capsys, monkeypatch):
    """Hydra's own --version printed only "Hydra 1.3.8"."""
    import sys
    from importlib import metadata

    from initnorm import __version__
    from initnorm.train import main as shim

    monkeypatch.setattr(sys, "argv", ["initnorm-train", "--version"])
    shim()
    out = capsys.readouterr().out.strip()
    assert out == f"initnorm {__version__} (Hydra {metadata.version('hydra-core')}, Lightning {metadata.version('lightning')})"


def test_the_closest_name_is_a_near_one_or_none():
    from initnorm.errors import closest

    assert closest("nrom", ["lr", "norm", "seed"]) == "norm"  # a swap of two letters is one edit
    assert closest("rms", ["layernorm", "none", "rmsnorm"]) == "rmsnorm"  # a name the word starts
    assert closest("adamm", ["adam", "adamw", "sgd"]) == "adam"
    assert closest("lion", ["adam", "adamw", "sgd"]) is None  # once `optim=sgd`: an arbitrary name offered as the meant one
    assert closest("heads", ["mlp_ratio", "n_heads", "width"]) == "n_heads"  # a whole part of the name
    assert closest("lr", ["adamw_lr", "betas"]) is None  # too short a part to say it is the one meant
    assert closest("head", ["n_heads"]) is None  # a part, not a piece of one
    assert closest("windows", ["alice", "char_windows", "text_windows"]) is None  # two names with that part


def test_the_missing_interpolation_key_is_read_from_the_node_not_from_the_message():
    from omegaconf import OmegaConf
    from omegaconf.errors import InterpolationKeyError

    from initnorm.cli.preflight import missing_reference

    cfg = OmegaConf.create({"model": {"dim": "a_${data.x}_${data.dim}"}, "data": {"x": 1}})
    with pytest.raises(InterpolationKeyError) as info:
        OmegaConf.to_container(cfg, resolve=True)
    info.value.msg = "reworded by another OmegaConf"  # the message plays no part
    assert missing_reference(info.value) == "data.dim"  # data.x is there: the one the config lacks is named
