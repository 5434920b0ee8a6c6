"""The callbacks that watch one model, per member of a vectorised group (``training/ensemble.py``).

A stacked group has no Lightning trainer and one model for all its members, so the callbacks
``callbacks.diagnostics`` and ``callbacks.coord`` cannot run as callbacks there. This module runs
the same measurements on the group's stacked state, with the callbacks' own functions over a
leading member dimension, and hands back each member's records, which ``train_group`` writes into
that member's events (and, for the coordinate check, its ``coord.csv``):

- ``MemberDiagnostics``: ``eff_lr`` (each member's rate per element in ``VecOptimizer`` x its
  schedule factor), ``eps_frac`` (``diagnostics.eps_below`` on the member's Adam state),
  ``sigma_w`` / ``sigma_dw`` (``SpectralTracker.member_records``: one batched, warm-started power
  iteration over the [E, out, in] weights, each member from its own previous vector);
- ``MemberCoord``: the coordinate check, every member's forward on its own fixed windows at once
  (``vmap``), the RMS change from step 0 per probe point and member.

Each is built from the callback's own config node through the callback's class, so the options
are checked as for a job alone, and the numbers are the job alone's to float32 rounding
(``tests/test_member_instruments.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch.func import vmap

from initnorm.callbacks.coord import COORD_FILE, CoordCheck, delta_records, fixed_windows, resumed_error, to_csv, watched_points
from initnorm.callbacks.diagnostics import Diagnostics, eps_below
from initnorm.callbacks.stats import Record, capture, grouped, parameter_role, rms
from initnorm.results import write_atomic

# callbacks.<name> -> the class whose per-member version runs in a stacked group (progress: any bar)
MEMBER_CALLBACKS = {
    "progress": None,
    "stats": "initnorm.callbacks.stats.LayerStats",
    "diagnostics": "initnorm.callbacks.diagnostics.Diagnostics",
    "coord": "initnorm.callbacks.coord.CoordCheck",
}


def unstackable_callbacks(callbacks: Mapping[str, Any] | None) -> list[str]:
    """The callbacks of a config that have no per-member version (their jobs run alone)."""
    out = []
    for name, node in (callbacks or {}).items():
        if name not in MEMBER_CALLBACKS or (MEMBER_CALLBACKS[name] and (node or {}).get("_target_") != MEMBER_CALLBACKS[name]):
            out.append(name)
    return sorted(out)


def _options(node: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in node.items() if k != "_target_"}


class MemberDiagnostics:
    """``callbacks.diagnostics`` for every member of the group ``g`` at once."""

    def __init__(self, g, node: Mapping[str, Any]):
        cb = Diagnostics(**_options(node))  # its checks of every option, as for a job alone
        self.g, self.every, self.tracker = g, cb.every, cb.spectral
        self.want_lr, self.want_eps, self.want_spectral = cb.want_lr, cb.want_eps, cb.want_spectral
        self.index = {n: i for i, n in enumerate(g.names)}

    def due(self, step: int) -> bool:
        return step % self.every == 0

    def before_step(self, step: int, factors: torch.Tensor) -> list[list[Record]]:
        """``eff_lr`` per member: the rate the member's optimiser group holds at this step (base x multiplier x factor)."""
        g = self.g
        if not self.want_lr:
            return [[] for _ in range(g.E)]
        rows, values = [], []
        f = factors.to(device=g.opt.rates.device, dtype=torch.float64)
        for layer, named in grouped(g.base).items():
            for name, _ in named:
                rows.append((layer, parameter_role(name)))
                values.append(g.block(g.opt.rates, self.index[name])[:, 0] * f)  # LambdaLR: base_lr x factor, in double
        table = torch.stack(values, 1).tolist() if values else [[] for _ in range(g.E)]
        return [[Record(step, layer, role, "eff_lr", v) for (layer, role), v in zip(rows, member)] for member in table]

    def after_step(self, step: int, before: torch.Tensor | None) -> list[list[Record]]:
        """``eps_frac`` per layer and ``sigma_w`` / ``sigma_dw`` per weight matrix, per member (``before``: flat before the step)."""
        g, out = self.g, [[] for _ in range(self.g.E)]
        opt = g.opt
        if self.want_eps and opt.exp_avg_sq is not None:
            layers, fractions = [], []
            steps, beta2 = opt.steps.unsqueeze(1), opt.beta2.unsqueeze(1)
            for layer, named in grouped(g.base).items():
                below, total = torch.zeros(g.E, dtype=torch.float64, device=opt.steps.device), 0
                for name, _ in named:
                    i = self.index[name]
                    below += eps_below(g.block(opt.exp_avg_sq, i), steps, beta2, g.block(opt.eps64, i)).sum(1)
                    total += g.sizes[i]
                if total:
                    layers.append(layer)
                    fractions.append(below / total)
            if layers:
                for e, member in enumerate(torch.stack(fractions, 1).tolist()):
                    out[e] += [Record(step, layer, "params", "eps_frac", v) for layer, v in zip(layers, member)]
        if self.want_spectral:
            weights = g.views(g.flat)
            for e, recs in enumerate(self.tracker.member_records(g.base, weights, None if before is None else g.views(before), step)):
                out[e] += recs
        return out


