"""Which matrices a Muon optimiser orthogonalises, and how far its Newton-Schulz iteration is from orthogonal.

``muon_matrices`` is the one place that recognises Muon: a ``torch.optim.Muon`` among the trainer's optimisers, a
container's too (an object with ``optimizers``, the Muon + AdamW shape), and a stacked group's matrices stepped at
once (``training/muon_group.MuonMatrices``, one ``muon_stack.StackedMuon`` per parameter over ``[E, m, n]``): each
member's matrix becomes an entry of its own, its parameter the member's module's and its buffer the member's row of
the stacked buffer, so a member writes the record it would write alone. An optimiser that steps Muon some other way
is taught here, by ``MUON_TYPES`` or a branch that lists its matrices. ``callback.residual_records`` finds each
entry's member by the parameter's identity among the members' modules.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from initnorm.training.muon_group import MuonMatrices
from initnorm.training.muon_stack import newton_schulz, next_input

MUON_TYPES: tuple[type, ...] = (torch.optim.Muon,)  # optimisers whose param groups step by Newton-Schulz


@dataclass
class MuonMatrix:
    """One matrix Muon steps: its parameter, momentum buffer (None before its first step) and the group's settings."""

    param: Tensor
    buffer: Tensor | None
    momentum: float
    nesterov: bool
    coefficients: Sequence[float]
    steps: int
    eps: float
    dtype: torch.dtype = torch.bfloat16

    def orthogonalised(self) -> Tensor | None:
        """The ``O`` Muon applies at the step about to be taken, from the parameter's gradient (None without one)."""
        grad = self.param.grad
        if grad is None:
            return None
        return newton_schulz(next_input(grad, self.buffer, self.momentum, self.nesterov), self.coefficients, self.steps,
                             self.eps, self.dtype)


def unwrapped(optimizers: Iterable) -> Iterator:
    """Every optimiser, Lightning's wrapper taken off and a container's members listed."""
    for opt in optimizers:
        opt = getattr(opt, "optimizer", opt)
        engine = getattr(opt, "engine", None)
        members = getattr(engine, "member_optimizers", None)  # training/engine.EngineOptimizer's
        if isinstance(members, (list, tuple)):
            yield from unwrapped(members)
            if getattr(engine, "matrices", None) is not None:  # a stacked group's Muon matrices, outside its members' optimisers
                yield engine.matrices
            continue
        inner = getattr(opt, "optimizers", None)
        # a container is often an Optimizer itself (training/optimizers.Several, torchtitan's): its members are what step
        if isinstance(inner, (list, tuple)) and inner and all(hasattr(o, "param_groups") for o in inner):
            yield from unwrapped(inner)
        else:
            yield opt


def muon_matrices(optimizers: Iterable) -> list[MuonMatrix]:
    """The matrices ``optimizers`` step with Muon, with what its next step needs to orthogonalise them."""
    found = []
    for opt in unwrapped(optimizers):
        if isinstance(opt, MUON_TYPES):
            for group in opt.param_groups:
                for p in group["params"]:
                    found.append(MuonMatrix(p, opt.state.get(p, {}).get("momentum_buffer"), group["momentum"],
                                            group["nesterov"], group["ns_coefficients"], group["ns_steps"], group["eps"]))
        elif isinstance(opt, MuonMatrices):
            found += member_matrices(opt)
    return found


def member_matrices(group: MuonMatrices) -> list[MuonMatrix]:
    """Every member's own entry for each matrix ``group`` steps at once: the member's parameter (its ``.grad`` a view
    of the stack's gradient) and its row of the stacked momentum buffer, with the stepper's settings."""
    found = []
    for e, member in enumerate(group.stack.members):
        params = dict(member.named_parameters())
        for n, s in group.steppers.items():
            buffer = None if s.momentum_buffer is None else s.momentum_buffer[e]
            found.append(MuonMatrix(params[n], buffer, s.momentum, s.nesterov, s.coefficients, s.ns_steps, s.eps, s.ns_dtype))
    return found


def ns_residual(o: Tensor) -> Tensor:
    """``||OᵀO − I||₂`` of ``O`` ``[..., m, n]`` on its smaller side (``OOᵀ`` for a wide matrix): the largest
    ``|σᵢ² − 1|``, 0 for an orthogonal matrix. Keller Jordan's quintic stops short of 1 by design (five steps):
    on Gaussian rectangular inputs its σ lie in about (0.68, 1.14), a residual near 0.53; a square or nearly
    low-rank input leaves small σ further from 1 (0.7-1.0), tests/test_spectral.py."""
    s = torch.linalg.svdvals(o.detach().float())
    return (s.square() - 1).abs().amax(dim=-1)
