"""Muon's matrices of a stacked group stepped at once: one ``muon_stack.StackedMuon`` per parameter over its ``[E, m, n]``.

A group of Muon jobs stacks its forward and backward (``training/stack.py``); its AdamW part steps each member's own
``torch.optim.AdamW``, and its hidden matrices step here, one batched Newton-Schulz iteration per parameter for every
member, each with its own rate and decay as its group holds them now (the groups are the members' own, the schedule
sets their ``lr``). Used only where a probe on tiny matrices shows each member stepping as ``torch.optim.Muon`` steps
it alone, bit for bit, and the members share Muon's settings (momentum, Nesterov, steps, scale); otherwise each member
steps its own ``torch.optim.Muon`` (``Engine``). The record says ``group.optimizer: muon_stack``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from initnorm.training.muon_stack import StackedMuon

SETTINGS = ("momentum", "nesterov", "ns_steps", "muon_scale")  # what the members must share to step as one


def _stepper(optim_cfg: Mapping[str, Any], scale: str) -> StackedMuon:
    return StackedMuon(scale=scale, momentum=optim_cfg["momentum"], nesterov=optim_cfg["nesterov"], ns_steps=optim_cfg["ns_steps"])


def probe(optim_cfg: Mapping[str, Any], rates: Sequence[tuple[float, float]], scale: str, steps: int = 2) -> bool:
    """Whether ``StackedMuon`` steps each member (``rates[e]``: its ``(lr, weight_decay)``) as ``torch.optim.Muon`` steps it
    alone, bit for bit, on tiny matrices taller and wider than square."""
    gen = torch.Generator().manual_seed(0)
    for shape in ((5, 3), (3, 5)):
        E = len(rates)
        stacked = torch.randn(E, *shape, generator=gen)
        alone = [torch.nn.Parameter(stacked[e].clone()) for e in range(E)]
        theirs = [torch.optim.Muon([{"params": [p], "lr": lr, "weight_decay": wd, "adjust_lr_fn": scale}], momentum=optim_cfg["momentum"],
                                   nesterov=optim_cfg["nesterov"], ns_steps=optim_cfg["ns_steps"]) for p, (lr, wd) in zip(alone, rates)]
        ours = _stepper(optim_cfg, scale)
        for _ in range(steps):
            grads = torch.randn(E, *shape, generator=gen)
            for p, g, opt in zip(alone, grads, theirs):
                p.grad = g.clone()
                opt.step()
            ours.step(stacked, grads, [lr for lr, _ in rates], [wd for _, wd in rates])
        if not all(torch.equal(p.detach(), s) for p, s in zip(alone, stacked)):
            return False
    return True


class MuonMatrices:
    """The Muon groups of E members (``groups[e]``: member ``e``'s groups marked ``muon``) over ``stack``'s tensors."""

    def __init__(self, stack, groups: Sequence[Sequence[dict]], optim_cfg: Mapping[str, Any]):
        self.stack = stack
        self.groups = [g for member in groups for g in member]
        self.names = [n for g in groups[0] for n in g["names"]]
        self.owner = {(e, n): g for e, member in enumerate(groups) for g in member for n in g["names"]}
        self.steppers = {n: _stepper(optim_cfg, self.owner[(0, n)]["adjust_lr_fn"]) for n in self.names}

    @classmethod
    def fits(cls, configs: Sequence[Mapping[str, Any]], groups: Sequence[Sequence[dict]]) -> bool:
        """Whether the members share Muon's settings and the probe passes with their groups' numbers."""
        optims = [c["optim"] for c in configs]
        if len(optims) < 2 or any(tuple(o.get(k) for k in SETTINGS) != tuple(optims[0].get(k) for k in SETTINGS) for o in optims):
            return False
        scales = {g["adjust_lr_fn"] for member in groups for g in member}
        first = [next(iter(member), None) for member in groups]
        if any(g is None for g in first):
            return False
        return all(probe(optims[0], [(g["lr"], g["weight_decay"]) for g in first], s) for s in scales)

    def step(self, active: torch.Tensor) -> None:
        """Every member's matrices, each at its group's rate and decay now; members not ``active`` stay as they are."""
        params, grads = self.stack.views(self.stack.flat), self.stack.views(self.stack.grad)
        alive = active.tolist()
        for n, stepper in self.steppers.items():
            rates = [self.owner[(e, n)]["lr"] if a else 0.0 for e, a in enumerate(alive)]
            decays = [self.owner[(e, n)]["weight_decay"] if a else 0.0 for e, a in enumerate(alive)]
            kept = None
            if not all(alive) and stepper.momentum_buffer is not None:
                kept = stepper.momentum_buffer.clone()
            stepper.step(params[n], grads[n], rates, decays)
            if kept is not None:
                frozen = ~active.to(kept.device)
                stepper.momentum_buffer[frozen] = kept[frozen]

    def member_state(self, e: int) -> dict[str, dict[str, torch.Tensor]]:
        """Member ``e``'s state as ``torch.optim.Muon`` keeps it, by parameter name."""
        return {n: {k: v.cpu() for k, v in s.member_state(e).items()} for n, s in self.steppers.items() if s.momentum_buffer is not None}

    @torch.no_grad()
    def load_member(self, e: int, named: Mapping[str, Mapping[str, torch.Tensor]]) -> None:
        """Member ``e``'s momentum buffers from ``member_state``'s form (a member not yet stepped: zeros, as torch starts)."""
        views = self.stack.views(self.stack.flat)
        for n, s in self.steppers.items():
            if "momentum_buffer" not in named.get(n, {}):
                continue
            if s.momentum_buffer is None:
                s.momentum_buffer = torch.zeros_like(views[n])
            s.momentum_buffer[e].copy_(named[n]["momentum_buffer"])
