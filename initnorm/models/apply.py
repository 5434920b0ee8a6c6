"""A parameterisation table applied to a built model, once: every parameter's role checked against the table,
the forward multipliers set in the layers that apply them, and the init filler (the scheme's std times the
table's init multiplier) that ``models/parameterize.py`` fills every parameter with and ``models/init_check.py``
draws its scratch tensors from.

Forward multipliers live in the layer that applies them (``nn.layers``: ``forward_mult``), set here once from the
table's rule for the layer's role, so a new parameterisation touches ``nn/param.py`` and its YAML only. A layer's
role is its weight's role, or its ``FORWARD_ROLE`` (the Decoder's attention: ``Role.ATTN_SCORES``); a table that
asks for a multiplier a layer cannot apply, or that needs a role the model lacks (residual branches), is refused."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from initnorm.errors import ConfigError
from initnorm.nn.init import InitContext, init_parameter, resolve
from initnorm.nn.param import Table, block_parameters, fan_in, in_block, refuse_unplaced
from initnorm.nn.roles import INPUT_SCALED_ROLES, Role, forward_sites


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
    """Set every layer's ``forward_mult`` from the table; refuse a multiplier a layer cannot apply. The layers are found by
    the role table's parameter names (``nn.roles.forward_sites``), never by a name's suffix."""
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
    depth = model_cfg["depth"]  # None: a model of one's own whose depth nothing reads (initnorm.parameterize without depth=)
    if depth is not None and table.init_from_base:
        depth = round(depth / table.depth_mult)
    ctx = InitContext(depth=depth, width=model_cfg["width"], nonlinearity=model_cfg["activation"], options=init_cfg)
    blocks = block_parameters(model)
    base = table.width_mult if table.init_from_base else None
    transposed = getattr(model, "TRANSPOSED", frozenset())  # weights stored (in, out): filled through their transpose

    def fill(name: str, p: torch.Tensor) -> None:
        with torch.no_grad():
            w = p.t() if name in transposed else p
        init_parameter(w, roles[name], ctx, scheme, table.rule(roles[name], name in blocks).init, base)

    return fill
