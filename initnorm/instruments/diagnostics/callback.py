"""Why a learning rate does not transfer: per-layer diagnostics of the optimiser's step.

At the stats interval, per layer, as flat records to TensorBoard (the same ``stat/layer/role``
tags as ``callbacks.stats``):

- ``eff_lr/<layer>/<role>``: the learning rate the optimiser applies to the parameter, i.e. base
  lr x the parameterisation table's multiplier x the schedule's factor (the group's ``lr`` at
  the step; the schedule multiplies each group's own rate);
- ``eps_frac/<layer>/params``: for Adam-family optimisers, the fraction of the layer's
  coordinates where sqrt(v_hat) < eps, i.e. where eps, not the gradient's scale, sets the step;
- ``sigma_w/<layer>/<role>`` and ``sigma_dw/<layer>/<role>``: the top singular value of each
  weight matrix and of the step's update Delta W, divided by sqrt(fan_out / fan_in) (the
  spectral condition of feature learning: both should stay of order one as width grows);
  estimated by power iteration, warm-started from the previous estimate's singular vector.

``callbacks.stats`` keeps ‖ΔW‖/‖W‖ (``update_ratio``). Nothing here touches the global RNG (the
cold start of the power iteration has its own generator), so runs with and without diagnostics
train the same numbers. The functions take a leading member dimension where a vectorised group
needs one (``top_singulars``, ``eps_below``, ``SpectralTracker.member_records``), and the callback
reads every member through the module's member view (``callbacks/members.py``): a job alone and a
stacked group's members get the same records.
"""

from __future__ import annotations

import math

import lightning as L
import torch
from torch import nn

from initnorm.callbacks.members import members_of
from initnorm.callbacks.probes import Record, flush, grouped, parameter_role, write_members
from initnorm.errors import bad_value

POWER_STEPS = 20  # per call, after a warm start; a cold start runs COLD_STEPS
COLD_STEPS = 100


def top_singular(w: torch.Tensor, v: torch.Tensor | None = None, steps: int | None = None) -> tuple[float, torch.Tensor]:
    """The largest singular value of the matrix ``w`` (viewed as rows x columns) and its right
    singular vector, by power iteration on w^T w from ``v`` (a cold start draws a vector from a
    private generator). The estimate ‖w v‖ never exceeds the true value; its relative error
    falls like (sigma_2 / sigma_1)^(4 k) in the steps k."""
    m = w.detach().reshape(w.shape[0], -1)
    sigma, v = top_singulars(m, v, steps)
    return float(sigma), v


