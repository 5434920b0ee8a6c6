"""Validate the composed config in one place: every bad value stops here, before any training,
with one line that names it, what is allowed and the override that fixes it (STYLE.md point 10)."""

from __future__ import annotations

from typing import Any, Mapping

from initnorm.errors import ConfigError, bad_value
from initnorm.models.build import MODELS
from initnorm.models.decoder import PLACEMENTS
from initnorm.nn.init import resolve
from initnorm.nn.norms import NORMS
from initnorm.nn.param import make_table
from initnorm.optim import OPTIMIZERS


def _positive(cfg: Mapping[str, Any], key: str, kind=float) -> None:
    value = cfg.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0 or (kind is int and int(value) != value):
        raise bad_value(key, value, f"a positive {'integer' if kind is int else 'number'}", f"{key}=<{'n' if kind is int else 'x'} > 0>")


def validate(cfg: Mapping[str, Any]) -> None:
    """Raise ``ConfigError`` for the first bad value in a resolved config (a plain dict)."""
    _positive(cfg, "steps", int)
    _positive(cfg, "lr")
    _positive(cfg, "batch_size", int)
    warmup = cfg.get("warmup", 0)
    if not isinstance(warmup, int) or not 0 <= warmup <= cfg["steps"]:
        raise bad_value("warmup", warmup, f"an integer from 0 to steps={cfg['steps']}", f"warmup={min(200, cfg['steps'])}")
    every = (cfg.get("checkpoint") or {}).get("every_n_steps", 0)
    if not isinstance(every, int) or isinstance(every, bool) or every < 0:
        raise bad_value("checkpoint.every_n_steps", every, "an integer >= 0 (0: no checkpoints)", "checkpoint.every_n_steps=250")
    if cfg.get("schedule", "cosine") not in ("cosine", "constant"):
        raise bad_value("schedule", cfg.get("schedule"), "one of cosine, constant", "schedule=cosine")

    model = cfg["model"]
    MODELS.get(model["family"])
    if model["family"] == "decoder":
        if cfg["norm"] not in PLACEMENTS:
            raise bad_value("norm", cfg["norm"], f"one of {', '.join(PLACEMENTS)}", "norm=pre")
        heads = model["n_heads"]
        if model["width"] % heads:
            raise bad_value("width", model["width"], f"a multiple of model.n_heads={heads}", f"width={heads * max(1, model['width'] // heads)}")
        context = cfg["data"]["context"]
        if context > model["max_context"]:
            raise bad_value("data.context", context, f"at most the position table's model.max_context={model['max_context']}", f"model.max_context={context}")
    _positive(model, "width", int)
    _positive(model, "depth", int)
    dropout = model.get("dropout", 0.0)
    if not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise bad_value("model.dropout", dropout, "a number in [0, 1)", "model.dropout=0.2")

    NORMS.get(cfg["norm_type"]["name"])
    OPTIMIZERS.get(cfg["optim"]["name"])
    resolve(cfg["init"])
    make_table(cfg["param"], width=model["width"])  # unknown name, width below µP's base width


def to_plain(cfg) -> dict:
    """The resolved config as plain dicts and lists (models and checks never see OmegaConf)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)


def compose_train(overrides: list[str]):
    """The training config with ``overrides``, composed outside a Hydra app (for commands such as
    ``initnorm.probe`` and ``initnorm.coord_check`` that build or train several models in one process)."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(Path(__file__).resolve().parents[1] / "conf"), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))


def split_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    """A command's own arguments, and the training-config overrides after ``--``."""
    if "--" not in argv:
        return list(argv), []
    i = argv.index("--")
    return list(argv[:i]), list(argv[i + 1 :])


def comma_list(kind=str):
    """An argparse type for ``16,32,64``."""
    return lambda text: [kind(x) for x in text.split(",") if x]
