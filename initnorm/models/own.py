"""``model=custom``: a user's own ``nn.Module``, named by its constructor, under every parameterisation.

    python -m initnorm.train model=custom model._target_=mymodels.TinyGPT model.width_arg=n_embd \\
        model.depth_arg=n_layer +model.n_head=2 param=mup width=64 model.base_width=16

The constructor (a class or any callable, ``model._target_``) gets the width under the name
``model.width_arg``, the depth under ``model.depth_arg`` (if set), the vocabulary size (or the number
of classes) under ``model.vocab_arg`` and the context length under ``model.context_arg`` (if set);
every other key under ``model`` goes to it as it is. It returns a module whose forward takes the
task's inputs (token ids) and returns logits, an object with ``.logits`` (Hugging Face) or a tuple
whose first element is the logits.

Nothing is declared by hand: the roles come from builds at ``model.base_width``, at a delta width
and at the target width on the meta device (``models/infer.py``), with ``model.roles`` globs for
what shapes cannot tell. The built module is the user's own, its parameter names unchanged; what
the engine reads of a family is added to the instance: ``parameter_roles()``, ``probe_points()``,
``BLOCKS`` (``model.blocks``: the residual blocks' ModuleList, for the depth rules) and ``TRANSPOSED``
(weights stored (in, out), initialised through their transpose). A parameterisation's forward
multipliers go where the model has no slot for them by hooks (``apply_forward``): the readout's
input x 1/m (microsoft/mup's ``MuReadout``), a residual branch's output x (L/L0)^-α; each hook reads
its multiplier from an attribute of its module, which a vectorised group stacks per member.
"""

from __future__ import annotations

import difflib
import inspect
import json
import logging
import types
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from initnorm.errors import ConfigError
from initnorm.keyrules import Bool, Int, KeyRule, Text
from initnorm.models import own_attention
from initnorm.models.infer import RoleTable, format_table, infer, owner
from initnorm.nn.param import PARAMS, SP_RULE, Table, in_block, make_table, refuse_unplaced, stable_across
from initnorm.nn.roles import INPUT_SCALED_ROLES, Role, forward_sites
from initnorm.own_errors import yours
from initnorm.registry import import_dotted

log = logging.getLogger(__name__)
_WARNED: set[str] = set()  # the tables whose kept attention scale was reported in this process
_MEASURED: dict[str, bool | None] = {}  # a constructor's arguments -> whether its forward attends (its attribute checked)
SCRATCH_VOCAB = 8  # the measuring model's vocabulary (own_attention: its tokens)

# The keys every family has (the schema's), and model=custom's own; every other model key is the constructor's.
COMMON = ("family", "width", "depth", "activation", "mup")
RULES = {
    "_target_": KeyRule("dotted", fix="mypkg.models.TinyGPT", note="the constructor: a class or a function"),
    "width_arg": Text(fix="n_embd"),
    "depth_arg": Text(null=True, fix="n_layer"),
    "vocab_arg": Text(null=True, fix="vocab_size"),
    "context": Int(1, null=True, fix=32),
    "context_arg": Text(null=True, fix="block_size"),
    "base_width": Int(1, fix=16),
    "delta_width": Int(1, null=True, fix=32, note="null: 2 x model.base_width"),
    "base_depth": Int(1, null=True, fix=2),
    "blocks": Text(null=True, fix="transformer.h"),
    "attn_mult_attr": Text(null=True, fix="attn_mult"),
    "check_init": Bool(fix=False, note="false: keep an init of your own that differs from the table (models/init_check.py)"),
    "roles": KeyRule("any", null=True, note="glob -> role"),
    "roles.**": KeyRule("any", note="a role name"),
    "*": KeyRule("any", note="passed to the constructor"),
}
OWN = tuple(k for k in RULES if "*" not in k)


def constructor(m: Mapping[str, Any]):
    """``model._target_``: a dotted path (the command line), or the constructor itself (``initnorm.parameterize``)."""
    target = m["_target_"]
    return target if callable(target) else import_dotted(target, "model._target_",
                                                         fix="fix it with `model._target_=mypkg.models.TinyGPT`")


def target_name(m: Mapping[str, Any]) -> str:
    """``model._target_`` as every message names it: its dotted path, also for a constructor handed over itself."""
    target = m["_target_"]
    return target if isinstance(target, str) else f"{target.__module__}.{getattr(target, '__qualname__', type(target).__name__)}"


