"""The validation schema: every class of bad value is one line naming the key and the fix, before anything runs."""

import pytest

from initnorm import schema
from initnorm.errors import ConfigError
from tests.conftest import ROOT, compose

PRESETS = [[], ["experiment=deep_mlp_train"], ["experiment=mup_mlp_sweep"], ["experiment=regularization"], ["experiment=coord_check"],
           ["experiment=mup_sweep_wide"], ["experiment=norm_warmup"], ["experiment=norm_type"], ["data=shakespeare"], ["param=mup"],
           ["experiment=regularization", "regularizer=weight_decay_1.0"], ["init=custom", "init.fn=math.sqrt"],
           ["optim=sgd", "init=orthogonal"], ["schedule=linear_to_zero"], ["schedule=wsd:0.1", "warmup=100"]]

# (overrides, what the one line must say): one entry per class of bad input.
BAD = [
    (["lr=nan"], "lr=nan is invalid: a finite positive number"),
    (["lr=inf"], "lr=inf is invalid"),
    (["lr=0"], "lr=0 is invalid"),
    (["lr=abc"], "lr='abc' is invalid"),
    (["lr=true"], "lr=True is invalid"),
    (["seed=-1"], "seed=-1 is invalid: an integer from 0 to 4294967295"),
    (["seed=abc"], "seed='abc' is invalid"),
    (["seed=1.5"], "seed=1.5 is invalid: an integer"),
    (["width=16.0"], "width=16.0 is invalid: an integer (write 16, not 16.0); fix it with `width=16`"),
    (["steps=1e3"], "fix it with `steps=1000`"),
    (["init.std=-1"], "init.std=-1 is invalid"),
    (["init.std=nan"], "init.std=nan is invalid"),
    (["log_every=0"], "log_every=0 is invalid"),
    (["trainer.val_check_interval=0"], "trainer.val_check_interval=0 is invalid"),
    (["threads=-1"], "threads=-1 is invalid"),
    (["data.val_batch_size=0"], "data.val_batch_size=0 is invalid"),
    (["data.context=0"], "data.context=0 is invalid"),
    (["model.n_heads=0"], "model.n_heads=0 is invalid"),
    (["experiment=regularization", "model.dropout=1.0"], "model.dropout=1.0 is invalid"),
    (["warmup=2000"], "warmup=2000 is invalid: an integer from 0 to steps=1500; fix it with `warmup=1500`"),
    (["schedule=linear"], "schedule='linear' is invalid: one of cosine, constant, linear_to_zero, wsd, or wsd:F"),
    (["schedule=wsd:1.5"], ("schedule='wsd:1.5' is invalid: one of cosine, constant, linear_to_zero, wsd, or wsd:F to decay over the "
                            "last fraction F of the run (0 < F <= 1; wsd alone: 0.2); fix it with `schedule=wsd:0.2`")),
    (["schedule=cosine:0.5"], "schedule='cosine:0.5' is invalid"),
    (["optim.betas=[0.9,1.5]"], "optim.betas=[0.9, 1.5] is invalid"),
    (["trainer.accelerator=tpu"], "trainer.accelerator='tpu' is invalid"),
    (["trainer.enable_progress_bar=maybe"], "trainer.enable_progress_bar='maybe' is invalid: true or false"),
    (["checkpoint.every_n_steps=-5"], "checkpoint.every_n_steps=-5 is invalid"),
    (["+summary.plots=[nope]"], "unknown sweep plot summary.plots='nope'; known: "),
    (["+model.foo=1"], "model.foo is not a key initnorm reads"),
    (["+lrr=0.1"], "lrr is not a key initnorm reads (the top-level keys: batch_size, "),
    (["+model.widht=16"], "the closest: width; fix it with `model.width=16`"),
    (["+init.per_role.readot=xavier"], "init.per_role.readot='xavier' is invalid: a key of init.per_role is a parameter role"),
    (["model=decoder", "data=clusters"], "model=decoder trains on data of kind char_lm"),
    (["experiment=regularization", "data=alice"], "model=char_mlp trains on data of kind char_windows"),
    (["width=15"], "width=15 is invalid: a multiple of model.n_heads=2"),
    (["data.context=100"], "at most the position table's model.max_context=64"),
    (["param=mup", "width=8"], "width >= param.base_width=16"),
    (["init=custom", "init.fn=nosuchmodule.fn"], "init.fn='nosuchmodule.fn' does not import"),
]


