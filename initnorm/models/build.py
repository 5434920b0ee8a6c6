"""Config -> model: a family by name, its parameters' roles checked, init and forward
multipliers applied once from the parameterisation table (STYLE.md points 2-3)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from torch import nn

from initnorm.errors import ConfigError
from initnorm.models import mlp
from initnorm.models.decoder import Decoder
from initnorm.nn.init import InitContext, init_parameter, resolve
from initnorm.nn.param import Table, make_table
from initnorm.nn.roles import Role
from initnorm.registry import Registry

FamilyFn = Callable[[Mapping[str, Any], int, Table], nn.Module]
MODELS: Registry[FamilyFn] = Registry("model family", "model")


@MODELS.register("decoder")
def decoder(m: Mapping[str, Any], vocab_size: int, table: Table) -> nn.Module:
    forward = {role: table.rule(role).forward for role in Decoder.FORWARD_ROLES}
    return Decoder(
        vocab_size,
        width=m["width"],
        depth=m["depth"],
        n_heads=m["n_heads"],
        mlp_ratio=m["mlp_ratio"],
        max_context=m["max_context"],
        placement=m["norm"],
        norm_type=m["norm_type"],
        norm_eps=m.get("norm_eps", 1e-5),
        forward_mults=forward,
        attn_scale=table.attn_scale,
    )


# Chapter 003's MLPs (models/mlp.py): char_mlp and wide_mlp are one class in two shapes.
MODELS.register("deep_mlp")(mlp.deep_mlp)
MODELS.register("char_mlp")(mlp.window_mlp)
MODELS.register("wide_mlp")(mlp.window_mlp)


@dataclass
class Built:
    model: nn.Module
    table: Table
    roles: dict[str, Role]


def check_roles(model: nn.Module, table: Table) -> dict[str, Role]:
    """Every parameter has a role, the table covers it, and no forward multiplier is left unapplied."""
    roles = model.parameter_roles()
    missing = [n for n, _ in model.named_parameters() if n not in roles]
    if missing:
        raise ConfigError(f"{type(model).__name__} has parameters without a role: {', '.join(missing)}; add them to its parameter_roles()")
    applied = getattr(model, "FORWARD_ROLES", frozenset())
    for role in set(roles.values()):
        if table.rule(role).forward != 1.0 and role not in applied:
            raise ConfigError(f"param={table.name} asks for a forward multiplier on {role.value}, which {type(model).__name__} does not apply")
    return roles


def build_model(model_cfg: Mapping[str, Any], init_cfg: Mapping[str, Any], param_cfg: Mapping[str, Any], vocab_size: int) -> Built:
    """Build, check roles, and initialise every parameter once: scheme std times the table's init multiplier."""
    table = make_table(param_cfg, width=model_cfg["width"])
    scheme = resolve(init_cfg)
    model = MODELS.get(model_cfg["family"])(model_cfg, vocab_size, table)
    roles = check_roles(model, table)
    ctx = InitContext(
        depth=model_cfg["depth"], width=model_cfg["width"], nonlinearity=model_cfg.get("activation", "gelu"), options=init_cfg
    )
    for name, p in model.named_parameters():
        init_parameter(p, roles[name], ctx, scheme, table.rule(roles[name]).init)
    return Built(model, table, roles)
