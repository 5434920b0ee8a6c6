"""Init schemes by name. Each is ``scheme(w, role, ctx)`` and fills one weight tensor in place.

Schemes are called once, when ``models.build`` makes the model; biases start at zero and norm
gains at one in every scheme (``roles.FIXED_ROLES``), so a scheme only ever sees matrices.
A parameterisation's init multiplier (``nn.param``) is applied on top, in the same place.

Add your own without touching the package: a function with this signature, named by a dotted
path (``init.name=mypkg.inits:fancy``, or ``init=custom init.fn=mypkg.inits.fancy``) or registered
with ``@INITS.register``; the init keys it reads are its ``about = About(..., rules={...})``. A scheme
whose std depends on the matrix's shape says how with a ``fan_std(fan_in, fan_out)`` attribute
(the fan schemes and ``orthogonal`` do), so µP can take its std at the base shape; without one
its std is taken to be the same at every width (``normal``, ``small``, ``gpt2``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from initnorm.errors import ConfigError
from initnorm.keyrules import Choice, Num
from initnorm.nn.roles import BRANCH_OUT_ROLES, FIXED_ROLES, WIDTH_SIDES, Role
from initnorm.registry import About, Registry

InitScheme = Callable[[torch.Tensor, Role, "InitContext"], None]
INITS: Registry[InitScheme] = Registry("init scheme", "init", "or your own, see README 'Your own init scheme'")

# The init keys each scheme reads (``About.rules``; the schema refuses the others; ``init.nonlinearity``,
# what ``gain`` reads for any scheme, is common to all). Kind: ``fixed``, one std at every shape, or
# ``fan``, a std from the matrix's shape (the scheme has ``fan_std``).
GAIN_NAMES = ("linear", "sigmoid", "tanh", "relu", "leaky_relu", "selu", "gelu")
STD = {"std": Num(0, fix=0.02)}
FAN = {"emb_std": Num(0, fix=1.0), "gain": Num(0, lo_open=True, fix=1.0), "distribution": Choice(("normal", "uniform"), fix="normal")}

LOOKUP_ROLES = frozenset({Role.EMBEDDING, Role.POSITIONAL})


@dataclass(frozen=True)
class InitContext:
    """What a scheme may depend on besides the tensor's shape and role.

    depth: residual blocks (Decoder) or layers (MLP); width: the model width;
    nonlinearity: the activation after the layer (for He/orthogonal gains);
    options: the whole ``init`` config node (``std``, ``distribution``, ``gain`` ...).
    """

    depth: int
    width: int
    nonlinearity: str = "relu"
    options: Mapping[str, Any] = field(default_factory=dict)

    def opt(self, key: str, default=None):
        value = self.options.get(key)
        return default if value is None else value


def fan_in(w: torch.Tensor, role: Role) -> int:
    """A lookup table reads a one-hot vector, so its fan-in is 1; a Linear weight is (out, in)."""
    return 1 if role in LOOKUP_ROLES else w.shape[1]


def gain(ctx: InitContext, role: Role) -> float:
    """The activation's gain (He et al. 2015); the readout feeds no activation, so its gain is 1."""
    if role == Role.READOUT:
        return 1.0
    name = ctx.opt("nonlinearity", ctx.nonlinearity)
    # GELU has no closed-form gain; it passes about as much energy as ReLU, so use ReLU's.
    return nn.init.calculate_gain("relu" if name == "gelu" else name)


def _normal(w: torch.Tensor, std: float) -> None:
    w.normal_(0.0, std)


@INITS.register("normal", About("normal", "fixed", STD))
def normal(w, role, ctx):
    """N(0, std), std = ``init.std`` (default 0.02, the Decoder's choice after GPT-2)."""
    _normal(w, ctx.opt("std", 0.02))


@INITS.register("small", About("N(0, 0.01)", "fixed", STD))
def small(w, role, ctx):
    """N(0, 0.01): the hand-picked spread of the 2000s (chapter 003, step 1)."""
    _normal(w, ctx.opt("std", 0.01))


@INITS.register("gpt2", About("GPT-2", "fixed", STD))
def gpt2(w, role, ctx):
    """N(0, 0.02), residual-branch outputs scaled by 1/sqrt(2L): every block adds twice to one stream (Radford et al. 2019)."""
    std = ctx.opt("std", 0.02)
    if role in BRANCH_OUT_ROLES:
        std /= math.sqrt(2 * ctx.depth)
    _normal(w, std)


@INITS.register("zero_readout", About("zero readout", "fixed", STD))
def zero_readout(w, role, ctx):
    """N(0, std) everywhere but the readout, which starts at zero (as µP's readout does)."""
    if role == Role.READOUT:
        w.zero_()
    else:
        normal(w, role, ctx)


@INITS.register("zero_branch", About("zero branch", "fixed", STD))
def zero_branch(w, role, ctx):
    """Residual-branch outputs start at zero, so every block starts as the identity
    (Fixup, Zhang et al. 2019; ReZero, Bachlechner et al. 2020)."""
    if role in BRANCH_OUT_ROLES:
        w.zero_()
    else:
        normal(w, role, ctx)


