"""Per-layer instruments during training: activation RMS, gradient RMS/norm, update size ‖ΔW‖/‖W‖.

Records are flat (``callbacks/probes.py``) and per member: the callback reads every tensor through
the module's member view (``callbacks/members.py``), ``[E, ...]`` with E = 1 for a job alone and E
members for a stacked group, and writes member ``e``'s records into member ``e``'s events. Nothing
goes through ``self.log`` (about half a millisecond a call here), and the hooks exist only during
the logging steps: every other step costs one integer test per Lightning hook.
"""

from __future__ import annotations

import logging

import lightning as L
import torch
from torch import nn

from initnorm.callbacks.members import members_of
from initnorm.callbacks.probes import Points, Record, flush, grouped, parameter_role, probe_points, rms, write_members

log = logging.getLogger(__name__)


def activation_records(step: int, seen: dict[str, torch.Tensor], E: int) -> list[list[Record]]:
    """``act_rms`` per probe point and member (``seen``: ``{"layer/role": [E]}``)."""
    names = list(seen)
    if not names:
        return [[] for _ in range(E)]
    values = torch.stack([seen[n].reshape(E) for n in names], 1).tolist()  # [E][points]: one transfer
    return [[Record(step, *n.split("/", 1), "act_rms", v) for n, v in zip(names, member)] for member in values]


def member_gradient_records(model: nn.Module, grads: dict[str, torch.Tensor], step: int, per_param: bool = False) -> list[list[Record]]:
    """Per member and layer: the norm and RMS of all its parameters' gradients (``params``); per parameter if asked.
    ``grads``: ``{name: [E, *shape]}``; ``model`` names the layers."""
    E = next(iter(grads.values())).shape[0] if grads else 1
    rows = []  # (layer, role, [E] squared sum, numel)
    for layer, named in grouped(model).items():
        parts = [(n, grads[n].float().pow(2).reshape(E, -1).sum(1), grads[n][0].numel()) for n, _ in named if n in grads]
        if not parts:
            continue
        rows.append((layer, "params", torch.stack([p[1] for p in parts]).sum(0), sum(p[2] for p in parts)))
        if per_param:
            rows += [(layer, parameter_role(n), sq, size) for n, sq, size in parts]
    if not rows:
        return [[] for _ in range(E)]
    sq_all = torch.stack([r[2] for r in rows], 1).tolist()  # [E][rows]
    out = []
    for member in sq_all:
        recs = []
        for (layer, role, _, numel), s in zip(rows, member):
            recs += [Record(step, layer, role, "grad_norm", s**0.5), Record(step, layer, role, "grad_rms", (s / numel) ** 0.5)]
        out.append(recs)
    return out


def gradient_records(model: nn.Module, step: int, per_param: bool = False) -> list[Record]:
    """``member_gradient_records`` of one model, from its parameters' ``.grad``."""
    grads = {n: p.grad.unsqueeze(0) for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}
    return member_gradient_records(model, grads, step, per_param)[0]


def member_update_records(model: nn.Module, before: dict[str, torch.Tensor], after: dict[str, torch.Tensor],
                          step: int) -> list[list[Record]]:
    """‖W_after − W_before‖ / ‖W_before‖ per member and layer, over the layer's weight matrices (``[E, *shape]`` each)."""
    layers, ratios = [], []
    for layer, named in grouped(model, weights_only=True).items():
        names = [n for n, _ in named if n in before]
        if not names:
            continue
        E = before[names[0]].shape[0]
        old = torch.cat([before[n].reshape(E, -1) for n in names], 1).float()
        new = torch.cat([after[n].reshape(E, -1) for n in names], 1).float()
        ratios.append((new - old).pow(2).sum(1).sqrt() / old.pow(2).sum(1).sqrt().clamp_min(1e-30))
        layers.append(layer)
    if not layers:
        return [[] for _ in range(len(next(iter(before.values()), [0])))]
    values = torch.stack(ratios, 1).tolist()
    return [[Record(step, layer, "weights", "update_ratio", v) for layer, v in zip(layers, member)] for member in values]


class LayerStats(L.Callback):
    """Activation RMS at the model's probe points, gradient RMS/norm per layer (after unscaling,
    before clipping: Lightning calls ``on_before_optimizer_step`` there) and ‖ΔW‖/‖W‖ per layer,
    every ``every_n_steps`` optimiser steps (``callbacks.stats.every_n_steps``), for every member.

    every_n_steps: the optimiser steps measured (0, n, 2n, ...); every other step costs one integer test.
    activations: ``act_rms/<layer>/<role>`` at the model's ``probe_points()`` (none: a warning, the rest still runs).
    gradients: ``grad_norm`` and ``grad_rms/<layer>/params`` over each layer's parameters.
    updates: ``update_ratio/<layer>/weights``, ‖ΔW‖/‖W‖ of the step over each layer's matrices.
    per_param: also ``grad_norm`` and ``grad_rms`` of every parameter (``<layer>/<its name in the layer>``)."""

    def __init__(self, every_n_steps: int = 50, activations: bool = True, gradients: bool = True,
                 updates: bool = True, per_param: bool = False):
        from initnorm.errors import bad_value

        if not isinstance(every_n_steps, int) or every_n_steps <= 0:
            raise bad_value("callbacks.stats.every_n_steps", every_n_steps, "a positive integer", "callbacks.stats.every_n_steps=50")
        self.every, self.per_param = every_n_steps, per_param
        self.want_acts, self.want_grads, self.want_updates = activations, gradients, updates
        self._view = None
        self._sinks: list[list] = []
        self._points: Points = {}
        self._step: int | None = None  # the step being measured, None on off-steps
        self._capture = None
        self._seen: dict[str, torch.Tensor] = {}
        self._before: dict[str, torch.Tensor] | None = None

    def on_fit_start(self, trainer, pl_module):
        self._view = view = members_of(pl_module, trainer)
        self._sinks = view.writers()
        self._points = probe_points(view.model) if self.want_acts else {}
        if self.want_acts and not self._points:
            log.warning("%s has no probe_points(): no activation statistics", type(view.model).__name__)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        step = trainer.global_step
        if step % self.every or not any(self._sinks):
            self._step = None
            return
        self._step = step
        if self._points:
            self._capture = self._view.capture(self._points, rms)
            self._seen = self._capture.__enter__()

    def _close_capture(self):
        if self._capture is not None:
            self._capture.__exit__(None, None, None)
            self._capture = None

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if self._step is None:
            return
        self._close_capture()  # the forward pass is over; the backward pass must not re-enter the hooks
        view = self._view
        if self.want_grads:
            write_members(member_gradient_records(view.model, view.grads(), self._step, self.per_param), self._sinks, view.active())
        if self.want_updates:
            self._before = {n: p.clone() for n, p in view.params().items() if p.dim() >= 3}  # [E, *matrix]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._step is None:
            return
        self._close_capture()
        view = self._view
        records = activation_records(self._step, dict(self._seen), view.E) if self._points else [[] for _ in range(view.E)]
        if self._before is not None:
            for member, ups in zip(records, member_update_records(view.model, self._before, view.params(), self._step)):
                member += ups
            self._before = None
        write_members(records, self._sinks, view.active())
        self._seen, self._step = {}, None

    def on_fit_end(self, trainer, pl_module):
        flush(self._sinks)

    def on_exception(self, trainer, pl_module, exception):
        self._close_capture()

