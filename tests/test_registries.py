"""Init schemes, parameterisations and their configs: measured numbers against the rules."""

import contextlib
import math
import re
import sys
from pathlib import Path

import pytest
import torch

from initnorm.cli.train import train
from initnorm.config import to_plain, validate
from initnorm.errors import ConfigError
from initnorm.models.build import build_model
from initnorm.nn.init import INITS
from initnorm.nn.norms import NORMS
from initnorm.nn.param import PARAMS
from initnorm.nn.roles import Role
from tests.conftest import CONF, ROOT, TINY, compose_cfg

VOCAB = 28


def build(*overrides):
    c = to_plain(compose_cfg(*overrides))
    return build_model(c["model"], c["init"], c["param"], VOCAB)


def role_std(built) -> dict[Role, float]:
    """Pooled std of every weight of each role (the unbiased std around zero mean)."""
    pooled: dict[Role, list[torch.Tensor]] = {}
    for name, p in built.model.named_parameters():
        pooled.setdefault(built.roles[name], []).append(p.detach().flatten())
    return {r: torch.cat(ts).std().item() for r, ts in pooled.items()}


def expected_std(scheme: str, role: Role, width: int, depth: int) -> float:
    fan_in = {Role.EMBEDDING: 1, Role.MLP_OUT: 2 * width}.get(role, width)
    fan_out = {Role.READOUT: VOCAB, Role.MLP_IN: 2 * width, Role.EMBEDDING: width}.get(role, width)
    gain = 1.0 if role == Role.READOUT else math.sqrt(2.0)
    if scheme in ("normal", "zero_readout", "zero_branch"):
        zero = (scheme == "zero_readout" and role == Role.READOUT) or (scheme == "zero_branch" and role in (Role.ATTN_OUT, Role.MLP_OUT))
        return 0.0 if zero else 0.02
    if scheme == "small":
        return 0.01
    if scheme == "gpt2":
        return 0.02 / math.sqrt(2 * depth) if role in (Role.ATTN_OUT, Role.MLP_OUT) else 0.02
    if role == Role.EMBEDDING:
        return 1.0  # fan-in of a one-hot lookup is 1
    return {
        "xavier": math.sqrt(2.0 / (fan_in + fan_out)),
        "he": gain / math.sqrt(fan_in),
        "lecun": 1.0 / math.sqrt(fan_in),
        "orthogonal": gain / math.sqrt(max(fan_in, fan_out)),
    }[scheme]


WEIGHT_ROLES = [Role.EMBEDDING, Role.ATTN_QKV, Role.ATTN_OUT, Role.MLP_IN, Role.MLP_OUT, Role.READOUT]


@pytest.mark.parametrize("width", [64, 256])
@pytest.mark.parametrize("scheme", sorted(set(INITS.names())))
def test_init_std_per_role_within_five_percent(scheme, width):
    depth = 4
    torch.manual_seed(0)
    measured = role_std(build(f"init={scheme}", f"width={width}", f"depth={depth}"))
    for role in WEIGHT_ROLES:
        want = expected_std(scheme, role, width, depth)
        assert measured[role] == pytest.approx(want, rel=0.05, abs=1e-7), (scheme, role)
    assert measured[Role.BIAS] == 0.0 and measured[Role.NORM_BIAS] == 0.0
    gains = torch.cat([p.flatten() for n, p in build(f"init={scheme}").model.named_parameters() if n.endswith("ln1.weight")])
    assert torch.all(gains == 1.0)


def test_gpt2_residual_scaling_follows_depth():
    torch.manual_seed(0)
    shallow = role_std(build("init=gpt2", "width=128", "depth=2"))
    deep = role_std(build("init=gpt2", "width=128", "depth=8"))
    assert shallow[Role.ATTN_QKV] == pytest.approx(deep[Role.ATTN_QKV], rel=0.05)
    assert shallow[Role.MLP_OUT] / deep[Role.MLP_OUT] == pytest.approx(2.0, rel=0.05)  # sqrt(8 / 2)


def test_mup_scales_hidden_init_and_leaves_embedding_and_readout():
    torch.manual_seed(0)
    sp, mup = role_std(build("width=64")), role_std(build("width=64", "param=mup"))
    for role in (Role.ATTN_QKV, Role.ATTN_OUT, Role.MLP_IN, Role.MLP_OUT):
        assert mup[role] == pytest.approx(sp[role] / 2.0, rel=0.05)  # 0.02 / sqrt(64 / 16)
    for role in (Role.EMBEDDING, Role.READOUT):
        assert mup[role] == pytest.approx(sp[role], rel=0.05)
    assert build("width=64", "param=mup").model.head.forward_mult == 0.25


