"""Check a whole command line before Hydra starts a job: one line for the first bad value.

``python -m initnorm.train ...`` calls :func:`check_command_line` first. It composes the config
the way Hydra will (with Hydra's own loader: every job of a ``-m`` sweep, preset
``hydra.sweeper.params`` included), then for each job runs ``initnorm.schema`` (every key's type and
range, the relations between keys, the family's own check, the text: found, UTF-8, long enough),
asks for the device the job will get, and looks into its folder (finished: skipped; killed: resumed; a different
config's work: refused; a link, FIFO or device anywhere in a named output folder: refused, since a job would write
through it). So a typo in job 40 of 54 stops the sweep before job 1 trains, and a
Hydra composition error (``init=xavir``) becomes one line that lists the known options, not
Hydra's page of search paths.
"""

from __future__ import annotations

import copy
import difflib
import functools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import InterpolationKeyError, OmegaConfBaseException

from initnorm import schema
from initnorm.cli import bad_override, distinct, launchers, memory, preflight_own, search
from initnorm.cli.argv import CommandLine, parse
from initnorm.cli.compose import CONF_DIR, compose_train
from initnorm.cli.composer import Composer
from initnorm.cli.disk import check_compiler_cache, check_writable
from initnorm.cli.hydra_adapter import BASIC_SWEEPER, basic_sweeper, parse_configs_once
from initnorm.cli.sweep import SWEPT_ENV, parse_sweep, register_resolvers, sweep_overrides
from initnorm.config import to_plain
from initnorm.errors import ConfigError
from initnorm.own_errors import user_frame, yours
from initnorm.safe_files import planted_below
from initnorm.training import devices, trackers
from initnorm.training.compiling import should_compile
from initnorm.training.distributed import check_batch
from initnorm.training.resume import Prior, error_line, inspect_folder

BASIC_SWEEPERS = (BASIC_SWEEPER, "hydra_plugins.initnorm_launchers.CheckedSweeper")


class Checked(list):
    """The checked jobs of a command line (``CheckedJob``, in Hydra's order), with what runs them: ``launcher``, the
    resolved ``hydra.launcher`` node, and ``sweep``: whether they are a sweep's jobs (False for a single run, and for
    a search, whose sweeper picks its jobs as it goes: the preflight checks its first)."""

    def __init__(self, jobs, launcher: dict[str, Any] | None = None, sweep: bool = False) -> None:
        super().__init__(jobs)
        self.launcher, self.sweep = launcher, sweep


@dataclass(frozen=True)
class CheckedJob:
    """One job of a command line: its overrides, resolved config, folder and what the folder holds."""

    overrides: list[str]
    config: dict[str, Any]
    folder: Path | None
    prior: Prior
    subdir: str | None = None  # a sweep's job: its folder within the sweep's (known before the sweep's own is made)


REFERENCE = re.compile(r"\$\{([A-Za-z_][\w.]*)\}")  # a plain interpolation of a config value: ${data.dim}


def missing_reference(exc: InterpolationKeyError) -> str | None:
    """The key an interpolation names that the config lacks (``data.dim`` of ``model.dim: ${data.dim}``), read from the
    node the exception carries (``parent_node`` and ``key``: its unresolved value, each key it names looked up from the
    root by a relative select), never from the exception's message."""
    parent, key, full_key = exc.parent_node, exc.key, str(exc.full_key or "")
    if not isinstance(parent, DictConfig) or key is None:
        return None
    value = OmegaConf.to_container(parent, resolve=False).get(key)
    up = "." * (full_key.count(".") + full_key.count("[") + 1)  # from the node's parent to the root
    absent = object()
    return next((ref for ref in REFERENCE.findall(value) if OmegaConf.select(parent, up + ref, default=absent) is absent),
                None) if isinstance(value, str) else None


