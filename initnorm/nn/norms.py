"""Norm layers by name: ``layernorm``, ``rmsnorm`` (Zhang & Sennrich 2019) and ``none``.

One constructor signature, ``make(dim, eps) -> nn.Module``; each module states its parameters'
roles. Where a norm sits (pre/post) is the block's business, not the norm's. A user's own norm is
a class with that signature named by a dotted path (``norm_type.name=mypkg.norms:MyNorm``).
Kind (``About.kind``): what the norm does to a vector, ``centre+scale``, ``scale`` or ``identity``.
"""

import torch
import torch.nn.functional as F
from torch import nn

from initnorm.nn.roles import Role
from initnorm.registry import About, Registry

NORMS: Registry = Registry("norm type", "norm_type")


class LayerNorm(nn.Module):
    """Subtract the mean, divide by the standard deviation, then scale and shift (gain + bias)."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)

    def parameter_roles(self):
        return {"weight": Role.NORM_GAIN, "bias": Role.NORM_BIAS}


class RMSNorm(nn.Module):
    """y = g * x / sqrt(mean(x^2) + eps): no mean subtraction and no shift (Zhang & Sennrich 2019)."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)

    def parameter_roles(self):
        return {"weight": Role.NORM_GAIN}


class NoNorm(nn.Module):
    """The identity, so a norm-free model runs through the same block code."""

    def __init__(self, dim: int, eps: float = 0.0):
        super().__init__()

    def forward(self, x):
        return x

    def parameter_roles(self):
        return {}


NORMS.register("layernorm", About("LayerNorm", "centre+scale"))(LayerNorm)
NORMS.register("rmsnorm", About("RMSNorm", "scale"))(RMSNorm)
NORMS.register("none", About("no norm", "identity"))(NoNorm)