def test_mup_equals_sp_at_the_base_width(tmp_path):
    sp = train(compose_cfg(*TINY, "param=sp"), tmp_path / "sp")
    mup = train(compose_cfg(*TINY, "param=mup"), tmp_path / "mup")
    assert sp["val_history"] == mup["val_history"]
    wide_sp = train(compose_cfg(*TINY, "param=sp", "width=32"), tmp_path / "wsp")
    wide_mup = train(compose_cfg(*TINY, "param=mup", "width=32"), tmp_path / "wmup")
    assert wide_sp["val_history"] != wide_mup["val_history"]  # and differ away from it


def test_each_schedule_at_known_steps():
    from initnorm.training.optim import schedule_factor

    # 100 steps, 10 of warmup; after it each schedule runs from 1 towards 0 at step 100.
    assert [schedule_factor(s, 100, 10, "linear_to_zero") for s in (0, 9, 10, 55, 99)] == pytest.approx([0.1, 1.0, 1.0, 0.5, 1 / 90])
    assert schedule_factor(55, 100, 10, "cosine") == pytest.approx(0.5) and schedule_factor(99, 100, 10, "constant") == 1.0
    # wsd: stable at 1 until its decay, the last 20% of the run (wsd:0.5: the last half), then a straight line to 0.
    assert [schedule_factor(s, 100, 10, "wsd") for s in (50, 79, 80, 90, 99)] == pytest.approx([1.0, 1.0, 1.0, 0.5, 0.05])
    assert [schedule_factor(s, 100, 0, "wsd:0.5") for s in (49, 50, 75)] == pytest.approx([1.0, 1.0, 0.5])
    # The stable phase does not depend on the horizon: a 400-step run's first 320 steps are every shorter run's stable part.
    assert all(schedule_factor(s, 400, 10, "wsd") == schedule_factor(s, 1000, 10, "wsd") for s in range(320))


@pytest.mark.parametrize("param, hidden_mult", [("sp", 1.0), ("mup", 0.25)])
def test_schedule_multiplies_each_groups_own_rate(param, hidden_mult, tmp_path):
    from initnorm.training.fit import Member, assemble

    c = to_plain(compose_cfg(f"param={param}", "width=64", "steps=100", "warmup=10", "lr=0.01", "callbacks=none"))
    engine, _, _ = assemble([Member(c, tmp_path)])
    groups = engine.optimizer.param_groups

    def rate_of(name):
        return next(g["lr"] for g in groups if name in g["names"])

    engine._set_rates(0)
    assert rate_of("blocks.0.attn.q.weight") == pytest.approx(0.01 * hidden_mult * 1 / 10)  # first warmup step
    engine._set_rates(9)
    assert rate_of("blocks.0.attn.q.weight") == pytest.approx(0.01 * hidden_mult)  # warmup done: peak
    assert rate_of("tok_emb.weight") == pytest.approx(0.01)
    engine._set_rates(99)
    end = rate_of("blocks.0.mlp.proj.weight") / rate_of("tok_emb.weight")
    assert end == pytest.approx(hidden_mult) and rate_of("tok_emb.weight") < 1e-5
    assert len(groups) >= 2  # decayed matrices and undecayed vectors at least


def test_norm_free_model_runs(tmp_path):
    m = train(compose_cfg(*TINY, "norm_type=none"), tmp_path)
    assert sum(p.numel() for p in build("norm_type=none").model.parameters()) == 5376 - 5 * 32
    assert math.isfinite(m["final_val_loss"])


def test_unknown_names_list_the_known_ones():
    for registry, bad in ((INITS, "xavir"), (NORMS, "batchnorm"), (PARAMS, "ntk")):
        with pytest.raises(ConfigError) as err:
            registry.get(bad)
        assert bad in str(err.value) and ", ".join(registry.names()) in str(err.value)
        assert "\n" not in str(err.value)


def test_bad_custom_paths_are_one_line():
    with pytest.raises(ConfigError, match="init.fn='nowhere.fancy' does not import"):
        build("init=custom", "init.fn=nowhere.fancy")
    with pytest.raises(ConfigError, match="no callable 'nothing'"):
        build("init=custom", "init.fn=math.nothing")


