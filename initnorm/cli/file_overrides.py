"""Overrides read back from a file (a search's ``search.json``, its best trial): data, never code:
the command line is the only source of code (ARCHITECTURE.md).

``initnorm-transfer`` hands a search's overrides to a new sweep. A copied search folder is someone
else's file, and ``data=custom data._target_=os.system +data.command='touch X'`` in it ran the command.
So an override from a file is taken only where it sets a value: a key the schema knows (``RULES``
and every shipped entry's own keys) to a value its rule accepts, or a config group of ``conf/`` to one
of its options. Everything that names code is refused in one line naming the file and the override,
and is left to the command line of the command being run, the only source of code: a ``_target_`` or
any key whose value is imported (``model.family``, ``param.name``, ``init.name``, ``init.fn``,
``norm_type.name``, ``data.kind`` as a dotted path), a key the schema does not check (``trainer.*``,
``callbacks.*``, ``logger.*`` beyond its rules, a ``+`` one it does not know, an argument of a user's own
class under ``model=custom`` or ``data=custom``), a ``hydra`` setting or
group (the launcher, callbacks, job logging), a package (``@``), an interpolation (``${...}``), a
mapping (a node that could hold a ``_target_``) and a sweep.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from initnorm.cli.compose import CONF_DIR
from initnorm.errors import ConfigError

OPTION = re.compile(r"[\w.-]+")  # an option's file name in conf/<group>/, no folder in it


def groups() -> dict[str, set[str]]:
    """``conf/``'s config groups (not hydra's) and their options."""
    return {d.name: {f.stem for f in d.glob("*.yaml")} for d in Path(CONF_DIR).iterdir() if d.is_dir() and d.name != "hydra"}


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def _problem(override: Any, known: dict[str, set[str]]) -> str | None:
    """Why ``override`` cannot come from a file; None where it only sets a value."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from initnorm import schema
    from initnorm.registry import is_dotted

    if not isinstance(override, str):
        return f"is a JSON {type(override).__name__}, not an override"
    try:
        ov = OverridesParser.create().parse_override(override)
    except Exception:  # Hydra's grammar: what it does not parse, Hydra would not run either
        return "is not an override Hydra reads"
    key = ov.key_or_group
    if key == "hydra" or key.startswith(("hydra.", "hydra/")):
        return "is a Hydra setting (launcher, sweeper, callbacks, logging)"
    if ov.package is not None:
        return "moves a config node to another package (@)"
    if any(part.startswith("_") for part in re.split(r"[./]", key)):
        return "names code (a _target_ or another key Hydra's instantiate reads)"
    if ov.is_sweep_override():
        return "is a sweep, not one value"
    value = None if ov.is_delete() else ov.value()
    if isinstance(value, dict) or (isinstance(value, (list, tuple)) and any(isinstance(v, (dict, list, tuple)) for v in value)):
        return "sets a node (which could hold a _target_), not a value"
    if any("${" in s for s in _strings(value)):
        return "holds an interpolation (${...})"
    if "." not in key and key in known:  # a config group: one of its options in conf/
        options = _strings(value)
        if ov.is_delete() or value is None:
            return None
        if not options or len(options) != len(value if isinstance(value, list) else [value]):
            return f"picks no option of conf/{key}/"
        bad = [o for o in options if not OPTION.fullmatch(o) or o not in known[key]]
        return f"names {bad[0]!r}, which is not an option of conf/{key}/ ({', '.join(sorted(known[key]))})" if bad else None
    rule = schema.rule_for(key, schema.every_rule())
    if rule is None:
        return "sets a key the schema does not check (only its keys are data)"
    if rule.kind == "dotted" or (rule.kind == "entry" and any(is_dotted(s) for s in _strings(value))):
        return "names code (a dotted path is imported)"
    if rule.kind == "any":  # model=custom's, data=custom's: whatever a class named on a command line takes
        return "sets an argument of a user's own class (model=custom, data=custom), which only its command line names"
    if ov.is_delete():
        return None
    try:
        schema.check_value(key, value, rule)
    except ConfigError as exc:
        return f"is not a value its rule allows ({exc})"
    return None


def data_overrides(overrides: list[Any], source: str) -> list[str]:
    """``overrides`` where each only sets a value (module docstring); else ``ConfigError``, one line naming ``source`` (the
    file) and the first override that could name code. Pass an override that names code on the command line instead."""
    if not isinstance(overrides, list):
        raise ConfigError(f"{source}: its overrides are a JSON {type(overrides).__name__}, not a list; delete the file (or move it "
                          "away) and rerun the command that wrote it")
    known = groups()
    for o in overrides:
        if why := _problem(o, known):
            key = o.partition("=")[0] if isinstance(o, str) else "it"
            raise ConfigError(f"{source}: {o!r} {why}, and a file's overrides are data only: nothing read from a run or "
                              f"sweep folder names code; give `{key}=...` on this command's own line if you mean it, "
                              "or delete the file (or move it away)")
    return list(overrides)
