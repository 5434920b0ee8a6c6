"""Parameterisations by name: each is a table, role -> (init, forward, learning-rate) multipliers.

A table is applied exactly twice: when ``models.build`` initialises the model (init multipliers,
forward multipliers) and when ``training.optim`` makes the optimiser's parameter groups
(learning-rate multipliers). Nothing rescales weights afterwards, so the result survives
``torch.save`` and any wrapper. A role the table does not cover is an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from initnorm.errors import ConfigError, bad_value
from initnorm.nn.roles import HIDDEN_ROLES, Role
from initnorm.registry import Registry


@dataclass(frozen=True)
class Rule:
    """Multipliers for one role: on the init std, on the layer's output, on the learning rate."""

    init: float = 1.0
    forward: float = 1.0
    lr: float = 1.0


@dataclass(frozen=True)
class Table:
    """A parameterisation at one width. ``attn_scale`` multiplies the usual 1/sqrt(d_k) of attention scores."""

    name: str
    rules: Mapping[Role, Rule]
    attn_scale: float = 1.0

    def rule(self, role: Role) -> Rule:
        try:
            return self.rules[role]
        except KeyError:
            raise ConfigError(f"param={self.name} has no rule for role {role.value!r}; add one to its table in initnorm/nn/param.py") from None


ParamFn = Callable[..., Table]
PARAMS: Registry[ParamFn] = Registry("parameterisation", "param")


@PARAMS.register("sp")
def standard(width: int, base_width: int, **_) -> Table:
    """Standard parameterisation: every multiplier is 1, at every width."""
    return Table("sp", {role: Rule() for role in Role})


@PARAMS.register("mup")
def mup(width: int, base_width: int, readout: str = "logits", hidden_init: str = "scale", **_) -> Table:
    """µP for Adam (Yang et al. 2022, Table 3), relative to ``base_width`` d0, with m = d / d0.

    Hidden matrices (fan-in grows with width) get their learning rate divided by m. Two choices
    pick the variant; at m = 1 every variant is SP except ``readout=zero``:

    - ``hidden_init=scale``: hidden init std divided by sqrt(m), for fixed-std schemes (the deck:
      0.02/sqrt(m)); ``keep``: the scheme is already fan-in (He), as in the chapter's step 4.
    - ``readout=logits``: logits divided by m (the deck, and mup's MuReadout);
      ``zero``: the readout starts at zero and its learning rate is divided by m (the chapter).

    Attention scores scale as 1/d_k instead of 1/sqrt(d_k): with a fixed head count d_k grows
    like m, so the multiplier on 1/sqrt(d_k) is 1/sqrt(m), which is 1 at the base width.
    """
    if width < base_width:
        raise bad_value("width", width, f"µP here is defined for width >= param.base_width={base_width}", f"param.base_width={width}")
    if readout not in ("logits", "zero"):
        raise bad_value("param.readout", readout, "one of logits, zero", "param.readout=logits")
    if hidden_init not in ("scale", "keep"):
        raise bad_value("param.hidden_init", hidden_init, "one of scale, keep", "param.hidden_init=scale")
    m = width / base_width
    hidden = Rule(init=m**-0.5 if hidden_init == "scale" else 1.0, lr=1.0 / m)
    out = Rule(forward=1.0 / m) if readout == "logits" else Rule(init=0.0, lr=1.0 / m)
    rules = {role: Rule() for role in Role}
    rules.update({role: hidden for role in HIDDEN_ROLES})
    rules[Role.READOUT] = out
    return Table("mup", rules, attn_scale=m**-0.5)


def make_table(options: Mapping, width: int) -> Table:
    """The table a config's ``param`` node names, at ``width``."""
    opts = {k: v for k, v in dict(options).items() if k != "name"}
    return PARAMS.get(options.get("name"))(width=width, **opts)
