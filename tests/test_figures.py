"""The summary figures: one per sweep where it tells more than the table, in plain words, PNG and SVG."""

from initnorm.nn.param import PARAMS
from initnorm.plots import PLOTS, lr_axis_label, plain, setup_title
from initnorm.registry import About


def record(norm, warmup, seed, curve, **extra):
    config = {"model": {"family": "decoder"}, "data": {"name": "alice"}, "optim": {"name": "adamw"}, "width": 16,
              "depth": 6, "steps": 1500, "lr": 0.01}
    return {"status": "finished", "seed": seed, "swept": ["norm", "warmup", "seed"],
            "overrides": {"norm": norm, "warmup": str(warmup), "seed": str(seed)},
            "val_history": curve, "config": config, **extra}


def test_val_curves_draw_a_line_and_a_seed_band_per_setting():
    recs = [record(n, w, s, [[0, 3.3], [750, 2.0 + s / 10], [1500, 1.8 + s / 10]])
            for n in ("pre", "post") for w in (0, 200) for s in (1, 2, 3)]
    plot = PLOTS.get("val_curves")(recs)
    assert set(plot.files) == {"val_curves.png", "val_curves.svg"}
    svg = plot.files["val_curves.svg"].decode()
    for words in ("pre-LN, no warmup", "post-LN, warmup 200 steps",
                  "Decoder, width 16, 6 blocks, Alice, 1,500 steps, AdamW peak lr 0.01, 3 seeds"):
        assert words in svg, words  # plain labels and a title naming the setup (SVG keeps text as text)
    assert "val_curves.png" in plot.markdown


def test_val_curves_zoom_on_the_end_and_give_each_setting_its_final_loss_and_seed_spread():
    # Settings 0.05 nats apart at the end of a curve that starts at 3.3: the second panel's scale shows them apart.
    recs = [record(n, 0, s, [[0, 3.3], [750, 2.0], [1200, 1.85 + d], [1500, 1.8 + d + s / 1000]], final_val_loss=1.8 + d + s / 1000)
            for n, d in (("pre", 0.0), ("post", 0.05)) for s in (1, 2, 3)]
    svg = PLOTS.get("val_curves")(recs).files["val_curves.svg"].decode()
    assert "the last 30%" in svg and "pre-LN, no warmup: 1.802 ± 0.001" in svg and "post-LN, no warmup: 1.852 ± 0.001" in svg


