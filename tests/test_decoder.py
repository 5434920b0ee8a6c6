import pytest
import torch

from initnorm.config import to_plain
from initnorm.models.build import build_model
from initnorm.models.decoder import sinusoidal
from tests.conftest import compose_cfg


def built(*overrides, vocab=28):
    c = to_plain(compose_cfg(*overrides))
    return build_model(c["model"], c["init"], c["param"], vocab)


@pytest.mark.parametrize(
    "overrides, count",
    [((), 5376), (("norm_type=rmsnorm",), 5296), (("width=64",), 70656), (("norm=post",), 5376)],
)
def test_parameter_counts_match_the_deck(overrides, count):
    model = built(*overrides).model
    assert sum(p.numel() for p in model.parameters()) == count


def test_positions_have_rms_sqrt_half():
    table = sinusoidal(64, 16)
    assert torch.allclose(table.pow(2).mean(dim=1).sqrt(), torch.full((64,), 0.5**0.5), atol=1e-6)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_forward_shape_and_causality(norm):
    model = built(f"norm={norm}").model
    x = torch.randint(0, 28, (3, 20))
    y = model(x)
    assert y.shape == (3, 20, 28)
    x2 = x.clone()
    x2[:, 15:] = (x2[:, 15:] + 1) % 28  # changing later characters must not change earlier logits
    assert torch.allclose(model(x2)[:, :15], y[:, :15], atol=1e-6)


def test_every_parameter_has_a_role():
    b = built("depth=3")
    assert set(b.roles) == {n for n, _ in b.model.named_parameters()}
