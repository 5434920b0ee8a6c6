"""The transfer rules (initnorm/transfer/rules.py): each rule's formula at two axis values, resolved once where the config
is checked, so that a job alone and a stacked group train with the resolved numbers and record them."""

import math

import pytest

from initnorm import schema
from initnorm.config import to_plain
from initnorm.errors import ConfigError
from initnorm.transfer.rules import parameter_count
from tests.conftest import TINY, compose


def resolved(*overrides: str) -> dict:
    return schema.check(to_plain(compose(*overrides)))


@pytest.mark.parametrize("rule, factors", [("sqrt", {8: 0.5, 128: 2.0}), ("linear", {8: 0.25, 128: 4.0}), ("none", {8: 1.0, 128: 1.0})])
def test_the_batch_rules_scale_the_rate_from_the_base_batch(rule, factors):
    for batch, factor in factors.items():
        c = resolved("lr=0.01", f"batch_size={batch}", "transfer.base.batch_size=32", f"transfer.batch_rule={rule}")
        assert c["lr"] == pytest.approx(0.01 * factor, rel=1e-12)
        assert c["optim"]["betas"] == [0.9, 0.999] and c["optim"]["eps"] == 1e-8  # the SDE rule's other parts are off by default
        assert c["transfer"]["base"] == {"width": None, "depth": None, "batch_size": None, "steps": None}
        assert c["transfer"]["applied"]["from"] == {"batch_size": 32} and c["transfer"]["applied"]["lr_factor"] == pytest.approx(factor)


def test_the_sde_rule_moves_the_betas_and_eps_too():
    # Malladi et al. 2022 at 4x the batch: lr x 2, 1 - beta x 4, eps / 2; at a quarter: lr / 2, 1 - beta / 4, eps x 2.
    on = ("transfer.base.batch_size=32", "transfer.batch_rule=sqrt", "transfer.sde_betas=true", "transfer.sde_eps=true", "lr=0.01")
    c = resolved(*on, "batch_size=128")
    assert c["lr"] == pytest.approx(0.02) and c["optim"]["betas"] == pytest.approx([0.6, 0.996])
    assert c["optim"]["eps"] == pytest.approx(5e-9)
    c = resolved(*on, "batch_size=8")
    assert c["lr"] == pytest.approx(0.005) and c["optim"]["betas"] == pytest.approx([0.975, 0.99975])
    assert c["optim"]["eps"] == pytest.approx(2e-8)
    with pytest.raises(ConfigError, match=r"transfer.sde_betas=true takes optim.betas=\[0.9, 0.999\] to .* at 16x the batch .* outside "
                                          r"\[0, 1\).*fix it with `transfer.sde_betas=false`"):
        resolved(*on, "batch_size=512")


def test_the_horizon_rule_is_a_power_of_the_steps():
    for steps, factor in ((6000, 4 ** -0.32), (375, 0.25 ** -0.32)):
        c = resolved("lr=0.01", f"steps={steps}", "transfer.base.steps=1500", "transfer.horizon_rule=power")
        assert c["lr"] == pytest.approx(0.01 * factor, rel=1e-12)
    c = resolved("lr=0.01", "steps=6000", "transfer.base.steps=1500", "transfer.horizon_rule=power", "transfer.horizon_exponent=-0.5")
    assert c["lr"] == pytest.approx(0.005)


def test_the_weight_decay_timescale_held_in_iterations_fractions_of_the_run_and_tokens_per_parameter():
    base = ("lr=0.01", "optim.weight_decay=0.1", "transfer.base.steps=1000", "transfer.base.batch_size=32")
    # A fixed fraction of the run (Wang & Aitchison 2024): 4x the steps, a quarter of the decay; with the sqrt rule's
    # lr x 2 at 4x the batch, half again, since tau = 1 / (lr x wd).
    quarter = resolved(*base, "optim.weight_decay_rule=fraction", "steps=4000", "batch_size=32")
    assert quarter["optim"]["weight_decay"] == pytest.approx(0.025)
    c = resolved(*base, "optim.weight_decay_rule=fraction", "steps=1000", "batch_size=128", "transfer.batch_rule=sqrt")
    assert c["lr"] == pytest.approx(0.02) and c["optim"]["weight_decay"] == pytest.approx(0.05)
    assert c["transfer"]["applied"]["wd_factor"] == pytest.approx(0.5)
    # Held in iterations: only the rate moves it.
    held = resolved(*base, "optim.weight_decay_rule=iterations", "steps=4000", "batch_size=32")
    assert held["optim"]["weight_decay"] == pytest.approx(0.1)
    # In tokens per parameter (Bergsma et al. 2025): wd x (batch / base batch) x (params at the base / params here).
    n16, n64 = parameter_count(resolved(), 16, 2), parameter_count(resolved(), 64, 2)
    assert n16 == 5376 and n64 > 10 * n16
    c = resolved(*base, "optim.weight_decay_rule=tokens_per_param", "steps=1000", "batch_size=64", "width=64", "transfer.base.width=16")
    assert c["optim"]["weight_decay"] == pytest.approx(0.1 * 2 * n16 / n64)
    # A timescale given outright: wd = 1 / (lr x tau x steps) for a fraction of the run, at any base.
    c = resolved("lr=0.01", "steps=2000", "optim.weight_decay_rule=fraction", "optim.weight_decay_timescale=0.5")
    assert c["optim"]["weight_decay"] == pytest.approx(1 / (0.01 * 0.5 * 2000))
    # Independent decay (weight_decay_mode=independent) does not scale with the rate: tau = 1 / wd.
    c = resolved(*base, "optim.weight_decay_mode=independent", "optim.weight_decay_rule=fraction", "steps=4000", "batch_size=128",
                 "transfer.batch_rule=sqrt")
    assert c["optim"]["weight_decay"] == pytest.approx(0.025)