class MemberCoord:
    """``callbacks.coord`` for every member of the group ``g``: each member's fixed windows, its own records and ``coord.csv``."""

    def __init__(self, g, nodes: Sequence[Mapping[str, Any]]):
        self.g = g
        self.checks = [CoordCheck(**_options(n)) for n in nodes]  # per member: its width, depth, param and seed for the table
        self.steps, self.n_windows = self.checks[0].steps, self.checks[0].n_windows  # the same in a group (shape keys)

    @torch.no_grad()
    def _measure(self) -> dict[str, torch.Tensor]:
        g, points = self.g, self.points

        def one(params, bufs, x):
            with capture(points, reduce=lambda t: t.detach().clone()) as seen:
                g._model_of(params, bufs)(x)
            return dict(seen)

        g.base.eval()  # as the callback measures: the model in eval mode
        try:
            return vmap(one)(g.views(), g.stacked_buffers, self.inputs)
        finally:
            g.base.train()

    def start(self, resumed: int, folders: Sequence[Path]) -> None:
        """The reference activations at step 0 (a resumed group has lost them: refused as for a job alone)."""
        if resumed:
            raise resumed_error(resumed, folders[0])
        g = self.g
        self.points, self.last_stream = watched_points(g.base)
        self.inputs = torch.stack([fixed_windows(d, self.n_windows) for d in g.datas]).to(g.device)
        self.reference = self._measure()

    def after_step(self, done: int, active: torch.Tensor) -> list[list[Record]]:
        """After the ``done``-th optimiser step: each member's records (empty past ``steps``, or for a frozen member)."""
        if done > self.steps:
            return [[] for _ in range(self.g.E)]
        now = self._measure()
        names = list(self.points)
        values = torch.stack([vmap(rms)(now[n] - self.reference[n]) for n in names], 1).tolist()  # [E][points]
        out = []
        for e, check in enumerate(self.checks):
            recs = delta_records(done, names, values[e], self.last_stream) if bool(active[e]) else []
            check.records += recs
            out.append(recs)
        return out

    def finish(self, folders: Sequence[Path]) -> None:
        for check, folder in zip(self.checks, folders):
            write_atomic(Path(folder) / COORD_FILE, to_csv(check.records, check.meta))


def member_instruments(g) -> tuple[MemberDiagnostics | None, MemberCoord | None]:
    """The group's diagnostics and coordinate check, where its config asks for them."""
    callbacks = [c["callbacks"] or {} for c in g.cs]  # callbacks=none leaves no node
    diag = MemberDiagnostics(g, callbacks[0]["diagnostics"]) if "diagnostics" in callbacks[0] else None
    coord = MemberCoord(g, [cb["coord"] for cb in callbacks]) if "coord" in callbacks[0] else None
    return diag, coord
