"""Optimisers by name: each a registered entry that says what it builds and how a parameterisation scales it.

An entry (``Optimiser``) builds a torch optimiser from parameter groups (``training/optim.py``'s
``optimiser_groups``: one group per role rule, each with its own ``lr``, ``weight_decay`` and ε), or a
container of several behind one ``step`` / ``zero_grad`` / ``state_dict`` / ``load_state_dict``
(``Several``, as torchtitan's optimiser container: Muon on the hidden matrices and AdamW on the rest).
It declares:

- ``family``: ``adam`` (the update's size does not follow the gradient's: Adam, AdamW, RMSprop ...),
  ``sgd`` (it does: SGD, ASGD) or ``orthogonal`` (each matrix's update is orthogonalised: Muon). A µP-family
  table is stated once per family (``nn/param.py``: MuAdam's and MuSGD's rules, and for ``orthogonal`` no
  width factor on the matrices on top of the optimiser's own shape factor); a user's own optimiser declares
  its family by ``optim.family``;
- ``elementwise``: every element's update reads only that element's numbers (declared: a stacked group's
  members each step their own instance over their views, ``training/stack.py``, right whatever it says; the flat
  fast path and the stacked Muon matrices are the steps taken over the stacked tensors at once);
- ``flat``: the step ``vec_optim.VecOptimizer`` writes for it (a fast path, used only where a probe at set-up
  shows it steps as torch does, bit for bit: ``vec_optim.probe``);
- ``matrices``: which parameters the orthogonalised part takes (Muon: hidden 2-D matrices), if any, and
  ``stacked_matrices``: whether a stacked group's may step at once (``training/muon_group.py``, by a probe).

Every ``torch.optim`` optimiser that steps without a closure is registered by its lower-case name
(``optim.name=nadam``); a user's own is ``optim=custom optim._target_=mypkg.Lion optim.family=adam``
(any class or function taking ``(param_groups, **keywords)``). ``optim.*`` keys an optimiser does not take are
refused in one line, so what was asked is what ran.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from initnorm.errors import ConfigError, bad_value
from initnorm.keyrules import Bool, Choice, Entry, Int, KeyRule, Num
from initnorm.nn.roles import HIDDEN_ROLES
from initnorm.registry import About, Registry, import_dotted

FAMILIES = ("adam", "sgd", "orthogonal")
# optim.* keys that are initnorm's, not an optimiser's keyword: how decay is scaled and carried, the family, the path
OWN_KEYS = ("name", "_target_", "family", "elementwise", "weight_decay_mode", "weight_decay_rule", "weight_decay_timescale", "muon_scale",
            "adamw_lr")


@dataclass(frozen=True)
class Optimiser:
    """A registered optimiser: ``make(groups, **keywords)`` builds it; see the module docstring for the rest."""

    make: Callable[..., Any]
    family: str | None
    elementwise: bool = True
    flat: str | None = None
    decoupled: bool = False  # its decay is lr x wd x p, not a gradient term (independent decay needs one)
    matrices: Callable[[Any, torch.Tensor], bool] | None = None  # (role, p) -> the orthogonalised part takes p
    stacked_matrices: bool = False  # a stacked group's orthogonalised part may step at once (training/muon_group.py)

    def keywords(self) -> set[str]:
        """The keywords ``make`` takes (``**kwargs``: any)."""
        params = inspect.signature(self.make).parameters
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return {"*"}
        return set(params) - {"params", "self"}


def edits(a: str, b: str) -> int:
    """Levenshtein distance: ``lion`` is 2 edits from ``muon``, not near ``sgd`` as a ratio of matching blocks says."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


class _Optimisers(Registry):
    """The optimiser registry: an unknown name's fix is the nearest name by edits, and one's own is ``optim=custom``."""

    def _known(self) -> str:
        return (f"known: {', '.join(self.names())}, or your own by its class, `optim=custom optim._target_=mypkg.optim.Lion "
                "optim.family=adam`")

    def _fix(self, name: Any) -> str:
        best = min(self.names(), key=lambda n: (edits(str(name).lower(), n), n))
        return f"fix it with `optim={best}`"


OPTIMIZERS: Registry[Optimiser] = _Optimisers("optimiser", "optim", path_key="optim._target_",
                                              expects=(lambda e: isinstance(e, Optimiser), "Optimiser", "mypkg.optim:ENTRY"))

