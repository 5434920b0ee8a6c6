"""The summary table as a pure function of the job records."""

from initnorm.results import group_rows, render_markdown


def record(norm, seed, loss, **extra):
    return {"overrides": {"norm": norm, "seed": str(seed)}, "swept": ["norm"], "seed": seed, "final_val_loss": loss, "status": "finished", **extra}


def test_rows_average_over_seeds_with_sample_sd():
    keys, metrics, rows = group_rows([record("pre", s, v) for s, v in ((1, 2.302), (2, 2.306), (3, 2.526))])
    md = render_markdown(keys, metrics, rows)
    assert "| pre | 2.378 ± 0.128 | 2.302, 2.306, 2.526 |" in md  # the deck's §7b pre-LN row, ddof 1
    assert "Seeds 1, 2, 3" in md


def test_rows_with_different_seeds_name_each_seed():
    recs = [record("pre", 1, 2.0), record("pre", 2, 2.1), record("post", 2, 2.5), {**record("post", 1, None), "status": "failed", "error": "boom"}]
    md = render_markdown(*group_rows(recs))
    assert "Per seed (seed: value)" in md and "| post | 2.500 ± 0.000 | 2: 2.500 |" in md and "boom" in md


def test_diverged_runs_are_counted_not_averaged():
    recs = [record("pre", 1, 2.0), record("pre", 2, float("nan"), diverged=True, diverged_step=7)]
    md = render_markdown(*group_rows(recs))
    assert "2.000 ± 0.000" in md and "1/2" in md and "nan ±" not in md
