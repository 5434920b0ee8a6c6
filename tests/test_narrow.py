"""nn/narrow.py: products with few columns computed transposed under the compiler, torch's own `@` eager."""

import pytest
import torch
from torch.func import vmap

from initnorm.models.decoder import Attention
from initnorm.nn import narrow

SHAPES = [((5, 32, 32), (5, 32, 8)),   # the heads: weights @ v (narrow)
          ((5, 32, 8), (5, 8, 32)),    # the scores: q @ kᵀ (wide, its gradient for q narrow)
          ((5, 32, 16), (5, 16, 16)),  # 16 columns: not narrow
          ((3, 2, 7, 4), (3, 2, 4, 3))]  # 4-D, narrow


@pytest.mark.parametrize("sa,sb", SHAPES)
def test_the_product_and_its_gradients_are_torchs_to_rounding(sa, sb):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(*sa, generator=g, requires_grad=True), torch.randn(*sb, generator=g, requires_grad=True)
    w = torch.randn(*sa[:-1], sb[-1], generator=g)
    ref = a @ b
    (ga, gb) = torch.autograd.grad((ref * w).sum(), (a, b))
    out = narrow._NarrowMatmul.apply(a, b)
    (na, nb) = torch.autograd.grad((out * w).sum(), (a, b))
    for x, y in ((out, ref), (na, ga), (nb, gb)):
        assert x.shape == y.shape
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)


def test_only_narrow_results_take_the_transposed_form():
    # the transposed form's result is the transpose of a contiguous product; torch's own is contiguous
    wide = narrow._product(torch.randn(4, 32, 8), torch.randn(4, 8, 32))
    narrow_ = narrow._product(torch.randn(4, 32, 32), torch.randn(4, 32, 8))
    assert wide.is_contiguous() and not narrow_.is_contiguous() and narrow_.mT.is_contiguous()
    assert narrow._product(torch.randn(4, 32, 32), torch.randn(4, 32, 16)).is_contiguous()  # 16 columns: torch's own


def test_it_batches_under_vmap_as_a_stacked_group_does():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(6, 4, 32, 32, generator=g, requires_grad=True), torch.randn(6, 4, 32, 8, generator=g, requires_grad=True)
    out = vmap(narrow._NarrowMatmul.apply)(a, b)
    torch.testing.assert_close(out, a @ b, rtol=1e-5, atol=1e-5)
    ga, gb = torch.autograd.grad(out.square().sum(), (a, b))
    ra, rb = torch.autograd.grad((a @ b).square().sum(), (a, b))
    torch.testing.assert_close(ga, ra, rtol=1e-4, atol=1e-4)  # gradients of a squared sum: larger, summed again
    torch.testing.assert_close(gb, rb, rtol=1e-4, atol=1e-4)


def test_eager_attention_is_torchs_own_product_bit_for_bit(monkeypatch):
    # a job alone runs eager: its numbers must not move (the default run's loss is compared bit for bit)
    torch.manual_seed(0)
    att, x = Attention(16, 2, 64), torch.randn(3, 32, 16)
    eager = att(x)
    calls = []
    real = narrow._NarrowMatmul.apply
    monkeypatch.setattr(narrow._NarrowMatmul, "apply", lambda a, b: calls.append(1) or real(a, b))
    assert torch.equal(att(x), eager) and calls == []
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)  # what dynamo's trace sees
    traced = att(x)
    assert calls == [1, 1]  # the scores and the heads
    torch.testing.assert_close(traced, eager, rtol=1e-5, atol=1e-6)
