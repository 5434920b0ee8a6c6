import csv
import io
import math
import random

import pytest
import torch

from initnorm import transfer as tr
from initnorm.instruments.diagnostics import eps_fraction, fans, top_singular

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
    lo, hi = tr.interval([(x, 1.0) for x in repeats], 0.95)
    true_width = hi - lo
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
    diverged = tr.fit_optimum(GRID, [math.nan] * len(GRID))
    assert diverged.method == "none" and math.isnan(diverged.log2_lr)


def test_verdict_with_an_optimum_on_the_grid_edge_claims_no_transfer():
    same = {(("param", "mup"),): {2: parabola_seeds(-2.0, sd=0.0, n_seeds=2), 4: parabola_seeds(-2.5, sd=0.0, n_seeds=2)}}
    (verdict,) = tr.verdicts(tr.transfer_rows(same, "depth", n_boot=20))
    assert verdict.startswith("µP undetermined: the optimum is on the lr grid's edge at depth 2, 4 (widen the grid)")
    falls = {(): {64: parabola_seeds(-7.0, sd=0.0, n_seeds=2), 1024: parabola_seeds(-13.0, sd=0.0, n_seeds=2)}}
    (verdict,) = tr.verdicts(tr.transfer_rows(falls, n_boot=20))
    assert "does not transfer: optimum falls at least 5.00 octaves from width 64 to 1024" in verdict


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
    assert verdict.startswith("SP does not transfer: optimum falls 2.00 octaves from width 64 to 1024") and "penalty ≤ 0.20 nats" in verdict


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
    assert verdict.startswith("µP transfers: optimum rises 0.") and "octaves from width 64 to " in verdict
    assert "(95% interval [" in verdict
    assert "; penalty ≤ " in verdict and "(both within ±0.5 octave and 0.01 nats)" in verdict


def test_three_seeds_are_resampled_exactly_weighted_by_multiplicity():
    draws = tr.resamples([3, 1, 2], tr.N_BOOT, tr.BOOT_SEED)
    assert len(draws) == 10 and sum(w for _, w in draws) == pytest.approx(1.0)
    weights = dict(draws)
    assert weights[(3, 3, 3)] == pytest.approx(1 / 27) and weights[(1, 2, 3)] == pytest.approx(6 / 27)
    assert weights[(1, 1, 2)] == pytest.approx(3 / 27)
    assert len(tr.resamples(list(range(7)), tr.N_BOOT, tr.BOOT_SEED)) == tr.N_BOOT  # 1,716 distinct: drawn at random


def test_a_rare_resample_at_the_extreme_is_inside_the_interval():
    # GPT-2's µP shift at width 256 (results/own_model/gpt2_transfer): seeds 1 and 2 put the wide optimum 0.9
    # octaves up, seed 3 alone 0.2 down. The draw of seed 3 thrice has probability 1/27 (3.7%), above a 95%
    # interval's 2.5% tail, so the interval reaches its shift; 1,000 random draws (RNG seed 0) gave it 22 times
    # (2.2%) and printed a lower end of +0.40, an interval that excluded zero.
    base = {s: {x: 0.05 * (x + 9.0) ** 2 + 2.0 for x in GRID} for s in (1, 2, 3)}
    wide = {s: {x: 0.05 * (x + 9.0 - (0.9 if s < 3 else -0.2)) ** 2 + 2.0 for x in GRID} for s in (1, 2, 3)}
    rows = tr.transfer_rows({(("param", "mup"),): {64: base, 256: wide}})
    all_three = tr.fit_optimum(*tr.seed_mean(wide, [3, 3, 3])).log2_lr + 9.0
    assert all_three == pytest.approx(-0.2, abs=0.05)
    assert rows[1].shift.lo == pytest.approx(all_three) and rows[1].shift.lo < 0 < rows[1].shift.hi
    assert (rows[1].shift.resamples, rows[1].shift.exact) == (10, True)
    md = tr.render_markdown(rows)
    assert "(every one of the 10 distinct resamples of 3 seeds, weighted by its multiplicity; the same seeds drawn" in md
    assert list(csv.DictReader(io.StringIO(tr.render_csv(rows))))[1]["resamples"] == "10"


