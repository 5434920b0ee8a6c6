"""The one place that knows what every user-settable key may hold.

``RULES`` is a table, one line per key: its type, its range, whether null is allowed, and the
value the error suggests. ``check(c, base)`` runs it over a resolved config (plain dicts), then
the rules that tie keys together (``warmup <= steps``, the model family's data, the family's own
hook), and returns a copy with relative paths made absolute against ``base`` (the folder the
command was started in: jobs run in their own folders) and the optimiser's numbers resolved by the
transfer rules (``initnorm/transfer/rules.py``: one place, so that every launcher and the engine read
them). ``check_text(c)`` reads the corpus the
config names and checks that it is text and long enough for the context and the split.

Every failure is a ``ConfigError`` of one line: the key, the value, what is allowed, the fix.
Whole-number floats are refused for integer keys (``width=16.0``: write ``16``), NaN and
infinities for every number, booleans for numbers. Keys under ``trainer``, ``logger`` and
``callbacks`` that the table does not name go to Lightning as they are (``+trainer.precision=...``);
anywhere else a key the table does not know is refused, so a misspelt ``+`` override cannot pass
unnoticed.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from initnorm.errors import ConfigError, bad_value
from initnorm.keyrules import Bool, Choice, Entry, Int, KeyRule, Num, Text
from initnorm.registry import GROUPS, Names, Registry

PASSED_ON = ("trainer.", "logger.", "callbacks.")  # their other keys are Lightning's to check
ACCELERATORS = ("cpu", "auto", "gpu", "cuda", "mps")

# The config groups whose entry comes from a registry (registry.GROUPS): the keys of each beyond
# RULES' common ones are what the named entry declares (``About.rules``), so a key no one reads is
# refused, and a user's own entry brings its own keys.
REGISTERED = {group: key for group, (key, _) in GROUPS.items()}

# One line per key a user can set. ``*`` stands for one part of a dotted key.
RULES: dict[str, KeyRule] = {
    # what people sweep
    "seed": Int(0, 2**32 - 1, fix=1, note="numpy's seed range"),
    "steps": Int(1, fix=1500),
    "lr": Num(0, lo_open=True, fix=0.01),
    "warmup": Int(0, "steps", fix=0),
    "schedule": KeyRule("schedule", fix="cosine"),
    "batch_size": Int(1, fix=32),
    "norm": Choice(Names("initnorm.models.decoder", "PLACEMENTS"), fix="pre"),
    "width": Int(1, fix=16),
    "depth": Int(1, fix=2),
    "threads": Int(0, fix=1, note="0: torch's default"),
    "log_every": Int(1, fix=25),
    "flush_denormal": Bool(fix=False),
    "forks": Bool(fix=False),
    "compile": KeyRule("auto_bool", fix="auto", note="torch.compile the training step; auto: a job alone from 30,000 steps on, a "
                                                     "vectorised group from 50,000 member-steps on"),
    "checkpoint.every_n_steps": Int(0, fix=250, note="0: no periodic checkpoints"),
    "summary.metrics": KeyRule("names", fix="final_val_loss"),
    "summary.plots": KeyRule("names", choices=Names("initnorm.plots", "PLOTS"), fix="lr_transfer", null=True),
    "summary.tail_steps": Int(1, fix=50),
    # data (one group per corpus or task)
    "data.kind": Entry("initnorm.training.tasks", "TASKS", "char_lm"),
    "data.name": Text(fix="alice"),
    "data.path": KeyRule("path", null=True, fix="/path/to/text.txt"),
    "data.context": Int(1, fix=32),
    "data.val_batch_size": Int(1, fix=512),
    "data.train_chars": Int(1, null=True, fix=20000),
    "data.val_chars": Int(1, null=True, fix=4016),
    "data.train_eval": Int(0, fix=4000, note="0: no training-set evaluation"),
    "data.n_clusters": Int(2, fix=8),
    "data.dim": Int(1, fix=32),
    "data.n_train": Int(1, fix=4096),
    "data.n_val": Int(1, fix=2048),
    # model: the keys every family has (the others are the family's own, ``Family.about.rules``)
    "model.family": Entry("initnorm.models.families", "MODELS", fix="decoder"),
    "model.width": Int(1, fix=16),
    "model.depth": Int(1, fix=2),
    "model.activation": Choice(Names("initnorm.nn.layers", "ACTIVATIONS"), fix="relu"),
    "model.mup.base_width": Int(1, fix=16),
    "model.mup.readout": Choice(Names("initnorm.nn.param", "READOUTS"), fix="logits"),
    "model.mup.base_depth": Int(1, null=True, fix=2),
    # init scheme: its name (or init.fn), init.per_role; the rest is each scheme's own
    "init.name": Entry("initnorm.nn.init", "INITS", "normal", "custom"),
    "init.fn": KeyRule("dotted", null=True, fix="mypkg.inits.fancy"),
    "init.nonlinearity": Choice(Names("initnorm.nn.init", "GAIN_NAMES"), null=True, fix="relu"),
    "init.per_role.*": Entry("initnorm.nn.init", "INITS", "xavier"),
    # parameterisation (the rest is each table's own), norm, optimiser
    "param.name": Entry("initnorm.nn.param", "PARAMS", "sp"),
    "param.base_width": Int(1, fix=16),
    "norm_type.name": Entry("initnorm.nn.norms", "NORMS", "layernorm"),
    "norm_type.eps": Num(0, fix=1e-5),
    "optim.name": Choice(Names("initnorm.training.optimizers", "OPTIMIZERS"), fix="adamw"),
    "optim.betas": KeyRule("betas", fix="[0.9,0.999]"),
    "optim.eps": Num(0, lo_open=True, fix=1e-8),
    "optim.weight_decay": Num(0, fix=0.01),
    "optim.momentum": Num(0, 1, hi_open=True, fix=0.9),
    "optim.weight_decay_mode": Choice(Names("initnorm.training.optim", "WEIGHT_DECAY_MODES"), fix="scaled"),
    "optim.weight_decay_rule": Choice(Names("initnorm.transfer.rules", "WEIGHT_DECAY_RULES"), fix="fraction"),
    "optim.weight_decay_timescale": Num(0, lo_open=True, null=True, fix=0.5, note="in optim.weight_decay_rule's unit"),
    # transfer: a config tuned at a base carried to the job by the rules (initnorm/transfer/rules.py)
    "transfer.base.width": Int(1, null=True, fix=64),
    "transfer.base.depth": Int(1, null=True, fix=2),
    "transfer.base.batch_size": Int(1, null=True, fix=32),
    "transfer.base.steps": Int(1, null=True, fix=1500),
    "transfer.batch_rule": Choice(Names("initnorm.transfer.rules", "BATCH"), fix="sqrt"),
    "transfer.sde_betas": Bool(fix=False),
    "transfer.sde_eps": Bool(fix=False),
    "transfer.horizon_rule": Choice(Names("initnorm.transfer.rules", "HORIZON"), fix="power"),
    "transfer.horizon_exponent": Num(fix=-0.32),
    "transfer.applied.**": KeyRule("any", note="written by the resolution: what it moved"),
    # what Lightning gets (other trainer/logger/callbacks keys go to it unchecked)
    "trainer.accelerator": Choice(ACCELERATORS, fix="cpu"),
    "trainer.max_steps": Int(1, fix=1500),
    "trainer.val_check_interval": Int(1, null=True, fix=250, note="null: every 250 steps, or a tenth of a shorter run"),
    "trainer.log_every_n_steps": Int(1, fix=25),
    "trainer.num_sanity_val_steps": Int(0, fix=0),
    "trainer.check_val_every_n_epoch": Int(1, null=True, fix="null"),
    "trainer.enable_progress_bar": Bool(fix=False),
    "trainer.enable_model_summary": Bool(fix=False),
    "trainer.enable_checkpointing": Bool(fix=False),
    "callbacks.progress.refresh_rate": Int(0, fix=50, note="0: no bar"),
    "callbacks.stats.every_n_steps": Int(1, fix=50),
    "callbacks.stats.activations": Bool(),
    "callbacks.stats.gradients": Bool(),
    "callbacks.stats.updates": Bool(),
    "callbacks.stats.per_param": Bool(fix=False),
    "callbacks.coord.windows": Int(1, fix=16),
    "callbacks.coord.steps": Int(1, fix=10),
    "callbacks.diagnostics.every_n_steps": Int(1, fix=50),
    "callbacks.diagnostics.power_steps": Int(1, fix=20),
    "callbacks.spectral.every_n_steps": Int(1, fix=50),
    "callbacks.spectral.power_steps": Int(1, fix=20),
    "callbacks.spectral.weight": Bool(),
    "callbacks.spectral.update": Bool(),
    "callbacks.spectral.ns_residual": Bool(),
}

# hydra.launcher keys (checked by the command-line preflight against the launcher the command picks)
LAUNCHER_RULES: dict[str, KeyRule] = {
    "n_jobs": KeyRule("n_jobs", fix=-1),
    "timeout_min": Int(1, fix=60),
    "cpus_per_task": Int(1, fix=1),
    "mem_gb": Num(0, lo_open=True, fix=4),
    "tasks_per_node": Int(1, 1, fix=1, note="one process per job"),
    "nodes": Int(1, 1, fix=1, note="one node per job"),
    "array_parallelism": Int(1, fix=64),
    "gpus_per_node": Int(0, null=True, fix=1),
    # hydra/launcher=vectorized (its slurm: node takes the keys above)
    "max_group": Int(1, fix=12, note="most jobs in one stacked model"),
    "max_params": Int(1, null=True, fix=2000000, note="null: no cap"),
    "engine": Choice(("processes", "sequential", "submitit", "joblib"), fix="processes"),  # joblib: processes' former name
}


def flat(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"model.width": 16, ...}``: nested dicts to dotted keys; lists stay values."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out |= flat(v, key)  # an empty mapping (init.per_role: {}) has no key to check
        else:
            out[key] = v
    return out


def rule_for(key: str, rules: Mapping[str, KeyRule] = RULES) -> KeyRule | None:
    if key in rules:
        return rules[key]
    parts = key.split(".")
    for pattern, rule in rules.items():
        p = pattern.split(".")
        if p[-1] == "**" and len(parts) >= len(p) and all(a in ("*", b) for a, b in zip(p[:-1], parts)):
            return rule  # ``model.roles.**``: any deeper key (a glob with dots in it, flattened)
        if len(p) == len(parts) and all(a in ("*", b) for a, b in zip(p, parts)):
            return rule
    return None


def _fix(key: str, rule: KeyRule) -> str:
    return f"{key}={rule.fix}"


def _bound(bound, values: Mapping[str, Any]) -> float | None:
    if isinstance(bound, str):
        other = values.get(bound)
        return other if isinstance(other, (int, float)) and not isinstance(other, bool) else None
    return bound


def _range_text(rule: KeyRule, values: Mapping[str, Any]) -> str:
    def show(bound):
        return f"{bound}={_bound(bound, values)}" if isinstance(bound, str) else f"{bound:g}" if isinstance(bound, float) else str(bound)

    lo, hi = rule.lo, rule.hi
    if lo is not None and hi is not None:
        if rule.kind == "int":
            return f"from {show(lo)} to {show(hi)}"
        return f"in {'(' if rule.lo_open else '['}{show(lo)}, {show(hi)}{')' if rule.hi_open else ']'}"
    if lo is not None:
        return f"{'>' if rule.lo_open else '>='} {show(lo)}"
    if hi is not None:
        return f"{'<' if rule.hi_open else '<='} {show(hi)}"
    return ""


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_value(key: str, value: Any, rule: KeyRule, values: Mapping[str, Any] | None = None) -> Any:
    """``value`` if ``rule`` allows it (``values``: the other keys, for bounds such as ``steps``); else ``ConfigError``."""
    values = values or {}
    if value is None:
        if rule.null:
            return value
        raise bad_value(key, value, f"a value is required ({_allowed(rule, values)})", _fix(key, rule))
    kind = rule.kind
    if kind in ("int", "number"):
        if not _is_number(value) or (isinstance(value, float) and not math.isfinite(value)):
            raise bad_value(key, value, _allowed(rule, values), _fix(key, rule))
        if kind == "int" and not isinstance(value, int):
            whole = f" (write {int(value)}, not {value})" if float(value).is_integer() else ""
            raise bad_value(key, value, f"an integer{whole}", f"{key}={int(value) if float(value).is_integer() else rule.fix}")
        lo, hi = _bound(rule.lo, values), _bound(rule.hi, values)
        below = lo is not None and (value < lo or (rule.lo_open and value == lo))
        above = hi is not None and (value > hi or (rule.hi_open and value == hi))
        if below or above:
            # Against another key's value (warmup <= steps), the nearest allowed value is the fix.
            fix = f"{key}={min(max(value, lo), hi)}" if isinstance(rule.hi, str) and lo is not None and hi is not None else _fix(key, rule)
            raise bad_value(key, value, _allowed(rule, values), fix)
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise bad_value(key, value, "true or false", _fix(key, rule))
        return value
    if kind == "choice":
        names = list(rule.choices() if callable(rule.choices) else rule.choices)
        if not isinstance(value, str) or value not in names:
            from initnorm.errors import closest

            if isinstance(rule.choices, Names) and isinstance(rule.choices.registry(), Registry):
                rule.choices.registry().get(str(value))  # raises the registry's line
            best = closest(value, names) or rule.fix or names[0]  # the meant value, else the rule's own default
            raise bad_value(key, value, f"one of {', '.join(names)}", f"{key}={best}")
        return value
    if kind == "entry":
        if not isinstance(value, str) or value not in rule.choices.more:
            rule.choices.registry().get(value, key=key)  # a name or a dotted path; else the registry's one line
        return value
    if kind in ("text", "path", "dotted"):
        if not isinstance(value, str) or not value.strip():
            raise bad_value(key, value, _allowed(rule, values), _fix(key, rule))
        if kind == "dotted":
            from initnorm.registry import import_dotted

            import_dotted(value, key)
        return value
    if kind == "names":
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise bad_value(key, value, "a list of names, e.g. [a,b]", f"{key}=[{rule.fix}]")
        for n in names:
            if rule.choices is not None:
                check_value(key, n, Choice(rule.choices, fix=rule.fix))
        return value
    if kind == "betas":
        if not (isinstance(value, list) and len(value) == 2 and all(_is_number(b) and math.isfinite(b) and 0 <= b < 1 for b in value)):
            raise bad_value(key, value, "two numbers in [0, 1)", f"{key}={rule.fix}")
        return value
    if kind == "schedule":  # a name, or wsd:F with its decay fraction (training/optim.py says what is wrong)
        from initnorm.training.optim import parse_schedule

        parse_schedule(value, key)
        return value
    if kind == "auto_bool":
        if value == "auto" or isinstance(value, bool):
            return value
        raise bad_value(key, value, "one of auto, true, false", f"{key}={rule.fix}")
    if kind == "any":  # what a user's own constructor takes (model=custom): it checks its own arguments
        return value
    if kind == "n_jobs":
        if not isinstance(value, int) or isinstance(value, bool) or value == 0:
            raise bad_value(key, value, "a whole number of worker processes: >= 1, or -1 for one per CPU core (-2: all but one)",
                            f"{key}={rule.fix}")
        return value
    raise AssertionError(f"rule kind {kind!r}")


def _allowed(rule: KeyRule, values: Mapping[str, Any]) -> str:
    if rule.kind == "int" and rule.lo == 1 and rule.hi is None:
        text = "a positive integer"
    elif rule.kind == "number" and rule.lo == 0 and rule.lo_open and rule.hi is None:
        text = "a finite positive number"
    else:
        what = {"int": "an integer", "number": "a number" if rule.lo is not None and rule.hi is not None else "a finite number",
                "bool": "true or false", "text": "a non-empty name",
                "path": "a path to a file", "dotted": "a dotted path like mypkg.module.function",
                "auto_bool": "auto, true or false", "schedule": "a schedule"}.get(rule.kind, rule.kind)
        text = f"{what} {_range_text(rule, values)}".strip()
    if rule.note:
        text += f" ({rule.note})"
    if rule.null:
        text += ", or null"
    return text


def check(c: Mapping[str, Any], base: str | Path | None = None, data_options: Mapping[str, list[str]] | None = None) -> dict[str, Any]:
    """Check a resolved config (plain dicts); return a copy with ``data.path`` absolute against ``base`` and its
    lr, weight decay, betas and eps carried from ``transfer.base`` to the job by the rules (``transfer.rules.resolve``).

    ``data_options`` (data kind -> the ``data=`` options of that kind) lets the family/data message
    name the option to pick. Raises ``ConfigError`` (one line) for the first bad value.
    """
    if not isinstance(c, Mapping):
        raise ConfigError(f"the config is a {type(c).__name__}, not a mapping of keys")
    check_keys(c)
    out = copy.deepcopy(dict(c))
    check_relations(out, data_options or {})
    data = out.get("data")
    if isinstance(data, dict) and data.get("path"):
        data["path"] = str(absolute(data["path"], base))
    from initnorm.transfer.rules import resolve

    return resolve(out)  # lr, wd, betas and eps carried from transfer.base: every launcher and the engine read these


def check_keys(c: Mapping[str, Any], skip: Callable[[Any], bool] = lambda value: False) -> None:
    """Every key of ``c`` against its rule, the registered names first (what else a group may hold depends on
    them): ``check`` before the relations, and ``initnorm.parameterize`` on the nodes it makes of its keywords
    (``skip``: a value handed over as an object, which has no rule to meet: a constructor, a table function)."""
    values = flat(c)
    for group, name_key in REGISTERED.items():
        key = f"{group}.{name_key}"
        if key in values and not skip(values[key]):
            check_value(key, values[key], RULES[key], values)
    rules = RULES | declared(c)
    for key, value in values.items():
        rule = rule_for(key, rules)
        if rule is None:
            if key.startswith(PASSED_ON):
                continue
            raise unknown_key(key, rules, c, value)
        if not skip(value):
            check_value(key, value, rule, values)


def declared(c: Mapping[str, Any]) -> dict[str, KeyRule]:
    """The keys the config's registrations read beyond RULES (``About.rules``), as dotted keys: the
    family's ``model.*``, the table's ``param.*``, the init scheme's (and ``init.per_role``'s and
    ``init.fn``'s) ``init.*``, the norm's ``norm_type.*``. A name no registry knows raises its line."""
    out: dict[str, KeyRule] = {}
    for group, name_key in REGISTERED.items():
        node = c.get(group)
        if not isinstance(node, Mapping):
            continue
        names = [node.get(name_key)]
        if group == "init":
            names = [node.get("fn") if names[0] == "custom" else names[0], *(node.get("per_role") or {}).values()]
        registry = GROUPS[group][1].registry()
        for name in names:
            if name is None:
                continue  # a missing or mistyped name: its own rule says so (an entry handed over itself declares its keys too)
            out |= {f"{group}.{k}": rule for k, rule in registry.about(name, strict=False).rules.items()}
    return out


def every_rule() -> dict[str, KeyRule]:
    """RULES and every shipped registration's own keys (for the tests: each rule's fix passes it)."""
    out = dict(RULES)
    for group, (_, names) in GROUPS.items():
        registry = names.registry()
        for name in registry.names():
            out |= {f"{group}.{k}": rule for k, rule in registry.about(name).rules.items()}
    return out


def unknown_key(key: str, rules: Mapping[str, KeyRule] = RULES, c: Mapping[str, Any] | None = None, value: Any = "...") -> ConfigError:
    """``lrr is not a key initnorm reads; ... the nearest: lr``: a misspelt ``+`` override, or a key
    that the chosen family / table / scheme / norm does not read (it says which one it asked)."""
    from initnorm.errors import closest

    group, _, rest = key.rpartition(".")
    if group:
        siblings = sorted({k[len(group) + 1 :].split(".")[0] for k in rules if k.startswith(f"{group}.")})
    else:
        siblings = sorted({k.split(".")[0] for k in [*rules, *PASSED_ON]})
    near = closest(rest, siblings)
    where = f"the keys of {group}" if group else "the top-level keys"
    top = group.split(".")[0]
    node = (c or {}).get(top)
    if top in REGISTERED and isinstance(node, Mapping) and node.get(REGISTERED[top]) is not None:
        where += f" for {top}.{REGISTERED[top]}={node[REGISTERED[top]]}"
    own = (f", or declare it in your own entry's About.rules and name that by `{top}.{REGISTERED[top]}=mypkg.module:Thing`"
           if top in REGISTERED else "")
    if rest == "_target_" and top == "model":  # the constructor of a model of one's own: model=custom (models/own.py)
        own = " (a model of your own is named by its constructor under model=custom: `model=custom model._target_=mypkg.models.Net`)"
    elif rest == "_target_" and top == "data":  # a LightningDataModule of one's own: data=custom (data/own.py)
        own = " (a data module of your own is named by its class under data=custom: `data=custom data._target_=mypkg.data.MyData`)"
    elif rest == "_target_" and top in REGISTERED:
        own = f" (initnorm does not instantiate a {top} by _target_: name your own by `{top}.{REGISTERED[top]}=mypkg.module:Thing`)"
    fixed = f"{group}.{near}" if group else near
    fix = f"the closest: {near}; fix it with `{fixed}={value}`" if near else f"fix it: drop `+{key}={value}`{own}"
    if not near and group and rest in rules:  # +optim.lr: the run's rate is the top-level lr
        fix = f"{rest} is a top-level key: fix it with `{rest}={value}`"
    return ConfigError(f"{key} is not a key initnorm reads ({where}: {', '.join(siblings) or 'none'}); " + fix)


def absolute(path: str, base: str | Path | None) -> Path:
    """``path`` with ``~`` expanded, made absolute against ``base`` (default: the current folder)."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else Path(base or Path.cwd()).resolve() / p


