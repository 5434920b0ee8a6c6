"""One optimiser step for E stacked jobs at once: AdamW, Adam and SGD on a flat [E, N] parameter.

A vectorised group (``training/ensemble.py``) keeps every member's parameters as one row of a
flat ``[E, N]`` tensor, so a step is a dozen element-wise operations on the whole group instead
of a dozen per parameter tensor per job. Every number that may differ between jobs is a column
or a row here, not a Python scalar:

- the learning rate per (member, element): the member's base lr x its table's multiplier for the
  element's role (``rates``), times the member's warmup/cosine factor of this step (``factors``);
- weight decay per (member, element): the member's decay on matrices, 0 on vectors (the rule of
  ``optim.param_groups``: ``p.dim() >= 2``); Adam has none;
- betas, eps (Adam), momentum (SGD) per member.

The arithmetic follows ``torch.optim``'s single-tensor CPU path operation for operation, with
the scalars it computes in Python double precision computed here in float64 and rounded to float32
where torch rounds them, so a member's update is the one ``torch.optim`` takes for that job alone
(``tests/test_ensemble.py`` checks it against ``torch.optim`` on separate tensors). A member that
is not ``active`` (it diverged) keeps its parameters and its state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

KINDS = ("adamw", "adam", "sgd")


SUPPORTED = {  # torch.optim class -> (kind, options that must stay at their defaults)
    "AdamW": ("adamw", {"amsgrad": False, "maximize": False}),
    "Adam": ("adam", {"amsgrad": False, "maximize": False, "decoupled_weight_decay": False}),
    "SGD": ("sgd", {"nesterov": False, "maximize": False, "dampening": 0}),
}


class NotStackable(ValueError):
    """These optimisers (or models) cannot be stepped as one stacked tensor. ``parts``, where known:
    the members (indices) that could still share a model, because they agree on what differs."""

    def __init__(self, message: str, parts: list[list[int]] | None = None):
        super().__init__(message)
        self.parts = parts


@dataclass
class MemberHyper:
    """One member's optimiser numbers, for tests and callers without a torch optimiser."""

    lr: float
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    momentum: float = 0.0


def _col(values: Sequence[float], dtype=torch.float64) -> torch.Tensor:
    return torch.tensor(list(values), dtype=dtype).unsqueeze(1)


