import json
import math

from lightning.pytorch.callbacks import Callback
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from initnorm.cli.train import train
from tests.conftest import TINY, compose_cfg, run_cli
from tests.inproc import run_module


def test_short_run_lowers_the_loss(tmp_path, tiny):
    m = train(compose_cfg(*tiny, "steps=200", "trainer.val_check_interval=50"), tmp_path)
    first, last = m["val_history"][0][1], m["final_val_loss"]
    # Below the unigram entropy of the corpus (2.85 nats): the model uses its context.
    assert last < first - 0.1 and last < 2.75 < math.log(28)
    assert json.loads((tmp_path / "metrics.json").read_text())["final_val_loss"] == m["final_val_loss"]


def test_same_seed_same_numbers(tmp_path, tiny):
    a = train(compose_cfg(*tiny, "seed=3"), tmp_path / "a")
    b = train(compose_cfg(*tiny, "seed=3"), tmp_path / "b")
    c = train(compose_cfg(*tiny, "seed=4"), tmp_path / "c")
    assert a["val_history"] == b["val_history"]
    assert a["final_val_loss"] != c["final_val_loss"]


def test_hparams_metric_is_the_real_final_loss(tmp_path, tiny):
    m = train(compose_cfg(*tiny), tmp_path)
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert {"Loss/train", "Schedule/learning_rate", "Loss/validation", "hp/final_val_loss"} <= set(tags)
    assert abs(acc.Scalars("hp/final_val_loss")[-1].value - m["final_val_loss"]) < 1e-6
    content = acc.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hparams = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
    assert hparams["norm"].string_value == "pre" and hparams["seed"].number_value == 1  # a number: a min/max filter


def test_multirun_writes_summary_rows(tmp_path):
    """The sweep as a process of its own: what its terminal shows (one line per job, no library noise) is the process's
    output, warnings a fresh interpreter prints included. initnorm-summarize reruns in this process (tests/inproc.py)."""
    proc = run_cli("-m", "norm=pre,post", "seed=1,2", *TINY, f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    sweep = tmp_path / "sweep"
    assert (sweep / "norm=post" / "seed=2" / "metrics.json").is_file()
    md = (sweep / "summary.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith(("| pre", "| post"))]
    assert len(rows) == 2 and "±" in rows[0]
    csv_lines = (sweep / "summary.csv").read_text().splitlines()
    assert csv_lines[0].startswith("norm,final_val_loss_mean") and len(csv_lines) == 3
    again = run_module("initnorm.summarize", [str(sweep)], cwd=tmp_path)
    shown = again.stdout
    table = md.split("\n\n", 2)[-1].partition("\n![")[0].strip()
    assert again.returncode == 0 and shown.startswith(table) and f"Figures: {sweep / 'val_curves.png'}" in shown
    # The terminal: one line per job as it starts and as it ends (final loss, progress), the summary; no library noise.
    out = proc.stdout + proc.stderr
    assert "start norm=post seed=2 (job 4 of 4)" in out and "done  norm=post seed=2: final validation loss" in out and "[4/4 done]" in out
    assert (sweep / "val_curves.png").is_file() and (sweep / "val_curves.svg").is_file()
    for noise in ("GPU available", "TPU available", "Tip:", "Warning", "warn", "Trainer.fit", "LeafSpec"):
        assert noise not in out, noise


BAR_AT_END: dict[str, float] = {}


class BarAtEnd(Callback):
    """Keeps what the progress bar shows when the fit ends."""

    def on_train_end(self, trainer, pl_module):
        BAR_AT_END.update({k: float(v) for k, v in trainer.progress_bar_metrics.items()})


def test_the_progress_bar_ends_on_the_final_validation_loss(tmp_path):
    """The bar's last val_loss is the run's final one, not step 0's (validated outside Lightning's loop)."""
    m = train(compose_cfg("steps=20", "trainer.val_check_interval=10", "checkpoint.every_n_steps=0", "trainer.enable_progress_bar=false",
                          "callbacks=none", "+callbacks.bar._target_=tests.test_train.BarAtEnd"), tmp_path)
    import importlib

    shown = importlib.import_module("tests.test_train").BAR_AT_END["val_loss"]  # the module Hydra made the callback from
    assert math.isclose(shown, m["final_val_loss"], rel_tol=1e-6) and not math.isclose(shown, m["val_history"][0][1], rel_tol=1e-3)
