"""What TensorBoard shows: HPARAMS (varying keys first and marked, trial IDs, final metrics at the
last step, no NaN), tag order (loss and learning rate first). Parsed from the written event files."""

import json

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata, plugin_data_pb2
from torch.utils.tensorboard import SummaryWriter

from initnorm import tb


def read_events(folder):
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


def hparams_data(acc, tag):
    return plugin_data_pb2.HParamsPluginData.FromString(acc.PluginTagToContent(metadata.PLUGIN_NAME)[tag])


def test_run_label_leads_with_what_varies():
    overrides = {"norm": "post", "seed": "3", "warmup": "200", "hydra.sweep.dir": "x", "trainer.enable_progress_bar": "false"}
    assert tb.run_label(overrides, ["norm", "warmup"], 3) == "norm=post warmup=200 seed=3"
    # A single run: every override sets it apart (hydra.* and the seed key excepted, the seed last).
    assert tb.run_label({"lr": "0.02", "hydra.run.dir": "x"}, None, 1) == "lr=0.02 seed=1"
    assert tb.run_label({}, None, 1) == "seed=1"
    assert tb.trial_id("norm=post warmup=200 seed=3") == "post 200 3"
    assert tb.trial_id("norm=post warmup=200 seed=3", ["norm", "seed", "warmup"]) == "post 3 200"  # the columns' order
    assert tb.trial_id("lr=0.1 batch_size=32 seed=3", ["batch_size", "lr"]) == "32 0.1 3"  # the seed, no column, after them
    # A custom init is named by its function, not only "custom".
    assert tb.run_label({"init": "custom", "init.fn": "mypkg.inits.fancy"}, ["init"], 1) == "init=custom:mypkg.inits.fancy seed=1"


def test_hparams_mark_varying_keys_first_and_write_metrics_at_the_last_step(tmp_path):
    w = SummaryWriter(str(tmp_path))
    hp = {"batch_size": 32, "lr": 0.01, "model": "decoder", "norm": "post", "warmup": 200, "seed": 3, "flag": True}
    metrics = {"hp/final_val_loss": 2.5, "hp/diverged_step": None, "hp/other": float("nan")}
    tb.write_hparams(w, hp, metrics, ["norm", "warmup", "seed"], "norm=post warmup=200 seed=3", step=120)
    w.close()
    acc = read_events(tmp_path)
    experiment = hparams_data(acc, metadata.EXPERIMENT_TAG).experiment
    infos = [(i.name, i.differs) for i in experiment.hparam_infos]
    # Only what varies: TensorBoard ticks the first five columns, so a constant key listed here would be ticked beside them;
    # in the order the tab shows them (by name), which the trial ID follows.
    assert infos == [("norm", True), ("seed", True), ("warmup", True)]
    assert [m.name.tag for m in experiment.metric_infos] == list(metrics)
    start = hparams_data(acc, metadata.SESSION_START_INFO_TAG).session_start_info
    assert start.group_name == "post 3 200"  # the trial ID: the values in the columns' order, within the table's 10-em column
    assert start.hparams["norm"].string_value == "post" and start.hparams["lr"].number_value == 0.01
    assert start.hparams["flag"].bool_value is True and start.hparams["batch_size"].number_value == 32  # the constants stay in the record
    assert start.hparams["seed"].number_value == 3
    scalars = acc.Tags()["scalars"]
    assert "hp/final_val_loss" in scalars and "hp/diverged_step" not in scalars and "hp/other" not in scalars
    (point,) = acc.Scalars("hp/final_val_loss")
    assert point.step == 120 and point.value == 2.5


