"""Config -> model: a family by name, its parameters' roles checked, init and forward
multipliers applied once from the parameterisation table: a parameterisation is a table
applied once, never weights rescaled in place later (which loses per-parameter tags under FSDP
and after ``torch.save``).

Forward multipliers live in the layer that applies them (``nn.layers``: ``forward_mult``), set
here once from the table's rule for the layer's role, so a new parameterisation touches
``nn/param.py`` and its YAML only. A layer's role is its weight's role, or its ``FORWARD_ROLE``
(the Decoder's attention: ``Role.ATTN_SCORES``); a table that asks for a multiplier a layer
cannot apply, or that needs a role the model lacks (residual branches), is refused."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from initnorm.errors import ConfigError, bad_value
from initnorm.keyrules import Choice, Int, Num, Text
from initnorm.models import mlp, own
from initnorm.models.decoder import PLACEMENTS, Decoder
from initnorm.nn.init import InitContext, init_parameter, resolve
from initnorm.nn.param import Table, block_parameters, fan_in, in_block, make_table, refuse_unplaced
from initnorm.nn.roles import INPUT_SCALED_ROLES, Role, forward_sites
from initnorm.registry import About, Registry

FamilyFn = Callable[[Mapping[str, Any], int], nn.Module]


@dataclass(frozen=True)
class Family:
    """A model family: ``build(model config, vocabulary or classes)`` and ``check(config)``, which
    raises a one-line ``ConfigError`` for values this family cannot take together (it sees the
    whole resolved config, since a family may constrain the data too). ``about``: its display name,
    its kind (the ``data.kind`` it trains on; empty: any) and the ``model`` keys it reads beyond the
    schema's common ones (family, width, depth, activation, mup.*), which the schema checks and
    whose absence from it refuses any other key. A new family is one such object: registered here,
    or in a file of its own named by a dotted path (``model.family=mypkg.models:FAMILY``)."""

    build: FamilyFn
    check: Callable[[Mapping[str, Any]], None] = lambda cfg: None
    about: About = field(default_factory=About)
    # Sets the table's forward multipliers on a built model (default: each layer's ``forward_mult``;
    # model=custom: hooks where a user's layer has no slot, models/own.py).
    forward: Callable[[nn.Module, Table, Mapping[str, Role]], None] | None = None

    @property
    def data_kind(self) -> str | None:
        """The data.kind it trains on (None: any); initnorm.schema names the data option that fits."""
        return self.about.kind or None


MODELS: Registry[Family] = Registry("model family", "model", path_key="model.family",
                                    expects=(lambda e: isinstance(e, Family),
                                             "Family (initnorm.models.build.Family)", "mypkg.models:FAMILY"))

DECODER_RULES = {
    "n_heads": Int(1, fix=2),
    "mlp_ratio": Int(1, fix=2),
    "max_context": Int(1, fix=64),
    "norm": Choice(PLACEMENTS, fix="pre"),
    "norm_type": Text(fix="layernorm"),
    "norm_eps": Num(0, fix=1e-5),
}


def check_decoder(cfg: Mapping[str, Any]) -> None:
    model = cfg["model"]
    heads = model["n_heads"]
    if model["width"] % heads:
        raise bad_value("width", model["width"], f"a multiple of model.n_heads={heads}", f"width={heads * max(1, model['width'] // heads)}")
    context = cfg["data"]["context"]
    if context > model["max_context"]:
        raise bad_value("data.context", context, f"at most the position table's model.max_context={model['max_context']}",
                        f"model.max_context={context}")


def decoder(m: Mapping[str, Any], vocab_size: int) -> nn.Module:
    return Decoder(
        vocab_size,
        width=m["width"],
        depth=m["depth"],
        n_heads=m["n_heads"],
        mlp_ratio=m["mlp_ratio"],
        max_context=m["max_context"],
        placement=m["norm"],
        norm_type=m["norm_type"],
        norm_eps=m["norm_eps"],
    )


MODELS.register("decoder")(Family(decoder, check_decoder, About("Decoder", "char_lm", DECODER_RULES)))
# Chapter 003's MLPs (models/mlp.py): char_mlp and wide_mlp are one class in two shapes.
MODELS.register("deep_mlp")(Family(mlp.deep_mlp, about=About("deep MLP", "clusters", mlp.DEEP_RULES)))
MODELS.register("char_mlp")(Family(mlp.window_mlp, about=About("char MLP", "char_windows", mlp.WINDOW_RULES)))
MODELS.register("wide_mlp")(Family(mlp.window_mlp, about=About("wide MLP", "char_windows", mlp.WINDOW_RULES)))
# A user's own nn.Module by its constructor (model._target_), roles inferred from builds at two widths (models/own.py).
MODELS.register("custom")(Family(own.build, own.check, About("own model", "", own.RULES), forward=own.apply_forward))


@dataclass
class Built:
    model: nn.Module
    table: Table
    roles: dict[str, Role]


def check_roles(model: nn.Module, table: Table) -> dict[str, Role]:
    """Every parameter has a role, the table covers it, and the model has every role the table needs."""
    roles = model.parameter_roles()
    missing = [n for n, _ in model.named_parameters() if n not in roles]
    if missing:
        raise ConfigError(f"{type(model).__name__} has parameters without a role: {', '.join(missing)}; add them to its parameter_roles()")
    lacking = sorted(r.value for r in table.needs - set(roles.values()))
    if lacking:
        raise ConfigError(f"param={table.name} scales {', '.join(lacking)} (residual branches), which {type(model).__name__} does not "
                          "have; use param=mup")
    for name in roles:
        table.rule(roles[name])
    return roles


def apply_forward_multipliers(model: nn.Module, table: Table, roles: Mapping[str, Role]) -> None:
    """Set every layer's ``forward_mult`` from the table; refuse a multiplier a layer cannot apply."""
    refuse_unplaced(model, table, roles)
    for name, module, role in forward_sites(model, roles):
        rule = table.rule(role, in_block(model, name))
        mult = rule.forward
        if rule.forward_fan_in:  # a layer without a weight states its own fan-in (the attention scores: d_k)
            mult *= (module.fan_in if hasattr(module, "fan_in") else fan_in(module.weight)) ** rule.forward_fan_in
        if hasattr(module, "forward_mult"):
            module.forward_mult = mult
            module.scale_input = role in INPUT_SCALED_ROLES
        elif mult != 1.0:
            raise ConfigError(
                f"param={table.name} multiplies the output of {role.value} by {mult:g}, but {type(model).__name__}.{name} is a "
                f"{type(module).__name__}, which cannot apply it; build the family from initnorm.nn.layers (Linear, Embedding)"
            )