def option_with_key(exc: InterpolationKeyError) -> str | None:
    """For a config that names ``data.dim`` where the chosen data option has none (``model=deep_mlp`` with Alice): name
    the options of that group which have the key, so the line says which one to pick."""
    group, _, key = (missing_reference(exc) or "").partition(".")
    folder = Path(CONF_DIR) / group
    if not group or not key or "." in key or not folder.is_dir():
        return None
    having = sorted(f.stem for f in folder.glob("*.yaml") if key in (OmegaConf.load(f) or {}))
    if not having:
        return None
    return (
        f"the chosen config needs {group}.{key}, which this {group} option does not have; "
        f"options that have it: {', '.join(having)}; fix it with `{group}={having[0]}` (or use the family's experiment= preset)"
    )


def one_line(exc: BaseException, overrides: list[str] | tuple[str, ...] = (), config: DictConfig | None = None) -> ConfigError:
    """A Hydra composition error as one line; a bad override (an unknown option, a key the config lacks) restated by
    ``cli/bad_override.py`` (``overrides``: the command line's; ``config``: the config composed without the bad one)."""
    if (restated := bad_override.restate(exc, overrides, config)) is not None:
        return restated
    if isinstance(exc, InterpolationKeyError):
        hint = option_with_key(exc)
        if hint:
            return ConfigError(hint)
    text = " ".join(str(e) for e in (exc, exc.__cause__) if e is not None).replace("\n", " ")
    typed = re.search(r"Error merging override (hydra\.launcher\.(\w+))=(.*?) .*could not be converted to (\w+)", text)
    if typed:  # a launcher's typed node (joblib's, submitit's): the schema's line, with its fix
        key, name, value, kind = typed.groups()
        rule = schema.LAUNCHER_RULES.get(name)
        fix = f"; fix it with `{key}={rule.fix}`" if rule is not None else ""
        return ConfigError(f"{key}={value!r} is invalid: {'an integer' if kind == 'Integer' else f'a {kind.lower()}'}{fix}")
    parts = [str(exc)] + ([str(exc.__cause__)] if exc.__cause__ is not None else [])
    lines = [line.strip() for part in parts for line in part.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(("full_key:", "object_type", "reference_type",
                                                            "Set the environment variable HYDRA_FULL_ERROR"))]
    return ConfigError(" ".join(dict.fromkeys(lines)) or type(exc).__name__)


def expand(primary: DictConfig) -> list[list[str]]:
    """Every job's overrides, as Hydra's basic sweeper makes them (preset ``hydra.sweeper.params`` first, the command line wins)."""
    if primary.hydra.sweeper.get("_target_") not in BASIC_SWEEPERS:
        return [[str(o) for o in primary.hydra.overrides.task]]  # another sweeper picks its own jobs: check the primary only
    parsed = OverridesParser.create().parse_overrides(sweep_overrides(primary))
    for o in parsed:
        bad_override.refuse_search_range(o)
    return [list(job) for batch in basic_sweeper().split_arguments(parsed, None) for job in batch]


def job_folder(cfg: DictConfig, multirun: bool, node: DictConfig | None = None) -> Path | None:
    """The folder Hydra will give the job where the command names it (``hydra.run.dir=...``,
    ``hydra.sweep.dir=...``); None for a generated one (time, unique id), which holds nothing yet
    and must not be resolved here (``initnorm.unique_dir`` reserves a folder when resolved).
    ``node``: that node instead (``hydra.sweep``, read as a run's: the sweep's own folder)."""
    node = node if node is not None else cfg.hydra.sweep if multirun else cfg.hydra.run
    if "${" in str(OmegaConf.to_container(node, resolve=False).get("dir")):
        return None
    try:
        return Path(node.dir) / str(node.subdir) if multirun else Path(node.dir)
    except OmegaConfBaseException:
        return None