def check_relations(c: dict[str, Any], data_options: Mapping[str, list[str]]) -> None:
    """The rules that tie keys together; the model family's own check last."""
    for key in ("steps", "lr", "batch_size", "seed", "model", "data", "init", "param", "optim", "norm_type", "transfer"):
        if key not in c:
            raise ConfigError(f"the config has no {key}; compose it from initnorm's conf/ (python -m initnorm.train), not by hand")
    family, kind = c["model"].get("family"), c["data"].get("kind")
    from initnorm.models.families import MODELS

    want = MODELS.get(family).data_kind
    if want is not None and kind != want:
        options = list(data_options.get(want, []))
        fix = f"data={options[0]}" if options else f"data=<a data option of kind {want}>"
        raise ConfigError(f"model={family} trains on data of kind {want}, and the chosen data is of kind "
                          f"{kind!r}{' (options of kind ' + want + ': ' + ', '.join(options) + ')' if options else ''}; fix it with "
                          f"`{fix}` (or use the family's experiment= preset)")
    family_hook(family)(c)
    from initnorm.nn.init import resolve
    from initnorm.nn.param import make_table
    from initnorm.nn.roles import FIXED_ROLES, Role

    roles = sorted(r.value for r in Role if r not in FIXED_ROLES)
    for role in c["init"].get("per_role") or {}:
        if role not in roles:
            raise bad_value(f"init.per_role.{role}", c["init"]["per_role"][role],
                            f"a key of init.per_role is a parameter role: one of {', '.join(roles)}", "init.per_role.readout=xavier")

    from initnorm.training.optim import check_decay_mode

    optim = c["optim"]
    check_decay_mode(optim, optim.get("weight_decay_mode"), optim.get("weight_decay"))
    from initnorm.training.optimizers import entry, keywords, probe

    keywords(entry(optim), optim)  # an optim.* key the optimiser does not take: refused here, before any job trains
    probe(optim)  # one's own optimiser: built and stepped once on tiny groups (what cannot train is refused here too)
    resolve(c["init"])
    # width below µP's base width, an optimiser without a µP table
    make_table(c["param"], width=c["model"]["width"], depth=c["model"]["depth"])


