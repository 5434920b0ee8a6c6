"""The callbacks that watch one model, per member of a vectorised group: every member's diagnostics
(eff_lr, eps_frac, sigma_w, sigma_dw) and coordinate check (coord.csv and its events) equal the same
job run alone, with members that differ in seed, learning rate, warmup and parameterisation."""

import csv
from pathlib import Path

import pytest
import torch

from initnorm.config import to_plain
from initnorm.instruments.diagnostics import top_singular, top_singulars
from initnorm.training.fit import Member, fit
from initnorm.training.group import group_key
from tests.conftest import compose_cfg

# sp and µP members, different seeds, rates and warmups, in one group
VARIANTS = [["seed=1", "lr=0.01"], ["seed=2", "lr=0.02", "warmup=10"], ["seed=3", "param=mup", "schedule=constant"]]
DIAG = ["width=16", "steps=60", "trainer.val_check_interval=60", "log_every=10", "checkpoint.every_n_steps=0", "~callbacks.progress",
        "trainer.enable_progress_bar=false", "callbacks.stats.every_n_steps=20", "callbacks.diagnostics.every_n_steps=20"]
# Relative tolerances (measured: eff_lr and eps_frac equal; sigma_w within 5e-6 and sigma_dw within 1e-5 on an AMD EPYC of
# family 25, within 2.7e-6 and 1.5e-4 on family 26, whose float32 kernels round otherwise):
# float32 rounding of the batched kernels (bmm over members) against the job's own.
# sigma_dw measures a difference of weights, W_after - W_before (a thousandth of W), so W's rounding
# weighs a thousand times more there. eps_frac counts coordinates on either side of a threshold: equal
# unless one sits within rounding of it.
TOLERANCE = {"eff_lr": 1e-12, "eps_frac": 1e-6, "sigma_w": 3e-5, "sigma_dw": 1e-3}


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(next(folder.rglob("events.out.tfevents.*")).parent), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _group(base, tmp_path):
    members = [Member(to_plain(compose_cfg(*base, *v)), tmp_path / f"group{i}") for i, v in enumerate(VARIANTS)]
    assert len({group_key(m.cfg) for m in members}) == 1
    fit(members)


def test_each_members_diagnostics_equal_its_job_alone(tmp_path):
    from initnorm.cli.train import train

    _group(DIAG, tmp_path)
    for i, v in enumerate(VARIANTS):
        train(compose_cfg(*DIAG, *v), tmp_path / f"alone{i}")
        alone, member = _scalars(tmp_path / f"alone{i}"), _scalars(tmp_path / f"group{i}")
        assert set(member) == set(alone)  # every tag of the job alone, diagnostics included, and no other
        diag = [t for t in alone if t.split("/")[0] in TOLERANCE]
        assert {t.split("/")[0] for t in diag} == set(TOLERANCE) and len(diag) > 50
        for tag in diag:
            a, b = alone[tag], member[tag]
            assert [s for s, _ in a] == [s for s, _ in b] == [0, 20, 40], tag
            for (step, x), (_, y) in zip(a, b):
                assert abs(x - y) <= TOLERANCE[tag.split("/")[0]] * abs(x), f"{v} {tag} at step {step}: alone {x}, member {y}"


# The key moves least of all under µP (its gradient passes the 1/d_k scores), so the float32 rounding of
# a_0 weighs most in rms(a_t - a_0) there: measured within 1.7e-5 (every other point within 5e-7).
COORD_TOLERANCE = {"key": 1e-4}
COORD = ["experiment=coord_check", "width=16", "checkpoint.every_n_steps=0", "trainer.enable_progress_bar=false"]


def test_each_members_coordinate_check_equals_its_job_alone(tmp_path):
    from initnorm.cli.train import train

    variants = [["seed=1", "param=sp"], ["seed=2", "param=mup"], ["seed=3", "param=mup", "lr=0.02"]]
    members = [Member(to_plain(compose_cfg(*COORD, *v)), tmp_path / f"group{i}") for i, v in enumerate(variants)]
    assert len({group_key(m.cfg) for m in members}) == 1
    fit(members)
    for i, v in enumerate(variants):
        train(compose_cfg(*COORD, *v), tmp_path / f"alone{i}")
        alone = list(csv.reader((tmp_path / f"alone{i}" / "coord.csv").open()))
        member = list(csv.reader((tmp_path / f"group{i}" / "coord.csv").open()))
        assert len(member) == len(alone) > 50 and member[0] == alone[0]  # the same header, rows, labels (param, seed)
        for a, b in zip(alone[1:], member[1:]):
            assert a[:-1] == b[:-1]
            assert float(b[-1]) == pytest.approx(float(a[-1]), rel=COORD_TOLERANCE.get(a[6], 1e-5)), f"{v}: {a} vs {b}"
        tags = {t: s for t, s in _scalars(tmp_path / f"group{i}").items() if t.startswith("coord_delta_rms/")}
        assert tags.keys() == {t for t in _scalars(tmp_path / f"alone{i}") if t.startswith("coord_delta_rms/")}
        assert [s for s, _ in tags["coord_delta_rms/stream/last"]] == list(range(1, 11))


