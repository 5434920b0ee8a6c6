"""Roles inferred, not declared: which dimensions of a user's model grow with width, read from builds.

The model is built three times on the meta device (no memory, no numbers): at the base width, at a
delta width and at the target width. A dimension is *infinite* where the base and delta shapes differ
(microsoft/mup's ``set_base_shapes(model, base, delta)`` reads shapes the same way). Each parameter is
then classified by its module's type and by which of its dimensions grow:

| parameter | grows | role |
|---|---|---|
| a matrix (``nn.Linear``; torch's own known layouts, ``OUT_IN_TYPES``; Conv1D read transposed) | in and out | ``hidden`` |
| a matrix | out only | ``input`` (its fan-in is the data's) |
| a matrix | in only | ``readout`` (its fan-out is the output's) |
| an ``nn.Embedding`` table, or a bare 2-D parameter whose last dimension grows | the vectors | ``embedding`` |
| a vector in a norm (a module whose output is the same for a scaled input: ``is_norm``) | its size | ``norm_gain`` / ``norm_bias`` |
| any other vector | its size | ``bias`` |
| a vector | nothing | ``readout_bias`` (nothing about it scales) |
| a matrix | nothing | ``fixed`` |

What shapes cannot tell is the config's to say: ``model.roles`` maps a glob of parameter names to a
role (``{"lm_head.*": readout, "*.c_proj.weight": attn_out}``), and wins over the inference. A
parameter that fits no row and no glob is refused in one line that names it.

A tied weight (one tensor, two uses: ``wte.weight`` read by the embedding and by ``lm_head``) is one
parameter with one role, the first use's (the embedding: init and learning rate as microsoft/mup's
``MuSharedReadout`` keeps them); the readout's 1/m output multiplier still applies, at the module
that reads the tensor as a readout (``forward_roles``).
"""

from __future__ import annotations

import copy
import fnmatch
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from initnorm.errors import ConfigError
from initnorm.nn.roles import Role

# A module whose weight is stored (in, out), not torch's (out, in), says so by its type: Hugging Face's GPT-2 ``Conv1D``
# (when transformers is installed), or a class of one's own that declares ``weight_layout = "in_out"``. Not by its
# class's name: any module called Conv1D was read transposed.
IN_OUT = "in_out"


def stored_in_out(module: nn.Module) -> bool:
    """Whether ``module``'s weight is stored (in, out): its class declares ``weight_layout = "in_out"``, or it is
    Hugging Face's ``Conv1D``."""
    if getattr(type(module), "weight_layout", None) == IN_OUT:
        return True
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:
        return False
    return isinstance(module, Conv1D)
# torch's own modules whose matrices are stored (out, in) as nn.Linear's: the recurrent layers' (gates x out, in)
# weights, multi-head attention's in_proj_weight (3 x embed, embed), a convolution's (out, in / groups, *kernel).
OUT_IN_TYPES = (nn.Linear, nn.RNNBase, nn.MultiheadAttention, nn.modules.conv._ConvNd)


@dataclass(frozen=True)
class Inferred:
    """What the builds said of one parameter: its shapes at base and target, which dims grow, its role and why."""

    name: str
    base: tuple[int, ...]
    target: tuple[int, ...]
    infinite: tuple[bool, ...]
    role: Role
    why: str
    transposed: bool = False
    tied: tuple[str, ...] = ()  # its other names (a tied weight)


@dataclass
class RoleTable:
    """Every parameter's ``Inferred`` (by its first name), the modules that apply a forward role (the
    readout that reads a tied weight), and the names stored (in, out)."""

    params: dict[str, Inferred] = field(default_factory=dict)
    forward_roles: dict[str, Role] = field(default_factory=dict)

    @property
    def roles(self) -> dict[str, Role]:
        return {n: p.role for n, p in self.params.items()}

    @property
    def transposed(self) -> frozenset[str]:
        return frozenset(n for n, p in self.params.items() if p.transposed)


# The probe's inputs: rows of the vector's size (LayerNorm, RMSNorm, BatchNorm1d, GroupNorm), then channels of it
# (InstanceNorm1d, a norm over dim 1); the first layout the module runs on decides.
PROBE_ROWS, PROBE_LENGTH, PROBE_SCALE = 4, 6, 8.0


