"""What an instrument sees of the models a LightningModule trains: E >= 1 members, member dimension first.

initnorm's engine trains E >= 1 members as one LightningModule (``training/engine.py``: a job alone is a
group of one), and its ``members[e]`` is each member's own module. A callback that measures the
models (``instruments/stats/callback.py``, ``instruments/diagnostics/callback.py``,
``instruments/coord/callback.py``, or a user's own) asks ``members_of(pl_module, trainer)`` for a view of
these members and reads every tensor with a leading member dimension ``[E, ...]``:

- ``E``, ``model`` (the module whose names, layers and fans describe every member), ``folders``,
  ``configs`` (each member's resolved config, where the engine knows it), ``datamodules()`` (each
  member's data module), ``active()`` ([E] bool:
  False for a member that diverged or retired at its last step, and is frozen), ``writers()`` (each member's TensorBoard writers);
- ``params()`` and ``grads()``: ``{name: [E, *shape]}`` of the trainable parameters (views, no copies);
- ``rates()``: ``{name: [E]}`` float64, the learning rate each parameter is stepped with now
  (base lr x the table's multiplier x the schedule's factor);
- ``adam()``: ``{name: (exp_avg_sq [E, *shape], steps [E], beta2 [E], eps [E, *shape] or [E])}``, or None
  for an optimiser without Adam's second moment;
- ``capture(points, reduce)``: a context manager around the next training forward: ``{"layer/role":
  reduce(tensor)}`` per member, ``[E, ...]``, read after the forward;
- ``forward(inputs, points, reduce)``: each member's model in eval mode on its own ``inputs[e]``, the
  probe points' ``reduce`` per member;
- ``member_loss(e, batch, points=None, reduce=None)``: member ``e``'s summed training loss on its part of
  a training batch, with its graph, and ``reduce`` of each of ``points`` (modules of ``model``) as member
  ``e`` computed them: for a measurement that needs gradients of the activations
  (``torch.autograd.grad``; nothing is accumulated into the parameters' ``.grad``).

Probe points are always given as modules of ``model``; the view maps them onto whatever runs. An
initnorm ``Engine`` gives its own view (``Engine.member_view``); any other LightningModule gets a
view of one member built here over its ``.model`` (or itself) and the trainer's optimiser, so the
instruments work in a Lightning project of one's own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from initnorm.callbacks.probes import Points, capture, eval_forward
from initnorm.training import trackers


class OneMember:
    """The view of a LightningModule that trains one model (``pl_module.model``, or the module itself)."""

    E = 1

    def __init__(self, pl_module, trainer):
        self.pl_module, self.trainer = pl_module, trainer
        self.model: nn.Module = getattr(pl_module, "model", pl_module)
        self.folders = [Path(trainer.default_root_dir)]
        self.configs: list[Mapping[str, Any] | None] = [getattr(pl_module, "config", None)]

    def datamodules(self) -> list:
        return [self.trainer.datamodule]

    def active(self) -> list[bool]:
        return [getattr(self.pl_module, "diverged_step", None) is None]

    def writers(self) -> list[list]:
        return [trackers.writers(self.trainer.loggers)]

    def _trainable(self) -> Iterator[tuple[str, nn.Parameter]]:
        return ((n, p) for n, p in self.model.named_parameters() if p.requires_grad)

    def params(self) -> dict[str, torch.Tensor]:
        return {n: p.detach().unsqueeze(0) for n, p in self._trainable()}

    def grads(self) -> dict[str, torch.Tensor]:
        return {n: p.grad.unsqueeze(0) for n, p in self._trainable() if p.grad is not None}

    def _optimizer(self) -> torch.optim.Optimizer | None:
        opts = self.trainer.optimizers
        if not opts:
            return None
        return getattr(opts[0], "optimizer", opts[0])  # Lightning may wrap it

    def _groups(self) -> dict[int, dict]:
        opt = self._optimizer()
        return {} if opt is None else {id(p): g for g in opt.param_groups for p in g["params"]}

    def rates(self) -> dict[str, torch.Tensor]:
        groups = self._groups()
        return {n: torch.tensor([float(groups[id(p)]["lr"])], dtype=torch.float64) for n, p in self._trainable() if id(p) in groups}

    def adam(self) -> dict[str, tuple] | None:
        opt, groups = self._optimizer(), self._groups()
        if opt is None or not any("betas" in g and "eps" in g for g in opt.param_groups):
            return None
        out = {}
        for n, p in self._trainable():
            state, g = opt.state.get(p, {}), groups.get(id(p))
            if g is None or "exp_avg_sq" not in state:
                continue
            step = torch.tensor([float(state.get("step", 0))], dtype=torch.float64)
            out[n] = (state["exp_avg_sq"].unsqueeze(0), step, torch.tensor([float(g["betas"][1])], dtype=torch.float64),
                      torch.tensor([float(g["eps"])], dtype=torch.float64))
        return out

    @contextlib.contextmanager
    def capture(self, points: Points, reduce: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[dict[str, torch.Tensor]]:
        with capture(points, lambda t: reduce(t).unsqueeze(0)) as seen:  # filled by the hooks as the forward runs
            yield seen

    def forward(self, inputs: torch.Tensor, points: Points, reduce: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        return eval_forward(self.model, inputs[0], points, lambda t: reduce(t).unsqueeze(0))

    def member_loss(self, e: int, batch, points: Points | None = None,
                    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        with capture(points or {}, reduce or (lambda t: t)) as seen:
            loss = self.pl_module.loss(batch, reduction="sum")
        return loss, dict(seen)


def members_of(pl_module, trainer) -> Any:
    """The member view of ``pl_module``: an initnorm engine's own, or a ``OneMember`` over its model."""
    own = getattr(pl_module, "member_view", None)
    return own() if callable(own) else OneMember(pl_module, trainer)