def test_readme_custom_scheme_example_runs(tmp_path, monkeypatch):
    readme = (ROOT / "README.md").read_text()
    code = re.search(r"<!-- example: custom-init -->\n```python\n(.*?)```", readme, re.DOTALL).group(1)
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "inits.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("mypkg", None), sys.modules.pop("mypkg.inits", None)
    torch.manual_seed(0)
    b = build("init=custom", "init.fn=mypkg.inits.fancy", "width=128", "depth=4")
    stds = role_std(b)
    assert stds[Role.READOUT] == 0.0
    assert stds[Role.ATTN_OUT] == pytest.approx(1 / math.sqrt(128 * 8), rel=0.05)
    assert stds[Role.ATTN_QKV] == pytest.approx(0.02, rel=0.05)
    m = train(compose_cfg(*TINY, "init=custom", "init.fn=mypkg.inits.fancy"), tmp_path / "run")
    assert math.isfinite(m["final_val_loss"])
    # by its path alone, with the key it declares (one it does not declare is refused)
    torch.manual_seed(0)
    assert role_std(build("init.name=mypkg.inits:fancy", "init.std=0.05", "width=128",
                          "depth=4"))[Role.ATTN_QKV] == pytest.approx(0.05, rel=0.05)
    with pytest.raises(ConfigError, match=r"init.sdt is not a key initnorm reads \(the keys of init for init.name=mypkg.inits:fancy: fn, "
                                          r"name, nonlinearity, per_role, std\)"):
        validate(to_plain(compose_cfg("init.name=mypkg.inits:fancy", "+init.sdt=0.05")))
    validate(to_plain(compose_cfg("init.name=mypkg.inits:fancy", "init.std=0.05")))
    # The README's sweep of it against a built-in composes and checks every job as written there.
    from initnorm.cli.preflight import check_command_line

    sweep = re.search(r"`-m (init=normal,custom [^`]*)`", readme).group(1).split()
    jobs = check_command_line(["-m", *sweep, *TINY, f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert [j.config["init"]["name"] for j in jobs] == ["normal", "custom"] and jobs[1].config["init"]["fn"] == "mypkg.inits.fancy"


def group_options():
    for group in ("init", "param", "norm_type", "optim"):
        for f in sorted(Path(CONF, group).glob("*.yaml")):
            yield group, f.stem


@pytest.mark.parametrize("group, option", list(group_options()))
def test_every_option_of_every_group_composes_and_builds(group, option):
    extra = {("init", "custom"): ["init.fn=math.sqrt"],
             ("optim", "custom"): ["optim._target_=tests.own_optim.Lion", "optim.family=adam"]}.get((group, option), [])
    c = to_plain(compose_cfg(f"{group}={option}", "width=32", *extra))
    validate(c)
    if (group, option) != ("init", "custom"):  # math.sqrt is callable but not a scheme
        build_model(c["model"], c["init"], c["param"], VOCAB)


@pytest.mark.parametrize("group", ["experiment", "callbacks", "trainer", "logger"])
def test_every_other_config_option_composes(group):
    for f in sorted(Path(CONF, group).glob("*.yaml")):
        to_plain(compose_cfg(f"{group}={f.stem}"))


def test_every_model_composes_with_some_data():
    """Each model's data options are tried until one composes (one is what the assertion needs: the others cost a
    composition each)."""
    datasets = sorted(f.stem for f in Path(CONF, "data").glob("*.yaml"))
    for model in sorted(f.stem for f in Path(CONF, "model").glob("*.yaml")):
        ok = []
        for data in datasets:
            with contextlib.suppress(Exception):  # a family that needs another kind of data does not compose with this one
                ok.append(to_plain(compose_cfg(f"model={model}", f"data={data}")))
            if ok:
                break
        assert ok, f"model={model} composes with no data option"


def test_every_registration_describes_itself():
    """Display name and kind on every shipped entry; a table's kind is one the coordinate check reads,
    an init scheme's kind says whether its std depends on the shape (``fan_std``), a family's is its data."""
    from initnorm.models.build import MODELS
    from initnorm.nn.param import KINDS
    from initnorm.training.tasks import TASKS

    for registry in (MODELS, PARAMS, INITS, NORMS):
        for name in registry.names():
            about = registry.about(name)
            assert about.display and about.display != name or name in ("normal", "orthogonal"), (registry.noun, name)
            # model=custom (a user's own module) trains on any task's data: an empty kind, Family.data_kind's "any"
            assert about.kind or (registry is MODELS and name == "custom"), (registry.noun, name)
    assert {PARAMS.about(n).kind for n in PARAMS.names()} <= set(KINDS)
    assert all((INITS.about(n).kind == "fan") == hasattr(INITS.get(n), "fan_std") for n in INITS.names())
    assert all(MODELS.about(n).kind in TASKS.names() for n in MODELS.names() if n != "custom")
    assert MODELS.get("custom").data_kind is None