@functools.cache
def data_options() -> dict[str, list[str]]:
    """data kind -> the ``data=`` options of that kind (for the line that names the one to pick)."""
    out: dict[str, list[str]] = {}
    for f in sorted(Path(CONF_DIR, "data").glob("*.yaml")):
        kind = (OmegaConf.load(f) or {}).get("kind")
        out.setdefault(str(kind), []).append(f.stem)
    return out


def check_config(c: dict[str, Any], seen: dict[Any, Any], job_num: int = 0, multirun: bool = False,
                 seeded: tuple[str, ...] = ()) -> dict[str, Any]:
    """``schema.check`` (paths made absolute against the launch folder), the text (once per corpus)
    and whether the job can have the device it asks for; returns the checked config. ``seen``: what earlier jobs of the same
    command line checked (a text, a model built on the meta device, a config), so that it is not checked again.

    Each distinct config is checked once (``cli/distinct.py``): jobs that differ only in their seed (a sweep's seeds)
    share the checked config of the first, and the seed is checked by its own rule (no other rule reads it), as is
    each key of ``seeded`` (``Composer.seeded``: the keys that copy the seed) that holds it.
    """
    seed = c.get("seed")
    key, copies = distinct.key(c, seeded)
    if key in seen:
        for k, rule in [("seed", schema.RULES["seed"]), *seen[key][1]]:
            schema.check_value(k, seed, rule)
    else:
        first = _check_config(c, seen)
        if "gpus" not in seen:
            seen["gpus"] = devices.gpu_count()
        trainer = first.get("trainer", {})  # the device's refusals read neither the seed nor the job's number
        place = devices.choose(trainer, job_num, multirun, seen["gpus"], devices.has_mps())
        check_batch(int(first["batch_size"]), place.processes)
        rules = schema.RULES | schema.declared(first) if copies else {}
        seen[key] = first, [(k, rule) for k in copies if (rule := schema.rule_for(k, rules)) is not None]
    return distinct.with_seed(seen[key][0], seed, copies)


def _check_config(c: dict[str, Any], seen: dict[Any, Any]) -> dict[str, Any]:
    c = schema.check(c, base=Path.cwd(), data_options=data_options())
    key = schema.text_key(c)
    if key not in seen:
        seen[key] = True
        schema.check_text(c)
    if should_compile(c["compile"], c["steps"]):  # (a vectorised group's auto decides by member-steps, at run time)
        check_compiler_cache(Path.cwd())
    trackers.check(c.get("logger"))  # logger=mlflow without mlflow installed: one line, before anything trains
    check_trainer_keys(c.get("trainer") or {})
    check_own_code(c, seen)
    return c


@functools.cache
def _trainer_defaults() -> frozenset[str]:
    return frozenset(OmegaConf.load(Path(CONF_DIR, "trainer", "default.yaml")))


def check_trainer_keys(node: dict[str, Any]) -> None:
    """Every key of the ``trainer`` node is an argument of Lightning's ``Trainer`` (read from its signature: a probe, not a
    list of ours); one line naming a stray one, the closest it takes, and the fix. Lightning is imported only for a key the
    config's own ``trainer`` file does not hold (a bad value never waits for it)."""
    extra = [k for k in node if k not in _trainer_defaults()]
    if not extra:
        return
    import inspect

    from lightning import Trainer

    takes = [k for k in inspect.signature(Trainer.__init__).parameters if k != "self"]
    for key in extra:
        if key not in takes:
            near = difflib.get_close_matches(key, takes, n=1, cutoff=0.5)
            fix = f"`+trainer.{near[0]}=...` in place of `+trainer.{key}`, or drop it" if near else "drop it"
            raise ConfigError(f"trainer.{key}: Lightning's Trainer takes no argument {key!r}"
                              f"{f' (the closest it takes: {near[0]})' if near else ''}; fix it with {fix} (`~trainer.{key}`)")


