"""Parameterisations by name: each is a table, role -> multipliers on init, forward, lr, weight decay, ε.

A table is applied exactly twice: when ``models.build`` makes the model (init multipliers,
forward multipliers, set once in the layer that applies them) and when ``training.optim`` makes
the optimiser's parameter groups (learning-rate, weight-decay and ε multipliers).
Nothing rescales weights afterwards, so the result survives ``torch.save`` and any wrapper. A
role the table does not cover is an error. Every multiplier is a plain number per role (and per
"in a residual block or not"), so a sweep can carry one per member.

The full table with its sources is docs/parameterisations.md; in short, with m = width /
base_width, l = depth / base_depth and α = depth_alpha (0: µP, 1/2: depth-µP, 1: CompleteP):

- hidden matrices: init x m^-1/2 (of the scheme's std at the base shape), lr x m^-1 (Adam) or
  x 1 (SGD), weight decay x m (Adam) under ``optim.weight_decay_mode=scaled``;
- residual-branch outputs: forward x l^-α; everything in a block: lr x l^(α-1) (Adam) or
  x l^(2α-1) (SGD), ε x l^-α;
- readout: forward x 1/m (``readout=logits``) or init 0 and lr x 1/m (``readout=zero``);
- SGD: vector-like parameters (embedding, input layer, biases and gains of width size, the
  readout) lr x m (microsoft/mup's MuSGD);
- ε x 1/m for every role whose gradient shrinks like 1/m (``scale_eps``);
- attention scores x m^-1/2 on top of 1/sqrt(d_k), i.e. 1/d_k.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from initnorm.errors import ConfigError, bad_value
from initnorm.keyrules import Bool, Choice, Int, Names, Num
from initnorm.nn.roles import BRANCH_OUT_ROLES, HIDDEN_ROLES, Role, unplaced
from initnorm.registry import About, Registry

READOUTS = ("logits", "zero")  # logits x 1/m (MuReadout) | zero start and lr / m (the chapter's)

# A table's kind (``About.kind``): the axes its coordinates are expected to be stable across, which
# the coordinate check's verdict reads. ``neither`` is the baseline that must grow (SP); a table
# without a declared kind makes no claim and gets no verdict.
KINDS = ("neither", "width", "width+depth")


def stable_across(kind: str, axis: str) -> bool:
    """Whether a table of ``kind`` promises coordinates that do not grow along ``axis`` (width, depth)."""
    return kind != "neither" and axis in kind.split("+")


@dataclass(frozen=True)
class TableAbout(About):
    """A table's ``About`` with the exponents its coordinates are expected to follow where its kind does not say them:
    ``coord[axis][optimiser family][point role] = e``, a probe point's change from step 0 going as axis^e
    (``output``: the logits, ``last``: the last residual stream). Along an axis its kind is stable across, every
    point's exponent is 0 (``expected_exponent``); the coordinate check prints these beside what it measured."""

    coord: Mapping[str, Mapping[str, Mapping[str, float]]] = field(default_factory=dict)


def expected_exponent(about: About, axis: str, family: str, role: str) -> float | None:
    """The exponent of a probe point's change on ``axis`` that a table declares: 0 along an axis its kind is stable
    across, else its ``TableAbout.coord`` entry for the optimiser ``family`` (training/optimizers.py: adam, sgd,
    orthogonal) and the point's ``role`` (None: none declared)."""
    if stable_across(about.kind, axis):
        return 0.0
    return getattr(about, "coord", {}).get(axis, {}).get(family, {}).get(role)


# SP's first steps at a fixed lr (Yang & Hu 2021, Tensor Programs IV, §3 and Table 1; Yang et al. 2022, TP V, Fig. 5):
# Adam's update is Θ(lr) per entry, so ΔW x sums n aligned terms: the logits and the residual stream move Θ(n). Under
# SGD the readout's gradient is Θ(1) per entry (logits Θ(n)), a hidden one's Θ(n^-1/2) (hidden outputs Θ(n^1/2)).
SP_COORD = {"width": {"adam": {"output": 1.0, "last": 1.0}, "sgd": {"output": 1.0, "last": 0.5}}}


@dataclass(frozen=True)
class Rule:
    """Multipliers for one role.

    init: on the init scheme's std (µP tables: the scheme's std at the base shape, ``Table.init_from_base``);
    forward: on the layer's output (or input, for the readout; ``nn.layers``);
    lr: on the learning rate; wd: on the weight decay under ``optim.weight_decay_mode=scaled``;
    eps: on Adam's ε;
    forward_fan_in, lr_fan_in: the forward and lr multipliers are also x fan_in ** power, the fan-in of the
    layer's own weight (``fan_in``): u-µP's rules are absolute in each parameter's shape (``nn.umup``).
    """

    init: float = 1.0
    forward: float = 1.0
    lr: float = 1.0
    wd: float = 1.0
    eps: float = 1.0
    forward_fan_in: float = 0.0
    lr_fan_in: float = 0.0