def top_singulars(w: torch.Tensor, v: torch.Tensor | None = None, steps: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``top_singular`` of a matrix or a stack of matrices ``w`` [..., rows, columns] at once (one per
    member of a vectorised group, say): sigmas [...] and right singular vectors [..., columns]. A
    cold start (``v`` None) gives every matrix ``top_singular``'s start vector, so each matrix's
    estimate is the one it gets alone."""
    m = w.detach().float()  # float32: far below the 1e-3 the steps reach, and twice as fast
    if v is None or v.shape != (*m.shape[:-2], m.shape[-1]):
        gen = torch.Generator().manual_seed(0)
        v = torch.randn(m.shape[-1], generator=gen).expand(*m.shape[:-2], m.shape[-1])
        steps = COLD_STEPS if steps is None else steps
    steps = POWER_STEPS if steps is None else steps
    v = v.float().to(m.device)
    start = v = v / v.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    mt = m.transpose(-1, -2)
    for _ in range(steps):
        v = (mt @ (m @ v.unsqueeze(-1))).squeeze(-1)
        v = v / v.norm(dim=-1, keepdim=True).clamp_min(1e-30)  # a zero matrix: v is 0 from here on
    sigma = (m @ v.unsqueeze(-1)).squeeze(-1).norm(dim=-1)
    # A zero matrix (a zero-initialised readout) has sigma 0 and keeps its start vector, so that the
    # next call's warm start is a unit vector again once the matrix has grown.
    return sigma, torch.where((sigma > 0).unsqueeze(-1), v, start)


def fans(model: nn.Module) -> dict[str, tuple[int, int]]:
    """(fan_out, fan_in) of every weight matrix, seen as the linear map it applies: a Linear's
    weight is (out, in); an Embedding's (num, dim) maps a one-hot of ``num`` to ``dim``, and so does a
    weight the model stores (in, out) (``TRANSPOSED``: Hugging Face's Conv1D under model=custom)."""
    out = {}
    transposed = getattr(model, "TRANSPOSED", frozenset())
    for prefix, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            if p.dim() < 2:
                continue
            name = f"{prefix}.{pname}" if prefix else pname
            if isinstance(module, nn.Embedding) or name in transposed:
                out[name] = (p.shape[1], p.shape[0])
            else:
                out[name] = (p.shape[0], math.prod(p.shape[1:]))
    return out


def eps_below(exp_avg_sq: torch.Tensor, step, beta2, eps) -> torch.Tensor:
    """Where Adam's sqrt(v_hat) = sqrt(v / (1 - beta2^t)) is below eps (bool, v's shape). ``step``,
    ``beta2`` and ``eps`` are numbers, or float64 tensors that broadcast against v (one per member)."""
    # sqrt(v / (1 - beta2^t)) < eps  <=>  v < eps^2 (1 - beta2^t): one comparison, no copy of v
    threshold = eps * eps * (1.0 - beta2**step)
    if isinstance(threshold, torch.Tensor):  # rounded to v's dtype, as a Python number is
        threshold = threshold.to(exp_avg_sq.dtype)
    return exp_avg_sq.detach() < threshold


def eps_fraction(exp_avg_sq: torch.Tensor, step: float, beta2: float, eps: float) -> float:
    """Fraction of coordinates where Adam's sqrt(v_hat) = sqrt(v / (1 - beta2^t)) is below eps."""
    if step <= 0:
        return 1.0
    return float(eps_below(exp_avg_sq, float(step), beta2, eps).float().mean())


class SpectralTracker:
    """Top singular values of each weight matrix and of its update, warm-started between calls.
    ``member_records`` measures a stack of models at once (a vectorised group's [E, *shape] weights),
    each member warm-started from its own previous vector."""

    def __init__(self, steps: int = POWER_STEPS):
        self.steps = steps
        self._v: dict[tuple[str, str], torch.Tensor] = {}

    def sigmas(self, key: tuple[str, str], w: torch.Tensor) -> torch.Tensor:
        """Top singular values of the matrices ``w`` [E, rows, columns] ([E])."""
        return self.sigmas_of({key: w})[key]

    def sigmas_of(self, matrices: dict[tuple[str, str], torch.Tensor]) -> dict[tuple[str, str], torch.Tensor]:
        """``sigmas`` of every stack of matrices in ``matrices`` ({key: [E, rows, columns]}): the stacks of one shape
        iterate together, one batched product a power step for all of them (a Decoder's q, k, v and o, W and ΔW, of
        every block: 28 small iterations of a measured step become 6), each from its own warm start or the cold one."""
        batches: dict[tuple, list[tuple[str, str]]] = {}
        for key, w in matrices.items():
            batches.setdefault((tuple(w.shape[1:]), key in self._v), []).append(key)
        out = {}
        for (_, warm), keys in batches.items():
            w = torch.cat([matrices[k] for k in keys])
            v = torch.cat([self._v[k] for k in keys]) if warm else None
            s, v = top_singulars(w, v, self.steps if warm else None)
            E = [matrices[k].shape[0] for k in keys]
            for k, sk, vk in zip(keys, s.split(E), v.split(E)):
                out[k], self._v[k] = sk, vk
        return out

    def member_records(self, model: nn.Module, weights: dict[str, torch.Tensor], before: dict[str, torch.Tensor] | None,
                       step: int) -> list[list[Record]]:
        """Records per member: ``weights`` and ``before`` hold every weight matrix of ``model`` (by name)
        with a leading member dimension [E, *shape]; ``model`` gives the names, layers and fans."""
        fan = fans(model)
        rows, stacks = [], {}
        for layer, named in grouped(model, weights_only=True).items():
            for name, p in named:
                if name not in fan:
                    continue
                fo, fi = fan[name]
                scale = math.sqrt(fo / fi)
                transpose = fo != p.shape[0]  # an embedding: the map is the transpose

                def matrices(t: torch.Tensor, transpose: bool = transpose) -> torch.Tensor:
                    t = t.detach().transpose(1, 2) if transpose else t.detach()
                    return t.reshape(t.shape[0], t.shape[1], -1)

                role = parameter_role(name)
                w = weights[name]
                rows.append((layer, role, "sigma_w", (name, "w"), scale))
                stacks[(name, "w")] = matrices(w)
                if before is not None and name in before:
                    rows.append((layer, role, "sigma_dw", (name, "dw"), scale))
                    stacks[(name, "dw")] = matrices(w - before[name])
        if not rows:
            return [[] for _ in range(next(iter(weights.values())).shape[0] if weights else 1)]
        sigma = self.sigmas_of(stacks)
        table = torch.stack([sigma[key] / scale for *_, key, scale in rows], 1).tolist()  # [E][rows]: one transfer
        return [[Record(step, layer, role, stat, v) for (layer, role, stat, *_), v in zip(rows, member)] for member in table]


def member_lr_records(model: nn.Module, rates: dict[str, torch.Tensor], step: int, E: int) -> list[list[Record]]:
    """``eff_lr`` per member: the rate each parameter is stepped with (``rates``: ``{name: [E]}``, float64)."""
    rows, values = [], []
    for layer, named in grouped(model).items():
        for name, _ in named:
            if name in rates:
                rows.append((layer, parameter_role(name)))
                values.append(rates[name].reshape(E))
    table = torch.stack(values, 1).tolist() if values else [[] for _ in range(E)]
    return [[Record(step, layer, role, "eff_lr", v) for (layer, role), v in zip(rows, member)] for member in table]


def member_eps_records(model: nn.Module, adam: dict[str, tuple], step: int, E: int) -> list[list[Record]]:
    """``eps_frac`` per member and layer: the fraction of the layer's coordinates where eps sets Adam's step."""
    layers, fractions = [], []
    for layer, named in grouped(model).items():
        below, total = torch.zeros(E, dtype=torch.float64), 0
        for name, p in named:
            if name not in adam:
                continue
            v, steps, beta2, eps = adam[name]
            v = v.reshape(E, -1)
            eps = eps.reshape(E, -1) if eps.numel() > E else eps.reshape(E, 1)
            below += eps_below(v, steps.reshape(E, 1).to(v.device), beta2.reshape(E, 1).to(v.device),
                               eps.to(v.device)).sum(1).double().cpu()
            total += v.shape[1]
        if total:
            layers.append(layer)
            fractions.append(below / total)
    if not layers:
        return [[] for _ in range(E)]
    return [[Record(step, layer, "params", "eps_frac", v) for layer, v in zip(layers, member)]
            for member in torch.stack(fractions, 1).tolist()]


class EveryNSteps(L.Callback):
    """What the diagnostics and the spectral instruments share: their schedule, checked (``callbacks.<name>.every_n_steps``
    and ``power_steps``, positive integers), the members' writers from the fit's start, the step measured now (None on
    the others: one integer test a step), the weights before the step, and the writers flushed at the fit's end."""

    def __init__(self, name: str, every_n_steps: int, power_steps: int):
        for key, value, default in (("every_n_steps", every_n_steps, 50), ("power_steps", power_steps, POWER_STEPS)):
            if not isinstance(value, int) or value <= 0:
                raise bad_value(f"callbacks.{name}.{key}", value, "a positive integer", f"callbacks.{name}.{key}={default}")
        self.every = every_n_steps
        self._view = None
        self._sinks: list[list] = []
        self._step: int | None = None
        self._before: dict[str, torch.Tensor] | None = None

    def on_fit_start(self, trainer, pl_module):
        self._view = members_of(pl_module, trainer)
        self._sinks = self._view.writers()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        step = trainer.global_step
        self._step = None if step % self.every or not any(self._sinks) else step

    def on_fit_end(self, trainer, pl_module):
        flush(self._sinks)


class Diagnostics(EveryNSteps):
    """Effective lr, Adam's eps fraction, and top singular values of W and ΔW relative to
    sqrt(fan_out/fan_in), per layer and member, every ``every_n_steps`` optimiser steps
    (``callbacks.diagnostics.every_n_steps``); every other step costs one integer test.

    effective_lr: ``eff_lr/<layer>/<role>``, the rate each parameter's group steps it with now (the table's
    multiplier and the schedule's factor included).
    eps: ``eps_frac/<layer>/params``, the fraction of coordinates where sqrt(v_hat) < ε (Adam-like optimisers).
    spectral: ``sigma_w`` and ``sigma_dw/<layer>/<role>``, the top singular value of each matrix and of its step's
    update, over sqrt(fan_out / fan_in); power_steps: the power iteration's steps per measurement, warm-started."""

    def __init__(self, every_n_steps: int = 50, effective_lr: bool = True, eps: bool = True, spectral: bool = True,
                 power_steps: int = POWER_STEPS):
        super().__init__("diagnostics", every_n_steps, power_steps)
        self.want_lr, self.want_eps, self.want_spectral = effective_lr, eps, spectral
        self.spectral = SpectralTracker(power_steps)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if self._step is None:
            return
        view = self._view
        if self.want_lr:
            write_members(member_lr_records(view.model, view.rates(), self._step, view.E), self._sinks, view.active())
        if self.want_spectral:
            self._before = {n: p.clone() for n, p in view.params().items() if p.dim() >= 3}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._step is None:
            return
        view = self._view
        records = [[] for _ in range(view.E)]
        adam = view.adam() if self.want_eps else None
        if adam:
            for member, recs in zip(records, member_eps_records(view.model, adam, self._step, view.E)):
                member += recs
        if self.want_spectral:
            weights = {n: p for n, p in view.params().items() if p.dim() >= 3}
            for member, recs in zip(records, self.spectral.member_records(view.model, weights, self._before, self._step)):
                member += recs
        write_members(records, self._sinks, view.active())
        self._step, self._before = None, None
