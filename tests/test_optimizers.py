"""The optimiser registry: every torch.optim optimiser by name, the names from the registry only, a user's own by its
dotted path, one-line refusals, the flat fast path chosen by a probe, and the Muon + AdamW container's state."""

import copy
from pathlib import Path

import pytest
import torch

from initnorm.errors import ConfigError
from initnorm.nn.param import Rule, Table, make_table
from initnorm.nn.roles import Role
from initnorm.training import optimizers
from initnorm.training.optim import param_groups
from initnorm.training.optimizers import OPTIMIZERS, Several, build, edits
from initnorm.training.vec_optim import probe

ROOT = Path(__file__).resolve().parents[1]


def test_every_torch_optimiser_that_steps_without_a_closure_is_registered_with_a_config():
    torch_names = {n.lower() for n in dir(torch.optim) if isinstance(getattr(torch.optim, n), type)
                   and issubclass(getattr(torch.optim, n), torch.optim.Optimizer) and n not in ("Optimizer", "LBFGS", "SparseAdam")}
    assert torch_names <= set(OPTIMIZERS.names())
    # each registered name is a config of conf/optim/ and nothing else is: the names are the registry's
    assert {p.stem for p in (ROOT / "conf" / "optim").glob("*.yaml")} == set(OPTIMIZERS.names())


def test_the_names_are_written_once():
    """The schema, the µP tables and the plots read the registry; no other list of optimiser names remains."""
    from initnorm import schema

    assert schema.RULES["optim.name"].choices() == OPTIMIZERS.names()
    text = "".join(p.read_text() for p in (ROOT / "initnorm").rglob("*.py") if p.name != "optimizers.py")
    for written in ('("adam", "adamw")', '{"adamw": "AdamW"', '("adamw", "adam", "sgd")  # the optimisers'):
        assert written not in text


def test_an_unknown_name_is_one_line_with_the_nearest_name_by_edits():
    with pytest.raises(ConfigError) as err:
        OPTIMIZERS.get("lion")
    line = str(err.value)
    assert "\n" not in line and "fix it with `optim=muon`" in line and all(n in line for n in OPTIMIZERS.names())
    assert edits("lion", "muon") == 2 and edits("lion", "sgd") == 4


def test_a_key_the_optimiser_does_not_take_is_refused():
    with pytest.raises(ConfigError, match=r"optim.momentum is not a keyword of optim.name=adamw .*~optim.momentum"):
        build([{"params": [torch.nn.Parameter(torch.zeros(2))]}], 0.1, {"name": "adamw", "momentum": 0.9})


def test_a_users_own_optimiser_without_a_family_is_refused_under_mup_naming_the_key():
    with pytest.raises(ConfigError, match="optim.family"):
        make_table({"name": "mup", "base_width": 16, "optimizer": "custom", "optimizer_family": None}, width=32)
    assert make_table({"name": "mup", "base_width": 16, "optimizer": "custom", "optimizer_family": "adam"}, width=32).name == "mup"
    assert make_table({"name": "sp", "base_width": 16}, width=32).name == "sp"  # SP reads no family


def test_adding_an_optimiser_is_one_entry():
    """An optimiser added from outside the package: one registered entry (in the package: the entry's line in
    training/optimizers.py and its conf/optim/<name>.yaml, ARCHITECTURE.md's table)."""
    from tests.own_optim import Lion

    OPTIMIZERS.register("lion_test", None)(optimizers.Optimiser(Lion, "adam"))
    try:
        p = torch.nn.Parameter(torch.ones(3))
        opt = build([{"params": [p], "lr": 0.1, "weight_decay": 0.0}], 0.1, {"name": "lion_test", "betas": [0.9, 0.99]})
        p.grad = torch.tensor([1.0, -2.0, 0.0])
        opt.step()
        assert p.detach().tolist() == pytest.approx([0.9, 1.1, 1.0])
        assert optimizers.family({"name": "lion_test"}, "mup") == "adam"
    finally:
        del OPTIMIZERS._entries["lion_test"]


def _hidden(shape=(8, 4)):
    p = torch.nn.Parameter(torch.randn(*shape))
    return [("w", p)], {"w": Role.HIDDEN}


def test_a_table_multiplier_on_muons_matrices_is_refused_with_the_formula():
    named, roles = _hidden()
    wide = Table("wide", {r: Rule(lr=0.5) for r in Role})
    with pytest.raises(ConfigError, match=r"0.5.*optim.muon_scale=original \(factor\(fan_out, fan_in\)\).*twice"):
        param_groups(named, roles, wide, 0.01, 0.0, "coupled", muon_scale="original")
    with pytest.raises(ConfigError, match="param=umup"):
        make_table({"name": "umup", "base_width": 16, "optimizer": "muon"}, width=32)