SP_RULE = Rule()


@dataclass(frozen=True)
class Table:
    """A parameterisation at one width and depth.

    ``rules`` hold for parameters outside residual blocks, ``block_rules`` (default: the same)
    for parameters inside them. ``init_from_base``: init multipliers are relative to the scheme's
    std at the parameter's base shape (µP), not at its shape (SP). ``needs``: roles a model must
    have for the table to mean what it says (a depth table needs residual branches).
    ``scheme``: an init function the table imposes whatever ``init`` says (u-µP: N(0, 1));
    ``layers``: sets, once at build, what a per-role rule cannot say (u-µP's residual weights and
    unit-scaled ops, on the layers that apply them).
    """

    name: str
    rules: Mapping[Role, Rule]
    block_rules: Mapping[Role, Rule] | None = None
    width_mult: float = 1.0
    depth_mult: float = 1.0
    init_from_base: bool = False
    needs: frozenset = frozenset()
    scheme: Callable | None = None
    layers: Callable | None = None

    def rule(self, role: Role, in_block: bool = False) -> Rule:
        rules = self.block_rules if in_block and self.block_rules is not None else self.rules
        try:
            return rules[role]
        except KeyError:
            raise ConfigError(f"param={self.name} has no rule for role {role.value!r}; "
                              "add one to its table in initnorm/nn/param.py") from None


ParamFn = Callable[..., Table]
PARAMS: Registry[ParamFn] = Registry("parameterisation", "param")

# The param keys µP and its depth variants read beyond name and base_width (the schema's common keys).
MUP_RULES = {
    "readout": Choice(READOUTS, fix="logits"),
    "base_depth": Int(1, null=True, fix=2),
    "depth_alpha": Num(0, 1, fix=0.5, note="0: µP, 0.5: depth-µP, 1: CompleteP"),
    "scale_eps": Bool(),
    "optimizer": Choice(Names("initnorm.training.optimizers", "OPTIMIZERS"), fix="adamw"),
    "optimizer_family": Choice(Names("initnorm.training.optimizers", "FAMILIES"), null=True, fix="adam",
                               note="optim=custom's family (optim.family)"),
    # µP's tunable constants (microsoft/mup: MuReadout's output_mult, its Transformer example's attn_mult): on top of
    # the width rules, tuned at the base width and kept at every width (hparams_search=mup_mults). 1 changes nothing.
    "output_mult": Num(0, lo_open=True, fix=1.0, note="the readout's output x output_mult, on top of µP's 1/m"),
    "attn_mult": Num(0, lo_open=True, fix=1.0, note="attention scores x attn_mult, on top of µP's 1/d_k"),
}


@PARAMS.register("sp", TableAbout("SP", "neither", coord=SP_COORD))
def standard(width: int, base_width: int, depth: int | None = None, base_depth: int | None = None, **_) -> Table:
    """Standard parameterisation: every multiplier is 1, at every width and depth."""
    return Table("sp", {role: SP_RULE for role in Role}, width_mult=width / base_width)


def _optimizer_kind(optimizer: str, name: str, family: str | None = None) -> str:
    """The optimiser's family (``training/optimizers.py``: adam, sgd, orthogonal), whose rules the table states once;
    optim=custom's is ``optim.family``, and an undeclared one is refused in one line naming that key."""
    from initnorm.training.optimizers import family as family_of

    return family_of({"name": optimizer, "family": family}, name)


