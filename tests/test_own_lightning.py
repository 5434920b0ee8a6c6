"""initnorm's instruments as callbacks for a Lightning project of one's own (issue 35): tests/own_lightning.py, not
initnorm's LightningModule, writes the TensorBoard tags an initnorm-train run of the same model writes."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from initnorm.callbacks import CoordCheck, Diagnostics, LayerStats
from tests.conftest import compose_cfg
from tests.own_lightning import Bigram, LitGPT, Windows
from tests.test_own_model import GPT

# docs/tensorboard.md: the instruments' tags (stat/layer/role)
INSTRUMENTS = ("act_rms", "grad_norm", "grad_rms", "update_ratio", "eff_lr", "eps_frac", "sigma_w", "sigma_dw", "coord_delta_rms")


def fit(module, folder, logger=None, callbacks=None, steps: int = 4):
    trainer = L.Trainer(max_steps=steps, logger=logger or TensorBoardLogger(folder, name="", version=""), accelerator="cpu",
                        callbacks=callbacks if callbacks is not None else
                        [LayerStats(every_n_steps=2), Diagnostics(every_n_steps=2), CoordCheck(steps=3, windows=4)],
                        default_root_dir=folder, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, limit_val_batches=0)
    trainer.fit(module, datamodule=Windows())
    return trainer


def instrument_steps(folder) -> dict[str, list[int]]:
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0}).Reload()
    return {t: [e.step for e in acc.Scalars(t)] for t in acc.Tags()["scalars"] if t.split("/")[0] in INSTRUMENTS}


def test_the_instruments_on_a_project_of_ones_own_write_initnorm_trains_tags(tmp_path):
    from initnorm.cli.train import train

    fit(LitGPT(width=64), tmp_path / "own")
    ours = instrument_steps(tmp_path / "own")
    train(compose_cfg(*GPT, "experiment=coord_check", "width=64", "steps=4", "callbacks.coord.steps=3", "callbacks.coord.windows=4",
                      "callbacks.stats.every_n_steps=2", "callbacks.diagnostics.every_n_steps=2", "trainer.enable_progress_bar=false"),
          tmp_path / "initnorm")
    theirs = instrument_steps(tmp_path / "initnorm")
    assert ours == theirs and {t.split("/")[0] for t in ours} == set(INSTRUMENTS), sorted(set(ours) ^ set(theirs))
    assert ours["act_rms/block_02/stream_out"] == [0, 2] and ours["coord_delta_rms/logits/output"] == [1, 2, 3]
    assert (tmp_path / "own" / "coord.csv").read_text().startswith("width,depth,param,seed,step,layer,role,value\n")


def test_a_module_that_is_its_own_model_and_a_logger_that_is_not_tensorboard(tmp_path):
    """No ``.model``: the module itself is read (its gradients, updates and rates; it states no probe points). A CSV
    logger gets the last measured step's records too, written when the fit ends."""
    fit(Bigram(), tmp_path / "tb", callbacks=[LayerStats(every_n_steps=2), Diagnostics(every_n_steps=2)])
    tags = instrument_steps(tmp_path / "tb")
    assert tags["grad_norm/head/params"] == tags["eff_lr/emb/weight"] == tags["sigma_w/head/weight"] == [0, 2]
    fit(Bigram(), tmp_path / "csv", logger=CSVLogger(tmp_path / "csv", name="", version=""),
        callbacks=[LayerStats(every_n_steps=2)], steps=3)
    rows = (tmp_path / "csv" / "metrics.csv").read_text().splitlines()
    assert "grad_norm/head/params" in rows[0] and [r.split(",")[rows[0].split(",").index("step")] for r in rows[1:]] == ["0", "2"]
