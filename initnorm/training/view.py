"""What an instrument sees of an ``Engine``'s members (the interface in ``callbacks/members.py``), every tensor ``[E, ...]``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from initnorm.callbacks.probes import Points


class EngineView:
    """The member view of an ``Engine`` (``training/engine.py``): its members over the one flat tensor."""

    def __init__(self, engine):
        self.engine = engine
        self.stack = engine.stack
        self.E = engine.E
        self.model = engine.stack.template  # names, layers and fans of every member; probe points are given on it
        self.members = engine.members
        self.folders = engine.folders
        self.configs = engine.configs

    def datamodules(self) -> list:
        return self.engine.datas

    def active(self) -> list[bool]:
        return self.engine.active.tolist()

    def writers(self) -> list[list]:
        return self.engine.writers

    def params(self) -> dict[str, torch.Tensor]:
        return {n: p.detach() for n, p in self.stack.views(self.stack.flat).items()}

    def grads(self) -> dict[str, torch.Tensor]:
        return {n: g for (n, g), t in zip(self.stack.views(self.stack.grad).items(), self.stack.trainable) if t}

    def rates(self) -> dict[str, torch.Tensor]:
        """Each parameter's rate per member now: its group's base rate x the member's schedule factor (float64)."""
        engine, vec = self.engine, self.engine.vec
        f = engine.factors(engine.global_step).to(device=vec.rates.device)
        return {n: self.stack.block(vec.rates, i)[:, 0] * f for i, n in enumerate(self.stack.names)}

    def adam(self) -> dict[str, tuple] | None:
        vec = self.engine.vec
        if vec.exp_avg_sq is None:
            return None
        return {n: (self.stack.block(vec.exp_avg_sq, i), vec.steps, vec.beta2, self.stack.block(vec.eps64, i))
                for i, n in enumerate(self.stack.names)}

    @contextlib.contextmanager
    def capture(self, points: Points, reduce: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[dict[str, torch.Tensor]]:
        """``points`` (modules of ``model``) seen in the next training forward, ``reduce`` of each per member."""
        seen: dict[str, torch.Tensor] = {}
        self.engine._capture = (points, reduce, seen)
        try:
            yield seen
        finally:
            self.engine._capture = None

    def forward(self, inputs: torch.Tensor, points: Points, reduce: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        return self.stack.forward(inputs, points, reduce)

    def member_loss(self, e: int, batch, points: Points | None = None,
                    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        return self.stack.member_loss(self.engine.loss, e, batch, points, reduce)