def _records(axis="width"):
    rng, out = random.Random(0), []
    for param, drift in (("sp", -1.0), ("mup", 0.0)):
        for k, n in enumerate((64, 256)):
            for seed in (0, 1):
                for x in GRID:
                    loss = 0.05 * (x - (-7 + drift * k)) ** 2 + 2 + rng.gauss(0, 0.005)
                    out.append({"status": "finished", "seed": seed, "swept": ["param", axis, "lr", "seed"],
                                "summary_metrics": ["final_loss"],
                                "overrides": {"param": param, axis: str(n), "lr": str(2**x), "seed": str(seed)}, "final_loss": loss,
                                "diverged": x == -4 and n == 256 and param == "sp"})
    return out


@pytest.mark.parametrize("axis", ["width", "depth"])
def test_table_from_records_fills_every_column(axis):
    rows = tr.transfer_table(_records(axis), n_boot=50)
    assert [(dict(r.setting)["param"], r.size) for r in rows] == [("sp", 64), ("sp", 256), ("mup", 64), ("mup", 256)]
    assert all(r.axis == axis for r in rows)
    table = list(csv.DictReader(io.StringIO(tr.render_csv(rows))))
    assert len(table) == 4 and all(v not in ("", "nan") for row in table for k, v in row.items() if k not in ("note", "tokens"))
    md = tr.render_markdown(rows)
    body = [line for line in md.split("| setting")[1].splitlines() if line.startswith("| ") and "(base)" not in line]
    assert "| SP | 256 | 2 |" in md and body and not any("—" in line for line in body)  # every row but the base's: every cell measured
    assert all(line.endswith("| 0 (base) | — | 0 (base) | — |") for line in md.splitlines() if "(base)" in line)
    assert "- SP does not transfer: optimum falls 1.00 octaves" in md and "- µP transfers" in md


def test_the_verdict_reads_the_shift_and_the_penalty_together():
    # The chapter's µP case: the optimum moves a little past ±0.5 octave on a flat curve (0.6^2 x 0.02 = 0.007 nats).
    flat = {(("param", "mup"),): {64: parabola_seeds(-7.0, a=0.02, sd=0.0, n_seeds=3),
                                  1024: parabola_seeds(-6.4, a=0.02, sd=0.0, n_seeds=3)}}
    (verdict,) = tr.verdicts(tr.transfer_rows(flat, n_boot=50))
    assert verdict.startswith("µP borderline: optimum rises 0.60 octaves from width 64 to 1024")
    assert "penalty ≤ 0.0072 nats at width 1024" in verdict
    assert "past ±0.5 octave but its base rate costs under 0.01 nats" in verdict
    # The same shift on a steep curve costs 0.18 nats: that does not transfer.
    steep = {(): {64: parabola_seeds(-7.0, a=0.5, sd=0.0, n_seeds=3), 1024: parabola_seeds(-6.4, a=0.5, sd=0.0, n_seeds=3)}}
    (verdict,) = tr.verdicts(tr.transfer_rows(steep, n_boot=50))
    assert verdict.startswith("the sweep does not transfer: optimum rises 0.60 octaves")
    assert "(both past ±0.5 octave and 0.01 nats)" in verdict
    # Within half an octave, but steep enough that the base rate costs more than 0.01 nats: borderline too.
    sharp = {(): {64: parabola_seeds(-7.0, a=0.5, sd=0.0, n_seeds=3), 1024: parabola_seeds(-6.7, a=0.5, sd=0.0, n_seeds=3)}}
    (verdict,) = tr.verdicts(tr.transfer_rows(sharp, n_boot=50))
    assert verdict.startswith("the sweep borderline: optimum rises 0.30 octaves")
    assert "stays within ±0.5 octave but the base rate costs over 0.01 nats" in verdict
    assert tr.verdict_class("within", "within") == "transfers" and tr.verdict_class("past", "unknown") == "undetermined"


