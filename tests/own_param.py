"""A parameterisation of one's own, in one file outside the package (what tests/test_own_entries.py
names by its dotted path): µP whose hidden matrices learn at m^-lr_power instead of m^-1 (m = width
/ base width), with ``param.lr_power`` a key of its own. At lr_power = 1 it is µP exactly.

Everything initnorm needs is here: the table function, its display name, its kind (the axes its
coordinates are expected to be stable across, which the coordinate check's verdict reads) and the
``param`` keys it reads with their rules (the schema refuses any other key).
"""

from dataclasses import replace

from initnorm.keyrules import Num
from initnorm.nn.param import MUP_RULES, Table, mup_table, standard
from initnorm.nn.roles import HIDDEN_ROLES
from initnorm.registry import About


def mup_lr_power(width: int, base_width: int, lr_power: float = 1.0, **options) -> Table:
    """µP's table with the hidden learning rate x m^-lr_power and, so lr x wd stays put, weight decay x m^lr_power."""
    table = mup_table(width=width, base_width=base_width, **{**options, "name": "mup_lr_power"})
    m = width / base_width
    rules = {role: replace(r, lr=m**-lr_power, wd=m**lr_power) if role in HIDDEN_ROLES else r for role, r in table.rules.items()}
    return replace(table, rules=rules)


mup_lr_power.about = About("µP, hidden lr x m^-p", "width", MUP_RULES | {"lr_power": Num(0, 2, fix=1.0, note="1: µP")})


def plain(width: int, base_width: int, **_) -> Table:
    """The standard parameterisation under another name: the verdict must judge it by its kind (the baseline)."""
    return standard(width=width, base_width=base_width)


plain.about = About("my SP", "neither")
