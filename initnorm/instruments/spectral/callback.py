"""The spectral condition during training (Yang, Simon and Bernstein, arXiv 2310.17813): per weight matrix and member,
``||W||₂`` and the step's ``||ΔW||₂`` over sqrt(fan_out / fan_in), both of order one at every width when features
learn as µP has them; and for a matrix Muon steps, how far its Newton-Schulz iteration is from orthogonal.

Tags (docs/tensorboard.md), ``Spectral/<what>/<layer>/<parameter in the layer>``:

- ``Spectral/weight/...``: ``||W||₂ / sqrt(fan_out / fan_in)`` after the step;
- ``Spectral/update/...``: ``||ΔW||₂ / sqrt(fan_out / fan_in)``, ΔW the step's change of W (decay included);
- ``Spectral/ns_residual/...``: ``||OᵀO − I||₂`` (``muon.ns_residual``) of the ``O`` Muon applies at the step,
  computed as ``training/muon_stack.py`` computes it from the gradient and momentum before the step.

The spectral norms are the diagnostics' warm-started power iteration (``diagnostics.SpectralTracker``: 20 steps a
call after a 100-step cold start) with its own vectors; nothing here draws from the global random stream, so a run
trains the same numbers with or without it. Every tensor is read through the member view (``callbacks/members.py``):
a job alone and a stacked group's members get the same records, each in its own events.
"""

from __future__ import annotations

from initnorm.callbacks.probes import Record, parameter_layer, parameter_role, write_members
from initnorm.instruments.diagnostics.callback import POWER_STEPS, EveryNSteps, SpectralTracker
from initnorm.instruments.spectral.muon import muon_matrices, ns_residual

STATS = {"sigma_w": "Spectral/weight", "sigma_dw": "Spectral/update"}  # the tracker's names -> this instrument's tags


def residual_records(optimizers, members, step: int) -> list[list[Record]]:
    """``Spectral/ns_residual`` per member for every matrix a Muon optimiser among ``optimizers`` steps, found by
    identity among ``members``' parameters (member e: ``members[e]``, a module), before the step is taken."""
    records: list[list[Record]] = [[] for _ in members]
    matrices = muon_matrices(optimizers)
    if not matrices:  # no Muon (AdamW, the default): nothing to find, so the members' parameters are not walked
        return records
    where = {id(p): (e, name) for e, m in enumerate(members) for name, p in m.named_parameters()}
    for matrix in matrices:
        if id(matrix.param) not in where or (o := matrix.orthogonalised()) is None:
            continue
        e, name = where[id(matrix.param)]
        records[e].append(Record(step, parameter_layer(name), parameter_role(name), "Spectral/ns_residual",
                                 float(ns_residual(o))))
    return records


class Spectral(EveryNSteps):
    """``Spectral/weight``, ``Spectral/update`` and, for Muon's matrices, ``Spectral/ns_residual``, per weight matrix
    and member, every ``every_n_steps`` optimiser steps (``callbacks.spectral.every_n_steps``, the statistics' 50);
    every other step costs one integer test.

    weight, update: ``||W||₂`` and ``||ΔW||₂`` over sqrt(fan_out / fan_in) of every matrix; ns_residual: ``||OᵀO − I||₂``
    of Muon's orthogonalised update (nothing for an optimiser that is not Muon); power_steps: the power iteration's
    steps per measurement, warm-started from the previous measurement's vector."""

    def __init__(self, every_n_steps: int = 50, weight: bool = True, update: bool = True, ns_residual: bool = True,
                 power_steps: int = POWER_STEPS):
        super().__init__("spectral", every_n_steps, power_steps)
        self.want_weight, self.want_update, self.want_residual = weight, update, ns_residual
        self.tracker = SpectralTracker(power_steps)
        self._records: list[list[Record]] = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if self._step is None:
            return
        view = self._view
        if self.want_update:
            self._before = {n: p.clone() for n, p in view.params().items() if p.dim() >= 3}  # [E, *matrix]
        if self.want_residual:
            self._records = residual_records(trainer.optimizers, getattr(view, "members", None) or [view.model], self._step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._step is None:
            return
        view = self._view
        records = self._records or [[] for _ in range(view.E)]
        if self.want_weight or self.want_update:
            weights = {n: p for n, p in view.params().items() if p.dim() >= 3}
            for member, recs in zip(records, self.tracker.member_records(view.model, weights, self._before, self._step)):
                member += [r._replace(stat=STATS[r.stat]) for r in recs if self.want_weight or r.stat != "sigma_w"]
        write_members(records, self._sinks, view.active())
        self._step, self._before, self._records = None, None, []