def test_every_number_is_a_number_and_divergence_true_or_false(tmp_path):
    """Issue 49: every swept number is a number column (a min/max filter, sorted by value), a whole number and an override
    given as text (``batch_size=32``) too; issue 36 had integers written as text so they would not show as 200.00, which
    left batch_size, seed and warmup filtered as text. Bools stay bools, divergence a true/false column (not 0.0000)."""
    from tensorboard.plugins.hparams import api_pb2

    w = SummaryWriter(str(tmp_path))
    hp = {"warmup": 200, "width": 64, "lr": 0.003, "compile": False, "seed": 1, "batch_size": "32", "norm": "post"}
    tb.write_hparams(w, hp, {"hp/final_val_loss": 2.5, "hp/diverged": 0.0, "hp/diverged_step": None},
                     ["warmup", "lr", "batch_size", "seed"], "x", step=10)
    w.close()
    acc = read_events(tmp_path)
    experiment = hparams_data(acc, metadata.EXPERIMENT_TAG).experiment
    kinds = [(i.name, i.type, i.differs) for i in experiment.hparam_infos]  # diverged after what varies, not marked varying
    number = api_pb2.DATA_TYPE_FLOAT64
    assert kinds == [("batch_size", number, True), ("lr", number, True), ("seed", number, True), ("warmup", number, True),
                     ("diverged", api_pb2.DATA_TYPE_BOOL, False)]
    assert [m.name.tag for m in experiment.metric_infos] == ["hp/final_val_loss", "hp/diverged_step"]
    start = hparams_data(acc, metadata.SESSION_START_INFO_TAG).session_start_info
    assert start.hparams["warmup"].number_value == 200 and start.hparams["width"].number_value == 64
    assert start.hparams["batch_size"].number_value == 32 and start.hparams["norm"].string_value == "post"
    assert start.hparams["compile"].HasField("bool_value") and start.hparams["diverged"].HasField("bool_value")
    assert start.hparams["diverged"].bool_value is False and start.hparams["lr"].number_value == 0.003


def test_a_batch_sweeps_job_writes_its_swept_numbers_as_numbers_in_the_trial_ids_order(tmp_path):
    """Issue 49: in `-m lr=... batch_size=...` lr had a min/max filter and batch_size was text, and the columns' order
    (TensorBoard's, by name) was not the trial ID's. The job's HPARAMS entry (cli/jobinfo.hparams_of) as written."""
    from tensorboard.plugins.hparams import api_pb2

    from initnorm.cli.jobinfo import hparams_of
    from initnorm.config import to_plain
    from initnorm.schema import check
    from tests.conftest import compose_cfg

    overrides = {"lr": "0.01", "batch_size": "8", "seed": "2"}
    hp = hparams_of(check(to_plain(compose_cfg("lr=0.01", "batch_size=8", "seed=2"))), overrides)
    w = SummaryWriter(str(tmp_path))
    tb.write_hparams(w, hp, {"hp/final_val_loss": 2.5}, ["lr", "batch_size", "seed"],
                     tb.run_label(overrides, ["lr", "batch_size", "seed"], 2), step=10)
    w.close()
    acc = read_events(tmp_path)
    infos = hparams_data(acc, metadata.EXPERIMENT_TAG).experiment.hparam_infos
    assert [(i.name, i.type) for i in infos] == [(k, api_pb2.DATA_TYPE_FLOAT64) for k in ("batch_size", "lr", "seed")]
    start = hparams_data(acc, metadata.SESSION_START_INFO_TAG).session_start_info
    assert [start.hparams[k].number_value for k in ("batch_size", "lr", "seed")] == [8, 0.01, 2]
    assert start.group_name == "8 0.01 2"  # beside the columns batch_size, lr, seed


def test_loss_and_learning_rate_tags_sort_before_the_instruments():
    # TensorBoard orders card groups by the tag's first path component, capitals before lower case.
    groups = sorted({t.split("/")[0] for t in (tb.TRAIN_LOSS, tb.VAL_LOSS, tb.LEARNING_RATE, "act_rms/block_01/attn_out", "grad_norm/x",
                                               "hp/final_val_loss", "update_ratio/x")})
    assert groups[:2] == ["Loss", "Schedule"]


def test_a_run_writes_its_hparams_row_and_curves_as_tensorboard_shows_them(tmp_path):
    from initnorm.cli.train import train
    from tests.conftest import TINY, compose_cfg

    m = train(compose_cfg(*TINY), tmp_path)
    acc = read_events(tmp_path)  # the events lie in the job folder: TensorBoard names the run by the folder
    start = hparams_data(acc, metadata.SESSION_START_INFO_TAG).session_start_info
    assert start.group_name == "1" and start.hparams["norm"].string_value == "pre"
    scalars = set(acc.Tags()["scalars"])
    assert {tb.TRAIN_LOSS, tb.VAL_LOSS, tb.LEARNING_RATE, "hp/final_val_loss"} <= scalars
    assert "hp/diverged_step" not in scalars  # no NaN for a run that did not diverge
    assert [p.step for p in acc.Scalars("hp/final_val_loss")] == [m["steps"]]  # at the last step, not step 0
    assert acc.Scalars(tb.VAL_LOSS)[0].step == 0 and m["val_history"][0][0] == 0  # validated before the first step
    machine = m["provenance"]["machine"]  # what moves the last digits between machines (docs/numerics.md)
    assert {"cpu", "cpu_capability", "threads", "blas", "onednn"} <= set(machine) and machine["threads"] == 1


