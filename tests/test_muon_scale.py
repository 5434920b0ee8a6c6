"""Muon's update scales: each name's formula, and torch.optim.Muon stepping by it through torch_group."""

import math

import pytest
import torch

from initnorm.errors import ConfigError
from initnorm.training.muon_scale import MUON_SCALES, factor, torch_group

SHAPES = [(64, 16), (16, 64), (32, 32)]


@pytest.mark.parametrize("shape", SHAPES)
def test_formulas(shape):
    fan_out, fan_in = shape
    assert factor("original", shape) == pytest.approx(math.sqrt(max(1, fan_out / fan_in)))
    assert factor("match_rms_adamw", shape) == pytest.approx(0.2 * math.sqrt(max(fan_out, fan_in)))
    assert factor("spectral", shape) == pytest.approx(math.sqrt(fan_out / fan_in))


def test_values_that_tell_the_formulas_apart():
    assert factor("original", (16, 64)) == 1.0  # never below 1
    assert factor("spectral", (16, 64)) == 0.5  # the spectral condition goes below 1 where the matrix narrows
    assert factor("match_rms_adamw", (16, 64)) == pytest.approx(1.6)  # 0.2 x sqrt(64), not Megatron's sqrt(max)
    assert factor("spectral", (64, 16)) == factor("original", (64, 16)) == 2.0


def test_unknown_name_is_one_line_with_the_names_and_the_override():
    with pytest.raises(ConfigError) as err:
        factor("spectal", (4, 4))
    text = str(err.value)
    assert "\n" not in text and "'spectal'" in text
    assert all(name in text for name in MUON_SCALES.names())
    assert "`optim.muon_scale=spectral`" in text


def orthogonalised(update: torch.Tensor) -> torch.Tensor:
    """torch's own Newton-Schulz, read back from its step: what it adds to a weight decayed by nothing."""
    from torch.optim._muon import DEFAULT_A, DEFAULT_B, DEFAULT_C, EPS, _zeropower_via_newtonschulz
    return _zeropower_via_newtonschulz(update, (DEFAULT_A, DEFAULT_B, DEFAULT_C), 5, EPS)


@pytest.mark.parametrize("name", ["original", "match_rms_adamw", "spectral"])
@pytest.mark.parametrize("shape", SHAPES)
def test_torch_muon_with_our_group_steps_by_the_formula(name, shape):
    torch.manual_seed(0)
    w0, grad = torch.randn(shape), torch.randn(shape)
    lr, wd, momentum = 0.02, 0.1, 0.95
    p = torch.nn.Parameter(w0.clone())
    p.grad = grad.clone()
    torch.optim.Muon([{"params": [p], **torch_group(name, shape, lr, wd)}], momentum=momentum, nesterov=True).step()
    # From zero momentum: buffer = (1 - µ) g, nesterov input = g.lerp(buffer, µ) = (1 - µ²) g; NS normalises it away
    expected = w0 * (1 - lr * wd) - lr * factor(name, shape) * orthogonalised((1 - momentum ** 2) * grad).float()
    assert torch.allclose(p.detach(), expected, rtol=0, atol=1e-6), (p.detach() - expected).abs().max()
    assert not torch.allclose(p.detach(), w0 * (1 - lr * wd), atol=1e-3)  # the update is there to compare
