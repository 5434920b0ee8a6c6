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


def ran(seed, loss, **config):
    """A job as metrics.json records it, run alone (nothing swept): its composed config holds what it ran with."""
    base = {"seed": seed, "lr": 0.01, "width": 64, "warmup": 0, "model": {"width": 64}, "callbacks": {"a": seed}}
    return {"overrides": {"seed": str(seed)}, "swept": [], "seed": seed, "final_val_loss": loss, "status": "finished",
            "config": _deep(base, config)}


def _deep(base, more):
    return {k: _deep(base[k], more[k]) if isinstance(base.get(k), dict) and k in more else more.get(k, base.get(k))
            for k in {**base, **more}}


def test_jobs_whose_recorded_configs_differ_never_share_a_row(tmp_path):
    # Issue 34: a folder holding lr=0.01 for seed 1 and lr=0.02 for seed 2 (a rerun with another lr) was one row,
    # "Seeds 1, 2: 2.179 ± 0.018". Any recorded key that differs splits the rows; the seed and watch-only keys do not.
    from initnorm.results import write_metrics
    from initnorm.summary import summarize

    recs = [ran(1, 2.166), ran(2, 2.192, lr=0.02), ran(3, 2.170)]
    keys, _, rows = group_rows(recs)
    assert keys == ["lr"] and [(r["lr"], r["seeds"]) for r in rows] == [("0.01", [1, 3]), ("0.02", [2])]
    wide = [ran(1, 2.1), ran(2, 2.2, width=128, model={"width": 128})]  # model.width follows width: one column
    assert group_rows(wide)[0] == ["width"]
    assert group_rows([ran(1, 2.1), ran(2, 2.2)])[0] == []  # seed and callbacks differ: one setting, averaged
    for r in recs:
        write_metrics(tmp_path / f"seed={r['seed']}", r)
    md = (summarize(tmp_path), (tmp_path / "summary.md").read_text())[1]
    assert "| 0.02 | 2.192 | 2: 2.192 |" in md and "2.179" not in md
    assert "Not swept, yet set differently between jobs of this folder (a rerun with other values?): lr." in md


def test_a_swept_row_splits_by_a_key_that_differs_inside_it():
    # norm swept, and one seed of "pre" rerun with warmup=200: a third row, never averaged into "pre".
    recs = [{**record("pre", s, 2.0 + s / 100), "config": {"norm": "pre", "warmup": 200 if s == 3 else 0, "seed": s}} for s in (1, 2, 3)]
    recs.append({**record("post", 1, 2.5), "config": {"norm": "post", "warmup": 0, "seed": 1}})
    keys, _, rows = group_rows(recs)
    assert keys == ["norm", "warmup"] and [(r["norm"], r["warmup"], r["seeds"]) for r in rows] == [
        ("pre", "0", [1, 2]), ("pre", "200", [3]), ("post", "0", [1])]


def test_an_lr_curve_never_mixes_jobs_whose_configs_differ():
    from initnorm.transfer import cells_from_records

    recs = [{"status": "finished", "seed": s, "swept": ["width", "lr", "seed"], "final_val_loss": 2.0,
             "overrides": {"width": str(w), "lr": str(lr), "seed": str(s)},
             "config": {"width": w, "lr": lr, "seed": s, "warmup": 100 * (s == 2)}}
            for w in (64, 256) for lr in (0.01, 0.02) for s in (1, 2)]
    _, cells = cells_from_records(recs)
    assert sorted(cells) == [(("warmup", "0"),), (("warmup", "100"),)]


def test_a_runs_csv_initnorm_did_not_write_is_one_line_and_a_formula_cell_is_ignored(tmp_path, caplog):
    import pytest

    from initnorm.errors import ConfigError
    from initnorm.results import read_runs_csv, render_runs_csv
    from initnorm.summary import summarize

    (tmp_path / "runs.csv").write_text("name,loss,lr\na,2.1,0.01\n")
    with pytest.raises(ConfigError, match=r"runs.csv is not a runs.csv initnorm wrote \(no _dir column; its columns: name, loss, lr\)"):
        read_runs_csv(tmp_path)
    recs = [{**r, "_dir": f"w{w}/lr{lr}", "overrides": {"width": str(w), "lr": str(lr), "seed": "1"},
             "swept": ["width", "lr", "seed"]} for w in (64, 256) for lr in (0.01, 0.02) for r in [record("pre", 1, 2.0 + lr)]]
    text = render_runs_csv(recs).splitlines()
    text[1] = text[1].replace(",0.01,", ",=cmd|calc,", 1)  # as a spreadsheet leaves it: a formula where a rate was
    text[2] = text[2].replace(",2.02,", ",=1+1,", 1) + ",surplus"  # a formula where a loss was, a cell past the header
    text[3] = text[3].rsplit(",", 3)[0]  # a short row
    (tmp_path / "runs.csv").write_text("\n".join(text) + "\n")
    with caplog.at_level("WARNING"):
        summarize(tmp_path)
    warned = [r.getMessage() for r in caplog.records if "should hold a number" in r.getMessage()]
    assert len(warned) == 1 and "line 2 lr '=cmd|calc', line 3 final_val_loss '=1+1'" in warned[0], warned
    assert "=cmd" not in (tmp_path / "summary.md").read_text()


def test_a_summary_reads_each_records_settings_once_not_per_record_and_key(monkeypatch):
    # Issue 37: 10,000 job folders took 44 CPU s in initnorm-summarize, 95% of it here: each of the summary's five
    # questions (table, runs.csv, TensorBoard's runs, the note) JSON-encoded every key of every record. Now the keys that
    # vary are found once per list of records, and only their values are encoded.
    from initnorm import results

    base = {f"k{i}": {"a": i, "b": [i, i + 1], "c": "x"} for i in range(30)}
    recs = [{"overrides": {"lr": str(lr), "seed": str(s)}, "swept": ["lr"], "seed": s, "status": "finished",
             "final_val_loss": 2.0, "config": {**base, "lr": lr, "seed": s, "warmup": 100 * (s == 7 and lr == 0.02)}}
            for lr in (0.01, 0.02) for s in range(1, 51)]
    encoded = []
    monkeypatch.setattr(results, "_canonical", lambda v: encoded.append(v) or repr(v))
    for _ in range(5):
        assert results.setting_keys(recs) == ["lr", "warmup"]
    assert len(encoded) <= 2 * len(recs) + 30 * len(recs)  # lr and warmup vary; the lists are encoded once each
    before = len(encoded)
    assert results.differing_keys(recs, ["lr"]) == ["warmup"] and len(encoded) == before  # the same list: asked before
    recs[0] = {**recs[0], "config": {**recs[0]["config"], "warmup": 5}}  # a record replaced: a new question
    assert results.differing_keys(recs, ["lr", "warmup"]) == [] and len(encoded) > before
    recs.append({**recs[1], "config": {**recs[1]["config"], "optim": "sgd"}})  # one appended with another optimiser
    assert results.differing_keys(recs, ["lr", "warmup"]) == ["optim"]