def test_validation_interval_gives_short_runs_a_curve():
    from initnorm.training.validation import validation_interval

    assert validation_interval(1500, None) == 150 and validation_interval(200, None) == 20 and validation_interval(5000, None) == 250
    assert validation_interval(200, 50) == 50  # a value that is set wins


def test_docs_list_every_tag_a_run_writes(tmp_path):
    # The tags of a default run (statistics and diagnostics on) and of a coordinate-check run, against
    # docs/tensorboard.md's table: each written tag is named there, as itself or as its group (`act_rms/...`).
    import re

    from initnorm.cli.train import train
    from tests.conftest import ROOT, compose_cfg

    quick = ["trainer.enable_progress_bar=false", "checkpoint.every_n_steps=0", "log_every=2"]
    train(compose_cfg("steps=4", "trainer.val_check_interval=4", "callbacks.stats.every_n_steps=2",
                      "callbacks.diagnostics.every_n_steps=2", *quick), tmp_path / "run")
    train(compose_cfg("experiment=coord_check", "steps=2", *quick), tmp_path / "coord")
    written = set()
    for run in ("run", "coord"):
        written |= set(read_events(tmp_path / run).Tags()["scalars"])
    doc = (ROOT / "docs" / "tensorboard.md").read_text(encoding="utf-8")
    table = doc[doc.index("| tag | what | when |"):doc.index("TensorBoard orders card groups")]
    named = set(re.findall(r"`([^`]+)`", "\n".join(line.split(" | ")[0] for line in table.splitlines())))
    groups = {n.removesuffix("/...") for n in named if n.endswith("/...")}
    missing = sorted(t for t in written
                     if t not in named and t.split("/")[0] not in groups and not (t.startswith("hp/") and "hp/<family metric>" in named))
    assert not missing, f"tags written but not in docs/tensorboard.md: {missing}"
    assert {"eff_lr", "eps_frac", "sigma_w", "sigma_dw", "coord_delta_rms"} <= {t.split("/")[0] for t in written}


def test_a_sweep_summary_writes_one_tensorboard_run_per_setting_with_its_seeds_mean_and_spread(tmp_path):
    """A sweep of many seeds (more than a handful) is one run per setting there (tensorboard_settings/), not one per
    job; written again by a second summary, not added to; a sweep of 3 seeds gets none."""
    from initnorm.results import read_metrics
    from initnorm.summary import summarize

    for lr in ("0.01", "0.1"):
        for seed in range(1, 10):
            job = tmp_path / f"lr={lr}" / f"seed={seed}"
            job.mkdir(parents=True)
            loss = float(lr) + seed / 3
            (job / "metrics.json").write_text(json.dumps({
                "status": "finished", "seed": seed, "swept": ["lr", "seed"], "overrides": {"lr": lr, "seed": str(seed)},
                "summary_metrics": ["final_val_loss"], "final_val_loss": loss, "val_history": [[0, 5.0], [10, loss]]}))
    summarize(tmp_path)
    summarize(tmp_path)
    runs = sorted(p.name for p in (tmp_path / tb.SETTINGS_DIR).iterdir())
    assert runs == ["lr=0.01", "lr=0.1"]
    acc = read_events(tmp_path / tb.SETTINGS_DIR / "lr=0.1")
    assert [(p.step, round(p.value, 4)) for p in acc.Scalars(tb.VAL_LOSS)] == [(0, 5.0), (10, 1.7667)]  # once: the old events gone
    assert [round(p.value, 4) for p in acc.Scalars(f"{tb.VAL_LOSS}_lowest")] == [5.0, 0.4333]
    assert [round(p.value, 4) for p in acc.Scalars(f"{tb.VAL_LOSS}_highest")] == [5.0, 3.1]
    start = hparams_data(acc, metadata.SESSION_START_INFO_TAG).session_start_info
    assert start.hparams["lr"].number_value == 0.1 and start.hparams["seeds"].number_value == 9  # numbers as numbers (tb.py)
    assert tb.write_setting_runs(tmp_path / "few", [r for r in read_metrics(tmp_path) if r["seed"] <= 3]) is None
