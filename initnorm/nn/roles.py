"""Parameter roles: the vocabulary shared by models, init schemes and parameterisations.

Every parameter of every model family has exactly one role, which the parameterisation maps to
its multipliers. Models state
their roles explicitly in ``parameter_roles()`` (a name -> role dict, not a tag on the tensor,
so it survives ``torch.save`` and wrappers); ``models.build`` refuses a parameter without one.
"""

from enum import Enum


class Role(str, Enum):
    EMBEDDING = "embedding"  # token lookup table
    POSITIONAL = "positional"  # learned positional table (the Decoder's is sinusoidal: no parameter)
    ATTN_QKV = "attn_qkv"  # query, key and value projections
    ATTN_OUT = "attn_out"  # attention output projection: writes into the residual stream
    MLP_IN = "mlp_in"  # first MLP matrix of a transformer block
    MLP_OUT = "mlp_out"  # second MLP matrix: writes into the residual stream
    INPUT = "input"  # an MLP's first layer, whose fan-in does not grow with width
    HIDDEN = "hidden"  # an MLP's width x width layers
    READOUT = "readout"  # the last matrix, producing logits
    READOUT_BIAS = "readout_bias"  # the readout's bias: its size is the output's, not the width
    NORM_GAIN = "norm_gain"
    NORM_BIAS = "norm_bias"
    BIAS = "bias"  # any other linear layer's bias
    FIXED = "fixed"  # a matrix no side of which grows with width (a user's model, models/infer.py): nothing scales
    ATTN_SCORES = "attn_scores"  # no parameter: the attention scores, whose forward multiplier is the attention scale


# Matrices whose fan-in grows with width: µP shrinks their init and learning rate (Yang et al. 2022, Table 3).
HIDDEN_ROLES = frozenset({Role.ATTN_QKV, Role.ATTN_OUT, Role.MLP_IN, Role.MLP_OUT, Role.HIDDEN})
# The last matrix of each residual branch: GPT-2 scales these by 1/sqrt(2L), Fixup/ReZero start them at zero.
BRANCH_OUT_ROLES = frozenset({Role.ATTN_OUT, Role.MLP_OUT})
# Roles that init schemes never see: biases start at zero and gains at one in every scheme.
FIXED_ROLES = {Role.BIAS: 0.0, Role.READOUT_BIAS: 0.0, Role.NORM_BIAS: 0.0, Role.NORM_GAIN: 1.0}
# Which sides (out, in) of a role's matrix grow with width; µP's base shape divides those by m.
WIDTH_SIDES = {Role.READOUT: (False, True), Role.INPUT: (True, False)} | {role: (True, True) for role in HIDDEN_ROLES}
# A forward multiplier on these scales the layer's input, so its bias is not scaled (microsoft/mup's
# MuReadout); on every other role it scales the layer's output, bias included (a residual branch).
INPUT_SCALED_ROLES = frozenset({Role.READOUT})



def _path(module_name: str, leaf: str) -> str:
    return f"{module_name}.{leaf}" if module_name else leaf


def _matrices(module) -> list[str]:
    return [n for n, p in module.named_parameters(recurse=False) if p.dim() >= 2]


def forward_sites(model, roles: dict, forward_roles: dict | None = None) -> list[tuple[str, object, Role]]:
    """The modules where a role's forward multiplier is applied, ``(name, module, role)``, found by the role table's
    parameter names: a module's declared forward role (the Decoder's attention scores, a readout that reads a tied
    weight), else the role of the one matrix it owns, when that matrix is its ``weight`` (a linear map of its input
    whose output a multiplier can scale: ``nn.Linear``, ``nn.Embedding``, a convolution, Hugging Face's ``Conv1D``).
    A module whose matrices are used inside its own forward (``nn.GRU``'s gates, ``nn.MultiheadAttention``'s
    ``in_proj_weight``) is no site: ``unplaced`` lists those matrices."""
    forward_roles = forward_roles or {}
    sites = []
    for name, module in model.named_modules():
        declared = forward_roles.get(name) or getattr(module, "FORWARD_ROLE", None)
        if declared is not None:
            sites.append((name, module, declared))
        elif _matrices(module) == ["weight"] and _path(name, "weight") in roles:
            sites.append((name, module, roles[_path(name, "weight")]))
    return sites


def unplaced(model, roles: dict) -> list[tuple[str, object, Role]]:
    """The matrices no forward site scales, ``(parameter name, owning module, role)``: a table that gives one of
    them a forward multiplier is refused, never silently not applied (``models/build.py``, ``models/own.py``)."""
    out = []
    for name, module in model.named_modules():
        own = _matrices(module)
        if own and own != ["weight"]:
            out += [(_path(name, n), module, roles[_path(name, n)]) for n in own if _path(name, n) in roles]
    return out