# torch.optim's own, by name: family and whether the update is element-wise. LBFGS (a closure per step) and
# SparseAdam (sparse gradients) do not fit a training step here.
_TORCH = {
    "adamw": ("AdamW", "adam", True, "adamw"), "adam": ("Adam", "adam", True, "adam"), "sgd": ("SGD", "sgd", True, "sgd"),
    "adamax": ("Adamax", "adam", True, None), "nadam": ("NAdam", "adam", True, None), "radam": ("RAdam", "adam", True, None),
    "rmsprop": ("RMSprop", "adam", True, None), "adagrad": ("Adagrad", "adam", True, None),
    "adadelta": ("Adadelta", "adam", True, None), "rprop": ("Rprop", "adam", True, None),
    "asgd": ("ASGD", "sgd", True, None),
    "adafactor": ("Adafactor", "adam", False, None),  # a factored second moment per matrix: not element-wise
}
for _name, (_cls, _family, _elementwise, _flat) in _TORCH.items():
    OPTIMIZERS.register(_name, About(_cls, _family))(
        Optimiser(getattr(torch.optim, _cls), _family, _elementwise, _flat, decoupled=_name == "adamw"))


def entry(optim_cfg: Mapping[str, Any]) -> Optimiser:
    """The entry ``optim.name`` names (``custom``: the one ``optim._target_`` and ``optim.family`` describe)."""
    name = optim_cfg["name"]
    if name != "custom":
        return OPTIMIZERS.get(name, "optim.name")
    target = optim_cfg.get("_target_")
    if not target:
        raise bad_value("optim._target_", target, "optim=custom names your optimiser's class by its dotted path",
                        "optim._target_=mypkg.optim.Lion")
    make = import_dotted(target, "optim._target_", fix="fix it with `optim._target_=mypkg.optim.Lion`")
    if isinstance(make, Optimiser):
        return make
    if not callable(make):
        raise bad_value("optim._target_", target, "a class or function taking (param_groups, **keywords)",
                        "optim._target_=mypkg.optim.Lion")
    family = optim_cfg.get("family")
    return Optimiser(make, family, elementwise=bool(optim_cfg.get("elementwise", True)))


def probe(optim_cfg: Mapping[str, Any]) -> None:
    """``optim=custom``: the user's optimiser built over two tiny parameter groups as initnorm hands them (one group per
    role, each its own rate) and stepped once, before any job trains. What cannot train here is refused in one line:
    a class that is no optimiser, one that takes a single group (torch's LBFGS), one whose ``step`` needs a closure or
    sparse gradients (LBFGS, SparseAdam). A job found it out only after its set-up, with a traceback. Once per distinct
    ``optim`` node in a process: a sweep's jobs mostly share one (their rates are the top-level ``lr``)."""
    if optim_cfg["name"] != "custom" or (seen := repr(sorted(optim_cfg.items()))) in _PROBED:
        return
    e = entry(optim_cfg)
    target = optim_cfg.get("_target_")
    params = [torch.nn.Parameter(torch.ones(2, 2)), torch.nn.Parameter(torch.ones(2))]
    groups = [{"params": [params[0]], "lr": 1e-3}, {"params": [params[1]], "lr": 2e-3}]
    for p in params:
        p.grad = torch.full_like(p, 0.1)
    try:
        opt = e.make(groups, lr=1e-3, **keywords(e, optim_cfg))
        missing = [a for a in ("step", "zero_grad", "param_groups", "state_dict", "load_state_dict") if not hasattr(opt, a)]
        if not missing:
            opt.step()
    except ConfigError:
        raise
    except Exception as exc:
        # torch's Muon takes matrices only: ``optim=muon`` gives it the hidden ones and AdamW the rest
        fix = "`optim=muon`" if e.make is getattr(torch.optim, "Muon", None) else "an optimiser that takes parameter groups " \
            "and steps on dense gradients, e.g. `optim=adamw`"
        raise ConfigError(f"optim._target_={target} cannot train here: built over initnorm's parameter groups (one per role, "
                          f"each with its own learning rate) and stepped without a closure, it raised {type(exc).__name__}: "
                          f"{' '.join(str(exc).split())}; fix it with {fix}") from None
    if missing:
        raise ConfigError(f"optim._target_={target} built a {type(opt).__name__}, which is not an optimiser (it has no "
                          f"{', '.join(missing)}); fix it with a torch.optim.Optimizer class, e.g. `optim._target_=torch.optim.NAdam`")
    _PROBED.add(seen)