def test_a_fixed_token_sweep_run_as_one_command_per_batch_names_its_product_not_one_runs_steps():
    # batch 8 x 2,048 steps ... 128 x 128, one command each (so no command swept either key): the title said "128 steps, batch 8"
    recs = [{"config": {"model": {"family": "decoder"}, "width": 64, "depth": 2, "steps": 16384 // b, "batch_size": b},
             "swept": ["lr"], "status": "finished", "seed": 1} for b in (8, 16, 128)]
    assert setup_title(recs) == "Decoder, width 64, 2 blocks, steps x batch 16,384, 1 seed"


def test_plain_names_and_setup_title():
    assert [plain(s) for s in ("norm=post", "warmup=0", "param=mup", "width=64")] == ["post-LN", "no warmup", "µP", "width 64"]
    recs = [record("pre", 0, 1, [])]
    assert setup_title(recs) == "Decoder, width 16, 6 blocks, Alice, 1,500 steps, AdamW peak lr 0.01, 1 seed"
    recs[0]["config"]["batch_size"] = 128
    assert setup_title(recs) == "Decoder, width 16, 6 blocks, Alice, 1,500 steps, batch 128, AdamW peak lr 0.01, 1 seed"


def test_lr_transfer_labels_rates_that_are_not_powers_of_two_as_they_are():
    recs = []
    for param in ("sp", "mup"):
        for width in (16, 64):
            for lr in (0.01, 0.03, 0.1):
                for seed in (1, 2):
                    recs.append({"status": "finished", "seed": seed, "swept": ["width", "lr", "param", "seed"],
                                 "summary_metrics": ["final_val_loss"],
                                 "overrides": {"width": str(width), "lr": str(lr), "param": param, "seed": str(seed)},
                                 "final_val_loss": 2 + lr + seed / 100})
    plot = PLOTS.get("lr_transfer")(recs)
    assert set(plot.files) == {"lr_transfer.png", "lr_transfer.svg"}
    assert "loss at each lr, 0.01 ... 0.1" in plot.markdown and "2^-7" not in plot.markdown
    assert "| sp | 16 | 0.01 | -6.64 | 2.025 ± 0.007 |" in plot.markdown  # one mean ± sd format; log2 as it is


def test_an_lr_sweep_at_one_width_is_drawn_at_the_width_its_jobs_recorded():
    """The sizes and rates come from each job's recorded config, not from its override strings: a sweep of lr alone
    at width 64 (no width override) was drawn as width 0."""
    recs = [{"status": "finished", "seed": seed, "swept": ["lr", "seed"], "summary_metrics": ["final_val_loss"],
             "overrides": {"lr": text, "seed": str(seed)}, "config": {"lr": lr, "width": 64, "param": {"name": "sp"}},
             "final_val_loss": 2 + (lr - 0.03) ** 2 + seed / 100}
            for text, lr in (("1e-2", 0.01), ("0.03", 0.03), ("1e-1", 0.1)) for seed in (1, 2)]
    markdown = PLOTS.get("lr_transfer")(recs).markdown
    assert "| sp | 64 | 0.03 |" in markdown and "| sp | 0 |" not in markdown, markdown


def test_the_lr_axis_names_the_reference_of_a_table_without_a_base_size(monkeypatch):
    recs = [{"status": "finished", "seed": seed, "swept": ["param", "width", "lr", "seed"], "summary_metrics": ["final_val_loss"],
             "overrides": {"param": param, "width": str(width), "lr": str(2.0**x), "seed": str(seed)},
             "final_val_loss": 2 + (x + 2) ** 2 / 10 + seed / 100}
            for param in ("mup", "umup") for width in (16, 64) for x in (-4, -3, -2, -1, 0) for seed in (1, 2)]
    svg = PLOTS.get("lr_transfer")(recs).files["lr_transfer.svg"].decode()
    assert svg.count("(at the base width)") == 1  # µP's panel; u-µP's rules have no base width
    assert "peak learning rate (no base width; reference: width 16, the smallest)" in svg
    # read from the table's declaration (About.absolute), not from its name
    monkeypatch.setitem(PARAMS._about, "mup", About("µP", "width", absolute=True))
    assert lr_axis_label("mup", "depth", 2) == "peak learning rate (no base depth; reference: depth 2, the smallest)"
    assert lr_axis_label("sp", "width", 16) == "peak learning rate"


def test_separate_runs_summarised_together_name_a_group_left_at_its_default_by_its_choice():
    """``initnorm-summarize outputs/runs``: one run set ``data=shakespeare``, another ``optim=sgd``; the others' data and
    optimiser were their config nodes, printed as JSON in the table and legend, and the title named the first run's corpus
    and optimiser as if every run shared them."""
    def run(overrides, data, optim):
        config = {"model": {"family": "decoder"}, "data": {"name": data, "context": 32}, "optim": {"name": optim, "eps": 1e-8},
                  "width": 16, "depth": 2, "steps": 3, "lr": 0.01}
        return {"status": "finished", "seed": 1, "overrides": overrides, "config": config, "final_val_loss": 3.0,
                "choices": {"data": data, "optim": optim, "model": "decoder"}, "val_history": [[0, 3.3], [3, 3.0]]}

    recs = [run({"data": "shakespeare"}, "shakespeare", "adamw"), run({"optim": "sgd"}, "alice", "sgd")]
    svg = PLOTS.get("val_curves")(recs).files["val_curves.svg"].decode()
    assert "data shakespeare, AdamW" in svg and "data alice, SGD" in svg and '"context"' not in svg
    assert setup_title(recs) == "Decoder, width 16, 2 blocks, 3 steps, peak lr 0.01, 1 seed"
