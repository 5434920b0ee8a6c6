"""µP's attention scale and a model's own attention, judged by what the forward does for any score shape (issue 46): a CLS
token prepended inside forward ((T+1) x (T+1) scores) and a sink column (T x (T+1)) are attention, and under param=mup with
no multiplier named the run says so in one line; a model without attention gets no line, and one whose forward could not be
measured is named plainly, with that said."""

from __future__ import annotations

import logging

import pytest

import initnorm
from initnorm.models import own, own_attention
from initnorm.models.own import logits_of
from tests.own_attention_shapes import ClsNet, FeatureNet, SinkNet, Unmeasurable


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(own, "_WARNED", set())  # the line is said once per table and process
    monkeypatch.setattr(own, "_MEASURED", {})


def notices(caplog, model, **kw) -> list[str]:
    with caplog.at_level(logging.WARNING, logger="initnorm.models.own"):
        initnorm.parameterize(model, width=32, base_width=16, param="mup", **kw)
    return [r.getMessage() for r in caplog.records if "attention scores" in r.getMessage()]


@pytest.mark.parametrize("model", [ClsNet, SinkNet])
def test_attention_whose_scores_are_not_length_squared_is_found(model):
    net = own_attention.scratch(lambda: model(width=16, vocab_size=8))
    assert own_attention.attends(net, 8, None, logits_of) is True


@pytest.mark.parametrize("model", [ClsNet, SinkNet])
def test_mup_on_it_says_its_own_scale_is_kept(model, caplog):
    (line,) = notices(caplog, model, vocab_size=8)
    said = f"but tests.own_attention_shapes.{model.__name__} computes attention scores and names no multiplier for them"
    assert said + ": its own scale is kept" in line
    assert "<class" not in line and "model.attn_mult_attr" in line


def test_no_line_for_a_model_without_attention(caplog):
    assert own_attention.attends(own_attention.scratch(lambda: FeatureNet()), 8, None, logits_of) is False
    assert notices(caplog, FeatureNet) == []


def test_a_forward_that_could_not_be_measured_is_said_so_with_its_plain_name(caplog):
    (line,) = notices(caplog, Unmeasurable, vocab_size=8)
    assert "but tests.own_attention_shapes.Unmeasurable's forward ran on neither scratch input" in line
    assert "whether it computes attention scores is not known" in line and "<class" not in line