def _fan_scheme(std_of: Callable[[int, int, float], float], activation_gain: bool) -> InitScheme:
    """A fan-based scheme: lookup tables get ``init.emb_std`` (default 1, fan-in of a one-hot),
    matrices a normal (or ``init.distribution=uniform``) draw with the std ``std_of(fan_in, fan_out, gain)``.
    The gain is ``init.gain`` if set, else the activation's (He, orthogonal) or 1 (Glorot, LeCun)."""

    def scheme(w, role, ctx):
        if role in LOOKUP_ROLES:
            _normal(w, ctx.opt("emb_std", 1.0))
            return
        g = ctx.opt("gain", gain(ctx, role) if activation_gain else 1.0)
        std = std_of(w.shape[1], w.shape[0], g)
        if ctx.opt("distribution", "normal") == "uniform":
            bound = math.sqrt(3.0) * std  # a uniform on [-b, b] has std b / sqrt(3)
            w.uniform_(-bound, bound)
        else:
            _normal(w, std)

    scheme.fan_std = lambda fi, fo: std_of(fi, fo, 1.0)
    return scheme


# Glorot & Bengio 2010: Var = 2 / (fan_in + fan_out).
INITS.register("xavier", About("Xavier", "fan", FAN))(_fan_scheme(lambda fi, fo, g: g * math.sqrt(2.0 / (fi + fo)), activation_gain=False))
# He et al. 2015: Var = gain^2 / fan_in (gain sqrt(2) for ReLU).
INITS.register("he", About("He", "fan", FAN))(_fan_scheme(lambda fi, fo, g: g / math.sqrt(fi), activation_gain=True))
# LeCun et al. 1998 (Efficient BackProp): Var = 1 / fan_in.
INITS.register("lecun", About("LeCun", "fan", FAN))(_fan_scheme(lambda fi, fo, g: g / math.sqrt(fi), activation_gain=False))


@INITS.register("orthogonal", About("orthogonal", "fan", {k: FAN[k] for k in ("emb_std", "gain")}))
def orthogonal(w, role, ctx):
    """A random orthogonal matrix times the activation's gain (Saxe et al. 2014); lookups as in fan schemes."""
    if role in LOOKUP_ROLES:
        _normal(w, ctx.opt("emb_std", 1.0))
    else:
        nn.init.orthogonal_(w, gain=ctx.opt("gain", gain(ctx, role)))


# A semi-orthogonal (out, in) matrix has orthonormal rows or columns: entry std 1/sqrt(max(in, out)).
orthogonal.fan_std = lambda fi, fo: 1.0 / math.sqrt(max(fi, fo))


def resolve(options: Mapping[str, Any]) -> InitScheme:
    """The scheme a config's ``init`` node names: ``init.name``, or ``init.fn`` when it is ``custom``."""
    name = options.get("name")
    if name == "custom":
        if not options.get("fn"):
            raise ConfigError("init=custom needs init.fn, a dotted path to your function; fix it with `init.fn=mypkg.inits.fancy`")
        return INITS.get(options["fn"], key="init.fn")
    return INITS.get(name)


def base_shape_ratio(scheme: InitScheme, role: Role, shape: tuple[int, ...], width_mult: float) -> float:
    """The scheme's std at the parameter's base shape (every width side divided by ``width_mult``)
    over its std at ``shape``: what µP's "relative to the base shape" init multiplies by (microsoft/mup's
    ``mup.init``). 1 for a scheme without ``fan_std`` (its std does not depend on the shape), for
    lookup tables, and at the base width."""
    fan_std = getattr(scheme, "fan_std", None)
    if fan_std is None or width_mult == 1.0 or role in LOOKUP_ROLES or len(shape) < 2:
        return 1.0
    out_w, in_w = WIDTH_SIDES.get(role, (False, False))
    fo, fi = shape[0], shape[1]
    return fan_std(fi / width_mult if in_w else fi, fo / width_mult if out_w else fo) / fan_std(fi, fo)


@torch.no_grad()
def init_parameter(w: torch.Tensor, role: Role, ctx: InitContext, scheme: InitScheme, multiplier: float = 1.0,
                   base_width_mult: float | None = None) -> None:
    """Fill ``w`` for its role: fixed roles get their constant, others the scheme (or ``init.per_role``'s
    choice) times ``multiplier``; with ``base_width_mult`` the multiplier is relative to the chosen
    scheme's std at the base shape (``base_shape_ratio``), as µP's tables are."""
    if role in FIXED_ROLES:
        w.fill_(FIXED_ROLES[role])
        return
    per_role = ctx.options.get("per_role") or {}
    chosen = INITS.get(per_role[role.value]) if role.value in per_role else scheme
    chosen(w, role, ctx)
    if base_width_mult is not None:
        multiplier *= base_shape_ratio(chosen, role, tuple(w.shape), base_width_mult)
    if multiplier != 1.0:
        w.mul_(multiplier)