@pytest.mark.parametrize("scale,factor", [("original", 2 ** 0.5), ("match_rms_adamw", 0.2 * 8 ** 0.5), ("spectral", 2 ** 0.5)])
def test_muons_groups_carry_its_shape_factor(scale, factor):
    from initnorm.training.muon_scale import original

    named, roles = _hidden((8, 4))
    (g,) = param_groups(named, roles, Table("sp", {r: Rule() for r in Role}), 0.01, 0.1, "coupled", muon_scale=scale)
    torch_ratio = 0.2 * 8 ** 0.5 if g["adjust_lr_fn"] == "match_rms_adamw" else original(8, 4)
    assert g["muon"] and "eps" not in g and g["lr"] * torch_ratio == pytest.approx(0.01 * factor)
    named, roles = _hidden((4, 8))  # narrowing: spectral goes below 1 where original stays at 1
    (g,) = param_groups(named, roles, Table("sp", {r: Rule() for r in Role}), 0.01, 0.1, "coupled", muon_scale="spectral")
    assert g["lr"] * original(4, 8) == pytest.approx(0.01 * 0.5 ** 0.5)


def test_the_probe_tells_a_flat_step_that_equals_torchs_from_one_that_does_not():
    def groups():
        return [[{"params": [], "lr": 0.01, "initial_lr": 0.01, "weight_decay": 0.1, "eps": 1e-8},
                 {"params": [], "lr": 0.03, "initial_lr": 0.03, "weight_decay": 0.0, "eps": 1e-6}]]

    adamw = lambda gs, e: torch.optim.AdamW(gs, lr=0.01, betas=(0.9, 0.999))
    assert probe("adamw", groups(), [(0.9, 0.999)], [0.0], adamw)
    assert not probe("adam", groups(), [(0.9, 0.999)], [0.0], adamw)  # coupled decay is another step
    assert not probe("adamw", groups(), [(0.8, 0.999)], [0.0], adamw)  # other betas than torch's


def test_several_optimisers_save_and_load_as_one():
    def make():
        torch.manual_seed(0)
        a, b = torch.nn.Parameter(torch.randn(4, 4)), torch.nn.Parameter(torch.randn(4))
        return a, b, Several([torch.optim.Muon([a], lr=0.01), torch.optim.AdamW([b], lr=0.01)])

    a, b, opt = make()
    for _ in range(2):
        a.grad, b.grad = torch.randn(4, 4), torch.randn(4)
        opt.step()
    saved = copy.deepcopy(opt.state_dict())  # as a checkpoint holds it: torch's state_dict() shares the live tensors
    assert sorted(saved["state"]) == [0, 1] and "momentum_buffer" in saved["state"][0] and "exp_avg" in saved["state"][1]
    a2, b2, other = make()
    other.load_state_dict(saved)
    a2.data.copy_(a.data), b2.data.copy_(b.data)
    g = torch.randn(4, 4), torch.randn(4)
    for (x, y, o) in ((a, b, opt), (a2, b2, other)):
        x.grad, y.grad = g[0].clone(), g[1].clone()
        o.step()
    assert torch.equal(a, a2) and torch.equal(b, b2)


class _NotAnOptimiser:
    def __init__(self, groups, lr):
        self.groups = groups


@pytest.mark.parametrize("target, says", [
    ("torch.optim.LBFGS", "ValueError: LBFGS doesn't support per-parameter options"),  # one group only, and a closure
    ("torch.optim.SparseAdam", "RuntimeError: SparseAdam does not support dense gradients"),
    ("torch.nn.Linear", "TypeError: Linear.__init__() got an unexpected keyword argument 'lr'"),
    ("torch.optim.Muon", "ValueError: Muon only supports 2D parameters"),  # optim=muon splits the roles; alone it cannot
    ("tests.test_optimizers._NotAnOptimiser", "built a _NotAnOptimiser, which is not an optimiser (it has no step, zero_grad"),
])
def test_ones_own_optimiser_that_cannot_train_here_is_refused_before_any_job_in_one_line(target, says):
    """The preflight's schema check builds and steps one's own optimiser on tiny groups (issue 45, found as a new user:
    `optim=custom optim._target_=torch.optim.LBFGS` ended each job in a traceback)."""
    from initnorm import schema
    from initnorm.cli.compose import compose_train
    from initnorm.config import to_plain

    config = to_plain(compose_train(["optim=custom", f"optim._target_={target}"]))
    with pytest.raises(ConfigError) as err:
        schema.check(config)
    line = str(err.value)
    assert "\n" not in line and f"optim._target_={target}" in line and says in line and "`optim" in line
    assert ("fix it with `optim=muon`" in line) == (target == "torch.optim.Muon")


def test_ones_own_optimiser_that_trains_passes_the_probe_untouched():
    from initnorm import schema
    from initnorm.cli.compose import compose_train
    from initnorm.config import to_plain

    for target in ("torch.optim.NAdam", "tests.own_optim.Lion"):
        assert schema.check(to_plain(compose_train(["optim=custom", f"optim._target_={target}"])))["optim"]["_target_"] == target
