"""The spectral instruments: power iteration against torch's spectral norm, the Newton-Schulz residual, the O that Muon
applies, and the Spectral/ tags written by a Lightning project stepping torch.optim.Muon and by an initnorm run."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn

from initnorm.errors import ConfigError
from initnorm.instruments.diagnostics.callback import SpectralTracker
from initnorm.instruments.spectral import Spectral, muon_matrices, ns_residual
from initnorm.training.muon_scale import factor
from initnorm.training.muon_stack import newton_schulz
from tests.own_lightning import VOCAB, Windows


def relative_shortfall(w: torch.Tensor, estimate: torch.Tensor) -> torch.Tensor:
    exact = torch.linalg.matrix_norm(w, ord=2)
    assert (estimate <= exact * (1 + 1e-5)).all()  # power iteration's ||w v|| never exceeds the true value
    return (exact - estimate) / exact


def test_power_iteration_equals_torch_spectral_norm_within_the_measured_bounds():
    """Gaussian matrices are the hard case (their top two singular values are close): measured on 200 of each of four
    shapes, the cold start's shortfall has median 0-2e-6, at most 2.4%; 20 warm steps after a change of 0.3 per entry,
    median 2e-6-4e-4, at most 6.6%. A matrix with a spectral gap, as training makes them, is exact to 1e-5."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(20, 40, 24, generator=g)
    tracker = SpectralTracker(steps=20)
    cold = relative_shortfall(w, tracker.sigmas(("w", "w"), w))  # 100 steps from a fixed vector
    assert cold.median() < 1e-5 and cold.max() < 0.03
    w = w + 0.3 * torch.randn(20, 40, 24, generator=g)  # a step later: 20 steps from the last vector
    warm = relative_shortfall(w, tracker.sigmas(("w", "w"), w))
    assert warm.median() < 1e-3 and warm.max() < 0.1
    spiked = w + 3 * torch.randn(20, 40, 1, generator=g) @ torch.randn(20, 1, 24, generator=g) / 24 ** 0.5
    assert relative_shortfall(spiked, tracker.sigmas(("w", "w"), spiked)).max() < 1e-5


def test_ns_residual_is_zero_for_orthogonal_and_large_for_random():
    q, _ = torch.linalg.qr(torch.randn(64, 16))
    assert ns_residual(q) < 1e-5 and ns_residual(q.T) < 1e-5  # wide: measured on O Oᵀ
    assert ns_residual(torch.randn(64, 16)) > 10
    o = newton_schulz(torch.randn(4, 64, 16))  # Muon's own: stops short of orthogonal by design, about 0.53
    assert ((0.4 < ns_residual(o)) & (ns_residual(o) < 0.7)).all()


def test_the_o_found_for_a_muon_matrix_is_the_one_torch_applies():
    torch.manual_seed(0)
    p = nn.Parameter(torch.randn(32, 12))
    lr, wd = 0.02, 0.1
    opt = torch.optim.Muon([p], lr=lr, weight_decay=wd)
    for _ in range(2):  # the second step has a momentum buffer to read
        p.grad = torch.randn(32, 12)
        (matrix,) = muon_matrices([opt])
        o = matrix.orthogonalised()
        before = p.detach().clone()
        opt.step()
        applied = (before * (1 - lr * wd) - p.detach()) / (lr * factor("original", p.shape))
        assert torch.allclose(applied, o.float(), atol=1e-5, rtol=0), (applied - o.float()).abs().max()


def test_bad_values_are_one_line_with_the_override():
    with pytest.raises(ConfigError, match="callbacks.spectral.every_n_steps=50"):
        Spectral(every_n_steps=0)
    with pytest.raises(ConfigError, match="callbacks.spectral.power_steps"):
        Spectral(power_steps=-1)


class MuonMLP(L.LightningModule):
    """A Lightning project of one's own stepping torch.optim.Muon on every (bias-free) matrix."""

    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(nn.Embedding(VOCAB, 16), nn.Linear(16, 48, bias=False), nn.ReLU(),
                                   nn.Linear(48, VOCAB, bias=False))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.model(x).reshape(-1, VOCAB), y.reshape(-1))

    def configure_optimizers(self):
        return torch.optim.Muon(self.model.parameters(), lr=0.02)


def scalars(folder) -> dict[str, list]:
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0}).Reload()
    return {t: acc.Scalars(t) for t in acc.Tags()["scalars"]}


