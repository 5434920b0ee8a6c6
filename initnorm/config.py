"""Validate the composed config in one place: every bad value stops here, before any training,
with one line that names it, what is allowed and the override that fixes it."""

from __future__ import annotations

from typing import Any, Mapping

from initnorm.errors import ConfigError, bad_value
from initnorm.models.build import MODELS
from initnorm.nn.init import resolve
from initnorm.nn.norms import NORMS
from initnorm.nn.param import make_table
from initnorm.training.optim import OPTIMIZERS


def _positive(cfg: Mapping[str, Any], key: str, kind=float) -> None:
    value = cfg.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0 or (kind is int and int(value) != value):
        raise bad_value(key, value, f"a positive {'integer' if kind is int else 'number'}", f"{key}=<{'n' if kind is int else 'x'} > 0>")


def validate(cfg: Mapping[str, Any]) -> None:
    """Raise ``ConfigError`` for the first bad value in a resolved config (a plain dict)."""
    _positive(cfg, "steps", int)
    _positive(cfg, "lr")
    _positive(cfg, "batch_size", int)
    warmup = cfg["warmup"]
    if not isinstance(warmup, int) or not 0 <= warmup <= cfg["steps"]:
        raise bad_value("warmup", warmup, f"an integer from 0 to steps={cfg['steps']}", f"warmup={min(200, cfg['steps'])}")
    every = cfg["checkpoint"]["every_n_steps"]
    if not isinstance(every, int) or isinstance(every, bool) or every < 0:
        raise bad_value("checkpoint.every_n_steps", every, "an integer >= 0 (0: no checkpoints)", "checkpoint.every_n_steps=250")
    if cfg["schedule"] not in ("cosine", "constant"):
        raise bad_value("schedule", cfg["schedule"], "one of cosine, constant", "schedule=cosine")
    if cfg["compile"] not in ("auto", True, False):
        raise bad_value("compile", cfg["compile"], "one of auto, true, false", "compile=auto")

    model = cfg["model"]
    _positive(model, "width", int)
    _positive(model, "depth", int)
    MODELS.get(model["family"]).check(cfg)  # the family's own rules (models/build.py)
    dropout = model.get("dropout", 0.0)  # a family without dropout has no key
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
