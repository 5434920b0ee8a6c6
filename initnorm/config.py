"""The composed config as plain values, its check, and which of its keys make the experiment.

The rules themselves live in ``initnorm.schema`` (one table for every key, the relations between
keys, each model family's own check next to its registry entry); ``validate`` is its entry point
for code that holds a resolved config.
"""

from __future__ import annotations

import json
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


# Keys that change how a run is watched or where it runs, not the experiment: a rerun may change them.
IGNORED = (
    "callbacks", "logger", "checkpoint", "summary", "threads", "log_every", "forks",
    "trainer.enable_progress_bar", "trainer.enable_model_summary", "trainer.log_every_n_steps", "trainer.accelerator", "trainer.devices",
    "trainer.strategy",  # batch_size is the global batch: a run resumes on another world size (training/distributed.py)
)


def comparable(c: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved config without the ``IGNORED`` keys, as JSON values: what must match for a folder to be reused."""
    out = json.loads(json.dumps(c, default=str))
    for dotted in IGNORED:
        node, *rest = dotted.split(".")
        if not rest:
            out.pop(node, None)
        elif isinstance(out.get(node), dict):
            out[node].pop(rest[0], None)
    return out
