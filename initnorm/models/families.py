"""Model families by name: a built-in family is one ``Family`` registered here (its builder, its check and its
``About``); a user's own is one named by a dotted path (``model.family=mypkg.models:FAMILY``), and a plain
``nn.Module`` of one's own is ``model=custom`` (``models/own.py``). ``models/parameterize.py`` builds and
parameterises whichever is named."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from initnorm.errors import bad_value
from initnorm.keyrules import Choice, Int, Num, Text
from initnorm.models import mlp, own
from initnorm.models.decoder import PLACEMENTS, Decoder
from initnorm.nn.param import Table
from initnorm.nn.roles import Role
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