def init_filler(model: nn.Module, model_cfg: Mapping[str, Any], init_cfg: Mapping[str, Any], table: Table,
                roles: Mapping[str, Role]) -> Callable[[str, torch.Tensor], None]:
    """``fill(name, w)``: ``w`` (parameter ``name``'s shape) filled as the table's rule for its role says: the scheme's
    std times the table's init multiplier. ``build_model`` fills every parameter with it; the check of an init that
    ignores the table (``models/init_check.py``) fills a scratch tensor with it to know what each parameter should be."""
    scheme = table.scheme or resolve(init_cfg)
    # A table that scales depth (depth-µP, CompleteP) starts from the base model, in depth as in width: a
    # scheme that reads the depth (GPT-2's 1/sqrt(2L) on branch outputs) sees the base depth, and the
    # table's branch multiplier (L/L0)^-α carries the rest. Read at the target depth, the depth would be
    # counted twice: std 0.0012 against 0.0099 for init=normal at 32 blocks under CompleteP (docs/parameterisations.md).
    depth = round(model_cfg["depth"] / table.depth_mult) if table.init_from_base else model_cfg["depth"]
    ctx = InitContext(depth=depth, width=model_cfg["width"], nonlinearity=model_cfg["activation"], options=init_cfg)
    blocks = block_parameters(model)
    base = table.width_mult if table.init_from_base else None
    transposed = getattr(model, "TRANSPOSED", frozenset())  # weights stored (in, out): filled through their transpose

    def fill(name: str, p: torch.Tensor) -> None:
        with torch.no_grad():
            w = p.t() if name in transposed else p
        init_parameter(w, roles[name], ctx, scheme, table.rule(roles[name], name in blocks).init, base)

    return fill


def build_model(model_cfg: Mapping[str, Any], init_cfg: Mapping[str, Any], param_cfg: Mapping[str, Any], vocab_size: int) -> Built:
    """Build, check roles, and initialise every parameter once: scheme std times the table's init multiplier."""
    table = make_table(param_cfg, width=model_cfg["width"], depth=model_cfg["depth"])
    family = MODELS.get(model_cfg["family"])
    model = family.build(model_cfg, vocab_size)
    roles = check_roles(model, table)
    (family.forward or apply_forward_multipliers)(model, table, roles)
    if table.layers is not None:
        table.layers(model)
    fill = init_filler(model, model_cfg, init_cfg, table, roles)
    for name, p in model.named_parameters():
        shape = tuple(p.shape)
        fill(name, p)
        if tuple(p.shape) != shape:  # (``w.data = ...`` of another shape): the model would fail many lines later, far from the cause
            which = f"init.fn={init_cfg.get('fn')}" if init_cfg.get("name") == "custom" else f"init={init_cfg.get('name')}"
            raise ConfigError(f"{which} changed the shape of parameter {name} from {list(shape)} to {list(p.shape)}; an init scheme fills "
                              "its weight in place and keeps its shape (w.normal_(...), torch.nn.init.*_(w)); fix the function, or pick a "
                              "registered scheme with `init=normal`")
    return Built(model, table, roles)
