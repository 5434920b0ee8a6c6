"""The summary table as a pure function of the job records."""

from initnorm.results import fmt_mean_sd, group_rows, render_markdown


def record(norm, seed, loss, **extra):
    return {"overrides": {"norm": norm, "seed": str(seed)}, "swept": ["norm"], "seed": seed, "final_val_loss": loss,
            "status": "finished", **extra}


def test_rows_average_over_seeds_with_sample_sd():
    keys, metrics, rows = group_rows([record("pre", s, v) for s, v in ((1, 2.302), (2, 2.306), (3, 2.526))])
    md = render_markdown(keys, metrics, rows)
    assert "| pre | 2.378 ± 0.128 | 2.302, 2.306, 2.526 |" in md  # the deck's §7b pre-LN row, ddof 1
    assert "Seeds 1, 2, 3" in md


def test_rows_with_different_seeds_name_each_seed():
    recs = [record("pre", 1, 2.0), record("pre", 2, 2.1), record("post", 2, 2.5),
            {**record("post", 1, None), "status": "failed", "error": "boom"}]
    md = render_markdown(*group_rows(recs))
    assert "Per seed (seed: value)" in md and "| post | 2.500 | 2: 2.500 |" in md and "boom" in md


def test_diverged_runs_are_counted_not_averaged():
    recs = [record("pre", 1, 2.0), record("pre", 2, float("nan"), diverged=True, diverged_step=7)]
    md = render_markdown(*group_rows(recs))
    assert "| pre | 2.000 | 2.000, diverged |" in md and "1/2" in md and "nan ±" not in md


def test_one_number_format_for_mean_and_sd():
    # The same decimals for mean and sd, enough for the sd's first digit; one value alone has no ±.
    assert fmt_mean_sd(2.233, 0.00446, 3) == "2.233 ± 0.004"
    assert fmt_mean_sd(2.856, 0.000687, 3) == "2.8560 ± 0.0007"
    assert fmt_mean_sd(2.291, 0.014, 3) == "2.291 ± 0.014"
    assert fmt_mean_sd(1.8, 0.0, 1) == "1.800" and fmt_mean_sd(float("nan"), 0.0, 0, missing="—") == "—"


def test_one_seed_per_row_has_no_spread_and_no_seeds_column():
    md = render_markdown(*group_rows([record("pre", 1, 2.302), record("post", 1, 2.5)]))
    assert "| pre | 2.302 |" in md and "±" not in md and "Seeds" not in md and "(seed 1)" in md


def test_a_row_of_thousands_of_seeds_shows_their_count_range_and_spread_not_each_one():
    recs = [record(norm, s, 2 + s / 10_000) for norm in ("pre", "post") for s in range(1, 3001)]
    recs += [{**record("pre", s, None), "status": "failed", "error": f"boom {s}"} for s in range(3001, 3021)]
    md = render_markdown(*group_rows(recs))
    lines = md.splitlines()
    assert "| Seeds 3,000 (1-3000): lowest .. highest | Failed |" in lines[0] and max(len(line) for line in lines) < 400
    assert "| pre | 2.150 ± 0.087 | 2.000 .. 2.300 | seed 3001: boom 3001; " in md
    assert "and 12 more (runs.csv)" in md and "boom 3020" not in md
    gaps = render_markdown(*group_rows([record("pre", s, 2.0) for s in (1, 2, 3, 5, 9, 10, 11, 12, 13)] + [record("post", 1, 2.0)]))
    assert "| pre | 2.000 ± 0.000 | 9 (1-13, not every one): 2.000 .. 2.000 |" in gaps  # rows of other seeds: each its own
