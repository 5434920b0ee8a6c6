"""Muon's update scale by name: ``optim.muon_scale`` -> ``factor(fan_out, fan_in)``.

Muon's orthogonalised update ``O`` has every singular value near 1 whatever the matrix's shape, so
its size per entry shrinks as the matrix grows; each library multiplies the learning rate by a
shape factor to put it back. The same name means different formulas in different libraries, so
here each name is its formula:

==================  =================================  ===============================================
``optim.muon_scale``  factor(fan_out, fan_in)           source
==================  =================================  ===============================================
``original``        sqrt(max(1, fan_out / fan_in))     Keller Jordan's Muon (2024); torch.optim.Muon's
                                                       default, ``adjust_lr_fn="original"``
``match_rms_adamw`` 0.2 sqrt(max(fan_out, fan_in))     Moonlight, Liu et al., arXiv 2502.16982: the
                                                       update's RMS matches AdamW's (about 0.2), so
                                                       AdamW's rate and decay carry over;
                                                       ``adjust_lr_fn="match_rms_adamw"``
``spectral``        sqrt(fan_out / fan_in)             the spectral condition, Yang, Simon and
                                                       Bernstein, arXiv 2310.17813: ||ΔW||₂ ∝
                                                       sqrt(fan_out / fan_in)
==================  =================================  ===============================================

Megatron-LM calls sqrt(max(fan_out, fan_in)) ``spectral``; here that is ``match_rms_adamw`` / 0.2,
and ``spectral`` is the paper's sqrt(fan_out / fan_in), which is below 1 for a matrix that narrows
(fan_out < fan_in) where ``original`` stays at 1. ``fan_out, fan_in`` are a weight's
``shape[0], shape[1]`` (torch's ``A, B``).

On ``torch.optim.Muon`` (``torch_group``): a name torch knows is its ``adjust_lr_fn``; any other
scale (``spectral``, a user's own) runs under ``adjust_lr_fn="original"`` with the group's rate
multiplied by ``factor / original`` and its weight decay divided by the same, because torch decays
by ``lr x weight_decay`` with the group's rate before the adjustment: the decay stays torch's, and
the update is ``lr x factor x O``. A user's own scale registers by a dotted path,
``optim.muon_scale=mypkg.scales:mine`` (a function of ``fan_out, fan_in``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from initnorm.registry import Registry

Scale = Callable[[int, int], float]

MUON_SCALES: Registry[Scale] = Registry("Muon scale", "optim.muon_scale", path_key="optim.muon_scale",
                                        expects=(callable, "function", "mypkg.scales:mine"))


@MUON_SCALES.register("original")
def original(fan_out: int, fan_in: int) -> float:
    """Keller Jordan's: an update no smaller per entry than a square matrix's (torch's default)."""
    return math.sqrt(max(1.0, fan_out / fan_in))


@MUON_SCALES.register("match_rms_adamw")
def match_rms_adamw(fan_out: int, fan_in: int) -> float:
    """Moonlight (arXiv 2502.16982 §2.2): update RMS 0.2, AdamW's typical one."""
    return 0.2 * math.sqrt(max(fan_out, fan_in))


@MUON_SCALES.register("spectral")
def spectral(fan_out: int, fan_in: int) -> float:
    """The spectral condition (arXiv 2310.17813, condition 1): ||ΔW||₂ = Θ(sqrt(fan_out / fan_in))."""
    return math.sqrt(fan_out / fan_in)


TORCH_ADJUST = ("original", "match_rms_adamw")  # torch.optim.Muon's own adjust_lr_fn names


def factor(name, shape) -> float:
    """The scale ``name`` for a weight of ``shape`` ``[fan_out, fan_in]``."""
    return float(MUON_SCALES.get(name)(int(shape[0]), int(shape[1])))


def torch_group(name, shape, lr: float, weight_decay: float) -> dict:
    """A ``torch.optim.Muon`` parameter group's ``lr``, ``weight_decay`` and ``adjust_lr_fn`` that step
    a weight of ``shape`` by ``lr x factor x O`` and decay it by ``lr x weight_decay``, as torch does."""
    if isinstance(name, str) and name in TORCH_ADJUST:
        return {"lr": lr, "weight_decay": weight_decay, "adjust_lr_fn": name}
    extra = factor(name, shape) / original(int(shape[0]), int(shape[1]))
    return {"lr": lr * extra, "weight_decay": weight_decay / extra, "adjust_lr_fn": "original"}