def arguments(m: Mapping[str, Any], n_out: int, width: int) -> dict[str, Any]:
    """The constructor's keyword arguments at ``width``: the named width, depth, vocabulary and context, then the rest."""
    kw = {k: v for k, v in m.items() if k not in COMMON and k not in OWN}
    kw[m["width_arg"]] = width
    for arg, value in ((m["depth_arg"], m["depth"]), (m["vocab_arg"], n_out), (m["context_arg"], m["context"])):
        if arg:
            kw[arg] = value
    return kw


def check_signature(m: Mapping[str, Any], n_out: int = 2) -> None:
    """Every argument we pass is one the constructor takes (unless it takes ``**kwargs``): one line naming a stray one."""
    target = constructor(m)
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):  # a builtin without a signature: the call itself will say
        return
    params = sig.parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    for key in arguments(m, n_out, m["width"]):
        if key not in params:
            near = difflib.get_close_matches(key, list(params), n=1)
            source = next((f"model.{k}" for k in ("width_arg", "depth_arg", "vocab_arg", "context_arg") if m[k] == key), f"model.{key}")
            if source.endswith("_arg"):
                fix = f"`{source}={near[0] if near else '<one of its arguments>'}`"
            else:
                fix = f"`+model.{near[0]}=...` in place of `+{source}`" if near else f"`~{source}`"
            takes = ", ".join(params) or "none"
            raise ConfigError(f"{source}: {target_name(m)} takes no argument {key!r} (it takes {takes}); fix it with {fix}")


def check(cfg: Mapping[str, Any]) -> None:
    """Before anything is built: the constructor imports, takes what we pass; the widths are ordered; the table is one
    whose every rule lands on a model of one's own; the attention's multiplier is what it says (``own_attention``)."""
    m = cfg["model"]
    check_signature(m)
    delta = m["delta_width"] or 2 * m["base_width"]
    if delta == m["base_width"]:
        raise ConfigError(f"model.delta_width={delta} equals model.base_width: no dimension could be seen to grow; "
                          f"fix it with `model.delta_width={2 * m['base_width']}`")
    table = make_table(cfg["param"], width=m["width"], depth=m["depth"])
    check_table(table)
    check_attention(m, table)


def check_table(table: Table) -> None:
    """u-µP acts inside the layers (each residual add's τ weights, the GELU's and the attention's output scales, every
    matrix's output x fan_in^-1/2: ``nn.umup``), which a model of one's own does not expose: applied in part it is not
    u-µP (issue 36, a model without ``model.blocks``, which was taken: qkv outputs at RMS 3.9 and 15.9 at widths 16 and 256
    where u-µP keeps them near 1, a validation loss of 20 after 10 steps). Refused in one line, before anything is built."""
    fan_in = sorted({r.value for rules in (table.rules, table.block_rules or {}) for r, rule in rules.items() if rule.forward_fan_in})
    if table.layers is None and not fan_in:
        return
    what = "its unit-scaled ops" if table.layers is not None else f"forward multipliers by fan-in ({', '.join(fan_in)})"
    raise ConfigError(f"param={table.name} on model=custom: {what} act inside the layers of the model, which initnorm can set only "
                      "on its own families, and half of them would train as neither SP nor u-µP; use param=mup (or sp, depth_mup, "
                      "completep), or param=umup with model=decoder")


def check_attention(m: Mapping[str, Any], table: Table) -> None:
    """``model.attn_mult_attr`` must be the multiplier the docs describe (``own_attention.check_multiplier``); with none
    named, a table that scales the scores and a model whose forward attends is said in one line (once per table)."""
    attr, scores = m["attn_mult_attr"], table.rule(Role.ATTN_SCORES).forward
    if not attr and (scores == 1.0 or table.name in _WARNED):
        return
    args = arguments(m, SCRATCH_VOCAB, m["base_width"])
    key = json.dumps([m["_target_"], attr, args], sort_keys=True, default=str)
    if key not in _MEASURED:
        model = own_attention.scratch(lambda: made(m, SCRATCH_VOCAB, m["base_width"]))
        if attr:
            own_attention.check_multiplier(model, attr, SCRATCH_VOCAB, m["context"], logits_of)
        _MEASURED[key] = own_attention.attends(model, SCRATCH_VOCAB, m["context"], logits_of)
    if not attr and _MEASURED[key] is not False:
        _WARNED.add(table.name)  # once per command: every job's config is checked
        name = own_attention.plain_name(m["_target_"])
        if _MEASURED[key]:
            how = f"{name} computes attention scores and names no multiplier for them: its own scale is kept"
        else:
            how = (f"{name}'s forward ran on neither scratch input (token ids, or features of its first matrix's fan-in), so whether it "
                   "computes attention scores is not known; if it does, its own scale is kept")
        log.warning("param=%s scales attention scores by %.4g (1/d_k at this width), but %s (1/sqrt(d_k) unless it says otherwise); "
                    "name the attribute it multiplies its scores by with model.attn_mult_attr", table.name, scores, how)