def mup_table(
    width: int,
    base_width: int,
    depth: int | None = None,
    base_depth: int | None = None,
    depth_alpha: float = 0.0,
    readout: str = "logits",
    scale_eps: bool = True,
    optimizer: str = "adamw",
    optimizer_family: str | None = None,
    name: str = "mup",
    output_mult: float = 1.0,
    attn_mult: float = 1.0,
    **_,
) -> Table:
    """µP (Yang et al. 2022, Table 3 and microsoft/mup's MuAdam/MuSGD) relative to ``base_width``,
    with residual branches x (depth/base_depth)^-depth_alpha (Yang et al. 2023: 1/2; Dey et al.
    2025, CompleteP: 1). See docs/parameterisations.md for the table and its sources."""
    if width < base_width:
        raise bad_value("width", width, f"µP here is defined for width >= param.base_width={base_width}", f"param.base_width={width}")
    if depth_alpha and (depth is None or base_depth is None or base_depth < 1):
        raise bad_value(
            "param.base_depth", base_depth,
            f"param={name} scales residual branches relative to a positive number of blocks (model.mup.base_depth); "
            "a model without residual blocks (the MLP families) cannot take it", "param=mup"
        )
    kind = _optimizer_kind(optimizer, name, optimizer_family)
    m = width / base_width
    a = float(depth_alpha)
    l = depth / base_depth if a else 1.0
    adam = kind != "sgd"  # an orthogonalised optimiser's AdamW part takes Adam's rules; its matrices below
    # The width part of each learning rate. Under optim.weight_decay_mode=scaled the weight decay
    # is its inverse, so lr x wd does not depend on width (MuAdam: hidden wd x m; MuSGD: vectors wd / m).
    vector_lr = 1.0 if adam else m  # vectors of width size and matrices with one width side
    hidden_lr = 1.0 / m if kind == "adam" else 1.0  # MuSGD: the fan-in/fan-out ratio, 1 for every matrix here
    # Muon's matrices: no 1/m, since optim.muon_scale's shape factor is already its width rule (the spectral
    # condition, arXiv 2310.17813; Moonlight's 0.2 sqrt(max) matches AdamW's update RMS); docs/optimisers.md.
    # A block's parameters: lr x l^(α-1) under Adam, x l^(2α-1) under SGD (TP VI; CompleteP, Table 1).
    depth_lr = l ** (a - 1.0) if adam else l ** (2.0 * a - 1.0)
    # ε follows the role's gradient: Θ(1/m) behind the 1/m readout, x l^-α in a block (branch multiplier).
    eps_width = 1.0 / m if scale_eps else 1.0
    eps_depth = l**-a if scale_eps else 1.0

    def rule(init: float = 1.0, forward: float = 1.0, lr: float = 1.0, eps: float = eps_width) -> Rule:
        return Rule(init=init, forward=forward, lr=lr, wd=1.0 / lr, eps=eps)

    rules = {role: rule(lr=vector_lr) for role in Role}
    rules.update({role: rule(init=m**-0.5, lr=hidden_lr) for role in HIDDEN_ROLES})
    rules[Role.READOUT_BIAS] = rules[Role.FIXED] = Rule()  # no side grows with width: nothing about it scales
    if readout == "logits":  # MuReadout: logits x 1/m, init and lr as a vector's
        rules[Role.READOUT] = rule(forward=output_mult / m, lr=vector_lr)
    else:  # the same function with W' = W/m: zero start, lr / m, a Θ(1) gradient
        rules[Role.READOUT] = rule(init=0.0, forward=output_mult, lr=1.0 / m, eps=1.0)
    rules[Role.ATTN_SCORES] = Rule(forward=attn_mult * m**-0.5)  # 1/d_k, equal to 1/sqrt(d_k) at the base width
    if not a:
        return Table(name, rules, width_mult=m, init_from_base=True)

    def block_rule(role: Role, r: Rule) -> Rule:
        branch = l**-a if role in BRANCH_OUT_ROLES else 1.0
        return Rule(init=r.init, forward=r.forward * branch, lr=r.lr * depth_lr, wd=r.wd, eps=r.eps * eps_depth)

    block = {role: block_rule(role, r) for role, r in rules.items()}
    block[Role.ATTN_SCORES] = rules[Role.ATTN_SCORES]
    return Table(name, rules, block, width_mult=m, depth_mult=l, init_from_base=True, needs=BRANCH_OUT_ROLES)


PARAMS.register("mup", About("µP", "width", MUP_RULES))(mup_table)


@PARAMS.register("depth_mup", About("depth-µP", "width+depth", MUP_RULES))
def depth_mup(**options) -> Table:
    """µP with residual branches x (L/L0)^-1/2: depth-µP (Yang et al. 2023, Tensor Programs VI; Bordelon et al. 2023)."""
    return mup_table(**{"depth_alpha": 0.5, **options, "name": "depth_mup"})


@PARAMS.register("completep", About("CompleteP", "width+depth", MUP_RULES))
def completep(**options) -> Table:
    """µP with residual branches x (L/L0)^-1: CompleteP (Dey et al. 2025)."""
    return mup_table(**{"depth_alpha": 1.0, **options, "name": "completep"})


def fan_in(p) -> int:
    """A parameter's fan-in as unit-scaling's optimiser counts it (``optim._get_fan_in``): a vector's
    length, a matrix's second dimension (a linear layer's input, an embedding's width)."""
    return p.shape[0] if p.dim() == 1 else p.shape[1]


UMUP_RULES = {
    "residual_mult": Num(0, lo_open=True, fix=1.0, note="the residual branches' total share against the embedding's"),
    "residual_attn_ratio": Num(0, lo_open=True, fix=1.0, note="the attention branches' share against the MLP's"),
    "attn_mult": Num(0, lo_open=True, fix=1.0, note="attention scores x attn_mult / d_head"),
    "optimizer": Choice(Names("initnorm.training.optimizers", "OPTIMIZERS"), fix="adamw"),
    "optimizer_family": Choice(Names("initnorm.training.optimizers", "FAMILIES"), null=True, fix="adam",
                               note="optim=custom's family (optim.family)"),
}