def test_at_the_base_depth_mups_runs_serve_completep_but_not_umup():
    # CompleteP at its base depth is µP exactly (tests/test_param_depth.py); u-µP has no base depth (About.absolute).
    cells = {(("param", p),): {8: parabola_seeds(-5.0, n_seeds=2)} for p in ("mup", "completep", "umup")}
    cells[(("param", "mup"),)][2] = parabola_seeds(-5.0, n_seeds=2)
    tr.share_base_depth(cells)
    assert sorted(cells[(("param", "completep"),)]) == [2, 8] and sorted(cells[(("param", "umup"),)]) == [8]


def test_the_report_calls_the_smallest_size_of_a_table_without_a_base_size_its_reference():
    cells = {(("param", p),): {16: parabola_seeds(-5.0, n_seeds=2), 64: parabola_seeds(-5.0, n_seeds=2)} for p in ("mup", "umup")}
    lines = tr.render_markdown(tr.transfer_rows(cells, n_boot=20)).splitlines()
    assert [line.count("| 0 (base) |") for line in lines if line.startswith("| µP | 16 |")] == [2]
    assert [line.count("| 0 (reference) |") for line in lines if line.startswith("| u-µP | 16 |")] == [2]


def test_one_seed_says_it_has_no_interval_and_prints_none():
    cells = {(("param", "mup"),): {64: parabola_seeds(-7.0, sd=0.0, n_seeds=1), 1024: parabola_seeds(-6.47, a=0.02, sd=0.0, n_seeds=1)}}
    rows = tr.transfer_rows(cells, n_boot=50)
    (verdict,) = tr.verdicts(rows)
    assert "too few seeds for an interval" in verdict and "interval [" not in verdict
    md = tr.render_markdown(rows)
    assert "— (1 seed)" in md and "[+0.53, +0.53]" not in md and "[-7.00, -7.00]" not in md


def test_an_optimum_on_the_grid_edge_is_a_bound_not_a_zero_width_interval():
    # The base optimum on the grid's highest rate (2^-4), the wide one inside: the fall can only be larger.
    cells = {(("param", "sp"),): {16: parabola_seeds(-3.0, sd=0.0, n_seeds=3), 64: parabola_seeds(-6.0, sd=0.0, n_seeds=3)}}
    base, wide = rows = tr.transfer_rows(cells, n_boot=50)
    assert (base.edge, wide.bound) == ("highest", "-")
    (verdict,) = tr.verdicts(rows)
    assert verdict.startswith("SP does not transfer: optimum falls at least 2.00 octaves from width 16 to 64 (an optimum on the lr grid's "
                              "edge: no interval)")
    md = tr.render_markdown(rows)
    assert "| SP | 16 | 3 | ≥ -4.00 | — (grid edge) |" in md and "| ≤ -2.00 | — (grid edge) |" in md
    assert "[-4.00, -4.00]" not in md and "[-2.00, -2.00]" not in md and "[+0.00, +0.00]" not in md


def test_intervals_are_printed_to_the_precision_that_shows_their_ends():
    assert tr.interval_text(tr.Estimate(0.52, 0.47, 0.58)) == "[+0.47, +0.58]"
    assert tr.interval_text(tr.Estimate(0.502, 0.501, 0.504)) == "[+0.501, +0.504]"
    assert tr.interval_text(tr.Estimate(0.007, 0.0066, 0.0068), 3, signed=False) == "[0.0066, 0.0068]"
    assert tr.interval_text(tr.Estimate(-2.0, -2.0, -2.0)) == "[-2.00, -2.00]"  # a measured zero width stays (every seed agrees)
    # A penalty is printed to its interval's decimals: 0.0002 [0.0001, 0.0004], not 0.000 [0.0001, 0.0004].
    fit = tr.fit_optimum([-8.0, -7.0, -6.0], [2.1, 2.0, 2.1])
    row = tr.Row((), "width", 256, 2, fit, tr.Estimate(-7.0, -7.1, -6.9), tr.Estimate(0.1, 0.0, 0.2),
                 tr.Estimate(0.00023, 0.00011, 0.00041))
    assert tr.row_cells(row)[4:] == ["0.0002", "[0.0001, 0.0004]"]


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
    assert sigma <= exact * (1 + 1e-6)  # a Rayleigh quotient: never above the truth (but for float32 rounding)
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