def test_without_a_base_nothing_moves_and_a_resolved_config_resolves_to_itself():
    plain = to_plain(compose("lr=0.01", "batch_size=128", "transfer.batch_rule=sqrt", "transfer.sde_betas=true"))
    assert schema.check(plain)["lr"] == 0.01 and "applied" not in schema.check(plain)["transfer"]
    c = resolved("lr=0.01", "batch_size=128", "transfer.base.batch_size=32", "transfer.batch_rule=sqrt", "transfer.sde_betas=true",
                 "optim.weight_decay_rule=fraction", "transfer.base.steps=500", "steps=1000")
    assert schema.check(c) == c  # the group's own check of a member's config, or any second check, moves nothing again
    t = resolved("lr=0.01", "steps=2000", "optim.weight_decay_rule=fraction", "optim.weight_decay_timescale=0.5")
    assert schema.check(t) == t


def test_a_job_trains_with_the_resolved_numbers_and_records_them(tmp_path):
    from initnorm.cli.jobinfo import hparams_of
    from initnorm.cli.train import train

    carried = train(compose(*TINY, "steps=30", "lr=0.005", "batch_size=32", "transfer.base.batch_size=8", "transfer.batch_rule=sqrt",
                                "optim.weight_decay_rule=fraction", "transfer.base.steps=120"), tmp_path / "carried")
    # 4x the batch: lr x 2; a quarter of the base's 120 steps at twice its rate: wd 0.01 x (1/2) x 4
    assert carried["resolved"]["lr"] == pytest.approx(0.01) and carried["resolved"]["weight_decay"] == pytest.approx(0.02)
    assert carried["resolved"]["applied"]["from"] == {"batch_size": 8, "steps": 120}
    direct = train(compose(*TINY, "steps=30", f"lr={carried['resolved']['lr']!r}", "batch_size=32",
                               f"optim.weight_decay={carried['resolved']['weight_decay']!r}"), tmp_path / "direct")
    assert carried["val_history"] == direct["val_history"]  # the engine trained at the resolved numbers, to the last bit
    hp = hparams_of(schema.check(to_plain(compose(*TINY, "lr=0.005", "transfer.base.batch_size=8", "transfer.batch_rule=sqrt"))),
                    {"lr": "0.005"})
    assert hp["lr"] == pytest.approx(0.01) and hp["lr_given"] == "0.005" and hp["weight_decay"] == 0.01 and hp["beta1"] == 0.9


def test_a_stacked_group_trains_its_members_with_the_resolved_numbers(tmp_path):
    from initnorm.training.fit import Member, fit

    def member(name, *overrides):  # as the vectorised launcher makes each member: its config checked, so resolved
        return Member(schema.check(to_plain(compose(*TINY, "steps=12", *overrides))), tmp_path / name)

    carried = fit([member(f"c{s}", f"seed={s}", "lr=0.005", "transfer.base.batch_size=8", "transfer.batch_rule=sqrt")
                           for s in (1, 2)])
    direct = fit([member(f"d{s}", f"seed={s}", "lr=0.01") for s in (1, 2)])
    assert [m["resolved"]["lr"] for m in carried] == pytest.approx([0.01, 0.01])
    assert [m["val_history"] for m in carried] == [m["val_history"] for m in direct]


def test_the_resolved_rate_survives_runs_csv_and_the_report_reads_what_the_rule_applied(tmp_path):
    from initnorm.results import read_runs_csv, render_runs_csv

    rec = {"status": "finished", "seed": 1, "swept": ["batch_size", "lr", "seed"], "overrides": {"batch_size": "128", "lr": "0.01",
           "seed": "1"}, "final_val_loss": 2.0, "diverged": False, "summary_metrics": ["final_val_loss"],
           "resolved": {"lr": 0.02, "weight_decay": 0.01, "betas": [0.9, 0.999]}}
    (tmp_path / "runs.csv").write_text(render_runs_csv([rec]))
    (back,) = read_runs_csv(tmp_path)
    assert back["resolved"] == {"lr": 0.02, "weight_decay": 0.01} and math.isclose(back["final_val_loss"], 2.0)
