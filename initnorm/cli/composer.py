"""A sweep's job configs, composed once per distinct choice of config groups.

Hydra composes each job of a sweep from scratch (``ConfigLoader.load_sweep_config``: 0.1-0.4 s a job,
most of it reading YAML and building the defaults list again). Only the overrides that choose a
config group (``model=wide_mlp``, ``+x=y`` for a group, ``~group``) and the sweep's Hydra overrides
change that composition; every other override is a value that Hydra applies to the composed config
afterwards, one after another (``ConfigLoaderImpl._apply_overrides_to_config``). So a
:class:`Composer` composes once per distinct combination of group choices (its *base*) and applies a
job's value overrides to a copy of it, with Hydra's own functions, in Hydra's order: the same config
and the same refusal as Hydra's composition of that job (``tests/test_composer.py`` compares both on
every preset's sweep).

:meth:`Composer.job_config` is the job's full config (what a launcher hands ``run_job``), a deep copy
each time; :meth:`Composer.job_plain` the same as plain values without that copy (what a vectorised group's member
saves in its folder: ``cli/member_setup.py``). :meth:`Composer.task` is what the preflight checks, the job's resolved config as plain
values, made without that copy: the overrides are set on the base in place, every interpolation of
the task is resolved again, and the base is put back. A job it cannot do that way (``+``, ``~``,
``++``, a dict value, an interpolation that reads the ``hydra`` node) goes through ``job_config``.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import sys
from collections.abc import Sequence
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, ValueType
from hydra.errors import ConfigCompositionException
from hydra.types import RunMode
from omegaconf import AnyNode, DictConfig, ListConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from initnorm.cli.hydra_adapter import apply_overrides, get_overrides_dirname

MISSING = object()


class Base:
    """One composition of the config groups, with what a job's value overrides need: the task's unresolved values,
    its resolved values (computed once), and how each of its interpolations is resolved again for a job."""

    def __init__(self, cfg: DictConfig, task_lines: list[str]) -> None:
        self.cfg = cfg
        self.task_lines = task_lines  # the group overrides of the job in the composition (its overrides.task)
        self.raw = OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)  # as Hydra saves it (.hydra/*.yaml)
        task = {k: v for k, v in self.raw.items() if k != "hydra"}
        self.interpolated = dict(_interpolated(task, ""))  # dotted key -> its unresolved value
        # ${hydra:job.num}, ${hydra.job.id}: values that differ from job to job in the hydra node, which apply does not make
        self.reads_hydra = any("hydra" in str(raw) for raw in self.interpolated.values())
        # the keys that copy the seed (experiment=coord_check's callbacks.coord.seed: ${seed}): the preflight checks once
        # the jobs that differ in their seed alone, copies included
        self.seeded = tuple(k for k in self.interpolated if self._origin(k) == "seed")
        self._resolved: dict[str, Any] | None = None
        self._untyped: dict[str, bool] = {}

    def _origin(self, key: str) -> str | None:
        """The key a chain of ``${a.b}`` interpolations from ``key`` ends on; None where it ends on anything else."""
        passed = set()
        while key in self.interpolated:
            if key in passed:
                return None  # a cycle: OmegaConf refuses it when it resolves the task
            passed.add(key)
            key = _simple_target(self.interpolated[key])
            if key is None:
                return None
        return key

    def resolved(self) -> dict[str, Any]:
        if self._resolved is None:
            self._resolved = _task(self.cfg)
        return self._resolved

    def untyped(self, key: str) -> bool:
        """Whether the node at ``key`` takes any value as it is (a YAML value; a typed node would convert it)."""
        if key not in self._untyped:
            node: Any = self.cfg
            for part in key.split("."):
                node = node._get_node(part) if isinstance(node, DictConfig) else None
            self._untyped[key] = isinstance(node, AnyNode) or (isinstance(node, ListConfig) and node._metadata.element_type is Any)
        return self._untyped[key]

    def apply(self, values: list[Override]) -> dict[str, Any] | None:
        """The resolved task config with ``values`` applied, as OmegaConf would resolve it; None where this
        cannot tell without OmegaConf (an add or a delete, a dict, an interpolation in a value, a typed node, a
        resolver other than ``oc.select``, an interpolation that names a changed key in a longer text)."""
        if self.reads_hydra or not all(_settable(o, self.raw) and self.untyped(o.key_or_group) for o in values):
            return None
        out = _copy(self.resolved())
        keys = []
        for o in values:
            _set(out, o.key_or_group, _copy(o.value()))
            keys.append(o.key_or_group)
        if not keys:
            return out
        # Each interpolation of the form ${a.b} takes its target's value; repeated until nothing changes, which
        # for a chain (model.norm_eps -> norm_type.eps) takes as many passes as the chain is long.
        for _ in range(len(self.interpolated) + 1):
            moved = False
            for key, raw in self.interpolated.items():
                if key in keys:
                    continue  # overridden: the override's value stands
                target = _simple_target(raw)
                if target is None:
                    continue
                value = value_at(out, target)
                if value is MISSING:
                    return None
                if value != value_at(out, key):
                    _set(out, key, _copy(value))
                    moved = True
            if not moved:
                break
        else:
            return None  # a cycle: OmegaConf says so in its own words
        changed = keys + [k for k in self.interpolated if value_at(out, k) != value_at(self.resolved(), k)]
        for key, raw in self.interpolated.items():
            if key in keys or _simple_target(raw) is not None:
                continue
            text = str(raw)
            if any(name != "oc.select" for name in RESOLVER.findall(text)):
                return None
            if any(_names(token, k) for token in TOKEN.findall(text) for k in changed):
                return None
        return out


class Composer:
    """Job configs of one sweep: ``master`` is the sweep's config (its ``hydra.overrides.hydra`` go into every
    job, and its resolved values, the sweep folder's random suffix and its timestamp, are copied into each)."""

    def __init__(self, loader, master: DictConfig) -> None:
        self.loader = loader
        self.master = master
        self.config_name = master.hydra.job.config_name
        # unresolved, as Hydra reads them: reading an element resolves it, and ${initnorm.unique_dir:...} reserves a folder
        self.hydra_lines = [str(o) for o in OmegaConf.to_container(master.hydra.overrides.hydra, resolve=False)]
        self._parsed: dict[str, Override] = {}
        self._parser: OverridesParser | None = None
        self._templates: dict[str, Override] = {}  # a line's text before "=" -> Hydra's parse of one line with that key
        self._is_group: dict[str, bool] = {}
        self._bases: dict[tuple[str, ...], Base] = {}

    def __getstate__(self) -> dict[str, Any]:  # to a worker: the compositions and the master, not the parser's caches
        return {**self.__dict__, "_parsed": {}, "_parser": None, "_templates": {}}

    def parse(self, lines: Sequence[str]) -> list[Override]:
        """Hydra's parse of each line, once per distinct line (a sweep repeats its values in every job); a number given to
        a key Hydra has parsed before is read without its parser (:func:`number`)."""
        new = [line for line in dict.fromkeys(lines) if line not in self._parsed]
        slow = []
        for line in new:
            key, _, text = line.partition("=")
            template, value = self._templates.get(key), number(text)
            if template is None or value is None:
                slow.append(line)
            else:  # the part before "=" is read alone (Hydra's KEY mode), so the key's parse is the template's
                self._parsed[line] = dataclasses.replace(template, _value=value, input_line=line)
        if slow:
            self._parser = self._parser or OverridesParser.create()
            for line, parsed in zip(slow, self._parser.parse_overrides(slow)):
                self._parsed[line] = parsed
                if parsed.value_type == ValueType.ELEMENT and not parsed.is_delete():
                    self._templates.setdefault(line.partition("=")[0], parsed)
        return [self._parsed[line] for line in lines]

    def is_group(self, override: Override) -> bool:
        """Hydra's own test (``defaults_list.Overrides``): a group that exists, and a value that is not a dict."""
        key = override.key_or_group
        if key not in self._is_group:
            self._is_group[key] = self.loader.repository.group_exists(key)
        return self._is_group[key] and not isinstance(override.value(), dict)

    def split(self, overrides: Sequence[str]) -> tuple[tuple[str, ...], list[Override]]:
        """The job's group overrides (what its composition depends on) and its value overrides, in order."""
        parsed = self.parse(list(overrides))
        groups = tuple(o.input_line for o in parsed if self.is_group(o))
        return groups, [o for o in parsed if not self.is_group(o)]

    def base(self, groups: tuple[str, ...]) -> Base:
        """The composition of the sweep's Hydra overrides and these group overrides, made once."""
        if groups not in self._bases:
            cfg = self.loader.load_configuration(config_name=self.config_name, overrides=self.hydra_lines + list(groups),
                                                 run_mode=RunMode.RUN)
            OmegaConf.copy_cache(from_config=self.master, to_config=cfg)
            self._bases[groups] = Base(cfg, list(groups))
        return self._bases[groups]

    def bases(self) -> int:
        return len(self._bases)

    def job_config(self, overrides: Sequence[str]) -> DictConfig:
        """The job's config, as ``load_sweep_config(master, overrides)`` composes it."""
        groups, values = self.split(overrides)
        base = self.base(groups)
        cfg = copy.deepcopy(base.cfg)
        try:
            apply_overrides(values, cfg)
        except OmegaConfBaseException as exc:  # as load_configuration wraps what its own steps raise
            raise ConfigCompositionException().with_traceback(sys.exc_info()[2]) from exc
        self._finish(cfg, overrides)
        OmegaConf.copy_cache(from_config=self.master, to_config=cfg)
        return cfg

    def _finish(self, cfg: DictConfig, overrides: Sequence[str]) -> None:
        """What Hydra sets from the whole override list after applying it: the task overrides and their folder name."""
        parsed = self.parse(list(overrides))
        with open_dict(cfg.hydra):
            cfg.hydra.overrides.task = [o.input_line for o in parsed]
            cfg.hydra.job.override_dirname = _dirname(parsed, cfg.hydra.job.config.override_dirname)

    def job_plain(self, overrides: Sequence[str]) -> dict[str, Any] | None:
        """The job's config as :meth:`job_config` makes it, as plain unresolved values (what Hydra saves in ``.hydra/``),
        without copying a config: the top-level nodes its value overrides set and the hydra node's ``overrides`` and
        ``job`` are copies, every other node is its composition's own, shared by its jobs (read them, never change them).
        None where a value override is not a plain ``key=value`` on an untyped key (:meth:`job_config` makes those)."""
        groups, values = self.split(overrides)
        base = self.base(groups)
        named = base.raw["hydra"]["job"]["config"]["override_dirname"]
        if _has_interpolation(named) or not all(_settable(o, base.raw) and base.untyped(o.key_or_group) for o in values):
            return None
        out = dict(base.raw)
        for key in dict.fromkeys(o.key_or_group.split(".")[0] for o in values):
            out[key] = _copy(base.raw[key])
        for o in values:
            _set(out, o.key_or_group, _copy(o.value()))
        hydra = out["hydra"] = dict(base.raw["hydra"])
        hydra["overrides"], hydra["job"] = _copy(hydra["overrides"]), _copy(hydra["job"])
        parsed = self.parse(list(overrides))
        hydra["overrides"]["task"] = [o.input_line for o in parsed]
        hydra["job"]["override_dirname"] = _dirname(parsed, named)
        return out

    def task(self, overrides: Sequence[str]) -> tuple[dict[str, Any], DictConfig | None]:
        """The job's task config resolved to plain values, and its full config where that had to be made
        (None: made from the base's resolved values without composing or copying a config)."""
        groups, values = self.split(overrides)
        base = self.base(groups)
        out = base.apply(values)
        if out is None:
            cfg = self.job_config(overrides)
            return _task(cfg), cfg
        return out, None

    def seeded(self, overrides: Sequence[str]) -> tuple[str, ...]:
        """The keys of the job's composition that copy its seed by interpolation (whether the job keeps them so is the
        caller's to see: an override may set one)."""
        return self.base(self.split(overrides)[0]).seeded

    def subdir(self, overrides: Sequence[str], task: dict[str, Any]) -> str:
        """The job's ``hydra.sweep.subdir`` resolved; ``task``: its resolved task config (from :meth:`task`)."""
        groups, _ = self.split(overrides)
        raw = value_at(self.base(groups).raw, "hydra.sweep.subdir")
        text = str(raw)
        if "hydra" in text.replace("hydra.overrides.task", ""):  # another node of hydra (job.num, override_dirname): Hydra's way
            return str(self.job_config(overrides).hydra.sweep.subdir)
        default = JOB_DIR.match(text)
        if default and value_at(task, default.group(1)) is not MISSING:  # the shipped one: its resolver, called as OmegaConf calls it
            from initnorm.cli.sweep import job_dir

            return str(job_dir(list(overrides), value_at(task, default.group(1))))
        # Only what it names, in a config of its own (in a copy of the whole config it costs 50 ms; a parse of its text 10 ms).
        names = {t.split(".")[0] for t in TOKEN.findall(text)} & set(task)
        small = OmegaConf.create({**{k: task[k] for k in names}, "hydra": {"overrides": {"task": list(overrides)}}, "subdir": raw})
        return str(small.subdir)


