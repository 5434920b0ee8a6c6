"""The composed config as plain values, and its check.

The rules themselves live in ``initnorm.schema`` (one table for every key, the relations between
keys, each model family's own check next to its registry entry); ``validate`` is its entry point
for code that holds a resolved config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def validate(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``ConfigError`` (one line) for the first bad value of a resolved config (a plain dict);
    returns the checked copy (``data.path`` absolute against the current folder)."""
    from initnorm.schema import check

    return check(cfg)


def to_plain(cfg) -> dict:
    """The resolved config as plain dicts and lists (models and checks never see OmegaConf)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)
