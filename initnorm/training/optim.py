"""Optimisers by name, parameter groups from the parameterisation table, and the schedule.

Groups carry their own learning rate (base lr x the table's multiplier for the role); the
schedule is a factor that multiplies each group's own rate (``LambdaLR``), so per-role rates
survive warmup and decay. A scheduler that sets one rate for every group would silently undo µP.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping

import torch

from initnorm.nn.param import Table
from initnorm.nn.roles import Role
from initnorm.registry import Registry

OPTIMIZERS: Registry[Callable[..., torch.optim.Optimizer]] = Registry("optimiser", "optim")


@OPTIMIZERS.register("adamw")
def adamw(groups, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, **_):
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)


@OPTIMIZERS.register("adam")
def adam(groups, lr, betas=(0.9, 0.999), eps=1e-8, **_):
    # Plain Adam: no decay at all, so the groups' weight_decay is dropped.
    return torch.optim.Adam([{**g, "weight_decay": 0.0} for g in groups], lr=lr, betas=tuple(betas), eps=eps)


@OPTIMIZERS.register("sgd")
def sgd(groups, lr, momentum=0.0, weight_decay=0.0, **_):
    return torch.optim.SGD(groups, lr=lr, momentum=momentum, weight_decay=weight_decay)


def param_groups(named: Iterable[tuple[str, torch.nn.Parameter]], roles: Mapping[str, Role], table: Table, lr: float, weight_decay: float) -> list[dict]:
    """One group per (learning-rate multiplier, decayed?) pair. Matrices decay, vectors do not
    (nanoGPT's rule: ``p.dim() >= 2``)."""
    groups: dict[tuple[float, bool], dict] = {}
    for name, p in named:
        mult = table.rule(roles[name]).lr
        decay = p.dim() >= 2
        g = groups.setdefault((mult, decay), {"params": [], "names": [], "lr": lr * mult, "weight_decay": weight_decay if decay else 0.0})
        g["params"].append(p)
        g["names"].append(name)
    return list(groups.values())


def make_optimizer(model: torch.nn.Module, roles, table: Table, lr: float, optim_cfg: Mapping[str, Any]) -> torch.optim.Optimizer:
    opts = {k: v for k, v in dict(optim_cfg).items() if k != "name"}
    groups = param_groups(model.named_parameters(), roles, table, lr, opts.get("weight_decay", 0.0))
    return OPTIMIZERS.get(optim_cfg["name"])(groups, lr=lr, **opts)


def schedule_factor(step: int, steps: int, warmup: int, schedule: str = "cosine") -> float:
    """Linear warmup over ``warmup`` steps, then cosine (or constant) decay to 0 at ``steps``."""
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    return 0.5 * (1.0 + math.cos(math.pi * progress))