def test_the_callback_writes_spectral_tags_in_a_muon_project(tmp_path):
    module = MuonMLP()
    trainer = L.Trainer(max_steps=3, logger=TensorBoardLogger(tmp_path, name="", version=""), accelerator="cpu",
                        callbacks=[Spectral(every_n_steps=2)], enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0)
    trainer.fit(module, datamodule=Windows())
    tags = scalars(tmp_path)
    wanted = {f"Spectral/{what}/{layer}/weight" for what in ("weight", "update", "ns_residual") for layer in ("0", "1", "3")}
    assert wanted <= set(tags), sorted(wanted - set(tags))
    assert all([e.step for e in tags[t]] == [0, 2] for t in wanted)
    # step 2 is the last: its weight is the trained one. The hidden matrix's map is 16 -> 48, the embedding's VOCAB -> 16
    w = module.model[1].weight.detach()
    assert tags["Spectral/weight/1/weight"][-1].value == pytest.approx(
        torch.linalg.matrix_norm(w, ord=2).item() / math.sqrt(48 / 16), rel=1e-4)
    emb = module.model[0].weight.detach()
    assert tags["Spectral/weight/0/weight"][-1].value == pytest.approx(
        torch.linalg.matrix_norm(emb, ord=2).item() / math.sqrt(16 / VOCAB), rel=1e-4)
    # Muon's update: lr x factor x O, O's largest σ about 1.1: ||ΔW||₂ / sqrt(48/16) about 0.02 x 1.1 (decay aside)
    assert 0.015 < tags["Spectral/update/1/weight"][-1].value < 0.03
    assert all(0.3 < e.value < 1.0 for t in wanted if "ns_residual" in t for e in tags[t])


def test_an_initnorm_run_writes_weight_and_update_tags_when_asked_and_no_residual_under_adamw(tmp_path):
    from initnorm.cli.train import train
    from tests.conftest import compose_cfg

    train(compose_cfg("steps=3", "log_every=5", "~callbacks.progress", "trainer.enable_progress_bar=false",
                      "~callbacks.stats", "callbacks.diagnostics.every_n_steps=2", "callbacks.spectral.every_n_steps=2",
                      "callbacks.spectral.weight=true", "callbacks.spectral.update=true"), tmp_path)
    tags = scalars(tmp_path)
    spectral = {t for t in tags if t.startswith("Spectral/")}
    assert {"Spectral/weight/block_01/attn.q.weight", "Spectral/update/head/weight"} <= spectral, sorted(spectral)
    assert [e.step for e in tags["Spectral/update/head/weight"]] == [0, 2]
    assert not any(t.startswith("Spectral/ns_residual/") for t in spectral)
    for ours, theirs in (("Spectral/weight/block_01/attn.q.weight", "sigma_w/block_01/attn.q.weight"),
                         ("Spectral/update/head/weight", "sigma_dw/head/weight")):  # the diagnostics' numbers, measured again
        assert [e.value for e in tags[ours]] == [e.value for e in tags[theirs]]


def test_an_initnorm_run_under_muon_writes_the_residual_for_its_hidden_matrices_only(tmp_path):
    # optim=muon steps torch's Muon inside a container that is itself an Optimizer (training/optimizers.Several)
    from initnorm.cli.train import train
    from tests.conftest import compose_cfg

    train(compose_cfg("steps=3", "log_every=5", "~callbacks.progress", "trainer.enable_progress_bar=false",
                      "~callbacks.stats", "~callbacks.diagnostics", "callbacks.spectral.every_n_steps=2",
                      "optim=muon", "param=mup"), tmp_path)
    residual = {t for t in scalars(tmp_path) if t.startswith("Spectral/ns_residual/")}
    assert {"Spectral/ns_residual/block_01/attn.q.weight", "Spectral/ns_residual/block_02/mlp.proj.weight"} <= residual, sorted(residual)
    assert not any(t.endswith(("head/weight", "tok_emb/weight")) for t in residual)  # AdamW's part: no residual


def test_a_stacked_muon_group_writes_each_members_residual_as_the_job_alone(tmp_path):
    # a vectorised group steps its members' Muon matrices at once (training/muon_group.MuonMatrices), outside the
    # members' own optimisers: each member must still write its own Spectral/ns_residual, the same tags as alone
    from initnorm.cli.train import train
    from initnorm.config import to_plain
    from initnorm.training.fit import Member, fit
    from tests.conftest import compose_cfg

    shared = ("steps=3", "log_every=5", "~callbacks.progress", "trainer.enable_progress_bar=false", "~callbacks.stats",
              "~callbacks.diagnostics", "callbacks.spectral.every_n_steps=2", "optim=muon", "param=mup", "width=32")
    train(compose_cfg(*shared, "seed=2"), tmp_path / "alone")
    group = fit([Member(to_plain(compose_cfg(*shared, f"seed={s}")), tmp_path / f"seed={s}") for s in (1, 2)])
    assert group[1]["group"]["optimizer"] == "muon_stack" and group[1]["group"]["size"] == 2
    alone = {t: v for t, v in scalars(tmp_path / "alone").items() if t.startswith("Spectral/ns_residual/")}
    assert "Spectral/ns_residual/block_01/attn.q.weight" in alone, sorted(alone)
    members = [{t: v for t, v in scalars(tmp_path / f"seed={s}").items() if t.startswith("Spectral/ns_residual/")} for s in (1, 2)]
    assert set(members[0]) == set(members[1]) == set(alone), sorted(set(alone) ^ set(members[1]))
    for t, events in alone.items():
        assert [e.step for e in members[1][t]] == [e.step for e in events] == [0, 2]
        # the same gradients up to the stacked forward's float32 rounding, through a bf16 iteration (measured here: at
        # most 0.0015 apart, most tags equal)
        assert [e.value for e in members[1][t]] == pytest.approx([e.value for e in events], abs=0.01), t
    assert any(members[0][t][0].value != members[1][t][0].value for t in alone)  # two seeds: each member its own record