class VecOptimizer:
    """``kind`` in adamw | adam | sgd over ``flat`` (float32, any layout), every number per element.

    ``member_of`` (long, ``flat``'s shape) says which member each element belongs to (default for
    a ``[E, N]`` flat: its row). Per element: ``rates`` (float64), the group learning rate (base lr
    x role multiplier); ``wd`` (float64), the group's weight decay (decoupled for adamw, added to
    the gradient for adam and sgd, as torch does); ``eps``. Per member: ``betas`` ([E, 2]) and
    ``momentum`` ([E]). ``from_torch`` reads them all from the members' own optimisers.
    """

    def __init__(self, kind: str, flat: torch.Tensor, rates: torch.Tensor, wd: torch.Tensor, eps: torch.Tensor, betas: torch.Tensor, momentum: torch.Tensor,
                 member_of: torch.Tensor | None = None):
        if kind not in KINDS:
            raise NotStackable(f"optim.name={kind!r} has no vectorised step; allowed: {', '.join(KINDS)}")
        dev = flat.device
        if member_of is None:
            E, N = flat.shape
            member_of = torch.arange(E).unsqueeze(1).expand(E, N)
        self.E = int(betas.shape[0])
        self.kind, self.flat = kind, flat
        self.member_of = member_of.to(dev)
        self._idx = [(self.member_of == e).flatten().nonzero().flatten() for e in range(self.E)]
        self.rates = rates.to(device=dev, dtype=torch.float64)
        self.wd = wd.to(device=dev, dtype=torch.float64)
        self.eps = eps.to(device=dev, dtype=torch.float32)
        self.eps64 = eps.to(device=dev, dtype=torch.float64)  # as the member's group holds it (its eps fraction)
        self.beta1 = betas[:, 0].to(device=dev, dtype=torch.float64)  # [E]
        self.beta2 = betas[:, 1].to(device=dev, dtype=torch.float64)
        self._wd_f32 = self.wd.float()
        self._coupled = kind != "adamw" and bool(self.wd.any())
        self.steps = torch.zeros(self.E, dtype=torch.float64, device=dev)  # optimiser steps taken per member
        self.exp_avg = torch.zeros_like(flat)  # Adam's m, or SGD's momentum buffer
        self.exp_avg_sq = torch.zeros_like(flat) if kind != "sgd" else None
        m = self.member_of
        self._one_m_b1 = (1.0 - self.beta1).float()[m]
        self._one_m_b2 = (1.0 - self.beta2).float()[m]
        self._b2 = self.beta2.float()[m]
        self._momentum = momentum.to(device=dev, dtype=torch.float32)[m]

    @classmethod
    def from_hypers(cls, kind: str, flat: torch.Tensor, hypers: Sequence[MemberHyper], lr_mult: torch.Tensor, decayed: torch.Tensor) -> "VecOptimizer":
        """Members described by numbers, ``flat`` [E, N]: lr x ``lr_mult`` per element, decay on ``decayed`` elements (adam: none)."""
        rates = _col([h.lr for h in hypers]) * lr_mult.to(torch.float64)
        wd = torch.where(decayed.unsqueeze(0), _col([0.0 if kind == "adam" else h.weight_decay for h in hypers]), torch.zeros((), dtype=torch.float64))
        eps = _col([h.eps for h in hypers]).expand_as(rates)
        betas = torch.tensor([list(h.betas) for h in hypers], dtype=torch.float64)
        return cls(kind, flat, rates, wd, eps, betas, torch.tensor([h.momentum for h in hypers]))

    @classmethod
    def from_torch(cls, flat: torch.Tensor, optimizers: Sequence[torch.optim.Optimizer], where: Sequence[Mapping[int, tuple[int, int]]]) -> "VecOptimizer":
        """The numbers of each member's own torch optimiser: its parameter groups' lr, weight decay,
        eps, betas, momentum, element by element (``where[e]``: id(parameter) -> (start, size) of
        its elements in ``flat.view(-1)``). Whatever the groups hold (per-role lr, weight-decay and ε
        multipliers of any parameterisation) is what the stacked step uses."""
        names = {type(o).__name__ for o in optimizers}
        if len(names) != 1 or next(iter(names)) not in SUPPORTED:
            raise NotStackable(f"optimisers {sorted(names)}: a stacked step exists for one kind at a time of {', '.join(SUPPORTED)}")
        kind, fixed = SUPPORTED[next(iter(names))]
        E, total = len(optimizers), flat.numel()
        rates = torch.zeros(total, dtype=torch.float64)
        wd = torch.zeros(total, dtype=torch.float64)
        eps = torch.ones(total, dtype=torch.float64)
        member_of = torch.full((total,), -1, dtype=torch.long)
        betas = torch.zeros(E, 2, dtype=torch.float64)
        momentum = torch.zeros(E)
        for e, (opt, pos) in enumerate(zip(optimizers, where)):
            for g in opt.param_groups:
                for k, v in fixed.items():
                    if g.get(k, v) != v:
                        raise NotStackable(f"{type(opt).__name__}({k}={g[k]}) has no stacked step")
                for p in g["params"]:
                    o, n = pos[id(p)]
                    rates[o : o + n] = g.get("initial_lr", g["lr"])
                    wd[o : o + n] = g["weight_decay"]
                    if kind != "sgd":
                        eps[o : o + n] = g["eps"]
                    member_of[o : o + n] = e
                if kind != "sgd":
                    betas[e] = torch.tensor([float(b) for b in g["betas"]], dtype=torch.float64)
                else:
                    momentum[e] = g["momentum"]
            # betas/momentum per member: one value for all of a member's groups
            if kind != "sgd" and len({tuple(g["betas"]) for g in opt.param_groups}) > 1:
                raise NotStackable("betas differ between a member's parameter groups")
            if kind == "sgd" and len({g["momentum"] for g in opt.param_groups}) > 1:
                raise NotStackable("momentum differs between a member's parameter groups")
        if bool((member_of < 0).any()):
            raise NotStackable("the members' optimisers do not hold every stacked parameter")
        shape = flat.shape
        return cls(kind, flat, rates.view(shape), wd.view(shape), eps.view(shape), betas, momentum, member_of.view(shape))

    @torch.no_grad()
    def step(self, grad: torch.Tensor, factors: torch.Tensor, active: torch.Tensor | None = None) -> None:
        """One step with ``grad`` (``flat``'s layout) at schedule ``factors`` ([E], float64); members not ``active`` stay as they are."""
        p, m = self.flat, self.member_of
        lr = self.rates * factors.to(self.rates)[m]  # float64: (lr x mult) x factor, as LambdaLR sets it
        if active is not None and not bool(active.all()):
            keep = (~active.to(p.device))[m]
            old = (p.clone(), self.exp_avg.clone(), None if self.exp_avg_sq is None else self.exp_avg_sq.clone(), self.steps.clone())
        else:
            keep = None
        if self.kind == "sgd":
            self._sgd(p, grad, lr)
        else:
            self._adam(p, grad, lr)
        if keep is not None:
            p.copy_(torch.where(keep, old[0], p))
            self.exp_avg.copy_(torch.where(keep, old[1], self.exp_avg))
            if self.exp_avg_sq is not None:
                self.exp_avg_sq.copy_(torch.where(keep, old[2], self.exp_avg_sq))
            self.steps.copy_(torch.where(~active.to(p.device), old[3], self.steps))

    def _adam(self, p, grad, lr):
        self.steps += 1
        m = self.member_of
        if self.kind == "adamw":
            p.mul_((1.0 - lr * self.wd).float())  # decoupled decay; exactly 1 where there is none
        elif self._coupled:
            grad = grad + self._wd_f32 * p  # Adam's L2 term: grad.add(param, alpha=wd)
        self.exp_avg.lerp_(grad, self._one_m_b1)
        self.exp_avg_sq.mul_(self._b2).add_((grad * self._one_m_b2) * grad)  # addcmul: self + (value * t1) * t2
        bc1 = (1.0 - self.beta1**self.steps)[m]
        bc2_sqrt = ((1.0 - self.beta2**self.steps) ** 0.5).float()[m]
        step_size = (lr / bc1).float()
        denom = (self.exp_avg_sq.sqrt() / bc2_sqrt).add_(self.eps)
        p.add_((-step_size * self.exp_avg) / denom)  # addcdiv: self + (value * t1) / t2

    def _sgd(self, p, grad, lr):
        self.steps += 1
        g = grad + self._wd_f32 * p if self._coupled else grad  # grad.add(param, alpha=wd)
        buf = self.exp_avg
        buf.mul_(self._momentum).add_(g)  # first step: 0 * m + g = g, torch's clone of the gradient
        p.add_(-lr.float() * buf)

    # ------------------------------------------------------------------ checkpoints, one member at a time

    def member_state(self, i: int) -> dict[str, torch.Tensor]:
        idx = self._idx[i]
        out = {"steps": self.steps[i].clone().cpu(), "exp_avg": self.exp_avg.view(-1)[idx].cpu()}
        if self.exp_avg_sq is not None:
            out["exp_avg_sq"] = self.exp_avg_sq.view(-1)[idx].cpu()
        return out

    @torch.no_grad()
    def load_member_state(self, i: int, state: dict[str, torch.Tensor]) -> None:
        idx = self._idx[i]
        self.steps[i] = state["steps"].to(self.steps)
        self.exp_avg.view(-1)[idx] = state["exp_avg"].to(self.exp_avg)
        if self.exp_avg_sq is not None:
            self.exp_avg_sq.view(-1)[idx] = state["exp_avg_sq"].to(self.exp_avg_sq)

    def member_values(self, t: torch.Tensor, i: int) -> torch.Tensor:
        """Member ``i``'s elements of ``t`` (``flat``'s layout), in order."""
        return t.reshape(-1)[self._idx[i]]

    @torch.no_grad()
    def set_member_values(self, t: torch.Tensor, i: int, values: torch.Tensor) -> None:
        t.view(-1)[self._idx[i]] = values.to(t)