def test_a_resumed_group_refuses_the_coordinate_check(tmp_path):
    from initnorm.results import read_record as results_read

    base = [*COORD, "checkpoint.every_n_steps=5"]
    members = lambda: [Member(to_plain(compose_cfg(*base, f"seed={s}")), tmp_path / str(s)) for s in (1, 2)]
    fit(members())
    for s in (1, 2):
        (tmp_path / str(s) / "metrics.json").unlink()  # as if killed after the checkpoint of step 5
    # each member's own refusal in its own folder (training/failure.py), none trained on
    results = fit(members())
    assert [r["status"] for r in results] == ["failed", "failed"]
    for s, r in zip((1, 2), results):
        assert "measures from step 0, but this job resumes at step 5" in r["error"] and f"/{s}" in r["error"]
        assert results_read(tmp_path / str(s) / "metrics.json")["status"] == "failed"


def test_batched_power_iteration_is_each_matrix_alone_and_survives_a_zero_matrix():
    torch.manual_seed(0)
    w = torch.randn(3, 12, 8)
    w[1] = 0.0  # a zero-initialised readout: sigma 0, and its warm start stays a unit vector
    sigmas, v = top_singulars(w)
    for e in range(3):
        alone, _ = top_singular(w[e])
        assert sigmas[e].item() == pytest.approx(alone, rel=1e-6, abs=1e-12)
    assert sigmas[1].item() == 0.0 and v[1].norm().item() == pytest.approx(1.0)
    w[1] = torch.randn(12, 8)  # the matrix grows: the warm start finds its top singular value
    exact = torch.linalg.matrix_norm(w[1].double(), ord=2).item()
    assert top_singulars(w, v, 20)[0][1].item() == pytest.approx(exact, rel=1e-3)


def test_coord_check_sweep_stacks_under_the_vectorized_launcher(tmp_path):
    """The command, run in this process (its sequential engine: the sweep's grouping and each member's coord.csv)."""
    from tests.inproc import command

    sweep = tmp_path / "sweep"
    proc = command("-m", "experiment=coord_check", "width=16", "param=sp,mup", "seed=1,2",
                   "trainer.enable_progress_bar=false", "hydra/launcher=vectorized",
                   "hydra.launcher.engine=sequential", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    import json

    records = [json.loads(p.read_text()) for p in sorted(sweep.rglob("metrics.json"))]
    assert len(records) == 4 and all(r["group"]["size"] == 4 for r in records)  # sp and µP, two seeds: one group
    labels = set()
    for p in sweep.rglob("metrics.json"):
        rows = list(csv.DictReader((p.parent / "coord.csv").open()))
        assert len(rows) > 50 and {r["step"] for r in rows} == {str(s) for s in range(1, 11)}
        labels.add((rows[0]["param"], rows[0]["seed"]))
    assert labels == {("sp", "1"), ("sp", "2"), ("mup", "1"), ("mup", "2")}


def test_stacks_of_one_shape_iterate_together_and_each_gets_what_it_gets_alone(monkeypatch):
    """``SpectralTracker.sigmas_of`` runs one batched power iteration per shape (and per cold or warm start), and each
    stack's sigmas and warm starts are the ones it gets through ``sigmas`` on its own."""
    from initnorm.instruments.diagnostics import callback

    g = torch.Generator().manual_seed(0)
    shapes = [(16, 16)] * 4 + [(32, 16), (16, 65)]
    stacks = {(f"p{i}", "w"): torch.randn(3, *s, generator=g) for i, s in enumerate(shapes)}
    alone, together = callback.SpectralTracker(), callback.SpectralTracker()
    calls = []
    real = callback.top_singulars
    monkeypatch.setattr(callback, "top_singulars", lambda *a: calls.append(a[0].shape) or real(*a))
    for _ in range(2):  # a cold start, then a warm one
        stacks = {k: w + 0.05 * torch.randn(w.shape, generator=g) for k, w in stacks.items()}
        calls.clear()
        many = together.sigmas_of(stacks)
        assert sorted(calls) == sorted([torch.Size([12, 16, 16]), torch.Size([3, 32, 16]), torch.Size([3, 16, 65])])
        for k, w in stacks.items():
            torch.testing.assert_close(many[k], alone.sigmas(k, w), rtol=1e-6, atol=0)
