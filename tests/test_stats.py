import math
from types import SimpleNamespace

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from initnorm.callbacks.probes import capture, parameter_layer
from initnorm.cli.train import train
from initnorm.errors import ConfigError
from initnorm.instruments.stats import LayerStats, gradient_records
from initnorm.models.decoder import Decoder
from tests.conftest import compose_cfg

STATS = ["steps=12", "trainer.val_check_interval=12", "log_every=5", "~callbacks.progress", "trainer.enable_progress_bar=false",
         "callbacks.stats.every_n_steps=5"]


def test_tags_in_the_event_files_on_logging_steps_only(tmp_path):
    train(compose_cfg(*STATS), tmp_path)
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    wanted = {f"act_rms/block_{b:02d}/{r}" for b in (1, 2) for r in ("stream_in", "attn_out", "mlp_out", "stream_out")}
    wanted |= {"act_rms/logits/output", "update_ratio/block_01/weights", "update_ratio/head/weights"}
    wanted |= {f"{s}/{layer}/params" for s in ("grad_norm", "grad_rms") for layer in ("tok_emb", "block_01", "block_02", "ln_f", "head")}
    assert wanted <= tags, sorted(wanted - tags)
    for tag in wanted:
        assert [e.step for e in acc.Scalars(tag)] == [0, 5, 10], tag
    # At init the stream is the embedding (std 0.02) plus sinusoidal positions (RMS sqrt(1/2)).
    assert acc.Scalars("act_rms/block_01/stream_in")[0].value == pytest.approx(math.sqrt(0.5 + 0.02**2), abs=0.01)
    # Adam's first step moves every weight by about lr = 0.01, against weights of std 0.02.
    assert 0.3 < acc.Scalars("update_ratio/block_01/weights")[0].value < 0.7


def test_hooks_are_gone_after_training(tmp_path, monkeypatch):
    import initnorm.training.fit as tr

    built, real = [], tr.build_model
    monkeypatch.setattr(tr, "build_model", lambda *a: built.append(real(*a)) or built[-1])
    train(compose_cfg(*STATS, "steps=3"), tmp_path)
    assert not any(m._forward_hooks for m in built[0].model.modules())


def test_hooks_exist_only_on_logging_steps():
    model = Decoder(28, width=16, depth=2)
    cb, module = LayerStats(every_n_steps=5), SimpleNamespace(model=model)
    writer = SimpleNamespace(experiment=SimpleNamespace(add_scalar=lambda *a: None))
    cb.on_fit_start(SimpleNamespace(loggers=[writer], default_root_dir=".", optimizers=[]), module)
    hooked = lambda: sum(len(m._forward_hooks) for m in model.modules())
    for step, expected in ((1, 0), (5, len(model.probe_points()))):
        cb.on_train_batch_start(SimpleNamespace(global_step=step), module, None, 0)
        assert hooked() == expected
        cb.on_train_batch_end(None, module, None, None, 0)
        assert hooked() == 0


def test_capture_and_gradient_records_agree_with_torch():
    torch.manual_seed(0)
    model = Decoder(28, width=16, depth=2)
    x = torch.randint(28, (4, 8))
    with capture(model.probe_points()) as seen:
        model(x).square().mean().backward()
    assert not any(m._forward_hooks for m in model.modules())
    assert seen["block_01/stream_in"].item() == pytest.approx(model.embed(x).pow(2).mean().sqrt().item(), rel=1e-6)
    recs = {(r.layer, r.stat): r.value for r in gradient_records(model, 0)}
    block = torch.cat([p.grad.flatten() for p in model.blocks[1].parameters()])
    assert recs[("block_02", "grad_norm")] == pytest.approx(block.norm().item(), rel=1e-5)
    assert recs[("block_02", "grad_rms")] == pytest.approx(block.pow(2).mean().sqrt().item(), rel=1e-5)


def test_parameter_layers_and_bad_interval():
    assert parameter_layer("blocks.2.attn.q.weight") == "block_03"
    assert parameter_layer("layers.0.weight") == "layer_01"
    assert parameter_layer("head.weight") == "head"
    with pytest.raises(ConfigError, match="every_n_steps"):
        LayerStats(every_n_steps=0)
