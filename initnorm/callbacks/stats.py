"""Per-layer instruments during training: activation RMS, gradient RMS/norm, update size ‖ΔW‖/‖W‖.

Everything is a flat record ``(step, layer, role, stat, value)`` (ready for a table or a plot), written
straight to the TensorBoard writer with an explicit step under ``stat/layer/role``
(``act_rms/block_03/stream_in``), so TensorBoard groups each statistic over layers. Nothing
goes through ``self.log`` (about half a millisecond a call here), and the hooks exist only
during the logging steps: every other step costs one integer test per Lightning hook.

What to probe is the model's business, stated by the family in one method (the interface the
model families implement; ``Decoder.probe_points`` is the example)::

    def probe_points(self) -> dict[str, tuple[nn.Module, str]]:
        # "layer/role" -> (module, "in" | "out"): the module's first input or its output
        return {"block_01/stream_in": (self.blocks[0], "in"), ...}

Layers are counted from 1 (``block_01`` is ``blocks[0]``), as the deck counts blocks; an MLP
family names its layers ``layer_01`` ... with roles such as ``preact`` and ``act``. Gradients and
updates are grouped by the parameter's name with the same rule (``blocks.2.attn.q.weight`` ->
``block_03``, ``layers.0.weight`` -> ``layer_01``, ``head.weight`` -> ``head``), so a family gets
them without writing anything. A model without ``probe_points`` gets gradients and updates only.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Callable, Iterator, NamedTuple

import lightning as L
import torch
from torch import nn

from initnorm.errors import bad_value

log = logging.getLogger(__name__)

Points = dict[str, tuple[nn.Module, str]]


class Record(NamedTuple):
    step: int
    layer: str
    role: str
    stat: str
    value: float

    @property
    def tag(self) -> str:
        return f"{self.stat}/{self.layer}/{self.role}"


def rms(t: torch.Tensor) -> torch.Tensor:
    return t.detach().float().pow(2).mean().sqrt()


def probe_points(model: nn.Module) -> Points:
    """The family's ``probe_points()``, or none (a model that does not say gets no activation stats)."""
    fn = getattr(model, "probe_points", None)
    return fn() if callable(fn) else {}


@contextlib.contextmanager
def capture(points: Points, reduce: Callable[[torch.Tensor], torch.Tensor] = rms) -> Iterator[dict[str, torch.Tensor]]:
    """Forward hooks on ``points`` for the duration of the block: ``{"layer/role": reduce(tensor)}``
    of the latest forward pass. The hooks are removed on exit, so the model is left untouched."""
    seen: dict[str, torch.Tensor] = {}

    def hook_for(name: str, side: str):
        def hook(module, args, output):
            seen[name] = reduce(args[0] if side == "in" else output)

        return hook

    handles = []
    for name, (module, side) in points.items():
        if side not in ("in", "out"):
            raise bad_value(f"probe point {name}", side, "'in' (the module's first input) or 'out' (its output)")
        handles.append(module.register_forward_hook(hook_for(name, side)))
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()


def parameter_layer(name: str) -> str:
    """``blocks.2.attn.q.weight`` -> ``block_03``; ``head.weight`` -> ``head`` (counted from 1, like probe points)."""
    parts = name.split(".")
    if len(parts) > 2 and parts[1].isdigit():
        return f"{parts[0].removesuffix('s')}_{int(parts[1]) + 1:02d}"
    return parts[0]


def parameter_role(name: str) -> str:
    """The parameter's name inside its layer: ``blocks.2.attn.q.weight`` -> ``attn.q.weight``."""
    parts = name.split(".")
    return ".".join(parts[2:] if len(parts) > 2 and parts[1].isdigit() else parts[1:])


def grouped(model: nn.Module, weights_only: bool = False) -> dict[str, list[tuple[str, nn.Parameter]]]:
    """Trainable parameters by layer, in model order; ``weights_only`` keeps matrices (biases start at 0)."""
    layers: dict[str, list[tuple[str, nn.Parameter]]] = {}
    for name, p in model.named_parameters():
        if p.requires_grad and (not weights_only or p.dim() >= 2):
            layers.setdefault(parameter_layer(name), []).append((name, p))
    return layers


def _sq_norms(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t.detach().float().pow(2).sum() for t in tensors]


def activation_records(step: int, seen: dict[str, torch.Tensor]) -> list[Record]:
    names = list(seen)
    values = torch.stack([seen[n] for n in names]).tolist() if names else []
    return [Record(step, *n.split("/", 1), "act_rms", v) for n, v in zip(names, values)]