@PARAMS.register("umup", About("u-µP", "width+depth", UMUP_RULES, absolute=True))  # fan-in rules: no base size
def umup(width: int, base_width: int, depth: int | None = None, residual_mult: float = 1.0,
         residual_attn_ratio: float = 1.0, attn_mult: float = 1.0, optimizer: str = "adamw", optimizer_family: str | None = None,
         **_) -> Table:
    """u-µP (Blake et al. 2024; graphcore-research/unit-scaling 0.3): unit init, each matrix's output x
    fan_in^-1/2 (the readout x fan_in^-1), absolute Adam learning rates with no base width, and the
    unit-scaled ops of ``nn.umup``. ``base_width`` is read by nothing here. docs/parameterisations.md."""
    if _optimizer_kind(optimizer, "umup", optimizer_family) != "adam":
        raise bad_value("optim", optimizer, "param=umup has its Adam rules only (unit-scaling's SGD rules assume a "
                                            "constrained readout, not built here; an orthogonalised optimiser's shape factor "
                                            "would count width twice on top of its fan-in rules)", "optim=adamw")
    unit = Rule(forward_fan_in=-0.5, lr_fan_in=-0.5)  # paper Table 2: hidden and input weights; optim.lr_scale_func_adam
    rules = {role: Rule() for role in Role}  # biases, norms, the readout's bias: lr x 1
    rules.update({role: unit for role in (*HIDDEN_ROLES, Role.INPUT)})
    rules.update({role: Rule(lr_fan_in=-0.5) for role in (Role.EMBEDDING, Role.POSITIONAL)})  # lr x d^-1/2: its fan-in is d
    rules[Role.READOUT] = Rule(forward_fan_in=-1.0)  # linear_readout: x fan_in^-1, lr x 1 (mup_type "output")
    rules[Role.ATTN_SCORES] = Rule(forward=attn_mult, forward_fan_in=-0.5)  # on top of 1/sqrt(d_k): attn_mult / d_head
    # Depth (paper §4.3; optim.lr_scale_for_depth): every parameter in a block x L^-1/2, L its number of blocks.
    depth_lr = depth**-0.5 if depth else 1.0
    block = {role: Rule(r.init, r.forward, r.lr * depth_lr, r.wd, r.eps, r.forward_fan_in, r.lr_fan_in) for role, r in rules.items()}
    block[Role.ATTN_SCORES] = rules[Role.ATTN_SCORES]
    from initnorm.nn.umup import unit_normal, unit_scale_layers  # torch: not imported by a command that only reads tables

    return Table("umup", rules, block, width_mult=width / base_width, scheme=unit_normal,
                 layers=lambda model: unit_scale_layers(model, residual_mult, residual_attn_ratio, attn_mult))


def in_block(model, name: str) -> bool:
    """Whether the parameter or module ``name`` lies in one of the model's residual blocks (the
    ModuleList its ``BLOCKS`` attribute names; a model without one has no blocks)."""
    blocks = getattr(model, "BLOCKS", None)
    return bool(blocks) and name.startswith(f"{blocks}.")


def block_parameters(model) -> frozenset[str]:
    """The names of the parameters in the model's residual blocks."""
    return frozenset(n for n, _ in model.named_parameters() if in_block(model, n))


def make_table(options: Mapping, width: int, depth: int | None = None) -> Table:
    """The table a config's ``param`` node names (a registered name or a dotted path), at ``width``
    and ``depth``. Its keys were checked by the schema against the table's declared rules."""
    opts = {k: v for k, v in dict(options).items() if k != "name"}
    return PARAMS.get(options.get("name"))(width=width, depth=depth, **opts)


def refuse_unplaced(model, table: Table, roles) -> None:
    """A table that multiplies the output of a matrix used inside its module's own forward (``nn.GRU``'s gates,
    ``nn.MultiheadAttention``'s ``in_proj_weight``) is refused in one line: no hook can scale it, and leaving it
    out would train half the parameterisation."""
    for pname, module, role in unplaced(model, roles):
        rule = table.rule(role, in_block(model, pname))
        if rule.forward != 1.0 or rule.forward_fan_in:
            raise ConfigError(f"param={table.name} multiplies the output of {pname} ({role.value}) by "
                              f"{rule.forward:g}{' x fan_in^' + format(rule.forward_fan_in, 'g') if rule.forward_fan_in else ''}, but "
                              f"{type(module).__name__} uses it inside its own forward, where no multiplier can be applied; use a "
                              "parameterisation without forward multipliers on that role (param=mup or param=sp)")