def is_norm(module: nn.Module, size: int) -> bool:
    """Whether ``module``, the owner of a vector of ``size``, is a normalisation, by what it does, not by its class's name:
    a module of vectors alone (its gain, its bias) whose output keeps its input's shape, varies with the input, and does not
    change when the input is scaled (``PROBE_SCALE`` times): ``norm(c x) = norm(x)``, which LayerNorm, RMSNorm, GroupNorm,
    BatchNorm and a user's own normalisation of any name share, and a scale, a bias or a linear map lack. Probed on a copy
    on the CPU (the builds are on the meta device), its vectors ones, under ``torch.no_grad``; a module that cannot run on
    the probe's input is not one."""
    if any(p.dim() > 1 for p in module.parameters()):
        return False  # a norm holds vectors only; a module with a matrix of its own is a layer
    gen = torch.Generator().manual_seed(0)
    try:
        probe = copy.deepcopy(module).to_empty(device="cpu").train()
        with torch.no_grad():
            for t in (*probe.parameters(), *probe.buffers()):
                if t.is_floating_point():
                    t.fill_(1.0)
    except Exception:  # a module that cannot be copied to the CPU: not probed, not a norm
        return False
    return any(_scale_free(probe, torch.randn(shape, generator=gen), torch.randn(shape, generator=gen))
               for shape in ((PROBE_ROWS, size), (PROBE_ROWS, size, PROBE_LENGTH)))


def _scale_free(probe: nn.Module, x: torch.Tensor, other: torch.Tensor) -> bool:
    """Whether ``probe`` runs on ``x``'s layout, keeps its shape, gives ``x`` scaled the same output and ``other`` another."""
    try:
        with torch.no_grad():
            outs = probe(x), probe(PROBE_SCALE * x), probe(other)
    except Exception:  # not this layout, or not a module of one input
        return False
    if not all(isinstance(o, torch.Tensor) and o.shape == x.shape for o in outs):
        return False
    return bool(torch.allclose(outs[0], outs[1], rtol=1e-3, atol=1e-3) and not torch.allclose(outs[0], outs[2], rtol=1e-3, atol=1e-3))


def owner(model: nn.Module, name: str) -> nn.Module:
    path = name.rpartition(".")[0]
    return model.get_submodule(path) if path else model


def _as_out_in(module: nn.Module, shape: tuple, infinite: tuple) -> tuple[tuple, tuple, bool]:
    """(out, in) shape and growth of a matrix, read from its module's layout."""
    if stored_in_out(module):
        return shape[::-1], infinite[::-1], True
    return shape, infinite, False


def classify(module: nn.Module, name: str, shape: tuple, infinite: tuple) -> tuple[Role | None, str, bool]:
    """(role or None, why, stored transposed) of one parameter from its module's type and its growing dims."""
    leaf = name.rpartition(".")[2]
    if len(shape) <= 1:
        if not any(infinite):
            return Role.READOUT_BIAS, "a vector whose size does not grow", False
        if is_norm(module, shape[0]):
            return (Role.NORM_BIAS, "a norm's bias", False) if leaf == "bias" else (Role.NORM_GAIN, "a norm's gain", False)
        return Role.BIAS, "a vector of width size", False
    if len(shape) > 2 and isinstance(module, nn.modules.conv._ConvNd) and not any(infinite[2:]):
        shape, infinite = shape[:2], infinite[:2]  # a kernel's sides do not grow: its (out, in) is what scales
    if len(shape) > 2:
        return None, f"a {len(shape)}-D tensor (only vectors, matrices and convolution kernels are inferred)", False
    if isinstance(module, nn.Embedding) or (not isinstance(module, OUT_IN_TYPES) and not stored_in_out(module)):
        if isinstance(module, nn.Embedding) or infinite == (False, True):
            if infinite == (False, True):
                return Role.EMBEDDING, "a lookup table of width-size vectors", False
            if not any(infinite):
                return Role.FIXED, "a lookup table whose shape does not grow", False
            return None, f"a {type(module).__name__} table whose rows grow with width", False
        if not any(infinite):
            return Role.FIXED, "a matrix whose shape does not grow", False
        return None, f"a bare {type(module).__name__} parameter whose first dimension grows (its layout is unknown)", False
    _, (out_inf, in_inf), transposed = _as_out_in(module, shape, infinite)
    if out_inf and in_inf:
        return Role.HIDDEN, "a matrix, fan-in and fan-out grow", transposed
    if out_inf:
        return Role.INPUT, "a matrix whose fan-in does not grow", transposed
    if in_inf:
        return Role.READOUT, "a matrix whose fan-out does not grow", transposed
    return Role.FIXED, "a matrix whose shape does not grow", transposed


def _overridden(name: str, names: tuple[str, ...], overrides: Mapping[str, str]) -> tuple[str, str] | None:
    """The last glob of ``model.roles`` that matches any of the parameter's names, and its role."""
    hit = None
    for glob, role in overrides.items():
        if any(fnmatch.fnmatchcase(n, glob) for n in names):
            hit = (glob, role)
    return hit


def _role_named(glob: str, value: str) -> Role:
    try:
        return Role(value)
    except ValueError:
        known = ", ".join(r.value for r in Role if r is not Role.ATTN_SCORES)
        raise ConfigError(f"model.roles.{glob}={value!r} is not a role; known: {known}; "
                          f"fix it with `model.roles={{{glob}:hidden}}`") from None