def family_hook(family: str) -> Callable[[Mapping[str, Any]], None]:
    """The model family's own check of the whole config (``Family.check``, next to its registry entry)."""
    from initnorm.models.families import MODELS

    return MODELS.get(family).check


# ---- the text a config trains on ---------------------------------------------------------------



def text_key(c: Mapping[str, Any]) -> tuple:
    d = c.get("data", {})
    return (d.get("kind"), d.get("name"), d.get("path"), d.get("context"), d.get("train_chars"), d.get("val_chars"))


# (text_key, the file's version) of every text that passed check_text in this process: a changed file is checked again
_TEXT_PASSED: set[tuple] = set()


def check_text(c: Mapping[str, Any]) -> None:
    """The corpus of a character task: found, UTF-8 text, cleanable by the data option's cleaner,
    and long enough that training and validation each get at least one window of ``data.context``."""
    d = c.get("data", {})
    if d.get("kind") not in ("char_lm", "char_windows"):
        return
    from initnorm.data.corpus import SOURCES, TRAIN_FRACTION, file_version, locate

    name, path, context = d.get("name"), d.get("path"), d["context"]
    file = locate(name, path)
    version = (text_key(c), file_version(file))
    if version in _TEXT_PASSED:  # every job of a sweep checks the same file: read and clean it once per process
        return
    shown = f"data.path={path!r}" if path else f"the {name} corpus file {str(file)!r}"
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{shown} cannot be read ({exc.strerror or exc}); fix the file's permissions or pick another with "
                          "`data.path=/path/to/text.txt`") from None
    if b"\x00" in raw:
        raise ConfigError(f"{shown} is a binary file (it holds NUL bytes), not text; fix it with `data.path=/path/to/text.txt`")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{shown} is not UTF-8 text (byte {exc.start}: {raw[exc.start:exc.start + 1]!r}); convert it (iconv -t utf-8) or "
                          "fix it with `data.path=/path/to/text.txt`") from None
    source = SOURCES.get(name)
    if source is not None and path:
        try:
            cleaned = source.normalise(text)
        except ConfigError:
            raise ConfigError(
                f"data={name} cleans its text as the {name} source file is laid out, and {shown} is not that file; "
                f"to train on your own text keep every character with `data=text data.path={path}`"
            ) from None
    else:
        cleaned = source.normalise(text) if source is not None else text
    n = int(len(cleaned) * TRAIN_FRACTION)
    train, val = cleaned[:n], cleaned[n:]
    train_part = train[: d.get("train_chars")] if d.get("train_chars") else train
    val_part = val[: d.get("val_chars")] if d.get("val_chars") else val
    need = context + 1
    for part, chars, key in (("training", train_part, "train_chars"), ("validation", val_part, "val_chars")):
        if len(chars) < need:
            raise ConfigError(
                f"{shown} gives {len(cleaned)} characters after cleaning: its {part} part ({len(chars)}) is shorter than one window "
                f"of data.context={context} + 1; use a longer text or fix it with `data.context={max(1, len(chars) - 1)}`"
                + (f" or a larger data.{key}" if d.get(key) else "")
            )
    if len(_TEXT_PASSED) >= 64:  # a bounded memo: a search over many data.path values never grows it without end
        _TEXT_PASSED.clear()
    _TEXT_PASSED.add(version)


def check_launcher(launcher: Mapping[str, Any] | None) -> None:
    """The ``hydra.launcher`` node's values (worker count, group sizes, SLURM sizes, a vectorised
    launcher's ``slurm.*`` too) that the table knows."""
    launcher = launcher or {}
    for key, value in flat(launcher).items():
        if key.startswith("slurm.") and launcher.get("engine") != "submitit":
            continue  # read only by engine=submitit (cpus_per_task follows threads, which may be 0 elsewhere)
        rule = LAUNCHER_RULES.get(key.removeprefix("slurm."))
        if rule is not None:
            check_value(f"hydra.launcher.{key}", value, rule)
