"""What an instrument sees of an ``Engine``'s members (the interface in ``callbacks/members.py``), every tensor ``[E, ...]``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from initnorm.callbacks.probes import Points
from initnorm.training.muon_scale import factor as muon_factor


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
        """Each parameter's rate per member now (float64): its group's peak rate x the member's schedule factor x, for an
        orthogonalised optimiser's matrix, the shape factor torch applies in its step (``adjust_lr_fn``)."""
        engine = self.engine
        f = engine.factors(engine.global_step)
        if engine.vec is not None:
            vec = engine.vec
            return {n: self.stack.block(vec.rates, i)[:, 0] * f.to(vec.rates.device) for i, n in enumerate(self.stack.names)}
        out = {n: torch.zeros(self.E, dtype=torch.float64) for n in self.stack.names}
        for g in engine.optimizer.param_groups:
            for n, p in zip(g["names"], g["params"]):
                shape = muon_factor(g["adjust_lr_fn"], p.shape) if g.get("muon") else 1.0
                out[n][g["member"]] = g["initial_lr"] * float(f[g["member"]]) * shape
        return out

    def adam(self) -> dict[str, tuple] | None:
        """Adam's second moments, step counts, β2 and ε per parameter (``[E, ...]``) where the optimiser keeps them; the
        matrices of an orthogonalised optimiser have none (no ε in their step) and are left out, not read as zeros."""
        engine = self.engine
        if engine.vec is not None:
            vec = engine.vec
            if vec.exp_avg_sq is None:
                return None
            return {n: (self.stack.block(vec.exp_avg_sq, i), vec.steps, vec.beta2, self.stack.block(vec.eps64, i))
                    for i, n in enumerate(self.stack.names)}
        rows: dict[str, list] = {}
        for e, opt in enumerate(engine.member_optimizers):
            for g in opt.param_groups:
                if "betas" not in g or "eps" not in g:
                    continue
                for n, p in zip(g["names"], g["params"]):
                    st = opt.state.get(p, {})
                    if "exp_avg_sq" in st:
                        beta2, eps = float(g["betas"][1]), float(g["eps"])
                        rows.setdefault(n, []).append((e, st["exp_avg_sq"], float(st.get("step", 0)), beta2, eps))
        out = {}
        for n, got in rows.items():
            if len(got) != self.E:  # a member that has not stepped it yet
                continue
            numbers = torch.tensor([r[2:] for r in got], dtype=torch.float64)  # step, β2, ε per member
            out[n] = (torch.stack([r[1] for r in got]), numbers[:, 0], numbers[:, 1], numbers[:, 2])
        return out or None

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
