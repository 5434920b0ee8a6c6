"""A bad override restated in one line, whatever Hydra raised for it.

Hydra answers a typo'd key (``nrom=post``), a key the config lacks (``trainer.strategy=ddp``) and an
unknown option (``optim=lion``, ``logger=[tensorboard,mlfow]``) in its own words ("Could not override
'nrom'. To append to your config use +nrom=post", a search path). Each becomes the project's line: what
is wrong, what is allowed (filled from conf/ or the registry that decides it), the closest known name
(``errors.closest``: none when none is close) and the override that fixes it, as the schema's own lines read.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from initnorm.cli.compose import CONF_DIR
from initnorm.errors import ConfigError, closest


def options(group: str) -> list[str]:
    """What ``group=`` accepts: its files in conf/ (Hydra's own list is empty for an option inside a list)."""
    folder = Path(CONF_DIR, group)
    return sorted(f.stem for f in folder.glob("*.yaml")) if folder.is_dir() else []


@functools.cache
def default_choice(group: str) -> str | None:
    """The option train.yaml's defaults list picks for ``group`` (``optim`` -> ``adamw``), the fix when no option is close."""
    for entry in OmegaConf.to_container(OmegaConf.load(Path(CONF_DIR, "train.yaml"))).get("defaults", []):
        if isinstance(entry, dict) and group in entry and entry[group] is not None:
            return str(entry[group])
    return None


@functools.cache
def own_route(group: str) -> str | None:
    """``optim=custom optim._target_=<module>.<name>``: how a group that takes one's own (``conf/<group>/custom.yaml``) is
    given it, for a name that is none of its options (``optim=lion``: a user's own Lion is one override away)."""
    path = Path(CONF_DIR, group, "custom.yaml")
    if not path.is_file():
        return None
    node = OmegaConf.load(path)
    keys = set(node)  # its keys, ??? ones included (`in` on the config is False for a ??? value)
    key = next((k for k in ("_target_", "fn") if k in keys), None)
    return f"{group}=custom {group}.{key}=<module>.<name>" if key else None


def written(overrides: Sequence[str], key: str) -> tuple[str, str] | None:
    """The override of ``key`` as the user wrote it (``+nrom=post``): its prefix and its value."""
    for override in overrides:
        name, eq, value = str(override).partition("=")
        if eq and name.lstrip("+~") == key:
            return name[: len(name) - len(name.lstrip("+~"))], value
    return None


def unknown_option(group: str, value: str, known: list[str], overrides: Sequence[str] = ()) -> ConfigError:
    """``optim=lion``: the known options, the closest (or the default when none is close), the whole override fixed."""
    known = known or options(group)
    best = closest(value, known)
    pick = best or default_choice(group) or (known[0] if known else "<name>")
    said = f"the closest: {best}" if best else f"no option is close to {value!r}, the default: {pick}"
    fix = f"{group}={pick}"
    if (mine := written(overrides, group)) is not None and value in mine[1]:  # a list or a sweep: only the bad name replaced
        fix = f"{mine[0]}{group}=" + re.sub(rf"(?<![\w.-]){re.escape(value)}(?![\w.-])", pick, mine[1])
    own = f"; or your own: `{route}`" if not best and (route := own_route(group)) else ""
    return ConfigError(f"unknown option {group}={value!r}; known: {', '.join(known) or 'none'}; {said}; fix it with `{fix}`{own}")


def refuse_search_range(override) -> None:
    """``lr=interval(1e-3,1e-1)`` outside a search (``override``: Hydra's parsed one): a grid sweep and a run take values.
    Hydra's basic sweeper says only "does not support sweep type : INTERVAL_SWEEP"."""
    from hydra.core.override_parser.types import ValueType

    if override.value_type == ValueType.INTERVAL_SWEEP:
        key, text, span = override.get_key_element(), override.input_line.partition("=")[2], override.value()
        raise ConfigError(f"{key}={text} is a range to search, and a grid sweep takes values: give them (`{key}={span.start:g},"
                          f"{span.end:g}`), or search the range with a search sweeper (conf/hparams_search/, as "
                          "`hparams_search=lr_base`)")


def several_values(key: str, text: str, values: list, overrides: Sequence[str], listed: bool) -> ConfigError:
    """``seed=1,2`` without ``-m``: Hydra's "Ambiguous value" with its three readings, as the project's line: the sweep
    (the whole command with ``-m``), one value, and a list only where the key holds one (``listed``)."""
    one = f"`{key}={values[0]}`"
    ways = [f"a sweep of them takes -m (`initnorm-train -m {' '.join(overrides)}`)", f"one value: {one}"]
    if listed:
        ways.append(f"a list: `{key}=[{text}]`")
    return ConfigError(f"{key}={text} gives {len(values)} values to one run; " + "; ".join(ways))


@functools.cache
def trainer_arguments() -> tuple[str, ...]:
    """What Lightning's Trainer takes (``strategy``, ``precision`` ...): the keys a ``+trainer.<key>=`` may add."""
    import inspect

    import lightning

    return tuple(p for p in inspect.signature(lightning.Trainer.__init__).parameters if p != "self")


def _node_keys(config: Any, group: str) -> list[str]:
    node = OmegaConf.select(config, group) if group and config is not None else config
    keys = node if isinstance(node, Mapping) or OmegaConf.is_dict(node) else []
    return sorted(str(k) for k in keys if not str(k).startswith("_"))


def not_in_config(key: str, value: str, prefix: str, config: Any) -> ConfigError:
    """``nrom=post``, ``trainer.strategy=ddp``: a key the composed config lacks. A key initnorm or Lightning's Trainer
    reads needs only Hydra's ``+``; a typo gets the closest key (with a ``+`` when the config lacks that one too)."""
    from initnorm import schema

    group, _, rest = key.rpartition(".")
    present = _node_keys(config, group)
    if group == "trainer":  # the config's keys listed; the Trainer's ~40 others are named only when one is meant
        known, whose = sorted(set(trainer_arguments()) | set(present)), "Lightning's Trainer"
    else:
        rules, whose = schema.every_rule(), "initnorm"
        if key in rules or key.startswith(schema.PASSED_ON):  # read by initnorm, or passed on to a tracker or callback
            return ConfigError(f"{key} is not in the chosen config, and Hydra adds a key only with a +; fix it with `+{key}={value}`")
        inside = [k[len(group) + 1 :] for k in rules if k.startswith(f"{group}.")] if group else [*rules, *schema.PASSED_ON]
        known = sorted({k.split(".")[0] for k in inside if k[:1].isalpha()} | {k for k in present if k != "hydra"})
        return _typo(key, value, known, whose, present, prefix, known, _node_keys(config, ""))
    if rest in known:
        return ConfigError(f"{key} is not in the trainer config ({', '.join(present)}), and Hydra adds a key only with a +: "
                           f"{whose} takes {rest}; fix it with `+{key}={value}`")
    listed = [*present, "or any argument of Lightning's Trainer with a +"]
    return _typo(key, value, known, whose, present, prefix, listed)


def _typo(key: str, value: str, known: list[str], whose: str, present: list[str], prefix: str, listed: list[str],
          top: Sequence[str] = ()) -> ConfigError:
    group, _, rest = key.rpartition(".")
    near = closest(rest, known)
    where = f"the keys of {group}" if group else "the top-level keys"
    head = f"{key} is not a key {whose} reads ({where}: {', '.join(listed)})"
    if near is None and group and rest in top:  # optim.lr: the run's rate is the top-level lr
        return ConfigError(f"{head}; {rest} is a top-level key: fix it with `{rest}={value}`")
    if near is None:
        return ConfigError(f"{head}; fix it: drop `{prefix}{key}={value}`")
    plus = "" if near in present else "+"
    return ConfigError(f"{head}; the closest: {near}; fix it with `{plus}{group + '.' if group else ''}{near}={value}`")


def restate(exc: BaseException, overrides: Sequence[str] = (), config: Any = None) -> ConfigError | None:
    """Hydra's error for a bad override as one line; None for any other error. ``config``: the config composed without
    the bad override (which keys need a ``+``), where the caller has it."""
    from hydra.errors import MissingConfigException

    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and "/" in exc.missing_cfg_file:
        group, _, value = exc.missing_cfg_file.rpartition("/")
        return unknown_option(group, value, sorted(exc.options or []), overrides)
    match = re.search(r"Could not override '([^']+)'\.\s*To append to your config use \+\S+?=(.*)", str(exc))
    if match is None:
        return None
    key, value = match.group(1), match.group(2).strip()
    prefix, value = written(overrides, key) or ("", value)
    return not_in_config(key, value, prefix, config)


def without(overrides: Sequence[str], exc: BaseException) -> list[str]:
    """The overrides minus the one ``exc`` is about, to compose the config the user meant to change."""
    match = re.search(r"Could not override '([^']+)'", str(exc))
    key = match.group(1) if match else None
    return [o for o in overrides if str(o).partition("=")[0].lstrip("+~") != key]
