"""Config -> model, for initnorm-train: ``build_model`` hands the composed config's ``model``, ``init`` and ``param``
nodes to ``initnorm.parameterize`` (``models/parameterize.py``), the one function that builds and parameterises a
model for the command line and for a loop of one's own, so the two never part.

The names other modules and users' own families import from here stay here: ``Family`` and ``MODELS``
(``models/families.py``), ``check_roles``, ``apply_forward_multipliers`` and ``init_filler`` (``models/apply.py``), and
``Built``, what ``build_model`` returns (``Parameterized``: ``model``, ``table``, ``roles``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from initnorm.models.apply import apply_forward_multipliers, check_roles, init_filler
from initnorm.models.families import MODELS, Family
from initnorm.models.parameterize import Parameterized, parameterize

__all__ = ["MODELS", "Built", "Family", "apply_forward_multipliers", "build_model", "check_roles", "init_filler"]

Built = Parameterized


def build_model(model_cfg: Mapping[str, Any], init_cfg: Mapping[str, Any], param_cfg: Mapping[str, Any], vocab_size: int) -> Built:
    """Build, check roles, and initialise every parameter once: scheme std times the table's init multiplier."""
    return parameterize(model_cfg, init=init_cfg, param=param_cfg, n_out=vocab_size)
