"""``initnorm.parameterize``: a model built and parameterised in one call, for ``initnorm-train`` and for a
training loop of one's own (nanoGPT's, a Lightning project's, Hugging Face's ``Trainer``)::

    p = initnorm.parameterize(GPT, width=256, base_width=64, param="mup", width_arg="n_embd",
                              vocab_size=65, n_layer=4, n_head=4, block_size=64)
    opt = torch.optim.AdamW(p.param_groups(lr=3e-3, weight_decay=0.1))
    print(p)   # the role table: every parameter's role and multipliers

What it does, once (a parameterisation is a table applied once, never weights rescaled later, which
microsoft/mup's users lost under FSDP and after ``torch.save``): the model is built by its family's builder
or the user's constructor; where its roles are not declared (a plain ``nn.Module``), they are read from
builds at the base, delta and target widths on the meta device (``models/infer.py``); the table's rules
are checked against them (``models/apply.py``), its forward multipliers set in the layers (or hooks) that
apply them, and every parameter filled by the init scheme times the table's init multiplier. The
optimiser's side of the same table is ``Parameterized.param_groups``: per-role learning rate, weight
decay and ε for any torch optimiser of the family the table was made for (``optimizer``).

``initnorm-train`` builds every model through this function (``models.build.build_model`` hands it the
composed config's ``model``, ``init`` and ``param`` nodes), and the keywords here are made into the same
nodes and checked by the same schema, so every refusal is the same one line: a keyword is the config key
of the same last name (``base_width=`` is ``model.base_width``, ``roles=`` is ``model.roles``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from initnorm import schema
from initnorm.errors import ConfigError
from initnorm.models import own
from initnorm.models.apply import apply_forward_multipliers, check_roles, init_filler
from initnorm.models.families import MODELS, Family
from initnorm.models.infer import columns
from initnorm.models.init_check import check_init
from initnorm.nn.param import PARAMS, Table, in_block, make_table
from initnorm.nn.roles import Role
from initnorm.training.optim import check_decay_mode, model_groups
from initnorm.training.optimizers import takes

__all__ = ["Parameterized", "parameterize"]

# What ``model`` may be: a family's name or dotted path, a ``Family``, a constructor of one's own, or a
# composed config's ``model`` node (initnorm-train's way in).
ModelSpec = str | Family | Callable[..., nn.Module] | Mapping[str, Any]


@dataclass
class Parameterized:
    """A built, parameterised model: ``model``, its parameterisation ``table`` (``nn.param.Table``) at this
    width and depth, and every parameter's role (``roles``: name -> ``nn.roles.Role``). ``param_groups`` is the
    optimiser's side of the table; ``str()`` and ``records()`` the role table, as text and as rows.
    ``config``: the ``model``, ``init`` and ``param`` nodes it was built from (as initnorm-train composes them);
    ``optimizer``: the optimiser family its table was made for."""

    model: nn.Module
    table: Table
    roles: dict[str, Role]
    config: dict[str, Any] = field(default_factory=dict, repr=False)
    optimizer: str | None = None  # the optimiser whose family the table was made for (training/optimizers.py)

    def param_groups(self, lr: float, weight_decay: float = 0.0, eps: float | None = None, mode: str = "scaled") -> list[dict]:
        """Parameter groups for a torch optimiser of the table's family (``torch.optim.AdamW(p.param_groups(3e-3,
        weight_decay=0.1))``): each group's ``lr`` is ``lr`` x its role's multiplier, its ``weight_decay`` follows
        ``mode`` (``optim.weight_decay_mode``: ``scaled``, MuAdamW's, the inverse of the width part of the lr
        multiplier; ``coupled``: ``weight_decay`` as it is; ``independent``: divided by the group's peak rate,
        AdamW only) on matrices only (``p.dim() >= 2``, nanoGPT's rule), and for an Adam-like table its ``eps``
        is ``eps`` (None: torch's default, 1e-8) x the role's ε multiplier. Each group also carries its
        multipliers (``lr_mult``, ``wd_mult``, ``eps_mult``) and its parameters' ``names``.

        A scheduler must scale each group's own rate (``LambdaLR`` does: group lr = its initial lr x a factor);
        one that sets one rate for every group erases the per-role rates (initnorm-train stops on that)."""
        schema.check_value("lr", lr, schema.RULES["lr"])
        schema.check_value("optim.weight_decay", weight_decay, schema.RULES["optim.weight_decay"])
        schema.check_value("optim.weight_decay_mode", mode, schema.RULES["optim.weight_decay_mode"])
        if eps is not None:
            schema.check_value("optim.eps", eps, schema.RULES["optim.eps"])
        elif takes(self.optimizer or "adamw", "eps"):  # torch's own default, so that the table's ε multipliers apply to it
            eps = inspect.signature(torch.optim.AdamW).parameters["eps"].default
        check_decay_mode(self.optimizer or "adamw", mode, weight_decay)
        return model_groups(self.model, self.roles, self.table, lr, weight_decay=weight_decay, mode=mode, eps=eps)

    def records(self) -> list[dict[str, Any]]:
        """The role table as rows for ``pandas.DataFrame``: per parameter its name, shape, role, whether it lies in a
        residual block, the table's ``init``, ``lr``, ``wd``, ``eps`` and ``forward`` multipliers, and ``lr_mult``,
        the multiplier its group's rate gets (u-µP's fan-in power included); for a model whose roles were inferred,
        also its shape at the base width, why it has its role, its tied names and whether it is stored (in, out)."""
        lr_mult = {n: g["lr_mult"] for g in self.param_groups(1.0) for n in g["names"]}
        inferred = getattr(self.model, "role_table", None)
        rows = []
        for name, p in self.model.named_parameters():
            block = in_block(self.model, name)
            rule = self.table.rule(self.roles[name], block)
            row = {"parameter": name, "shape": tuple(p.shape), "role": self.roles[name].value, "in_block": block,
                   **{k: getattr(rule, k) for k in ("init", "lr", "wd", "eps", "forward")}, "lr_mult": lr_mult[name]}
            if inferred is not None:
                info = inferred.params[name]
                row |= {"base_shape": info.base, "why": info.why, "tied": info.tied, "transposed": info.transposed}
            rows.append(row)
        return rows

    def __str__(self) -> str:
        """The role table as ``initnorm-roles`` prints it and a job's ``roles.txt`` holds it."""
        if hasattr(self.model, "role_table"):
            return own.describe(self.model, self.table)
        rows = []
        for name, p in self.model.named_parameters():
            r = self.table.rule(self.roles[name], in_block(self.model, name))
            rows.append([name, "x".join(map(str, p.shape)), self.roles[name].value,
                         *(f"{getattr(r, k):.4g}" for k in ("init", "lr", "wd", "eps", "forward"))])
        head = f"# {type(self.model).__name__} under param={self.table.name} (width multiplier {self.table.width_mult:g})\n"
        return head + columns(["parameter", "shape", "role", "init", "lr", "wd", "eps", "forward"], rows)

    def check_init(self, inputs: torch.Tensor) -> None:
        """After one forward of ``inputs`` (eval mode, the random stream untouched), every parameter still as its rule
        draws it; else the one-line ``ConfigError`` initnorm-train stops on (an init deferred to the first forward
        would undo the table: microsoft/mup's README warns of a model's own init left in place)."""
        check_init(self.model, self.table, self.roles, {"model": {**self.config["model"], "check_init": True},
                                                         "init": self.config["init"]}, inputs)


def parameterize(
    model: ModelSpec,
    *,
    width: int | None = None,
    base_width: int | None = None,
    param: str | Callable[..., Table] | Mapping[str, Any] = "mup",
    init: str | Callable | Mapping[str, Any] = "normal",
    optimizer: str = "adamw",
    depth: int | None = None,
    base_depth: int | None = None,
    delta_width: int | None = None,
    width_arg: str = "width",
    depth_arg: str | None = None,
    blocks: str | None = None,
    roles: Mapping[str, str] | None = None,
    attn_mult_attr: str | None = None,
    activation: str = "relu",
    n_out: int | None = None,
    **kwargs: Any,
) -> Parameterized:
    """Build ``model`` at ``width`` under the parameterisation ``param`` and return it with its table and roles.

    ``model``: a constructor of one's own (a class or function; ``width_arg`` names its width argument,
    ``depth_arg`` its depth's, every other keyword in ``kwargs`` goes to it as it is: ``vocab_size=65``), a
    built-in family's name (``"decoder"``; its keys in ``kwargs``, ``n_out`` its vocabulary or classes) or a
    ``Family``, or a composed config's ``model`` node (then ``init`` and ``param`` are its nodes too, and ``n_out``
    the output size: ``models.build.build_model``'s call). ``param``: ``sp``, ``mup``, ``depth_mup``,
    ``completep``, ``umup``, a dotted path or a table function of one's own (``nn.param``), or a mapping of the
    table's options (``{"name": "mup", "readout": "zero"}``). ``base_width``: every multiplier is 1 there (µP at
    its base width is SP); ``delta_width`` (default 2 x base) the second width the roles are read from.
    ``depth``/``base_depth``: the depth tables' (L / L0); ``blocks``: the residual blocks' ``ModuleList``
    (``"transformer.h"``), below which the depth rules hold. ``init``: a scheme's name (``normal``, ``he``, ...),
    its options (``{"name": "normal", "std": 0.02}``) or a function ``(w, role, ctx)``. ``optimizer``: the family
    whose table is made (``adamw``, ``adam``, ``sgd``). ``roles``: glob -> role for what shapes cannot tell;
    ``attn_mult_attr``: the attribute the model's attention multiplies its scores by (µP's 1/d_k goes there).

    Raises ``initnorm.errors.ConfigError`` with initnorm-train's one line for whatever it refuses: a value no
    rule allows, a parameter no rule places, a width argument that changes nothing, a table the model cannot
    take. docs/library.md."""
    if isinstance(model, Mapping):  # initnorm-train's composed nodes, checked by its schema already
        also = [k for k, v in locals().items() if k in _DEFAULTS and k not in ("init", "param", "n_out") and v != _DEFAULTS[k]]
        if also or kwargs:
            raise TypeError(f"parameterize(<a model config>, ...) reads width, depth and the rest from the config; "
                            f"drop {', '.join([*also, *kwargs])}")
        return _build(dict(model), dict(init), dict(param), n_out, param.get("optimizer"))
    if isinstance(model, (str, Family)):
        model_node = {"family": model, "width": width, "depth": depth, "activation": activation, **kwargs}
    elif callable(model):
        model_node = {"family": "custom", "_target_": model, "width": width, "depth": depth, "width_arg": width_arg,
                      "depth_arg": depth_arg, "vocab_arg": None, "context": None, "context_arg": None, "base_width": base_width,
                      "delta_width": delta_width, "base_depth": base_depth, "blocks": blocks, "attn_mult_attr": attn_mult_attr,
                      "roles": dict(roles) if roles else None, "check_init": True, "activation": activation, **kwargs}
    else:
        raise TypeError(f"model is a {type(model).__name__}: give a constructor, a family's name or a Family, or a model config")
    init_node = dict(init) if isinstance(init, Mapping) else {"name": init}
    param_node = _param_node(param, base_width, base_depth, optimizer)
    # No depth is a model whose depth nothing reads (no depth_arg): not checked, read by no table but the depth ones.
    # The width and the depth are checked as the top-level keys the command line sets first (`width=16`).
    sizes = {"width": width} | ({} if depth is None and not depth_arg else {"depth": depth})
    nodes = {**sizes, "model": {k: v for k, v in model_node.items() if k not in ("width", "depth")} | sizes, "init": init_node,
             "param": param_node, "optim": {"name": optimizer}}
    schema.check_keys(nodes, skip=lambda v: not isinstance(v, (str, int, float, bool, list, type(None))))  # objects: no rule
    builder = None
    if model_node["family"] == "custom":
        own.check({"model": {**model_node, **sizes}, "param": param_node})  # as the command line checks it
        builder = lambda m, n: own.build(m, n, logits=False)  # its forward returns what it returns, to the user's own loop
    return _build(model_node, init_node, param_node, n_out, optimizer, builder)


_DEFAULTS = {k: p.default for k, p in inspect.signature(parameterize).parameters.items() if p.default is not p.empty}


def _param_node(param: Any, base_width: int | None, base_depth: int | None, optimizer: str) -> dict[str, Any]:
    """The ``param`` node of the keywords: the table's name (or its options) with the base sizes and the
    optimiser family, each where the table reads it (its ``About.rules``; a table that declares nothing gets
    the base width, which every table takes)."""
    node = dict(param) if isinstance(param, Mapping) else {"name": param}
    reads = PARAMS.about(node.get("name"), strict=False).rules
    node.setdefault("base_width", base_width)
    for key, value in (("base_depth", base_depth), ("optimizer", optimizer)):
        if key in reads:
            node.setdefault(key, value)
    return node


def _build(model_cfg: dict[str, Any], init_cfg: dict[str, Any], param_cfg: dict[str, Any], n_out: int | None,
           optimizer: str | None, builder: Callable[[dict[str, Any], int | None], nn.Module] | None = None) -> Parameterized:
    """Build (by ``builder``, default the family's), check roles, set the forward multipliers, and initialise every
    parameter once: the scheme's std times the table's init multiplier."""
    table = make_table(param_cfg, width=model_cfg["width"], depth=model_cfg.get("depth"))
    family = MODELS.get(model_cfg["family"])
    model = (builder or family.build)(model_cfg, n_out)
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
    return Parameterized(model, table, roles, {"model": model_cfg, "init": init_cfg, "param": param_cfg}, optimizer)
