"""The unit-scale check (initnorm/instruments/unitscale): its verdict, and a job's records in TensorBoard and unit_scale.txt."""

import json

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from initnorm.callbacks.probes import Record
from initnorm.cli.train import train
from initnorm.errors import ConfigError
from initnorm.instruments.unitscale import UNIT_FILE, UnitScale, verdict
from tests.conftest import compose_cfg

UNIT = ["steps=3", "trainer.val_check_interval=3", "~callbacks.progress", "trainer.enable_progress_bar=false", "~callbacks.stats",
        "~callbacks.diagnostics", "+callbacks.unit._target_=initnorm.instruments.unitscale.UnitScale", "+callbacks.unit.steps=2"]


def test_verdict_names_the_outputs_off_unit_scale_and_leaves_out_the_logits():
    ok = [Record(0, "block_01", "attn_out", "unit_act_rms", 1.9), Record(2, "block_01", "attn_out", "unit_act_rms", 0.6),
          Record(0, "logits", "output", "unit_act_rms", 0.05), Record(0, "head", "weight", "unit_grad_rms", 1e-4)]
    assert verdict(ok) == (True, "unit-scaled within a factor of 2 (2 outputs at steps 0, 2)")
    passed, line = verdict([*ok, Record(2, "block_02", "mlp_out", "unit_act_rms", 2.5)])
    assert not passed and line == "not unit-scaled within a factor of 2: block_02/mlp_out at step 2: 2.5"
    assert verdict([Record(0, "block_01", "attn_out", "unit_act_rms", 2.5)], factor=3)[0]
    with pytest.raises(ConfigError, match="callbacks.unit.steps"):
        UnitScale(steps=0)


def test_a_job_records_outputs_and_gradients_at_init_and_after_steps(tmp_path):
    train(compose_cfg(*UNIT, "param=umup", "lr=0.25"), tmp_path)
    text = (tmp_path / UNIT_FILE).read_text().splitlines()
    rows = [line.split("\t") for line in text[3:]]
    assert {(r[0], r[1]) for r in rows} == {(s, t) for s in ("unit_act_rms", "unit_out_grad_rms", "unit_grad_rms") for t in ("0", "2")}
    out_grad = {(r[1], r[2]) for r in rows if r[0] == "unit_out_grad_rms"}  # the gradient at each probe point, both steps
    assert out_grad >= {(t, p) for t in ("0", "2") for p in ("block_01/stream_in", "block_02/mlp_out", "logits/output", "block_01/key")}
    act0 = {r[2]: float(r[3]) for r in rows if r[:2] == ["unit_act_rms", "0"]}
    assert act0["block_01/stream_in"] == pytest.approx((1 + 0.5) ** 0.5, rel=0.1)  # N(0, 1) embedding + sinusoid (RMS sqrt(1/2))
    assert act0["logits/output"] == pytest.approx(16**-0.5, rel=0.5)  # the readout's fan_in^-1 on unit inputs
    assert text[0] == verdict([Record(int(r[1]), *r[2].split("/", 1), r[0], float(r[3])) for r in rows])[1]
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("unit_act_rms/block_02/mlp_out")] == [0, 2]
    assert [e.step for e in acc.Scalars("unit_grad_rms/block_01/attn.q.weight")] == [0, 2]
    # at init SP's branches are far below unit scale (std 0.02 weights), u-µP's within a factor of 2 of it
    train(compose_cfg(*UNIT, "param=sp"), tmp_path / "sp")
    sp = (tmp_path / "sp" / UNIT_FILE).read_text().splitlines()[0]
    assert sp.startswith("not unit-scaled within a factor of 2: block_01/query at step 0: 0.") and "block_01/attn_out at step 0: 0.0" in sp
    assert all(0.5 < v < 2 for k, v in act0.items() if k.endswith("mlp_out")) and torch.isfinite(torch.tensor(list(act0.values()))).all()


def test_the_coordinate_check_report_carries_each_jobs_unit_scale_verdict(tmp_path):
    from initnorm.instruments.coord.analysis import unit_lines

    for job, line in (("param=sp,width=16", "not unit-scaled within a factor of 2: block_01/attn_out at step 0: 0.003"),
                      ("param=umup,width=16", "unit-scaled within a factor of 2 (8 outputs at steps 0, 10)")):
        (tmp_path / job).mkdir()
        (tmp_path / job / UNIT_FILE).write_text(line + "\n\nstat\tstep\tpoint\trms\n")
    assert unit_lines(tmp_path).splitlines() == [
        "unit scale, param=sp,width=16: not unit-scaled within a factor of 2: block_01/attn_out at step 0: 0.003",
        "unit scale, param=umup,width=16: unit-scaled within a factor of 2 (8 outputs at steps 0, 10)"]


def test_a_stacked_members_unit_scale_records_equal_its_job_alone(tmp_path):
    """The output gradients come from one more forward and backward per member outside the vmap: each
    member's equal its job alone's (float32 rounding of the batched kernels), and training is unchanged."""
    from initnorm.config import to_plain
    from initnorm.training.fit import Member, fit

    variants = [["param=umup", "seed=1", "lr=0.25"], ["param=umup", "seed=2", "lr=0.5"]]
    fit([Member(to_plain(compose_cfg(*UNIT, *v)), tmp_path / f"group{i}") for i, v in enumerate(variants)])
    for i, v in enumerate(variants):
        alone = train(compose_cfg(*UNIT, *v), tmp_path / f"alone{i}")
        assert json.loads((tmp_path / f"group{i}" / "metrics.json").read_text())["final_val_loss"] == pytest.approx(
            alone["final_val_loss"], rel=1e-5)
        rows = {name: [line.split("\t") for line in (tmp_path / name / UNIT_FILE).read_text().splitlines()[3:]]
                for name in (f"group{i}", f"alone{i}")}
        member, job = rows[f"group{i}"], rows[f"alone{i}"]
        assert [r[:3] for r in member] == [r[:3] for r in job] and any(r[0] == "unit_out_grad_rms" for r in job)
        for a, b in zip(job, member):
            assert float(b[3]) == pytest.approx(float(a[3]), rel=1e-3), (v, a, b)  # printed to 4 significant digits