def infer(build: Callable[[int], nn.Module], base_width: int, delta_width: int, width: int,
          overrides: Mapping[str, str] | None = None, what: str = "the model") -> RoleTable:
    """The role table of ``build(width)``: every parameter's role from its base, delta and target shapes
    (built on the meta device), ``overrides`` (glob -> role) first. ``what`` names the model in errors."""
    overrides = dict(overrides or {})
    with torch.device("meta"):
        base, delta, target = build(base_width), build(delta_width), build(width)
    if not isinstance(base, nn.Module):
        raise ConfigError(f"{what} returned a {type(base).__name__}, not a torch.nn.Module; fix it with `model._target_=<a class or "
                          "function that returns one>`")
    shapes = [{n: tuple(p.shape) for n, p in m.named_parameters()} for m in (base, delta)]
    uses: dict[int, list[str]] = {}
    for n, p in target.named_parameters(remove_duplicate=False):
        uses.setdefault(id(p), []).append(n)
    grew = False
    table = RoleTable()
    for names in uses.values():
        name = names[0]
        p = target.get_parameter(name)
        if name not in shapes[0] or name not in shapes[1]:
            raise ConfigError(f"{what}: parameter {name} exists at width {width} but not at width {base_width} or {delta_width}; the width "
                              "argument must change shapes, not which parameters exist")
        b, d, t = shapes[0][name], shapes[1][name], tuple(p.shape)
        infinite = tuple(x != y for x, y in zip(b, d))
        grew |= any(infinite)
        if any(bt != tt and not inf for bt, tt, inf in zip(b, t, infinite)):
            raise ConfigError(f"{what}: parameter {name} is {list(b)} at width {base_width}, {list(d)} at {delta_width} and {list(t)} at "
                              f"{width}: a dimension that does not grow from base to delta grows to the target, which fits no role; "
                              f"name its role with `model.roles={{{name}:hidden}}`")
        hit = _overridden(name, tuple(names), overrides)
        if hit is not None:
            role, why = _role_named(*hit), f"model.roles {hit[0]!r}"
            transposed = stored_in_out(owner(target, name))
        else:
            role, why, transposed = classify(owner(target, name), name, t, infinite)
        if role is None:
            raise ConfigError(f"{what}: parameter {name} ({list(b)} at width {base_width}, {list(t)} at {width}) has no role: {why}; name "
                              f"it with `model.roles={{{name}:hidden}}` (roles: embedding, input, hidden, readout, bias, norm_gain, fixed)")
        table.params[name] = Inferred(name, b, t, infinite, role, why, transposed, tuple(names[1:]))
        for other in names[1:]:  # a tied weight's other uses: the readout among them still scales its output
            module = owner(target, other)
            other_role, _, _ = classify(module, other, t, infinite)
            if other_role == Role.READOUT or (other_role is None and _reads_out(module, t, infinite)):
                table.forward_roles[other.rpartition(".")[0]] = Role.READOUT
    if not grew:
        raise ConfigError(f"{what}: no parameter changes shape between width {base_width} and {delta_width}, so nothing would scale; "
                          "the width argument is not the one that sets the width: fix it with `model.width_arg=<the constructor argument "
                          "that sets it>`")
    for name, p in table.params.items():
        if p.role == Role.READOUT:
            table.forward_roles[name.rpartition(".")[0]] = Role.READOUT
    return table


def _reads_out(module: nn.Module, shape: tuple, infinite: tuple) -> bool:
    """An ``nn.Linear`` that reads an embedding's (vocab, width) tensor as its weight is a readout."""
    return isinstance(module, nn.Linear) and infinite == (False, True)


def format_table(table: RoleTable, rules: Mapping[str, object] | None = None, forwards: Mapping[str, float] | None = None) -> str:
    """The inferred table as text: parameter, shape at base and target, role, why, and the multipliers
    (``rules``: name -> ``nn.param.Rule``; ``forwards``: a module row's forward multiplier), one row per parameter."""
    head = ["parameter", "base", "target", "role", "init", "lr", "wd", "eps", "forward", "why"]
    rows = []
    for name, p in table.params.items():
        r = (rules or {}).get(name)
        mults = [f"{getattr(r, k):.4g}" if r is not None else "" for k in ("init", "lr", "wd", "eps", "forward")]
        tied = f" (tied: {', '.join(p.tied)})" if p.tied else ""
        rows.append([name + tied, "x".join(map(str, p.base)), "x".join(map(str, p.target)), p.role.value, *mults,
                     p.why + (", stored (in, out)" if p.transposed else "")])
    for module, role in table.forward_roles.items():
        if f"{module}.weight" not in table.params:
            forward = f"{forwards[module]:.4g}" if forwards and module in forwards else ""
            rows.append([f"{module} (module)", "", "", role.value, "", "", "", "", forward, "reads a tied weight as the readout"])
    return columns(head, rows)


def columns(head: list[str], rows: list[list]) -> str:
    """A plain-text table, each column as wide as its widest cell."""
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line(head), *(line(r) for r in rows)]) + "\n"