def own_code(c: dict[str, Any]) -> bool:
    """Whether the job runs a user's own family, init scheme, table or norm (a dotted path, ``init.fn``, or
    ``model=custom``'s constructor, whose roles are inferred: a parameter without one is refused here)."""
    from initnorm.registry import is_dotted

    names = (c["model"].get("family"), c["init"].get("name"), c["param"].get("name"), c["norm_type"].get("name"))
    return bool(c["init"].get("fn")) or "_target_" in c["model"] or any(is_dotted(n) for n in names)


def check_own_code(c: dict[str, Any], seen: dict[Any, Any]) -> None:
    """What the user brought (``cli/preflight_own.py``: callbacks, trackers, a data module, a model's forward) and a
    user's own code built once per distinct model on the meta device (no memory, no numbers) before anything exists:
    the model's own one-line refusals (an init that changes a weight's shape, a parameter without a role) stop the
    command here rather than in a job folder. Anything else the meta build raises is left to the real build of
    ``model=custom`` at its base width (``preflight_own.check_model``: the user's exception, named as theirs), or to
    the job, which builds it for real."""
    data = preflight_own.check(c, seen)
    if not own_code(c):
        return
    import json

    key = "build:" + json.dumps([c["model"], c["init"], c["param"], c["norm_type"], c["data"]], sort_keys=True, default=str)
    if key in seen:
        return
    seen[key] = True
    import torch

    from initnorm.models.build import build_model
    from initnorm.training.tasks import TASKS

    if data is None:
        data = TASKS.get(c["data"]["kind"]).make_data(c)
        data.setup("fit")
    try:
        with torch.device("meta"):
            build_model(c["model"], c["init"], c["param"], data.vocab_size)
    except ConfigError:
        raise
    except Exception:  # e.g. an init drawing from a CPU generator: the build below, or the job, builds it for real
        preflight_own.check_model(c, data, seen)
        return
    preflight_own.check_model(c, data, seen)


def unexpected(exc: BaseException) -> ConfigError:
    """An exception no check meant to raise, still as one line: the user's, where it was raised in their code (a module of
    theirs the config names that raises on import, a rule of their family: ``own_errors.user_frame``), else a request to
    report it."""
    if user_frame(exc) is not None:
        return yours(exc, "your code")
    return ConfigError(f"{error_line(exc)} (raised while checking the config: a bug in initnorm's checks, please report it with this line)")


def check_job(cfg: DictConfig, overrides: list[str], label: str, seen: dict[Any, Any]) -> CheckedJob:
    """Validate one composed job config (with its ``hydra`` node); errors start with ``label``."""
    multirun, where = bool(label), f"{label}: " if label else ""
    previous = HydraConfig.instance().cfg
    HydraConfig.instance().set_config(cfg)  # so ${hydra:...} resolves as it will in the job
    try:
        try:
            folder = job_folder(cfg, multirun)
            subdir = str(cfg.hydra.sweep.subdir) if multirun else None
            task = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
            num = OmegaConf.select(cfg, "hydra.job.num", default=0, throw_on_missing=False)
            c = check_config(to_plain(task), seen, num if isinstance(num, int) else 0, multirun)
            prior = inspect_folder(folder, c) if folder is not None else Prior()
        except OmegaConfBaseException as exc:
            raise ConfigError(where + str(one_line(exc))) from exc
        except ConfigError as exc:
            raise ConfigError(where + str(exc)) from exc
        except Exception as exc:
            raise ConfigError(where + str(unexpected(exc))) from exc
    finally:
        HydraConfig.instance().cfg = previous
    return CheckedJob(overrides, c, folder, prior, subdir)


def output_base(node: DictConfig) -> Path:
    """The folder a job's (or sweep's) output goes below: the named one, or the fixed start of a
    generated one (``outputs/multirun`` for ``${initnorm.unique_dir:outputs/multirun/${now:...}}``)."""
    raw = str(OmegaConf.to_container(node, resolve=False).get("dir"))
    if "${" not in raw:
        return Path(raw)
    fixed = raw.removeprefix("${initnorm.unique_dir:").split("${")[0]
    return Path(fixed or ".")


