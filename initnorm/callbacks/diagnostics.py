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
needs one (``top_singulars``, ``eps_below``, ``SpectralTracker.member_records``);
``training/member_instruments.py`` runs them per member of a stacked group.
"""

from __future__ import annotations

import math

import lightning as L
import torch
from torch import nn

from initnorm.callbacks.stats import Record, grouped, parameter_role, write, writers
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
    weight is (out, in); an Embedding's (num, dim) maps a one-hot of ``num`` to ``dim``."""
    out = {}
    for prefix, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            if p.dim() < 2:
                continue
            name = f"{prefix}.{pname}" if prefix else pname
            if isinstance(module, nn.Embedding):
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


def eps_fraction(exp_avg_sq: torch.Tensor, step: int | float, beta2: float, eps: float) -> float:
    """Fraction of coordinates where Adam's sqrt(v_hat) = sqrt(v / (1 - beta2^t)) is below eps."""
    if step <= 0:
        return 1.0
    return float(eps_below(exp_avg_sq, float(step), beta2, eps).float().mean())


def _groups_by_param(optimizer: torch.optim.Optimizer) -> dict[int, dict]:
    return {id(p): g for g in optimizer.param_groups for p in g["params"]}


def lr_records(model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> list[Record]:
    """The learning rate each parameter is stepped with (base x table multiplier x schedule)."""
    by_param = _groups_by_param(optimizer)
    out = []
    for layer, named in grouped(model).items():
        for name, p in named:
            g = by_param.get(id(p))
            if g is not None:
                out.append(Record(step, layer, parameter_role(name), "eff_lr", float(g["lr"])))
    return out


def is_adam(optimizer: torch.optim.Optimizer) -> bool:
    return any("betas" in g and "eps" in g for g in optimizer.param_groups)


def eps_records(model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> list[Record]:
    """Per layer, the fraction of its coordinates (all its parameters) where eps dominates Adam's step."""
    by_param = _groups_by_param(optimizer)
    out = []
    for layer, named in grouped(model).items():
        below, total = 0.0, 0
        for _, p in named:
            state, g = optimizer.state.get(p, {}), by_param.get(id(p))
            if g is None or "exp_avg_sq" not in state:
                continue
            t = state.get("step", 0)
            below += eps_fraction(state["exp_avg_sq"], float(t), g["betas"][1], g["eps"]) * p.numel()
            total += p.numel()
        if total:
            out.append(Record(step, layer, "params", "eps_frac", below / total))
    return out


class SpectralTracker:
    """Top singular values of each weight matrix and of its update, warm-started between calls.
    ``member_records`` measures a stack of models at once (a vectorised group's [E, *shape] weights),
    each member warm-started from its own previous vector."""

    def __init__(self, steps: int = POWER_STEPS):
        self.steps = steps
        self._v: dict[tuple[str, str], torch.Tensor] = {}

    def sigmas(self, key: tuple[str, str], w: torch.Tensor) -> torch.Tensor:
        """Top singular values of the matrices ``w`` [E, rows, columns] ([E])."""
        v = self._v.get(key)
        steps = None if v is None else self.steps
        if w.shape[0] == 1:  # one model (a job alone): plain matrix-vector products, cheaper than a batch of one
            s, v = top_singulars(w[0], None if v is None else v[0], steps)
            s, self._v[key] = s.unsqueeze(0), v.unsqueeze(0)
        else:
            s, self._v[key] = top_singulars(w, v, steps)
        return s

    def member_records(self, model: nn.Module, weights: dict[str, torch.Tensor], before: dict[str, torch.Tensor] | None, step: int) -> list[list[Record]]:
        """Records per member: ``weights`` and ``before`` hold every weight matrix of ``model`` (by name)
        with a leading member dimension [E, *shape]; ``model`` gives the names, layers and fans."""
        fan = fans(model)
        rows, values = [], []
        for layer, named in grouped(model, weights_only=True).items():
            for name, p in named:
                if name not in fan:
                    continue
                fo, fi = fan[name]
                scale = math.sqrt(fo / fi)
                transpose = fo != p.shape[0]  # an embedding: the map is the transpose

                def matrices(t: torch.Tensor) -> torch.Tensor:
                    t = t.detach().transpose(1, 2) if transpose else t.detach()
                    return t.reshape(t.shape[0], t.shape[1], -1)

                role = parameter_role(name)
                w = weights[name]
                rows.append((layer, role, "sigma_w"))
                values.append(self.sigmas((name, "w"), matrices(w)) / scale)
                if before is not None and name in before:
                    rows.append((layer, role, "sigma_dw"))
                    values.append(self.sigmas((name, "dw"), matrices(w - before[name])) / scale)
        if not rows:
            return [[] for _ in range(next(iter(weights.values())).shape[0] if weights else 1)]
        table = torch.stack(values, 1).tolist()  # [E][rows]: one transfer from the device
        return [[Record(step, layer, role, stat, v) for (layer, role, stat), v in zip(rows, member)] for member in table]

    def records(self, model: nn.Module, before: dict[str, torch.Tensor] | None, step: int) -> list[Record]:
        weights = {n: p.detach().unsqueeze(0) for n, p in model.named_parameters()}
        stacked = None if before is None else {n: b.unsqueeze(0) for n, b in before.items()}
        return self.member_records(model, weights, stacked, step)[0]


class Diagnostics(L.Callback):
    """Effective lr, Adam's eps fraction, and top singular values of W and ΔW relative to
    sqrt(fan_out/fan_in), per layer, every ``every_n_steps`` optimiser steps
    (``callbacks.diagnostics.every_n_steps``); every other step costs one integer test."""

    def __init__(self, every_n_steps: int = 50, effective_lr: bool = True, eps: bool = True, spectral: bool = True, power_steps: int = POWER_STEPS):
        if not isinstance(every_n_steps, int) or every_n_steps <= 0:
            raise bad_value("callbacks.diagnostics.every_n_steps", every_n_steps, "a positive integer", "callbacks.diagnostics.every_n_steps=50")
        if not isinstance(power_steps, int) or power_steps <= 0:
            raise bad_value("callbacks.diagnostics.power_steps", power_steps, "a positive integer", f"callbacks.diagnostics.power_steps={POWER_STEPS}")
        self.every = every_n_steps
        self.want_lr, self.want_eps, self.want_spectral = effective_lr, eps, spectral
        self.spectral = SpectralTracker(power_steps)
        self._sinks: list = []
        self._step: int | None = None
        self._optimizer = None
        self._before: dict[str, torch.Tensor] | None = None

    @staticmethod
    def _model(pl_module) -> nn.Module:
        return getattr(pl_module, "model", pl_module)

    def on_fit_start(self, trainer, pl_module):
        self._sinks = writers(trainer)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        step = trainer.global_step
        self._step = None if step % self.every or not self._sinks else step

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if self._step is None:
            return
        model = self._model(pl_module)
        self._optimizer = optimizer
        if self.want_lr:
            write(lr_records(model, optimizer, self._step), self._sinks)
        if self.want_spectral:
            self._before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad and p.dim() >= 2}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._step is None:
            return
        model, records = self._model(pl_module), []
        opt = getattr(self._optimizer, "optimizer", self._optimizer)  # Lightning may wrap it
        if self.want_eps and opt is not None and is_adam(opt):
            records += eps_records(model, opt, self._step)
        if self.want_spectral:
            records += self.spectral.records(model, self._before, self._step)
        write(records, self._sinks)
        self._step, self._before, self._optimizer = None, None, None
