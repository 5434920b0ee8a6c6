import csv
import io
import math
import random

import pytest
import torch

from initnorm import transfer as tr
from initnorm.callbacks.diagnostics import eps_fraction, fans, top_singular

GRID = [float(x) for x in range(-12, -3)]  # log2 lr: 2^-12 ... 2^-4, the chapter's grid


def parabola_seeds(x0, a=0.05, c=2.0, sd=0.01, n_seeds=6, rng=None, grid=GRID):
    rng = rng or random.Random(1)
    return {s: {x: a * (x - x0) ** 2 + c + rng.gauss(0, sd) for x in grid} for s in range(n_seeds)}


def test_fit_recovers_a_known_optimum_between_grid_points():
    for x0 in (-9.3, -7.0, -5.6):
        fit = tr.fit_optimum(*tr.seed_mean(parabola_seeds(x0, sd=0.0)))
        assert fit.method == "parabola" and fit.note == ""
        assert fit.log2_lr == pytest.approx(x0, abs=1e-9)
        assert fit.loss == pytest.approx(2.0, abs=1e-9)


def test_bootstrap_interval_matches_the_spread_of_repeated_sweeps_and_covers_the_optimum():
    x0, rng = -7.3, random.Random(7)
    # The estimator's true spread: the optimum of many independent sweeps.
    repeats = [tr.fit_optimum(*tr.seed_mean(parabola_seeds(x0, rng=rng))).log2_lr for _ in range(400)]
    true_width = tr.quantile(repeats, 0.975) - tr.quantile(repeats, 0.025)
    covered, widths = 0, []
    for _ in range(60):
        (row,) = tr.transfer_rows({(): {64: parabola_seeds(x0, rng=rng)}}, n_boot=200)
        covered += row.optimum.lo <= x0 <= row.optimum.hi
        widths.append(row.optimum.hi - row.optimum.lo)
        assert row.optimum.lo <= row.optimum.value <= row.optimum.hi
    assert covered >= 48  # a 95% interval from 6 seeds: most sweeps cover the truth
    assert 0.4 * true_width < sorted(widths)[len(widths) // 2] < 1.6 * true_width


def test_minimum_on_the_grid_edge_is_the_grid_argmin_with_a_note():
    low = tr.fit_optimum(*tr.seed_mean(parabola_seeds(-14.0, sd=0.0)))
    assert (low.method, low.log2_lr) == ("grid argmin", -12.0) and "lowest lr" in low.note
    high = tr.fit_optimum(*tr.seed_mean(parabola_seeds(-2.0, sd=0.0)))
    assert (high.method, high.log2_lr) == ("grid argmin", -4.0) and "highest lr" in high.note
    flat = tr.fit_optimum(GRID, [1.0 if x != -8 else 0.5 for x in GRID][:4] + [0.9] + [1.0] * 4)
    assert flat.method in ("parabola", "grid argmin")
    diverged = tr.fit_optimum(GRID, [math.nan] * len(GRID))
    assert diverged.method == "none" and math.isnan(diverged.log2_lr)


def test_neighbour_diverged_falls_back_to_the_argmin():
    ys = [3.0, 2.8, 2.6, 2.5, 2.4, math.nan, math.nan, math.nan, math.nan]
    fit = tr.fit_optimum(GRID, ys)
    assert fit.method == "grid argmin" and fit.log2_lr == -8.0 and "diverged" in fit.note


def test_shift_and_penalty_of_a_known_drift():
    # Width 64 has its optimum at 2^-7, width 1024 at 2^-9: shift -2 octaves, and at 2^-7 the
    # wider model loses a (2)^2 = 0.2 nats against its best.
    cells = {(("param", "sp"),): {64: parabola_seeds(-7.0, sd=0.0, n_seeds=3), 1024: parabola_seeds(-9.0, sd=0.0, n_seeds=3)}}
    base, wide = tr.transfer_rows(cells, n_boot=50)
    assert base.shift.value == 0 and base.penalty.value == pytest.approx(0, abs=1e-12)
    assert wide.shift.value == pytest.approx(-2.0) and wide.shift.lo == pytest.approx(-2.0) and wide.shift.hi == pytest.approx(-2.0)
    assert wide.penalty.value == pytest.approx(0.2)
    (verdict,) = tr.verdicts([base, wide])
    assert verdict.startswith("SP does not transfer: optimum falls 2.0 octaves from width 64 to 1024") and "penalty ≤ 0.20 nats" in verdict


def test_penalty_is_infinite_where_the_base_lr_diverges():
    wide = parabola_seeds(-10.0, sd=0.0, n_seeds=2)
    for s in wide:
        for x in (-7.0, -6.0, -5.0, -4.0):
            wide[s][x] = math.nan
    base, row = tr.transfer_rows({(): {16: parabola_seeds(-6.5, sd=0.0, n_seeds=2), 64: wide}}, n_boot=20)
    assert math.isinf(row.penalty.value)
    assert "diverges" in tr.render_markdown([base, row])


def test_within_half_an_octave_transfers_and_the_bootstrap_is_deterministic():
    rng = random.Random(3)
    cells = {(("param", "mup"),): {n: parabola_seeds(-7.2 + 0.1 * i, rng=rng, n_seeds=3) for i, n in enumerate((64, 256, 1024))}}
    rows = tr.transfer_rows(cells, n_boot=100)
    assert rows == tr.transfer_rows(cells, n_boot=100)
    (verdict,) = tr.verdicts(rows)
    assert verdict.startswith("µP transfers: optimum within ±0.5 octave from width 64 to 1024, penalty ≤")


def _records(axis="width"):
    rng, out = random.Random(0), []
    for param, drift in (("sp", -1.0), ("mup", 0.0)):
        for k, n in enumerate((64, 256)):
            for seed in (0, 1):
                for x in GRID:
                    loss = 0.05 * (x - (-7 + drift * k)) ** 2 + 2 + rng.gauss(0, 0.005)
                    out.append({"status": "finished", "seed": seed, "swept": ["param", axis, "lr", "seed"], "summary_metrics": ["final_loss"],
                                "overrides": {"param": param, axis: str(n), "lr": str(2**x), "seed": str(seed)}, "final_loss": loss, "diverged": x == -4 and n == 256 and param == "sp"})
    return out


@pytest.mark.parametrize("axis", ["width", "depth"])
def test_table_from_records_fills_every_column(axis):
    rows = tr.transfer_table(_records(axis), n_boot=50)
    assert [(dict(r.setting)["param"], r.size) for r in rows] == [("sp", 64), ("sp", 256), ("mup", 64), ("mup", 256)]
    assert all(r.axis == axis for r in rows)
    table = list(csv.DictReader(io.StringIO(tr.render_csv(rows))))
    assert len(table) == 4 and all(v not in ("", "nan") for row in table for k, v in row.items() if k != "note")
    md = tr.render_markdown(rows)
    assert f"| SP | 256 | 2 |" in md and "—" not in md.split("| setting")[1]
    assert "- SP does not transfer: optimum falls 1.0 octaves" in md and "- µP transfers" in md


def test_records_without_an_lr_axis_give_no_table():
    recs = [r for r in _records() if r["overrides"]["width"] == "64"]
    assert tr.transfer_table(recs) == []


# ---------------------------------------------------------------- diagnostics against exact computations


@pytest.mark.parametrize("shape", [(8, 4), (32, 32), (64, 32), (16, 64), (256, 128)])
def test_power_iteration_within_1e_3_at_its_default_steps(shape):
    torch.manual_seed(0)
    w = torch.randn(*shape)
    exact = torch.linalg.matrix_norm(w.double(), ord=2).item()
    sigma, v = top_singular(w)  # a cold start
    assert abs(sigma - exact) / exact < 1e-3
    assert sigma <= exact * (1 + 1e-12)  # a Rayleigh quotient: never above the truth
    w2 = w + 0.05 * torch.randn(*shape)  # one training step later: a warm start
    exact2 = torch.linalg.matrix_norm(w2.double(), ord=2).item()
    assert abs(top_singular(w2, v)[0] - exact2) / exact2 < 1e-3


def test_power_iteration_leaves_the_global_rng_alone_and_handles_zero():
    state = torch.get_rng_state()
    top_singular(torch.ones(5, 3))
    assert torch.equal(state, torch.get_rng_state())
    assert top_singular(torch.zeros(4, 3))[0] == 0.0


def test_eps_fraction_against_a_direct_count():
    torch.manual_seed(0)
    step, beta2, eps = 7, 0.999, 1e-8
    v = torch.rand(50, 20) * 2 * eps**2 * (1 - beta2**step)  # about half the coordinates below eps
    exact = ((v / (1 - beta2**step)).sqrt() < eps).float().mean().item()
    assert 0.05 < exact < 0.95
    assert eps_fraction(v, step, beta2, eps) == pytest.approx(exact)
    opt = torch.optim.Adam([p := torch.nn.Parameter(torch.randn(6, 3))], lr=1e-3, eps=1e-3)
    p.grad = torch.cat([torch.full((3, 3), 1e-6), torch.ones(3, 3)])
    opt.step()
    state = opt.state[p]
    assert eps_fraction(state["exp_avg_sq"], state["step"].item(), 0.999, 1e-3) == pytest.approx(0.5)


def test_fans_of_linear_and_embedding():
    m = torch.nn.Sequential(torch.nn.Embedding(65, 16), torch.nn.Linear(16, 48))
    assert fans(m) == {"0.weight": (16, 65), "1.weight": (48, 16)}