def named_folder(node: DictConfig) -> Path | None:
    """The folder ``node`` (``hydra.sweep``, ``hydra.run``) names on the command line; None for a generated one (new, empty)."""
    raw = str(OmegaConf.to_container(node, resolve=False).get("dir"))
    return None if "${" in raw else Path(raw)


def check_planted(folder: Path | None, key: str) -> None:
    """A named output folder (one a command made before, or a copy) holds only files and folders: a link, FIFO, socket or
    device anywhere below it was put there, and a job would write through it (Hydra's multirun.yaml, train.log and
    .hydra/, a job folder, its checkpoints/, a logger's files) or hang reading it; one line naming it (safe_files.py)."""
    if folder is not None and (found := planted_below(folder)):
        path, what = found
        raise ConfigError(f"{path} is {what}, which no initnorm command makes in an output folder: a job would write through it or "
                          f"read it; delete it (or move it away), or pick another folder with `{key}=...`")


def check_launcher_and_folder(primary: DictConfig, multirun: bool) -> dict[str, Any]:
    """The launcher's values and whether the output folder can be written, once per command line; returns the
    launcher's resolved node."""
    try:
        launcher = OmegaConf.to_container(primary.hydra.launcher, resolve=True) if "launcher" in primary.hydra else {}
    except OmegaConfBaseException as exc:
        raise one_line(exc) from exc
    launcher = launcher if isinstance(launcher, dict) else {}
    schema.check_launcher(launcher)
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    check_planted(named_folder(primary.hydra.sweep if multirun else primary.hydra.run), key)  # before the search opens search.journal
    if launchers.kind(primary.hydra.sweeper) == "search":  # hparams_search=...: it picks its own jobs
        search.check([str(o) for o in primary.hydra.overrides.task], dict(primary.hydra.sweeper.get("params") or {}), primary,
                     named_folder(primary.hydra.sweep))
    if launchers.kind(launcher) == "vectorized" and (problem := launchers.missing_extra("vectorized", str(launcher.get("engine")))):
        raise ConfigError(problem)
    check_writable(output_base(primary.hydra.sweep if multirun else primary.hydra.run), f"{key}=/a/writable/folder")
    return launcher


def check_overrides(jobs: list[list[str]], label=lambda i, o: f"job {i}") -> list[dict[str, Any]]:
    """For commands that train or build in one process (``probe``, ``coord_check``): compose each
    override list as ``initnorm.train`` would and check it; one line for the first bad one."""
    register_resolvers()
    out, seen = [], {}
    for i, overrides in enumerate(jobs):
        where = f"{label(i, overrides)}: " if len(jobs) > 1 else ""
        try:
            out.append(copy.deepcopy(check_config(to_plain(compose_train(overrides)), seen)))  # theirs to change
        except (HydraException, OmegaConfBaseException) as exc:
            raise ConfigError(where + str(one_line(exc))) from exc
        except ConfigError as exc:
            raise ConfigError(where + str(exc)) from exc
        except Exception as exc:
            raise ConfigError(where + str(unexpected(exc))) from exc
    return out


def check_command_line(argv: list[str] | CommandLine, progress: Callable[[int, int], None] | None = None) -> list[CheckedJob] | None:
    """Compose and check every job ``argv`` would run; ``ConfigError`` (one line) for the first bad one.

    Returns the jobs, or None for a command line that runs nothing (``--help``, ``--cfg``) or that
    names its own config folder (Hydra composes those as usual). No exception but ``ConfigError``
    leaves it: any other is a bug in a check, and still one line. ``progress(done, total)`` is called
    as the jobs are checked (first with 0, once their number is known).
    """
    try:
        cmd = argv if isinstance(argv, CommandLine) else parse(argv)
        return _check_command_line(cmd, progress or (lambda done, total: None))
    except ConfigError:
        raise
    except Exception as exc:
        raise unexpected(exc) from exc