def logits_of(out):
    """The logits a model returned: a tensor, an object's ``.logits`` (Hugging Face), or a tuple's first element."""
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "logits"):
        return out.logits
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    raise TypeError(f"the model returned a {type(out).__name__}; return logits, an object with .logits, or a tuple whose first "
                    "element is the logits")


def _logits_hook(module, args, out):
    return logits_of(out)


def _parameter_roles(self) -> dict[str, Role]:
    return self.role_table.roles


def _probe_points(self) -> dict[str, tuple[nn.Module, str]]:
    """The logits; each residual block's input and output (``model.blocks``), else each hidden or input
    matrix's output, named by its module's path."""
    points: dict[str, tuple[nn.Module, str]] = {}
    if self.BLOCKS:
        for i, block in enumerate(self.get_submodule(self.BLOCKS), 1):
            points |= {f"block_{i:02d}/stream_in": (block, "in"), f"block_{i:02d}/stream_out": (block, "out")}
    else:
        for name, role in self.role_table.roles.items():
            if role in (Role.HIDDEN, Role.INPUT):
                points[f"{name.rpartition('.')[0]}/out"] = (owner(self, name), "out")
    return points | {"logits/output": (self, "out")}


def globs(roles: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``model.roles`` as glob -> role: a glob with dots in it, given on the command line, arrives nested."""
    out: dict[str, str] = {}
    for k, v in roles.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out |= globs(v, key) if isinstance(v, Mapping) else {key: v}
    return out


def blocks_path(glob: str | None) -> str | None:
    """``transformer.h.*`` or ``transformer.h``: the ModuleList's path."""
    return glob.removesuffix(".*") if glob else None


def made(m: Mapping[str, Any], n_out: int, width: int):
    """What the user's constructor returns at ``width``; an exception it raises is theirs, in one line (``own_errors.yours``)."""
    target = constructor(m)
    try:
        return target(**arguments(m, n_out, width))
    except ConfigError:
        raise
    except Exception as exc:
        raise yours(exc, f"model._target_={target_name(m)} (built at width {width})") from exc


def build(m: Mapping[str, Any], n_out: int, logits: bool = True) -> nn.Module:
    """The user's model at ``model.width``, its roles inferred from the base, delta and target builds. ``logits``: its
    forward returns the logits of what it returned (initnorm-train's losses read them); False: what it returned, as
    it returned it (``initnorm.parameterize``: the user's loop, Lightning module or ``Trainer`` reads it)."""
    what = f"model._target_={target_name(m)}"
    make = lambda width: made(m, n_out, width)
    table = infer(make, m["base_width"], m["delta_width"] or 2 * m["base_width"], m["width"], globs(m.get("roles") or {}), what)
    model = make(m["width"])
    if not isinstance(model, nn.Module):
        raise ConfigError(f"{what} returned a {type(model).__name__}, not a torch.nn.Module; fix it with `model._target_=<a class or "
                          "function that returns one>`")
    model.role_table = table
    model.initnorm_target = target_name(m)  # how errors about the built model name it
    model.BLOCKS = blocks_path(m["blocks"])
    if model.BLOCKS:
        try:
            blocks = model.get_submodule(model.BLOCKS)
        except AttributeError:
            blocks = None
        if not isinstance(blocks, (nn.ModuleList, nn.Sequential)):
            raise ConfigError(f"model.blocks={m['blocks']!r} names no ModuleList of {what}; fix it with `model.blocks=<the path of the "
                              "residual blocks' list, e.g. transformer.h>`")
    model.TRANSPOSED = table.transposed
    model.attn_mult_attr = m["attn_mult_attr"]
    model.parameter_roles = types.MethodType(_parameter_roles, model)
    model.probe_points = types.MethodType(_probe_points, model)
    if logits:
        model.register_forward_hook(_logits_hook)
    return model


# The hooks read their multiplier from this attribute of their module, not from a number of their own:
# in a vectorised group ``training/stack.py`` turns a float attribute that differs between the members into a
# per-member buffer, which ``functional_call`` hands each member (as µP's attention scale).
MULT = "initnorm_forward_mult"


def _unit(mult) -> bool:
    return isinstance(mult, float) and mult == 1.0  # a tensor (a group's member-wise multiplier) is always applied


def _scale_input(module, args):
    mult = getattr(module, MULT)
    return None if _unit(mult) else (args[0] * mult, *args[1:])


def _scale_output(module, args, out):
    mult = getattr(module, MULT)
    return None if _unit(mult) else out * mult


def apply_forward(model: nn.Module, table: Table, roles: Mapping[str, Role]) -> None:
    """The table's forward multipliers: a layer with a ``forward_mult`` slot gets it set, any other a hook
    (the readout's input, another role's output) that reads its module's ``MULT`` attribute; the
    attention-score multiplier goes to every module with the attribute ``model.attn_mult_attr`` names
    (measured to be that multiplier by ``check``, which also reports in one line a model that attends
    with none named)."""
    refuse_unplaced(model, table, roles)
    refuse_missing_readout(model, table, roles)
    for name, module, role in forward_sites(model, roles, model.role_table.forward_roles):
        mult = table.rule(role, in_block(model, name)).forward
        if hasattr(module, "forward_mult"):
            module.forward_mult, module.scale_input = mult, role in INPUT_SCALED_ROLES
            continue
        # A hook on every module with a role, 1 or not: the members of a group share the first member's hooks.
        setattr(module, MULT, float(mult))
        if role in INPUT_SCALED_ROLES:
            module.register_forward_pre_hook(_scale_input)
        else:
            module.register_forward_hook(_scale_output)
    attr = model.attn_mult_attr
    for m in (m for m in model.modules() if attr and hasattr(m, attr)):
        setattr(m, attr, table.rule(Role.ATTN_SCORES).forward)


def refuse_missing_readout(model: nn.Module, table: Table, roles: Mapping[str, Role]) -> None:
    """Under a µP-family table (one whose kind is stable across width, or whose readout rule is not SP's here) a model
    must have a readout the table can reach: µP's readout is the one matrix whose fan-out is the output's, and its
    1/fan_in output multiplier (Yang et al. 2022, Tensor Programs V, Table 3; microsoft/mup's ``MuReadout``) keeps the
    logits from growing with width. Logits made from a tied weight by hand (``h @ emb.weight.T``) leave no module to
    put it on, and the table would train as SP's readout with µP elsewhere: refused in one line, never applied nowhere.
    A readout named on an ``nn.Embedding`` (``model.roles``) is refused too: its input is token ids, which no
    multiplier may scale."""
    readouts = [n for n, r in {**roles, **model.role_table.forward_roles}.items() if r == Role.READOUT]
    try:
        rule = table.rule(Role.READOUT)
    except ConfigError:  # a table with no readout rule asks nothing of one
        return
    family = stable_across(PARAMS.about(table.name, strict=False).kind, "width") or rule != SP_RULE
    what = f"model._target_={model.initnorm_target}" if hasattr(model, "initnorm_target") else type(model).__name__
    if not readouts and family:
        raise ConfigError(
            f"{what} has no readout under param={table.name}: no matrix maps the width to the logits (a Linear whose fan-out does not "
            f"grow), so µP's 1/m readout multiplier (Yang et al. 2022, Table 3) would apply nowhere; logits made by hand from a tied "
            f"weight (h @ emb.weight.T) go through a module: `self.head = nn.Linear(width, vocab, bias=False); self.head.weight = "
            f"self.emb.weight` (the weight keeps the embedding's init and lr, the head scales its input by 1/m: microsoft/mup's "
            f"MuSharedReadout); another module's readout is named with `model.roles={{<its weight>:readout}}`; or train it with param=sp")
    for name in readouts:
        module = owner(model, name) if name in roles else model.get_submodule(name)
        if isinstance(module, nn.Embedding) and family:
            raise ConfigError(f"{what}: {name} is named the readout, but it is an nn.Embedding's table, whose input is token ids: the "
                              f"readout's 1/m multiplier of param={table.name} cannot scale them; make the readout a module that reads the "
                              "table as its weight (`self.head = nn.Linear(width, vocab, bias=False); self.head.weight = self.emb.weight`) "
                              "and drop its model.roles entry")


def describe(model: nn.Module, table: Table) -> str:
    """The inferred table with the multipliers this parameterisation gives each parameter (``roles.txt`` in a job folder)."""
    roles: RoleTable = model.role_table
    rules = {n: table.rule(p.role, in_block(model, n)) for n, p in roles.params.items()}
    forwards = {n: table.rule(r, in_block(model, n)).forward for n, r in roles.forward_roles.items()}
    head = f"# {type(model).__name__} under param={table.name} (width multiplier {table.width_mult:g})\n"
    return head + format_table(roles, rules, forwards)
