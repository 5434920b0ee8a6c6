"""initnorm as a library (issue 35): docs/library.md's three examples run as the page shows them, and the page holds
each example file as it is; the public surface is initnorm.__all__ and initnorm.callbacks."""

from __future__ import annotations

import math
import runpy
import subprocess
import sys

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import initnorm
from tests.conftest import ROOT

PAGE = (ROOT / "docs" / "library.md").read_text(encoding="utf-8")
EXAMPLES = ["nanogpt_loop.py", "lightning_project.py", "hf_trainer.py"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_page_shows_each_example_as_the_file_is(name):
    text = (ROOT / "examples" / name).read_text(encoding="utf-8")
    assert f"```python\n{text}```" in PAGE and f"python examples/{name}" in PAGE


def example(name: str):
    """The example's ``main`` as ``python examples/<name>`` runs it (its module code, then ``main()``)."""
    return runpy.run_path(str(ROOT / "examples" / name))["main"]


def test_the_plain_loop(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    losses, report = example("nanogpt_loop.py")()
    assert len(losses) == 20 and losses[-1] < losses[0] - 0.3  # 4.64 -> 4.04 when written
    assert report.ok and {r["param"] for r in report.records} == {"sp", "mup"}
    out = capsys.readouterr().out
    assert out.startswith("# GPT under param=mup (width multiplier 4)") and "Verdict: PASS" in out


def test_a_lightning_project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trainer = example("lightning_project.py")()
    assert trainer.global_step == 10
    folder = tmp_path / "runs" / "lightning_project"
    events = EventAccumulator(str(next(folder.rglob("events.out.tfevents*")).parent), size_guidance={"scalars": 0}).Reload()
    tags = set(events.Tags()["scalars"])
    assert {"act_rms/block_02/stream_out", "eff_lr/h_01/attn.c_attn.weight", "coord_delta_rms/logits/output"} <= tags, sorted(tags)
    assert (folder / "coord.csv").exists()
    # its own loss in its 10 steps (Lightning logs every 50 by default: none was written), and a validation
    assert len(events.Scalars("train_loss")) == 10 and len(events.Scalars("val_loss")) == 1


def test_the_lightning_project_validates_without_lightnings_warning(tmp_path, monkeypatch, recwarn):
    monkeypatch.chdir(tmp_path)
    example("lightning_project.py")()
    said = [str(w.message) for w in recwarn]
    assert not any("validation_step" in m for m in said), said


def test_hugging_faces_trainer_keeps_the_per_role_rates(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    monkeypatch.chdir(tmp_path)
    trainer = example("hf_trainer.py")()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert trainer.state.global_step == 6 and len(losses) == 2 and all(math.isfinite(v) for v in losses)
    # µP's rates at width 64 over base 16: vectors at the peak rate, hidden matrices at a quarter of it
    assert sorted({round(g["lr"], 12) for g in trainer.optimizer.param_groups}) == [0.003 / 4, 0.003]


def test_the_public_surface_loads_on_first_use_and_import_initnorm_stays_light():
    """``import initnorm`` imports neither torch nor Lightning (a process of its own: this one has both)."""
    code = ("import sys, initnorm\n"
            "print('torch' in sys.modules, 'lightning' in sys.modules)\n"
            "initnorm.parameterize, initnorm.coord_check\n"
            "print('lightning' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300).stdout.split()
    assert out == ["False", "False", "False"]
    assert set(initnorm.__all__) <= set(dir(initnorm))
    assert all(getattr(initnorm, name) is not None for name in initnorm.__all__)
    from initnorm import callbacks

    named = (callbacks.LayerStats, callbacks.Diagnostics, callbacks.CoordCheck, callbacks.Spectral)
    assert {c.__name__ for c in named} == set(callbacks.__all__)
    with pytest.raises(AttributeError, match="has no attribute 'parametrize'"):
        initnorm.parametrize  # noqa: B018


def test_the_coord_check_function_survives_an_import_of_the_command_module(monkeypatch):
    # `python -m initnorm.coord_check` run in a process that imported initnorm (reproduce --ci, a notebook's runpy) makes
    # the package's attribute that module: initnorm.coord_check(...) must still be the library function.
    import importlib

    import initnorm
    from initnorm.instruments.coord import check

    importlib.import_module("initnorm.coord_check")
    monkeypatch.setattr(check, "coord_check", lambda *a, **k: ("called", a, k))
    assert initnorm.coord_check(1, widths=[8]) == ("called", (1,), {"widths": [8]})