def check_config_flags(cmd: CommandLine) -> None:
    """``--config-dir`` and ``--config-name`` that name nothing, before Hydra answers them in its own words (a line and a
    HYDRA_FULL_ERROR hint; a search path)."""
    if cmd.config_dir and not Path(cmd.config_dir).expanduser().is_dir():  # Hydra: its own line and a HYDRA_FULL_ERROR hint
        raise ConfigError(f"--config-dir {cmd.config_dir!r} is not a folder: it adds a folder of YAML configs to initnorm's own; "
                          "give an existing one, or leave --config-dir out")
    if cmd.config_name and not cmd.config_dir and cmd.runs_jobs and not Path(CONF_DIR, f"{cmd.config_name}.yaml").is_file():
        known = sorted(p.stem for p in Path(CONF_DIR).glob("*.yaml"))
        raise ConfigError(f"--config-name {cmd.config_name!r} is not a config of initnorm's (known: {', '.join(known)}); fix it with "
                          f"`--config-name {known[0] if len(known) == 1 else 'train'}`, or leave --config-name out")


def _check_command_line(cmd: CommandLine, progress: Callable[[int, int], None]) -> list[CheckedJob] | None:
    check_config_flags(cmd)
    if not cmd.runs_jobs:
        return None
    multirun = cmd.multirun
    chosen = cmd.value("hydra/launcher")
    if chosen and (problem := launchers.missing_extra(chosen)):  # before composing: its config needs the extra's
        raise ConfigError(problem)
    register_resolvers()
    parse_configs_once()  # each config file parsed once for every composition from here on, Hydra's run of the command too
    saved_env = os.environ.get(SWEPT_ENV)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            loader = GlobalHydra.instance().config_loader()
            try:
                if not multirun:
                    check_one_value(loader, cmd)
                primary = loader.load_configuration(cmd.config_name or "train", list(cmd.overrides),
                                                    run_mode=RunMode.MULTIRUN if multirun else RunMode.RUN)
                job_lists = expand(primary) if multirun else [list(cmd.overrides)]
            except (HydraException, OmegaConfBaseException) as exc:
                raise one_line(exc, cmd.overrides, meant(loader, cmd, exc)) from exc
            progress(0, len(job_lists))
            launcher = check_launcher_and_folder(primary, multirun)
            if not multirun:
                return Checked(memory.fits([check_job(primary, job_lists[0], "", {})], launcher), launcher)
            swept = parse_sweep(sweep_overrides(primary))
            os.environ[SWEPT_ENV] = ",".join(swept)  # as SummaryCallback sets it, for the job folder names
            composer, seen, jobs = Composer(loader, primary), {}, []
            sweep_dir = job_folder(primary, False, node=primary.hydra.sweep)
            for num, overrides in enumerate(job_lists):
                named = " ".join(o for o in overrides if o.partition("=")[0].lstrip("+~") in swept)
                jobs.append(check_sweep_job(composer, overrides, num, f"job {named or num}", sweep_dir, seen))
                progress(num + 1, len(job_lists))
            check_one_folder_each(jobs, sweep_overrides(primary))
            return Checked(memory.fits(jobs, launcher), launcher, sweep=primary.hydra.sweeper.get("_target_") in BASIC_SWEEPERS)
    finally:
        GlobalHydra.instance().clear()
        if saved_env is None:
            os.environ.pop(SWEPT_ENV, None)
        else:
            os.environ[SWEPT_ENV] = saved_env


