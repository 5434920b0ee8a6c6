"""Muon for E stacked members: one Newton-Schulz iteration over ``[E, m, n]`` and one update for all.

Each member steps as ``torch.optim.Muon`` (torch 2.13, ``torch/optim/_muon.py``) steps that matrix alone:

- momentum as an average, ``B <- µ B + (1 - µ) G`` (``buf.lerp_(grad, 1 - µ)``); the iteration's input is
  ``G.lerp(B, µ)`` under Nesterov, else ``B``;
- Newton-Schulz (Keller Jordan's quintic, coefficients (3.4445, -4.7750, 2.0315), 5 steps) in bfloat16, as torch
  runs it: the input cast to bf16, transposed when it has more rows than columns (the Gram matrix is then the
  smaller one), divided by its Frobenius norm clamped at ``eps``, ``A = XXᵀ``, ``X <- aX + (bA + cA²)X``;
- decoupled decay by the member's unadjusted rate, ``W <- W (1 - lr wd)``, then ``W <- W - lr factor O`` with
  ``factor`` the ``optim.muon_scale`` of the member's shape (``training/muon_scale.py``).

Each member equals ``torch.optim.Muon`` stepping it alone (tests/test_muon_stack.py, on this CPU: bit for bit in
bfloat16, every step, for matrices taller and wider than square; ``ns_dtype=torch.float32`` is offered too and
differs from torch's bf16 iteration by the bf16 rounding itself). Members share a shape, momentum and the
iteration's settings; rate and decay are per member.

The state is one momentum buffer ``[E, m, n]`` (``state_dict``); ``member_state(i)`` is member i's in
``torch.optim.Muon``'s per-parameter format (``{"momentum_buffer": [m, n]}``) and ``from_members`` stacks them
back, so a stacked checkpoint and E checkpoints of jobs alone hold the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from initnorm.training.muon_scale import factor

COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # Keller Jordan's quintic, torch.optim.Muon's default
NS_STEPS = 5
EPS = 1e-7


def newton_schulz(g: Tensor, coefficients: Sequence[float] = COEFFICIENTS, steps: int = NS_STEPS,
                  eps: float = EPS, dtype: torch.dtype = torch.bfloat16) -> Tensor:
    """The orthogonalised ``g`` (``[m, n]`` or ``[E, m, n]``, each matrix on its own), in ``dtype``: torch's
    ``_zeropower_via_newtonschulz`` batched over the leading dimension."""
    a, b, c = coefficients
    x = g.to(dtype)
    tall = g.size(-2) > g.size(-1)
    if tall:
        x = x.mT
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)  # spectral norm <= Frobenius norm <= 1
    for _ in range(steps):
        gram = x @ x.mT
        x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a) if x.dim() == 3 else \
            torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.mT if tall else x


def as_column(values, like: Tensor) -> Tensor:
    """Per-member numbers ``[E]`` (a list, a tensor, or one number for all) as ``[E, 1, 1]`` in ``like``'s dtype."""
    column = torch.as_tensor(values, dtype=torch.float64).to(like.device).expand(like.size(0))
    return column.to(like.dtype).view(-1, 1, 1)


class StackedMuon:
    """Muon's step for E members of one shape ``[m, n]``: ``step(params, grads, lr, weight_decay)`` with
    ``params``, ``grads`` either ``[E, m, n]`` tensors or E ``[m, n]`` tensors (a stack's views), updated in place."""

    def __init__(self, scale="original", momentum: float = 0.95, nesterov: bool = True,
                 coefficients: Sequence[float] = COEFFICIENTS, ns_steps: int = NS_STEPS, eps: float = EPS,
                 ns_dtype: torch.dtype = torch.bfloat16):
        self.scale, self.momentum, self.nesterov = scale, momentum, nesterov
        self.coefficients, self.ns_steps, self.eps, self.ns_dtype = tuple(coefficients), ns_steps, eps, ns_dtype
        self.momentum_buffer: Tensor | None = None  # [E, m, n], made at the first step as torch makes its own

    @torch.no_grad()
    def orthogonalised(self, grads: Tensor) -> Tensor:
        """``O`` for every member from this step's gradients ``[E, m, n]``, advancing the momentum buffer."""
        if self.momentum_buffer is None:
            self.momentum_buffer = torch.zeros_like(grads)
        buf = self.momentum_buffer
        buf.lerp_(grads, 1 - self.momentum)
        update = grads.lerp(buf, self.momentum) if self.nesterov else buf
        return newton_schulz(update, self.coefficients, self.ns_steps, self.eps, self.ns_dtype)

    @torch.no_grad()
    def step(self, params, grads, lr, weight_decay=0.0) -> None:
        """One update of every member: ``lr`` and ``weight_decay`` per member ``[E]`` (or one number for all)."""
        stacked = params if isinstance(params, Tensor) else torch.stack(list(params))
        g = grads if isinstance(grads, Tensor) else torch.stack(list(grads))
        o = self.orthogonalised(g)
        lr_e = torch.as_tensor(lr, dtype=torch.float64).expand(stacked.size(0))
        decay = 1 - lr_e * torch.as_tensor(weight_decay, dtype=torch.float64)  # torch: 1 - lr x wd, in double
        step = lr_e * factor(self.scale, stacked.shape[-2:])
        stacked.mul_(as_column(decay, stacked))
        # W - step x O as torch's add_(O, alpha=-step) rounds it: O widened to W's dtype, one multiply-add
        stacked.addcmul_(o.to(stacked.dtype), as_column(-step, stacked))
        if not isinstance(params, Tensor):
            torch._foreach_copy_(list(params), list(stacked.unbind(0)))

    def state_dict(self) -> dict:
        return {"momentum_buffer": self.momentum_buffer}

    def load_state_dict(self, state: dict) -> None:
        buf = state["momentum_buffer"]
        self.momentum_buffer = None if buf is None else buf.clone()

    def member_state(self, i: int) -> dict:
        """Member i's state as ``torch.optim.Muon`` keeps it for that parameter (empty before the first step)."""
        return {} if self.momentum_buffer is None else {"momentum_buffer": self.momentum_buffer[i].clone()}

    def load_members(self, states: Sequence[dict]) -> None:
        """Every member's state from ``torch.optim.Muon``'s per-parameter format (all stepped, or none)."""
        has = [bool(s) for s in states]
        if any(has) and not all(has):
            raise ValueError("either every member has a momentum buffer or none has: they step together")
        self.momentum_buffer = torch.stack([s["momentum_buffer"] for s in states]).clone() if all(has) and has else None