@pytest.mark.parametrize("overrides", PRESETS, ids=lambda o: " ".join(o) or "default")
def test_every_shipped_config_passes(overrides):
    c = schema.check(schema_input(overrides))
    schema.check_text(c)


def schema_input(overrides):
    from omegaconf import OmegaConf

    return OmegaConf.to_container(compose(*overrides), resolve=True)


@pytest.mark.parametrize("overrides,says", BAD, ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_each_bad_value_is_one_line_naming_it(overrides, says):
    with pytest.raises(ConfigError) as info:
        schema.check(schema_input(overrides))
    line = str(info.value)
    assert says in line and "\n" not in line
    assert "fix it with `" in line or "drop `+" in line


def test_relative_data_path_is_made_absolute_against_the_launch_folder(tmp_path):
    (tmp_path / "mine.txt").write_text("abcdefgh " * 200)
    c = schema.check(schema_input(["data=text", "data.path=mine.txt"]), base=tmp_path)
    assert c["data"]["path"] == str(tmp_path.resolve() / "mine.txt")
    schema.check_text(c)


@pytest.mark.parametrize("content,says", [
    (b"", "shorter than one window"),
    (b"just a few words here", "shorter than one window of data.context=32"),
    (b"\x00\x01\x02binary" * 100, "is a binary file"),
    ("caf\u00e9 ".encode("latin-1") * 100, "is not UTF-8 text"),
    (("abcdefghij" * 30).encode(), r"its validation part \(30\) is shorter than one window"),
])
def test_text_that_cannot_train_is_refused(tmp_path, content, says):
    (tmp_path / "t.txt").write_bytes(content)
    c = schema.check(schema_input(["data=text", f"data.path={tmp_path / 't.txt'}"]))
    with pytest.raises(ConfigError, match=says):
        schema.check_text(c)


def test_the_alice_cleaner_on_another_text_names_the_option_that_fits(tmp_path):
    (tmp_path / "t.txt").write_text("plain text, no chapters. " * 100)
    c = schema.check(schema_input([f"data.path={tmp_path / 't.txt'}"]))
    with pytest.raises(ConfigError, match=r"fix it with|keep every character with `data=text data.path="):
        schema.check_text(c)


def test_a_missing_text_is_one_line(tmp_path):
    c = schema.check(schema_input(["data=text", "data.path=nope.txt"]), base=tmp_path)
    with pytest.raises(ConfigError, match="does not exist"):
        schema.check_text(c)


@pytest.mark.parametrize("launcher,says", [({"n_jobs": 0}, "hydra.launcher.n_jobs=0 is invalid"), ({"n_jobs": 2.5}, "n_jobs=2.5"),
                                           ({"timeout_min": 0}, "timeout_min=0")])
def test_launcher_values(launcher, says):
    with pytest.raises(ConfigError, match=says):
        schema.check_launcher(launcher)
    schema.check_launcher({"n_jobs": -1, "batch_size": "1", "pre_dispatch": "n_jobs"})


def test_every_rule_names_a_fix_that_passes_its_own_rule():
    from omegaconf import OmegaConf

    for key, rule in schema.every_rule().items():  # the common keys and every registration's own
        if rule.kind in ("int", "number", "bool") and not isinstance(rule.lo, str) and not isinstance(rule.hi, str):
            value = OmegaConf.create(f"v: {rule.fix}")["v"]  # as the command line would parse the suggested value
            schema.check_value(key, value, rule)


EXPERIMENTS = sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_job_of_every_shipped_preset_passes(experiment, tmp_path):
    """Every job each preset's sweep would run (all four families among them) passes the schema, whose
    keys come from the chosen registrations: a key no family, table, scheme or norm reads would fail here.
    One learning rate and one seed (they change no key) keep the big sweeps short."""
    from initnorm.cli.preflight import check_command_line

    assert check_command_line(["-m", f"experiment={experiment}", "lr=0.01", "seed=1", f"hydra.sweep.dir={tmp_path}"])
