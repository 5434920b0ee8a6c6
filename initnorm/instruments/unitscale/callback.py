"""The unit-scale check as a callback (Blake et al. 2024, u-µP §3: unit scaling keeps every op's output at
unit variance at initialisation; the paper's Figure 4 follows the RMS through training).

Before the first step and after the first ``steps`` optimiser steps the callback runs fixed windows
(the first ``windows`` of the validation set, as the coordinate check does) through each member's
model and records the RMS of every probe point's output (``probe_points``); on the same two steps,
on the training batch, the RMS of the gradient of the loss summed over the batch's tokens with
respect to each probe point (one more forward and backward per member, its own parameters, outside
the stacked vmap: ``member_loss``; the parameters' ``.grad`` is not touched) and the RMS of every
weight's gradient (before clipping: Lightning's ``on_before_optimizer_step``). Records go to
TensorBoard as ``unit_act_rms/<layer>/<role>``, ``unit_out_grad_rms/<layer>/<role>`` and
``unit_grad_rms/<layer>/<parameter>``; at the end of the fit each member's folder gets
``unit_scale.txt``: the verdict ("unit-scaled within a factor of 2", or the outputs that are not)
and every value.

The verdict reads the outputs only, and leaves out the logits: the readout is scaled x fan_in^-1 on
purpose (µP's and u-µP's readout), so the logits start near width^-1/2. The gradients are reported,
not judged: unit-scaling makes them unit by backward-only scales (the cross-entropy's, the readout's
input gradient x fan_out^-1/2, a weight's x batch^-1/2) that initnorm does not apply
(docs/parameterisations.md): Adam divides each parameter's gradient scale out, so they would change
the step only through ε.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch

from initnorm.callbacks.members import members_of
from initnorm.callbacks.probes import Record, parameter_layer, parameter_role, probe_points, write_members
from initnorm.errors import ConfigError, bad_value
from initnorm.instruments.coord.analysis import UNIT_FILE
from initnorm.instruments.coord.record import fixed_windows, member_rms, resumed_error
from initnorm.results import write_atomic

ACT, OUT_GRAD, GRAD = "unit_act_rms", "unit_out_grad_rms", "unit_grad_rms"
NOT_JUDGED = ("logits",)  # layers the verdict leaves out (the readout's fan_in^-1)


def verdict(records: list[Record], factor: float = 2.0) -> tuple[bool, str]:
    """Whether every judged output lies within ``factor`` of RMS 1, and one line that says so or names those off."""
    judged = [r for r in records if r.stat == ACT and r.layer not in NOT_JUDGED]
    off = [f"{r.layer}/{r.role} at step {r.step}: {r.value:.3g}" for r in judged if not 1 / factor <= r.value <= factor]
    steps = sorted({r.step for r in judged})
    if not off:
        return True, f"unit-scaled within a factor of {factor:g} ({len(judged)} outputs at steps {', '.join(map(str, steps))})"
    return False, f"not unit-scaled within a factor of {factor:g}: {'; '.join(off)}"


def report(records: list[Record], factor: float) -> str:
    _, line = verdict(records, factor)
    rows = [f"{r.stat}\t{r.step}\t{r.layer}/{r.role}\t{r.value:.4g}" for r in records]
    return "\n".join([line, "", "stat\tstep\tpoint\trms", *rows]) + "\n"


class UnitScale(L.Callback):
    """RMS of every probe point's output and every weight's gradient, at step 0 and after ``steps`` steps."""

    def __init__(self, steps: int = 10, windows: int = 16, factor: float = 2.0):
        if not isinstance(steps, int) or steps <= 0:
            raise bad_value("callbacks.unit.steps", steps, "a positive integer", "callbacks.unit.steps=10")
        if not isinstance(windows, int) or windows <= 0:
            raise bad_value("callbacks.unit.windows", windows, "a positive integer", "callbacks.unit.windows=16")
        if not isinstance(factor, (int, float)) or factor <= 1:
            raise bad_value("callbacks.unit.factor", factor, "a number above 1", "callbacks.unit.factor=2")
        self.steps, self.n_windows, self.factor = steps, windows, float(factor)
        self.records: list[list[Record]] = []

    def on_train_start(self, trainer, pl_module):
        if trainer.global_step != 0:
            raise resumed_error(trainer.global_step, trainer.default_root_dir)
        self._view = view = members_of(pl_module, trainer)
        self.points = probe_points(view.model)
        if not self.points:
            raise ConfigError(f"{type(view.model).__name__} has no probe_points(), so the unit-scale check has no outputs to "
                              "measure; add the method (see initnorm/callbacks/probes.py) or drop the callback (~callbacks.unit)")
        self.inputs = torch.stack([fixed_windows(d, self.n_windows) for d in view.datamodules()]).to(pl_module.device)
        self.records = [[] for _ in range(view.E)]
        self._sinks = view.writers()
        self._outputs(0)

    def _add(self, per_member: list[list[Record]]) -> None:
        for mine, recs in zip(self.records, per_member):
            mine += recs
        write_members(per_member, self._sinks, self._view.active())

    def _outputs(self, step: int) -> None:
        seen = self._view.forward(self.inputs, self.points, lambda t: t.detach().float().pow(2).mean().sqrt())
        names = list(self.points)
        values = torch.stack([seen[n].reshape(-1) for n in names], 1).tolist()  # [E][points]
        self._add([[Record(step, *n.split("/", 1), ACT, v) for n, v in zip(names, member)] for member in values])

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        step = trainer.global_step
        if step not in (0, self.steps):
            return
        view, active, per_member = self._view, self._view.active(), []
        for e in range(view.E):
            with torch.random.fork_rng(devices=[]), torch.enable_grad():
                loss, seen = view.member_loss(e, batch, self.points, lambda t: t) if active[e] else (None, {})
            names = [n for n in self.points if n in seen and seen[n].requires_grad]
            grads = torch.autograd.grad(loss, [seen[n] for n in names], allow_unused=True) if loss is not None else []
            per_member.append([Record(step, *n.split("/", 1), OUT_GRAD, g.detach().float().pow(2).mean().sqrt().item())
                               for n, g in zip(names, grads) if g is not None])
        self._add(per_member)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        step = trainer.global_step  # steps taken before this one: 0 is the gradient at initialisation
        if step not in (0, self.steps):
            return
        grads = {n: g for n, g in self._view.grads().items() if g.dim() >= 3}  # [E, ...] of the matrices
        names = list(grads)
        values = torch.stack([member_rms(grads[n]) for n in names], 1).tolist()
        self._add([[Record(step, parameter_layer(n), parameter_role(n), GRAD, v) for n, v in zip(names, member)] for member in values])

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.steps and not any(r.step == self.steps and r.stat == ACT for r in self.records[0]):
            self._outputs(self.steps)

    def on_fit_end(self, trainer, pl_module):
        for folder, records in zip(self._view.folders, self.records):
            write_atomic(Path(folder) / UNIT_FILE, report(records, self.factor))
