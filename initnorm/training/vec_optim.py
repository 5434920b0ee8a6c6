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
from typing import Sequence

import torch

KINDS = ("adamw", "adam", "sgd")


@dataclass
class MemberHyper:
    """One member's optimiser numbers (the config's ``optim`` node and ``lr``)."""

    lr: float
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    momentum: float = 0.0


def _col(values: Sequence[float], dtype=torch.float64, device=None) -> torch.Tensor:
    return torch.tensor(list(values), dtype=dtype, device=device).unsqueeze(1)


class VecOptimizer:
    """``kind`` in adamw | adam | sgd over ``flat`` ([E, N], float32).

    ``lr_mult`` ([E, N]) is each element's learning-rate multiplier for its member (the table's
    multiplier of the parameter's role); ``decayed`` ([N] bool) marks the matrices' elements.
    """

    def __init__(self, kind: str, flat: torch.Tensor, hypers: Sequence[MemberHyper], lr_mult: torch.Tensor, decayed: torch.Tensor):
        if kind not in KINDS:
            raise ValueError(f"optim.name={kind!r} has no vectorised step; allowed: {', '.join(KINDS)}")
        E, N = flat.shape
        if len(hypers) != E or tuple(lr_mult.shape) != (E, N) or tuple(decayed.shape) != (N,):
            raise ValueError(f"shapes do not match: flat {tuple(flat.shape)}, {len(hypers)} members, lr_mult {tuple(lr_mult.shape)}, decayed {tuple(decayed.shape)}")
        dev = flat.device
        self.kind, self.flat = kind, flat
        # Group lr as torch.optim sees it: base lr x role multiplier, in double precision.
        self.rates = _col([h.lr for h in hypers], device=dev) * lr_mult.to(device=dev, dtype=torch.float64)
        wd = _col([0.0 if kind == "adam" else h.weight_decay for h in hypers], device=dev)
        self.wd = torch.where(decayed.to(dev).unsqueeze(0), wd, torch.zeros((), dtype=torch.float64, device=dev))  # [E, N]
        self.beta1 = _col([h.betas[0] for h in hypers], device=dev)
        self.beta2 = _col([h.betas[1] for h in hypers], device=dev)
        self.eps = _col([h.eps for h in hypers], dtype=torch.float32, device=dev)
        self.momentum = _col([h.momentum for h in hypers], dtype=torch.float32, device=dev)
        self.steps = torch.zeros(E, 1, dtype=torch.float64, device=dev)  # optimiser steps taken per member
        self.exp_avg = torch.zeros_like(flat)  # Adam's m, or SGD's momentum buffer
        self.exp_avg_sq = torch.zeros_like(flat) if kind != "sgd" else None
        self._one_m_b1 = (1.0 - self.beta1).float()
        self._one_m_b2 = (1.0 - self.beta2).float()
        self._b2 = self.beta2.float()

    @torch.no_grad()
    def step(self, grad: torch.Tensor, factors: torch.Tensor, active: torch.Tensor | None = None) -> None:
        """One step with ``grad`` ([E, N]) at schedule ``factors`` ([E], float64); rows not ``active`` stay as they are."""
        p = self.flat
        lr = self.rates * factors.to(self.rates).unsqueeze(1)  # [E, N] float64: (lr x mult) x factor, as LambdaLR sets it
        if active is not None and not bool(active.all()):
            keep = ~active.to(p.device).unsqueeze(1)
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
            self.steps.copy_(torch.where(keep[:, :1], old[3], self.steps))

    def _adam(self, p, grad, lr):
        self.steps += 1
        if self.kind == "adamw":
            p.mul_((1.0 - lr * self.wd).float())  # decoupled decay; exactly 1 where there is none
        self.exp_avg.lerp_(grad, self._one_m_b1)
        self.exp_avg_sq.mul_(self._b2).add_((grad * self._one_m_b2) * grad)  # addcmul: self + (value * t1) * t2
        bc1 = 1.0 - self.beta1**self.steps
        bc2_sqrt = ((1.0 - self.beta2**self.steps) ** 0.5).float()
        step_size = (lr / bc1).float()
        denom = (self.exp_avg_sq.sqrt() / bc2_sqrt).add_(self.eps)
        p.add_((-step_size * self.exp_avg) / denom)  # addcdiv: self + (value * t1) / t2

    def _sgd(self, p, grad, lr):
        self.steps += 1
        g = grad + self.wd.float() * p  # grad.add(param, alpha=wd); exact where wd is 0
        buf = self.exp_avg
        buf.mul_(self.momentum).add_(g)  # first step: 0 * m + g = g, torch's clone of the gradient
        p.add_(-lr.float() * buf)

    # ------------------------------------------------------------------ checkpoints, one member at a time

    def member_state(self, i: int) -> dict[str, torch.Tensor]:
        out = {"steps": self.steps[i].clone().cpu(), "exp_avg": self.exp_avg[i].clone().cpu()}
        if self.exp_avg_sq is not None:
            out["exp_avg_sq"] = self.exp_avg_sq[i].clone().cpu()
        return out

    @torch.no_grad()
    def load_member_state(self, i: int, state: dict[str, torch.Tensor]) -> None:
        self.steps[i].copy_(state["steps"])
        self.exp_avg[i].copy_(state["exp_avg"])
        if self.exp_avg_sq is not None:
            self.exp_avg_sq[i].copy_(state["exp_avg_sq"])