def number(text: str) -> int | float | None:
    """``text`` as Hydra's grammar reads it where it is one INT or FLOAT token (``int(text)``, ``float(text)``, as its
    visitor converts them); None for anything else, which Hydra's parser reads. A sweep's thousands of job lines differ
    in such a value (``seed=1`` .. ``seed=10000``), and the parser took half of each job's check (docs/performance.md).
    Digits separated by ``_``, ``inf`` and ``nan`` are left to the parser."""
    if INT.fullmatch(text):
        return int(text)
    if FLOAT.fullmatch(text):
        return float(text)
    return None


def _dirname(parsed: list[Override], named: Any) -> str:
    """``hydra.job.override_dirname`` of these overrides, by the config's ``hydra.job.config.override_dirname`` (``named``)."""
    return get_overrides_dirname(overrides=parsed, kv_sep=named["kv_sep"], item_sep=named["item_sep"], exclude_keys=named["exclude_keys"])


def _task(cfg: DictConfig) -> dict[str, Any]:
    task = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    return OmegaConf.to_container(task, resolve=True)


def _settable(o: Override, raw: dict[str, Any]) -> bool:
    """A plain ``key=value`` on a key that exists and holds no dict, with a value of plain values."""
    if o.is_add() or o.is_force_add() or o.is_delete() or o.package is not None or o.key_or_group.startswith("hydra"):
        return False
    old = value_at(raw, o.key_or_group)
    value = o.value()
    return old is not MISSING and not isinstance(old, dict) and not _has_interpolation(value) and not _holds_dict(value)


