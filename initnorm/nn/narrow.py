"""``a @ b`` whose result has few columns, computed transposed under the compiler.

MKL's batched GEMM (torch 2.13's CPU build) is about three times slower when the result has 8 columns or
fewer than for the same work transposed: on a 2-core AMD EPYC, 384 products [32, 32] x [32, 8] take
295 us, the same products as ([8, 32] x [32, 32])ᵀ 109 us; at 16 columns and more the two forms cost
the same (docs/performance.md). The Decoder's attention at width 16 has d_k = 8, so its heads
(``weights @ v``) and, backward, the gradients of q and v are such products: in a compiled stacked
group of 6 they were 30% of a training step.

In a stacked group the compiler derives the gradients from the forward's operations by autograd and does
not call ``_NarrowMatmul.backward`` (torch 2.13: ``torch.func.vmap`` over an ``autograd.Function`` inside
``torch.compile``; a backward made deliberately wrong changes nothing there, and doubles the gradient of a
compiled job alone). The transposed forward of ``weights @ v`` makes the gradient of v a wide product all the
same; the gradient of q (``dscores @ k``) stays narrow in a group, about 6% of its compiled kernels' time.

Only under ``torch.compile``: the transposed product sums in another order (4e-6 apart on one such
product), and a job alone runs eager, so its numbers stay bit for bit what they were. Compiled
numbers already differ from eager ones by the fused kernels' rounding (tests/test_compile.py).
"""

from __future__ import annotations

import torch

NARROW = 8  # at most this many columns, and fewer than rows: MKL's slow case, measured above


def _narrow(rows: int, cols: int) -> bool:
    return cols <= NARROW < rows


def _product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b``, transposed where its result is narrow."""
    return (b.mT @ a.mT).mT if _narrow(a.shape[-2], b.shape[-1]) else a @ b


class _NarrowMatmul(torch.autograd.Function):
    """``a @ b`` with the forward and both gradients each taking the faster form (the gradient of a
    [32, 8] operand is itself a [32, 8] product, which autograd's own formula would compute narrow). The
    backward serves a compiled job alone; under a stacked group's vmap the compiler uses autograd's (above)."""

    generate_vmap_rule = True  # forward and backward are torch operations only: vmap batches them as written

    @staticmethod
    def forward(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return _product(a, b)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        a, b = ctx.saved_tensors
        return _product(grad, b.mT), _product(a.mT, grad)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b``: torch's own eager; under the compiler, the narrow products in their faster form."""
    if torch.compiler.is_compiling():
        return _NarrowMatmul.apply(a, b)
    return a @ b
