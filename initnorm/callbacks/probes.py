"""What every instrument records and where it looks: flat records, probe points, parameters by layer.

Everything an instrument measures is a flat record ``(step, layer, role, stat, value)`` (ready for a
table or a plot), written to TensorBoard with an explicit step under ``stat/layer/role``
(``act_rms/block_03/stream_in``), so TensorBoard groups each statistic over layers.

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
from collections.abc import Callable, Iterator
from typing import NamedTuple

import torch
from torch import nn

from initnorm.errors import bad_value
from initnorm.models.own import logits_of

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
    of the latest forward pass (an output that is not a tensor: its logits, ``models.own.logits_of``, as a model
    of one's own returns them to its own loop). The hooks are removed on exit, so the model is left untouched."""
    seen: dict[str, torch.Tensor] = {}

    def hook_for(name: str, side: str):
        def hook(module, args, output):
            seen[name] = reduce(args[0] if side == "in" else output if isinstance(output, torch.Tensor) else logits_of(output))

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


@torch.no_grad()
def eval_forward(model: nn.Module, inputs: torch.Tensor, points: Points, reduce: Callable[[torch.Tensor], torch.Tensor]
                 ) -> dict[str, torch.Tensor]:
    """``reduce`` of every probe point in one forward of ``inputs`` in eval mode (the model's mode put back after):
    what an instrument measures on fixed inputs, apart from training (a job's member view, ``initnorm.coord_check``)."""
    was_training = model.training
    model.eval()
    try:
        with capture(points, reduce) as seen:
            model(inputs)
    finally:
        model.train(was_training)
    return dict(seen)


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


def write(records: list[Record], sinks: list) -> None:
    for w in sinks:
        for r in records:
            w.add_scalar(r.tag, r.value, r.step)


def write_members(records: list[list[Record]], sinks: list[list], active: list[bool]) -> None:
    """Member ``e``'s records into member ``e``'s writers; nothing for a member that is frozen."""
    for recs, member_sinks, alive in zip(records, sinks, active):
        if alive:
            write(recs, member_sinks)


def flush(sinks: list[list]) -> None:
    """Every member's writers flushed at the end of a fit: a logger that is not TensorBoard gets a step's scalars in one
    call when the next step starts (``training/trackers.Buffered``), so the last measured step's would wait for
    initnorm's own end of a job, which a Lightning project of one's own does not have."""
    for writers in sinks:
        for w in writers:
            w.flush()