def check_one_folder_each(jobs: list[CheckedJob], overrides: list[str]) -> None:
    """Two jobs of a sweep whose folder is one (a value listed twice, ``seed=1,1``, or a ``hydra.sweep.subdir`` that leaves
    a swept key out) are refused before any trains, on every launcher: at once (local_parallel's workers, a stacked
    group) they would write the same checkpoint and event files; one after another the second would take the first's
    record for its own."""
    first: dict[str, CheckedJob] = {}
    for job in jobs:
        other = first.setdefault(job.subdir, job) if job.subdir is not None else job
        if other is job:
            continue
        # each value as Hydra writes it in the job's overrides (``1e-2`` is ``0.01``)
        listed = [(o.get_key_element(), list(o.sweep_string_iterator()))
                  for o in OverridesParser.create().parse_overrides(overrides) if o.is_sweep_override()]
        fix = next((f"`{key}={','.join(dict.fromkeys(values))}` (each value once)" for key, values in listed
                    if len(set(values)) < len(values)),
                   "the default folders: no `hydra.sweep.subdir=` override (each swept value in the name)")
        both = "; ".join(" ".join(j.overrides) or "no overrides" for j in (other, job))
        where = job.folder or f"<the sweep folder>/{job.subdir}"
        raise ConfigError(f"two jobs of this sweep have one folder, {where} ({both}): they would write the same files; "
                          f"fix it with {fix}")


def check_one_value(loader, cmd: CommandLine) -> None:
    """A run's override with several values (``seed=1,2`` without ``-m``) in one line (``bad_override.several_values``);
    an override Hydra cannot parse is left to its composition, which names it."""
    try:
        parsed = OverridesParser.create().parse_overrides(list(cmd.overrides))
    except HydraException:
        return
    for o in parsed:
        bad_override.refuse_search_range(o)
        if o.is_sweep_override():
            key, text = o.get_key_element(), o.input_line.partition("=")[2]
            try:  # whether the key holds a list: the config without this override
                rest = [x for x in cmd.overrides if x != o.input_line]
                base = loader.load_configuration(cmd.config_name or "train", rest, run_mode=RunMode.RUN)
                listed = OmegaConf.is_list(OmegaConf.select(base, key.lstrip("+~"), default=None))
            except (HydraException, OmegaConfBaseException):
                listed = False
            raise bad_override.several_values(key, text, list(o.sweep_string_iterator()), cmd.overrides, listed)


def meant(loader, cmd: CommandLine, exc: BaseException) -> DictConfig | None:
    """The config the command line composes without the override ``exc`` is about (None if that fails too): which
    keys a fix needs a ``+`` for."""
    try:
        return loader.load_configuration(cmd.config_name or "train", bad_override.without(cmd.overrides, exc),
                                         run_mode=RunMode.MULTIRUN if cmd.multirun else RunMode.RUN)  # a sweep's a,b composes
    except (HydraException, OmegaConfBaseException):
        return None


def check_sweep_job(composer: Composer, overrides: list[str], num: int, label: str, sweep_dir: Path | None,
                    seen: dict[Any, Any]) -> CheckedJob:
    """One job of a sweep, from the composition of its group choices (cli/composer.py): its task config made
    without a copy of the whole config where it can be (milliseconds), else composed as Hydra composes it."""
    try:
        task, cfg = composer.task(overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(f"{label}: {one_line(exc, overrides, composer.master)}") from exc
    if cfg is not None:
        with open_dict(cfg):
            cfg.hydra.job.num = num  # as Hydra's launcher sets it before the folder is named
        return check_job(cfg, overrides, label, seen)
    try:
        c = check_config(task, seen, num, True, composer.seeded(overrides))
        subdir = composer.subdir(overrides, task)
        folder = sweep_dir / subdir if sweep_dir is not None else None
        prior = inspect_folder(folder, c) if folder is not None else Prior()
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{label}: {one_line(exc)}") from exc
    except ConfigError as exc:
        raise ConfigError(f"{label}: {exc}") from exc
    except Exception as exc:
        raise ConfigError(f"{label}: {unexpected(exc)}") from exc
    return CheckedJob(overrides, c, folder, prior, subdir)
