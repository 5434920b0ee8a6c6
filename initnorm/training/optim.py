"""Parameter groups from the parameterisation table, and the schedule.

Groups carry their own learning rate (base lr x the table's multiplier for the role), weight
decay and Adam ε; the schedule is a factor that multiplies each group's own rate (``LambdaLR``),
so per-role rates survive warmup and decay. A scheduler that sets one rate for every group would
silently undo µP: a job alone checks its groups' rates every ``log_every`` steps (``overwritten_rate``)
and stops with one line when something else set them.

``optim.weight_decay_mode`` (docs/parameterisations.md): ``coupled`` is torch's decay on our
groups, ``lr x lr_mult x wd`` per step; ``scaled`` (default) multiplies wd by the table's
``wd`` multiplier, the inverse of the width part of the role's lr multiplier, so that lr x wd
does not depend on width (microsoft/mup's MuAdamW and MuSGD); ``independent`` divides wd by the
group's peak rate, so each step decays by ``schedule x wd`` whatever the learning rate
(Wortsman et al. 2023), AdamW only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from initnorm.errors import ConfigError, bad_value
from initnorm.nn.param import Table, fan_in, in_block
from initnorm.nn.roles import Role
from initnorm.training.optimizers import OPTIMIZERS, build, entry

WEIGHT_DECAY_MODES = ("coupled", "scaled", "independent")


def weight_decay_mode(optim_cfg: Mapping[str, Any]) -> str:
    """``optim.weight_decay_mode`` (its values and the optimisers it fits are the schema's to check);
    an optimiser config without decay (adam) has none."""
    return optim_cfg["weight_decay_mode"] if "weight_decay" in optim_cfg else "coupled"


def param_groups(
    named: Iterable[tuple[str, torch.nn.Parameter]],
    roles: Mapping[str, Role],
    table: Table,
    lr: float,
    weight_decay: float,
    mode: str,
    eps: float | None = None,
    blocks: Callable[[str], bool] = lambda name: False,
    muon_scale: str | None = None,
    rest_lr: float | None = None,
) -> list[dict]:
    """One group per (lr, wd, ε multipliers, decayed?). Matrices decay, vectors do not (nanoGPT's
    rule: ``p.dim() >= 2``). ``blocks(name)`` says whether a parameter lies in a residual block
    (a depth table's block rules hold there). Each group keeps its multipliers (``lr_mult``,
    ``wd_mult``, ``eps_mult``: plain numbers a sweep member can carry) and its parameters'
    ``names``; ``eps`` is set only when the optimiser has one.

    ``muon_scale`` (an orthogonalised optimiser's shape factor, ``muon_scale.MUON_SCALES``): the hidden matrices
    (``optimizers.is_muon_matrix``) get groups of their own, marked ``muon``, one per shape, whose rate and decay
    carry the factor as ``torch.optim.Muon`` takes it (``muon_scale.torch_group``), and no ε. Their table
    multiplier must have no width part: the shape factor is Muon's width rule (docs/optimisers.md).

    ``rest_lr`` (``optim.adamw_lr``, with ``muon_scale`` only): the base rate of every other group (the AdamW part),
    in place of ``lr``, the table's multiplier on top. Its ``lr_mult`` carries ``rest_lr / lr`` too, so that a group's
    rate stays ``lr x lr_mult`` x the schedule for everything that reads or checks it (``overwritten_rate``)."""
    from initnorm.training.optimizers import is_muon_matrix

    groups: dict[tuple, dict] = {}
    for name, p in named:
        rule = table.rule(roles[name], blocks(name))
        lr_mult = rule.lr * fan_in(p) ** rule.lr_fan_in if rule.lr_fan_in else rule.lr
        decay = p.dim() >= 2
        ortho = muon_scale is not None and is_muon_matrix(roles[name], p)
        base = rest_lr if rest_lr is not None and muon_scale is not None and not ortho else lr
        if ortho and (rule.lr_fan_in or (lr_mult != 1.0 and not blocks(name))):
            raise ConfigError(f"param={table.name} multiplies {name}'s learning rate by {lr_mult:.4g}, and Muon already scales "
                              f"its update by optim.muon_scale={muon_scale} (factor(fan_out, fan_in)): asking for both counts width "
                              "twice; a µP-family table gives Muon's matrices lr x 1 (param=mup, param=sp), so use one of those")
        key = (lr_mult, rule.wd, rule.eps, decay, tuple(p.shape) if ortho else None)
        if key not in groups:
            wd = 0.0 if not decay else {"coupled": weight_decay, "scaled": weight_decay * rule.wd,
                                        "independent": weight_decay / (base * lr_mult)}[mode]
            groups[key] = {"params": [], "names": [], "lr": base * lr_mult, "weight_decay": wd, "lr_mult": lr_mult * base / lr,
                           "wd_mult": rule.wd, "eps_mult": rule.eps}
            if ortho:
                from initnorm.training.muon_scale import torch_group

                scaled = torch_group(muon_scale, p.shape, 1.0, 1.0)  # the factor as a rate and decay multiplier
                groups[key] |= {"muon": True, "adjust_lr_fn": scaled["adjust_lr_fn"], "lr_mult": lr_mult * scaled["lr"],
                                "lr": lr * lr_mult * scaled["lr"], "weight_decay": wd * scaled["weight_decay"]}
            elif eps is not None:
                groups[key]["eps"] = eps * rule.eps
        groups[key]["params"].append(p)
        groups[key]["names"].append(name)
    return list(groups.values())


def check_decay_mode(optimizer: Mapping[str, Any] | str, mode: str, weight_decay: float) -> None:
    """Independent decay (wd / the group's peak rate) only where the decay is not a gradient term (AdamW, Muon)."""
    cfg = {"name": optimizer} if isinstance(optimizer, str) else optimizer
    if weight_decay and mode == "independent" and not entry(cfg).decoupled:
        decoupled = [n for n in OPTIMIZERS.names() if OPTIMIZERS.get(n).decoupled]
        raise bad_value("optim.weight_decay_mode", "independent",
                        f"independent decay needs a decoupled optimiser ({', '.join(decoupled)}); "
                        f"optim={cfg['name']} decays through its gradient",
                        "optim.weight_decay_mode=scaled")


def model_groups(model: torch.nn.Module, roles: Mapping[str, Role], table: Table, lr: float, *, weight_decay: float, mode: str,
                 eps: float | None, muon_scale: str | None = None, rest_lr: float | None = None) -> list[dict]:
    """``param_groups`` of a built model (its residual blocks from its ``BLOCKS``): what ``make_optimizer`` gives the
    configured optimiser and ``initnorm.parameterize``'s ``param_groups`` gives any torch optimiser, one call for both."""
    return param_groups(model.named_parameters(), roles, table, lr, weight_decay, mode, eps, lambda n: in_block(model, n),
                        muon_scale, rest_lr)


def optimiser_groups(model: torch.nn.Module, roles, table: Table, lr: float, optim_cfg: Mapping[str, Any]) -> list[dict]:
    """The groups a job's optimiser steps: ``model_groups`` under the optimiser's own rules (one without weight decay has
    none; one without ε gets none), each with its rate, weight decay and ε; an orthogonalised optimiser's matrices apart."""
    e = entry(optim_cfg)
    takes = e.keywords()
    eps = optim_cfg.get("eps") if "*" in takes or "eps" in takes else None
    groups = model_groups(model, roles, table, lr, weight_decay=optim_cfg.get("weight_decay", 0.0), mode=weight_decay_mode(optim_cfg),
                          eps=eps, muon_scale=optim_cfg.get("muon_scale", "original") if e.matrices else None,
                          rest_lr=optim_cfg.get("adamw_lr") if e.matrices else None)
    if "weight_decay" not in optim_cfg:
        for g in groups:
            g["weight_decay"] = 0.0
    return groups


def make_optimizer(model: torch.nn.Module, roles, table: Table, lr: float, optim_cfg: Mapping[str, Any]) -> torch.optim.Optimizer:
    """The configured optimiser over ``optimiser_groups`` (the plain loop of the benchmark, a loop of one's own)."""
    return build(optimiser_groups(model, roles, table, lr, optim_cfg), lr, optim_cfg)


# The schedules after the warmup, by name (``schedule=``): each a factor on every group's own peak rate.
# ``wsd:F`` decays over the last fraction F of the run; ``wsd`` alone over the last WSD_DECAY.
SCHEDULES = ("cosine", "constant", "linear_to_zero", "wsd")
# Hägele et al. 2024 ("Scaling Laws and Compute-Optimal Training beyond Fixed Training Durations"): a cooldown over
# the last 20% of the run matches cosine's loss.
WSD_DECAY = 0.2


def parse_schedule(schedule: str, key: str = "schedule") -> tuple[str, float]:
    """(name, decay fraction) of ``cosine``, ``constant``, ``linear_to_zero``, ``wsd`` or ``wsd:F`` (0 < F <= 1; the
    fraction is 1 for the schedules that decay over the whole run, 0 for constant); one line for anything else."""
    from initnorm.errors import bad_value

    name, colon, arg = str(schedule).partition(":") if isinstance(schedule, str) else ("", "", "")
    allowed = (f"one of {', '.join(SCHEDULES)}, or wsd:F to decay over the last fraction F of the run (0 < F <= 1; wsd alone: "
               f"{WSD_DECAY:g})")
    if name not in SCHEDULES or (colon and name != "wsd"):
        raise bad_value(key, schedule, allowed, f"{key}=cosine" if name not in SCHEDULES else f"{key}={name}")
    if name != "wsd":
        return name, 0.0 if name == "constant" else 1.0
    try:
        decay = float(arg) if colon else WSD_DECAY
    except ValueError:
        decay = math.nan
    if not 0 < decay <= 1:
        raise bad_value(key, schedule, allowed, f"{key}=wsd:{WSD_DECAY:g}")
    return name, decay


def schedule_factor(step: int, steps: int, warmup: int, schedule: str = "cosine") -> float:
    """Linear warmup over ``warmup`` steps, then the schedule's factor at ``step`` of ``steps``:

    - ``cosine``: half a cosine from 1 to 0 at ``steps``;
    - ``constant``: 1;
    - ``linear_to_zero``: a straight line from 1 to 0 at ``steps`` (Bergsma et al. 2025, "Straight to Zero: Why
      Linearly Decaying the Learning Rate to Zero Works Best for LLMs");
    - ``wsd`` / ``wsd:F``: warmup, stable at 1, then a straight line to 0 at ``steps`` over the last fraction F
      of the run's steps (Hägele et al. 2024; warmup-stable-decay). The stable part is the same whatever
      ``steps``, so a run's state before its decay begins is a state of every longer run too.

    ``step`` counts updates from 0, so a run's updates are steps 0 ... ``steps`` - 1 and the factor reaches 0 at
    ``steps``, one step after the last update: ``linear_to_zero``'s last update runs at 1/(steps - warmup) of the
    peak (wsd's at 1/its decay steps, cosine's at 0.5 (1 - cos(pi / (steps - warmup)))), as PyTorch's LambdaLR
    counts. Every committed result was trained so; tests/test_schedule_end.py pins it (docs/transfer.md).
    """
    if step < warmup:
        return (step + 1) / warmup
    name, decay = parse_schedule(schedule)
    if name == "constant":
        return 1.0
    if name == "wsd":
        start = max(warmup, steps - max(1, round(decay * steps)))  # the first step of the decay
        return 1.0 if step < start else max(0.0, 1.0 - (step - start) / max(1, steps - start))
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    return 1.0 - progress if name == "linear_to_zero" else 0.5 * (1.0 + math.cos(math.pi * progress))


def overwritten_rate(groups: Iterable[Mapping[str, Any]], lr: float, factor: float, step: int, param: str) -> str | None:
    """One line naming the first group whose rate is not base lr x its table multiplier x the schedule's
    ``factor``: something else (a user's scheduler or callback) set the optimiser's rates, which erases the
    per-role rates the parameterisation gives (microsoft/mup's README warns of exactly this). None when all agree."""
    for g in groups:
        if "lr_mult" not in g:
            continue
        want = lr * g["lr_mult"] * factor
        if not math.isclose(g["lr"], want, rel_tol=1e-6, abs_tol=1e-30):
            names = g.get("names") or ["?"]
            return (f"at step {step} the optimiser steps {names[0]}{' and ' + str(len(names) - 1) + ' more' if len(names) > 1 else ''} "
                    f"at lr {g['lr']:.4g}, not {want:.4g} (lr x its multiplier {g['lr_mult']:.4g} under param={param} x the "
                    f"schedule's {factor:.4g}): a scheduler or callback of your own set the rates and erased the per-role ones; "
                    "scale each group's own rate (as LambdaLR does: group lr = its initial lr x a factor) or drop it")
    return None