# ---------------------------------------------------------------- in training, and on a small real sweep

DIAG = ["steps=12", "trainer.val_check_interval=12", "log_every=5", "~callbacks.progress", "trainer.enable_progress_bar=false",
        "callbacks.stats.every_n_steps=5", "callbacks.diagnostics.every_n_steps=5", "checkpoint.every_n_steps=0"]


def test_diagnostics_in_the_event_files_and_training_unchanged(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from initnorm.cli.train import train
    from initnorm.training.optim import schedule_factor
    from tests.conftest import compose_cfg

    with_diag = train(compose_cfg(*DIAG, "lr=0.01"), tmp_path / "on")
    without = train(compose_cfg(*DIAG, "lr=0.01", "~callbacks.diagnostics"), tmp_path / "off")
    assert with_diag["final_val_loss"] == without["final_val_loss"]  # nothing draws from the training RNG
    acc = EventAccumulator(str(tmp_path / "on"), size_guidance={"scalars": 0})  # events sit in the job folder
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    wanted = ("eff_lr/block_01/attn.q.weight", "eps_frac/block_01/params", "sigma_w/block_01/attn.q.weight",
              "sigma_dw/head/weight", "sigma_w/tok_emb/weight")
    for tag in wanted:
        assert tag in tags and [e.step for e in acc.Scalars(tag)] == [0, 5, 10], tag
    # SP: every group at the base lr times the schedule's factor at that step (cosine over 12 steps).
    for e in acc.Scalars("eff_lr/block_01/attn.q.weight"):
        assert e.value == pytest.approx(0.01 * schedule_factor(e.step, 12, 0), rel=1e-6)
    # Every measured step moves the weights.
    assert all(0 < e.value for e in acc.Scalars("sigma_dw/head/weight"))
    assert all(0 <= e.value <= 1 for e in acc.Scalars("eps_frac/block_01/params"))


@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory):
    """The sweep command run in this process (tests.inproc.command: the command's main, its checks and Hydra's multirun;
    a subprocess spent its first seconds importing torch), with everything it changes in the process put back."""
    from tests.inproc import command

    tmp = tmp_path_factory.mktemp("transfer")
    sweep = tmp / "sweep"
    # 12 jobs: the fewest that fill every column (two widths, three rates for a parabola, two seeds for an interval)
    proc = command("-m", "experiment=mup_mlp_sweep", "param=sp", "width=16,32", "lr=0.001953125,0.0078125,0.03125",
                   "seed=0,1", "steps=12", "summary.tail_steps=4", "~callbacks.progress", "trainer.enable_progress_bar=false",
                   "checkpoint.every_n_steps=0",
                   "callbacks.stats.every_n_steps=4", "callbacks.diagnostics.every_n_steps=4", f"hydra.sweep.dir={sweep}", cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (tmp / "stdout.txt").write_text(proc.stdout)
    return sweep


def test_the_sweep_prints_its_transfer_verdicts_at_its_end(small_sweep):
    out = (small_sweep.parent / "stdout.txt").read_text()
    tail = out[out.index("Summary of "):]
    assert "Learning-rate transfer (the table in summary.md and transfer.csv):\n- SP " in tail
    assert "| setting | width | seeds |" not in tail  # the table's rows stay in summary.md


def test_transfer_table_of_a_small_real_sweep_has_every_column(small_sweep):
    table = list(csv.DictReader((small_sweep / "transfer.csv").open()))
    assert [(r["param"], r["axis"], r["size"]) for r in table] == [("sp", "width", "16"), ("sp", "width", "32")]
    for row in table:  # (tokens: a batch or steps axis's; the exponent: nan where an optimum sits on the 3-rate grid's edge)
        assert all(row[k] not in ("", "nan") for k in row if k not in ("note", "tokens", "exponent", "exponent_lo", "exponent_hi")), row
        assert row["note"] or row["method"] == "parabola"  # a grid argmin always says why
    md = (small_sweep / "summary.md").read_text()
    assert "## Learning-rate transfer" in md and "- SP " in md


def test_diagnose_command_names_layers_per_width(small_sweep, capsys):
    from initnorm.cli.diagnose import main  # `python -m initnorm.diagnose` is `raise SystemExit(main())`

    def diagnose(*args):
        try:
            code = main(list(args))
        except SystemExit as stop:  # argparse's refusal of a bad option
            code = stop.code
        return code, *capsys.readouterr()

    code, out, err = diagnose(str(small_sweep), "--factor", "1.01")
    assert code == 0, err[-2000:]
    assert "### SP at lr 2^" in out and "- width 32:" in out
    assert (small_sweep / "diagnose.md").read_text().endswith(out)
    code, _, err = diagnose(str(small_sweep), "--factor", "0.5")
    assert code == 2 and "--factor '0.5': a number above 1" in err
    (one := small_sweep.parent / "one_job").mkdir(exist_ok=True)
    (one / "metrics.json").write_text((next(small_sweep.rglob("metrics.json"))).read_text())  # one job: no sweep
    code, _, err = diagnose(str(one))
    assert code == 2 and "holds no finished sweep over lr and width (or depth)" in err


def test_the_other_axis_is_part_of_the_setting():
    recs = _records("depth")
    for r in recs:
        r["overrides"]["width"] = "64" if r["seed"] == 0 else "128"  # a second swept size, not the axis
        r["swept"] = ["param", "width", "depth", "lr", "seed"]
    axis, cells = tr.cells_from_records(recs)
    assert axis == "width" and (("param", "sp"), ("depth", "64")) in cells


def test_a_depth_sweep_gets_its_plot_and_the_transfer_table_in_the_summary(tmp_path):
    from initnorm.plots import PLOTS
    from initnorm.results import write_metrics
    from initnorm.summary import summarize

    for i, r in enumerate(_records("depth")):
        write_metrics(tmp_path / f"job{i:03d}", {**r, "job_num": i, "summary_plots": ["lr_transfer_depth"]})
    plot = PLOTS.get("lr_transfer_depth")(_records("depth"))
    assert set(plot.files) == {"lr_transfer_depth.png", "lr_transfer_depth.svg"} and "## Best learning rate per depth" in plot.markdown
    md = summarize(tmp_path)
    assert "- SP does not transfer: optimum falls 1.00 octaves from depth 64 to 256" in md and "| shift from depth 64 (log2) |" in md
    assert (tmp_path / "lr_transfer_depth.png").is_file() and (tmp_path / "transfer.csv").read_text().count("\n") == 5


def test_a_folder_that_keeps_only_runs_csv_gives_the_same_summary(tmp_path):
    # results/ keeps each sweep's runs.csv, not its job folders: the summary must come back from it alone.
    from initnorm.cli.summarize import main
    from initnorm.results import read_runs_csv, write_metrics
    from initnorm.summary import summarize

    for i, r in enumerate(_records("width")):
        job = f"param={r['overrides']['param']},width={r['overrides']['width']},lr={r['overrides']['lr']}"
        write_metrics(tmp_path / job / f"seed={r['seed']}",
                      {**r, "job_num": i, "summary_plots": ["lr_transfer"],
                       "group": {"size": 4, "member": i % 4, "forward": "vmap", "ms_per_step": 8.0, "device": "cpu"},
                       "wall_s": 3.0})
    summarize(tmp_path)
    before = {f: (tmp_path / f).read_text() for f in ("summary.md", "summary.csv", "transfer.csv", "runs.csv")}
    runs = list(csv.DictReader(io.StringIO(before["runs.csv"])))
    assert [runs[0][k] for k in ("param", "width", "lr", "group_size", "group_ms_per_step", "group_wall_s", "ms_per_step",
                                 "wall_s")] == ["sp", "64", str(2**-12), "4", "8.0", "3.0", "", ""]
    for f in tmp_path.rglob("metrics.json"):
        f.unlink()
    assert main([str(tmp_path)]) == 0
    assert {f: (tmp_path / f).read_text() for f in before} == before
    assert read_runs_csv(tmp_path)[0]["overrides"] == {"param": "sp", "width": "64", "lr": str(2**-12), "seed": "0"}


def test_a_member_recorded_before_the_one_engine_keeps_its_group_columns_in_runs_csv():
    # metrics.json written before issue 39 names a member's group "vectorized" (group_size, group_ms_per_step), its
    # wall_s the group's: runs.csv must not give that time to the member (it did after the merge of the one engine).
    from initnorm.results import render_runs_csv

    rec = {"status": "finished", "seed": 1, "swept": ["lr", "seed"], "overrides": {"lr": "0.01", "seed": "1"}, "final_val_loss": 2.0,
           "summary_metrics": ["final_val_loss"], "wall_s": 664.5, "ms_per_step": 55.4,
           "vectorized": {"group_size": 8, "member": 0, "group_ms_per_step": 55.4}}
    (row,) = csv.DictReader(io.StringIO(render_runs_csv([rec])))
    assert [row[k] for k in ("group_size", "group_ms_per_step", "group_wall_s", "ms_per_step", "wall_s")] == ["8", "55.4", "664.5", "", ""]


def test_a_single_parameterisation_sweeps_runs_csv_keeps_its_parameterisation(tmp_path):
    # `param=umup -m width=16,64 lr=...`: param is set, not swept. Its report names u-µP and its smallest width a
    # reference (no base width); the same summary rebuilt from runs.csv alone must say so too, not "all" and "base".
    from initnorm.results import write_metrics
    from initnorm.summary import summarize

    for i, r in enumerate(r for r in _records("width") if r["overrides"]["param"] == "mup"):
        r["overrides"]["param"], r["swept"] = "umup", ["width", "lr", "seed"]
        write_metrics(tmp_path / f"job{i:03d}", {**r, "job_num": i})
    summarize(tmp_path)
    before = {f: (tmp_path / f).read_text() for f in ("summary.md", "transfer.csv", "runs.csv")}
    assert "- u-µP " in before["summary.md"] and "0 (reference)" in before["summary.md"]
    for f in tmp_path.rglob("metrics.json"):
        f.unlink()
    summarize(tmp_path)
    assert {f: (tmp_path / f).read_text() for f in before} == before


def test_the_best_lr_table_puts_each_mean_under_its_rate_when_the_grids_differ():
    from initnorm.plots import PLOTS

    lowest = min(GRID)
    recs = [r for r in _records("width") if not (r["overrides"]["param"] == "mup" and math.log2(float(r["overrides"]["lr"])) == lowest)]
    md = PLOTS.get("lr_transfer")(recs).markdown
    rows = {line.split(" | ")[0] + " " + line.split(" | ")[1]: line.rstrip(" |").rsplit(" | ", 1)[1].split()
            for line in md.splitlines() if line.startswith(("| sp |", "| mup |"))}
    assert all(len(v) == len(GRID) for v in rows.values()), rows  # one column per rate of the union grid
    assert rows["| mup 64"][0] == "—" and rows["| sp 64"][0] != "—"


def test_an_lr_sweep_at_one_width_keeps_its_width_in_runs_csv(tmp_path):
    # `width=64 -m lr=...`: the width is set, not swept; the best-lr table rebuilt from runs.csv alone says 64, not 0.
    from initnorm.results import write_metrics
    from initnorm.summary import summarize

    for i, r in enumerate(r for r in _records("width") if r["overrides"]["param"] == "mup" and r["overrides"]["width"] == "64"):
        r["swept"] = ["lr", "seed"]
        write_metrics(tmp_path / f"job{i:03d}", {**r, "job_num": i, "summary_plots": ["lr_transfer"]})
    first = summarize(tmp_path)
    for f in tmp_path.rglob("metrics.json"):
        f.unlink()
    assert summarize(tmp_path) == first and "| mup | 64 | " in first