def gradient_records(model: nn.Module, step: int, per_param: bool = False) -> list[Record]:
    """Per layer: the norm and the RMS of all its parameters' gradients (``params``); per parameter if asked."""
    out, rows = [], []
    for layer, named in grouped(model).items():
        named = [(n, p) for n, p in named if p.grad is not None]
        if not named:
            continue
        sq = _sq_norms([p.grad for _, p in named])
        rows.append((layer, "params", torch.stack(sq).sum(), sum(p.numel() for _, p in named)))
        if per_param:
            rows += [(layer, parameter_role(n), s, p.numel()) for (n, p), s in zip(named, sq)]
    if not rows:
        return out
    sq_all = torch.stack([r[2] for r in rows]).tolist()
    for (layer, role, _, numel), s in zip(rows, sq_all):
        out += [Record(step, layer, role, "grad_norm", s**0.5), Record(step, layer, role, "grad_rms", (s / numel) ** 0.5)]
    return out


def snapshot(model: nn.Module) -> dict[str, list[torch.Tensor]]:
    """A copy of every layer's weight matrices, to measure the coming update against."""
    return {layer: [p.detach().clone() for _, p in named] for layer, named in grouped(model, weights_only=True).items()}


def update_records(model: nn.Module, before: dict[str, list[torch.Tensor]], step: int) -> list[Record]:
    """‖W_after − W_before‖ / ‖W_before‖ per layer, over the layer's weight matrices."""
    layers, ratios = [], []
    for layer, named in grouped(model, weights_only=True).items():
        old = before.get(layer)
        if old is None:
            continue
        delta = torch.stack(_sq_norms([p - o for (_, p), o in zip(named, old)])).sum()
        ratios.append(delta.sqrt() / torch.stack(_sq_norms(old)).sum().sqrt().clamp_min(1e-30))
        layers.append(layer)
    values = torch.stack(ratios).tolist() if ratios else []
    return [Record(step, layer, "weights", "update_ratio", v) for layer, v in zip(layers, values)]


def writers(trainer: L.Trainer) -> list:
    """Every logger's TensorBoard ``SummaryWriter`` (anything with ``add_scalar``)."""
    return [lg.experiment for lg in trainer.loggers if hasattr(lg.experiment, "add_scalar")]


def write(records: list[Record], sinks: list) -> None:
    for w in sinks:
        for r in records:
            w.add_scalar(r.tag, r.value, r.step)


class LayerStats(L.Callback):
    """Activation RMS at the model's probe points, gradient RMS/norm per layer (after unscaling,
    before clipping: Lightning calls ``on_before_optimizer_step`` there) and ‖ΔW‖/‖W‖ per layer,
    every ``every_n_steps`` optimiser steps (``callbacks.stats.every_n_steps``)."""

    def __init__(self, every_n_steps: int = 50, activations: bool = True, gradients: bool = True, updates: bool = True, per_param: bool = False):
        if not isinstance(every_n_steps, int) or every_n_steps <= 0:
            raise bad_value("callbacks.stats.every_n_steps", every_n_steps, "a positive integer", "callbacks.stats.every_n_steps=50")
        self.every, self.per_param = every_n_steps, per_param
        self.want_acts, self.want_grads, self.want_updates = activations, gradients, updates
        self._sinks: list = []
        self._step: int | None = None  # the step being measured, None on off-steps
        self._capture = None
        self._seen: dict[str, torch.Tensor] = {}
        self._before: dict | None = None

    @staticmethod
    def _model(pl_module) -> nn.Module:
        return getattr(pl_module, "model", pl_module)

    def on_fit_start(self, trainer, pl_module):
        self._sinks = writers(trainer)
        if self.want_acts and not probe_points(self._model(pl_module)):
            log.warning("%s has no probe_points(): no activation statistics", type(self._model(pl_module)).__name__)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        step = trainer.global_step
        if step % self.every or not self._sinks:
            self._step = None
            return
        self._step = step
        if self.want_acts:
            self._capture = capture(probe_points(self._model(pl_module)))
            self._seen = self._capture.__enter__()

    def _close_capture(self):
        if self._capture is not None:
            self._capture.__exit__(None, None, None)
            self._capture = None

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if self._step is None:
            return
        self._close_capture()  # the forward pass is over; the backward pass must not re-enter the hooks
        model = self._model(pl_module)
        if self.want_grads:
            write(gradient_records(model, self._step, self.per_param), self._sinks)
        if self.want_updates:
            self._before = snapshot(model)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._step is None:
            return
        self._close_capture()
        records = activation_records(self._step, self._seen) if self.want_acts else []
        if self._before is not None:
            records += update_records(self._model(pl_module), self._before, self._step)
            self._before = None
        write(records, self._sinks)
        self._seen, self._step = {}, None

    def on_exception(self, trainer, pl_module, exception):
        self._close_capture()
