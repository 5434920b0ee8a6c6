"""Which jobs of a sweep are one config to check: the preflight checks each distinct config once (``cli/preflight.py``).

Jobs that differ in their seed alone are one config: no rule but the seed's own reads the seed. A key that copies the
seed by interpolation (``experiment=coord_check``'s ``callbacks.coord.seed: ${seed}``; ``Composer.seeded`` names them)
counts as the seed does where a job's holds its seed, so a coordinate check's seeds of one width are one config too.
"""

from __future__ import annotations

import json
from typing import Any

from initnorm.cli.composer import value_at

_DROP = object()


def key(c: dict[str, Any], seeded: tuple[str, ...] = ()) -> tuple[str, tuple[str, ...]]:
    """What makes ``c`` (a job's resolved config) the same check as another's, and the keys of ``seeded`` that hold its seed."""
    seed = c.get("seed")
    copies = tuple(k for k in seeded if _same(value_at(c, k), seed))
    rest = {k: v for k, v in c.items() if k != "seed"}
    for k in copies:
        rest = replaced(rest, k)
    return "config:" + json.dumps([copies, rest], sort_keys=True, default=repr), copies


def with_seed(checked: dict[str, Any], seed: Any, copies: tuple[str, ...]) -> dict[str, Any]:
    """The checked config of the job's distinct config, with the job's seed where it goes (the nested values stay the
    first job's: read them, do not change them)."""
    out = {**checked, "seed": seed}
    for k in copies:
        out = replaced(out, k, seed)
    return out


def replaced(d: dict[str, Any], dotted: str, value: Any = _DROP) -> dict[str, Any]:
    """``d`` with ``dotted`` set to ``value`` (or dropped), copying only the dicts on its path."""
    head, _, rest = dotted.partition(".")
    out = dict(d)
    if rest:
        out[head] = replaced(d[head], rest, value)
    elif value is _DROP:
        out.pop(head, None)
    else:
        out[head] = value
    return out


def _same(value: Any, seed: Any) -> bool:
    return type(value) is type(seed) and value == seed