def _holds_dict(value: Any) -> bool:
    return isinstance(value, dict) or (isinstance(value, list) and any(_holds_dict(v) for v in value))


def _simple_target(raw: Any) -> str | None:
    """``a.b`` for a value that is exactly ``${a.b}`` (an absolute key, no resolver), else None."""
    match = SIMPLE.match(raw) if isinstance(raw, str) else None
    return match.group(1) if match else None


def _names(token: str, key: str) -> bool:
    """Whether a key named in an interpolation (absolute, or relative: ``..width``) may read ``key``'s value."""
    token = token.lstrip(".")
    return (token == key or key.startswith(token + ".") or token.startswith(key + ".")
            or token.rsplit(".", 1)[-1] == key.rsplit(".", 1)[-1])


def _copy(value: Any) -> Any:
    """A copy of plain values (dicts, lists, scalars), faster than copy.deepcopy."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _interpolated(raw: Any, prefix: str):
    """(dotted key, unresolved value) for each value that holds an interpolation (a list that holds one counts as a whole)."""
    if isinstance(raw, dict):
        for k, v in raw.items():
            yield from _interpolated(v, f"{prefix}.{k}" if prefix else str(k))
    elif _has_interpolation(raw):
        yield prefix, raw


def _has_interpolation(raw: Any) -> bool:
    if isinstance(raw, str):
        return "${" in raw
    if isinstance(raw, list):
        return any(_has_interpolation(v) for v in raw)
    if isinstance(raw, dict):
        return any(_has_interpolation(v) for v in raw.values())
    return False


def value_at(raw: Any, key: str) -> Any:
    """The value at a dotted ``key`` of plain dicts; ``MISSING`` where there is none."""
    for part in key.split("."):
        if not isinstance(raw, dict) or part not in raw:
            return MISSING
        raw = raw[part]
    return raw


def _set(out: dict[str, Any], key: str, value: Any) -> None:
    *parents, last = key.split(".")
    for part in parents:
        out = out[part]
    out[last] = value


# Hydra's OverrideLexer.g4: INT is [+-]? INT_UNSIGNED, INT_UNSIGNED '0' | [1-9] digits (so "007" is not one); FLOAT a
# POINT_FLOAT (INT_UNSIGNED '.' | INT_UNSIGNED? '.' digits) or an EXPONENT_FLOAT ((INT_UNSIGNED | POINT_FLOAT) [eE] [+-]? digits).
_UNSIGNED = r"(?:0|[1-9][0-9]*)"
_POINT = rf"(?:{_UNSIGNED}\.|{_UNSIGNED}?\.[0-9]+)"
INT = re.compile(rf"[+-]?{_UNSIGNED}")
FLOAT = re.compile(rf"[+-]?(?:{_POINT}|(?:{_UNSIGNED}|{_POINT})[eE][+-]?[0-9]+)")
SIMPLE = re.compile(r"^\$\{([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\}$")  # ${a.b}
RESOLVER = re.compile(r"\$\{\s*([\w.]+):")  # ${oc.select:...}
JOB_DIR = re.compile(r"^\$\{initnorm\.job_dir:\$\{hydra\.overrides\.task\},\$\{([A-Za-z_][\w.]*)\}\}$")  # conf/hydra/default.yaml's
TOKEN = re.compile(r"\.*[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")  # the keys (and words) an interpolation names