_PROBED: set[str] = set()  # the optim nodes ``probe`` found to train


def family(optim_cfg: Mapping[str, Any], table: str) -> str:
    """The optimiser's family, for a µP-family table ``table``; an undeclared one is refused in one line."""
    fam = optim_cfg.get("family") if optim_cfg["name"] == "custom" else OPTIMIZERS.get(optim_cfg["name"], "optim.name").family
    if fam not in FAMILIES:
        raise bad_value("optim.family", fam, f"param={table} scales the learning rate by the optimiser's family: one of "
                                            f"{', '.join(FAMILIES)} (adam: the update's size does not follow the gradient's)",
                        "optim.family=adam")
    return fam


def keywords(e: Optimiser, optim_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The ``optim.*`` values handed to ``e.make``; a key it does not take is refused in one line."""
    takes = e.keywords()
    out = {}
    for k, v in optim_cfg.items():
        if k in OWN_KEYS:
            continue
        if "*" not in takes and k not in takes:
            raise ConfigError(f"optim.{k} is not a keyword of optim.name={optim_cfg['name']} (it takes: "
                              f"{', '.join(sorted(takes - {'lr'}))}); drop it with `~optim.{k}`")
        out[k] = tuple(v) if k == "betas" else v
    return out


def build(groups: list[dict], lr: float, optim_cfg: Mapping[str, Any]):
    """The configured optimiser over ``groups`` (``optim.optimiser_groups``)."""
    e = entry(optim_cfg)
    return e.make(groups, lr=lr, **keywords(e, optim_cfg))


def takes(name: str, key: str) -> bool:
    """Whether the registered optimiser ``name`` takes the keyword ``key`` (``optim=custom``'s: assumed so)."""
    if name == "custom":
        return True
    found = OPTIMIZERS.get(name, "optim.name").keywords()
    return "*" in found or key in found


def build_named(name: str, groups: list[dict], lr: float, **numbers) -> Any:
    """The registered optimiser ``name`` over ``groups`` with those of ``numbers`` it takes (a loop of one's own hands
    every optimiser the same ``betas``, ``eps``, ``momentum`` ...; each takes its own)."""
    return build(groups, lr, {"name": name, **{k: v for k, v in numbers.items() if takes(name, k)}})


def _order(opt: torch.optim.Optimizer) -> list[str]:
    """The parameter names in the order torch's ``state_dict()`` numbers them (each group carries its ``names``)."""
    return [n for g in opt.param_groups for n in g["names"]]


def named_state(opt: torch.optim.Optimizer) -> dict[str, dict[str, Any]]:
    """``opt.state_dict()``'s per-parameter state by parameter name (copies on the CPU)."""
    order = _order(opt)
    return {order[i]: {k: v.detach().cpu().clone() if isinstance(v, torch.Tensor) else v for k, v in st.items()}
            for i, st in opt.state_dict()["state"].items()}


def load_named_state(opt: torch.optim.Optimizer, named: Mapping[str, Mapping[str, Any]]) -> None:
    """``named`` (``named_state``'s form) into ``opt`` through its ``load_state_dict``, its groups' numbers kept."""
    index = {n: i for i, n in enumerate(_order(opt))}
    sd = opt.state_dict()
    sd["state"] = {index[n]: dict(st) for n, st in named.items() if n in index}
    opt.load_state_dict(sd)


class Several(torch.optim.Optimizer):
    """Several torch optimisers behind one ``step``, ``zero_grad``, ``state_dict`` and ``load_state_dict`` (torchtitan's
    container): ``param_groups`` is theirs in order, and the state dict numbers the parameters across them in that order,
    as one optimiser's does."""

    def __init__(self, optimizers: Sequence[torch.optim.Optimizer]):
        self.optimizers = list(optimizers)
        self.defaults = {}
        self.state = _Chained(self.optimizers)
        self._optimizer_step_pre_hooks, self._optimizer_step_post_hooks = {}, {}
        self._optimizer_state_dict_pre_hooks, self._optimizer_state_dict_post_hooks = {}, {}
        self._optimizer_load_state_dict_pre_hooks, self._optimizer_load_state_dict_post_hooks = {}, {}

    @property
    def param_groups(self) -> list[dict]:
        return [g for o in self.optimizers for g in o.param_groups]

    @param_groups.setter
    def param_groups(self, value) -> None:  # torch's __init__ does not run here; nothing sets them
        raise AttributeError("Several's groups are its optimisers'")

    @torch.no_grad()
    def step(self, closure: Callable | None = None):
        loss = closure() if closure is not None else None
        for o in self.optimizers:
            o.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none)

    def state_dict(self) -> dict[str, Any]:
        out, offset = {"state": {}, "param_groups": []}, 0
        for o in self.optimizers:
            sd = o.state_dict()
            out["state"] |= {offset + i: s for i, s in sd["state"].items()}
            out["param_groups"] += [{**g, "params": [offset + i for i in g["params"]]} for g in sd["param_groups"]]
            offset += sum(len(g["params"]) for g in o.param_groups)
        return out

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        offset, k = 0, 0
        for o in self.optimizers:
            n = sum(len(g["params"]) for g in o.param_groups)
            groups = state_dict["param_groups"][k : k + len(o.param_groups)]
            o.load_state_dict({"state": {i - offset: s for i, s in state_dict["state"].items() if offset <= i < offset + n},
                               "param_groups": [{**g, "params": [i - offset for i in g["params"]]} for g in groups]})
            offset, k = offset + n, k + len(o.param_groups)


class _Chained(dict):
    """``Several.state``: every optimiser's per-parameter state, read as one mapping (the instruments read it)."""

    def __init__(self, optimizers):
        super().__init__()
        self._optimizers = optimizers

    def get(self, p, default=None):
        for o in self._optimizers:
            if p in o.state:
                return o.state[p]
        return default

    def __contains__(self, p) -> bool:
        return any(p in o.state for o in self._optimizers)

    def __getitem__(self, p):
        got = self.get(p)
        if got is None:
            raise KeyError(p)
        return got


def is_muon_matrix(role, p: torch.Tensor) -> bool:
    """Muon's part: the hidden matrices (Keller Jordan's Muon: embeddings, the readout, gains and biases take AdamW)."""
    return role in HIDDEN_ROLES and p.dim() == 2


def muon(groups: list[dict], lr: float, momentum: float = 0.95, nesterov: bool = True, ns_steps: int = 5,
         betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.01) -> Several:
    """``torch.optim.Muon`` on the groups marked ``muon`` (hidden matrices, their rate and decay already carrying
    ``optim.muon_scale``'s shape factor: ``muon_scale.torch_group``), ``torch.optim.AdamW`` on the rest (their rates
    from ``optim.adamw_lr`` where it is set: ``optim.param_groups``' ``rest_lr``)."""
    ortho = [g for g in groups if g.get("muon")]
    rest = [g for g in groups if not g.get("muon")]
    parts = []
    if ortho:
        parts.append(torch.optim.Muon(ortho, lr=lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps, weight_decay=weight_decay))
    if rest:
        parts.append(torch.optim.AdamW(rest, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))
    return Several(parts)


MUON_RULES = {
    "muon_scale": Entry("initnorm.training.muon_scale", "MUON_SCALES", "match_rms_adamw"),
    "momentum": Num(0, 1, hi_open=True, fix=0.95),
    "nesterov": Bool(fix=True),
    "ns_steps": Int(1, 99, fix=5),
    # the AdamW part's base rate (embedding, readout, vectors), µP's table on top; null: the run's lr drives both parts
    "adamw_lr": Num(0, lo_open=True, null=True, fix=0.0078125, note="null: the run's lr"),
}
OPTIMIZERS.register("muon", About("Muon", "orthogonal", MUON_RULES))(
    Optimiser(muon, "orthogonal", elementwise=False, decoupled=True, matrices=is_muon_matrix, stacked_matrices=True))
OPTIMIZERS.register("custom", About("your own", "", {"_target_": KeyRule("dotted", fix="mypkg.optim.Lion"),
                                                   "family": Choice(FAMILIES, null=True, fix="adam"),
                                                   "elementwise": Bool(fix=True)}))(
    Optimiser(lambda groups, **kw: None, None))  # stands for optim._target_'s (``entry``)
