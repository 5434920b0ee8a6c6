"""initnorm's own Hydra launchers and sweeper, registered by hand, and what each launcher needs installed.

Hydra instantiates a launcher only from a class under the ``hydra_plugins`` namespace, and finds
those by scanning the ``hydra_plugins`` folders on ``sys.path``, which an editable install
(``pip install -e``) does not expose. Registering the classes by hand works for every kind of
install: ``hydra/launcher=slurm`` (initnorm/launch/slurm.py), ``hydra/launcher=vectorized``
(initnorm/cli/vectorized.py) and the sweepers ``hydra/sweeper=checked`` (initnorm/cli/sweeper.py) and ``search``
(initnorm/cli/search.py).

The plugin classes import this package's code (they hand it the work), so this module names them
and never imports them, as Hydra names a ``_target_``: no import cycle between ``hydra_plugins/``
and ``initnorm/cli``. A launcher whose ``launchers`` extra is missing is not registered, and the
command line that asks for it stops with one line naming the extra (``missing_extra``).
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from initnorm.cli.hydra_adapter import BASIC_LAUNCHER

EXTRA = "pip install 'initnorm[launchers]'"
SUBMITIT = "hydra_plugins.hydra_submitit_launcher"
JOBLIB = "hydra_plugins.hydra_joblib_launcher"
# class (as its config's _target_ names it) -> the module it needs beyond the base install (None: none)
PLUGINS = {
    "hydra_plugins.initnorm_launchers.CheckedSweeper": None,
    "hydra_plugins.initnorm_launchers.SearchSweeper": "optuna",
    "hydra_plugins.initnorm_vectorized.vectorized_launcher.VectorizedLauncher": None,
    "hydra_plugins.initnorm_vectorized.vectorized_launcher.ParallelLauncher": None,
    "hydra_plugins.initnorm_launchers._slurm.SlurmLauncher": SUBMITIT,
}
# What a launcher or sweeper is, by the class its ``_target_`` names: the class, or the nearest of its bases, found here
# (``kind``). Hydra's own launchers come first among its bases for a class of one's own that extends one of them.
KINDS = {
    BASIC_LAUNCHER: "basic",
    "hydra_plugins.initnorm_vectorized.vectorized_launcher.VectorizedLauncher": "vectorized",
    "hydra_plugins.initnorm_vectorized.vectorized_launcher.ParallelLauncher": "local_parallel",
    "hydra_plugins.initnorm_launchers._slurm.SlurmLauncher": "slurm",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher": "slurm",
    "initnorm.cli.search.SearchSweeper": "search",
    "hydra_plugins.initnorm_launchers.SearchSweeper": "search",
}
# hydra/launcher=<name> -> (module it needs, what it is, the other way to run the sweep)
NEEDS = {
    "local_parallel": (JOBLIB, "Hydra's joblib launcher",
                       "drop hydra/launcher=local_parallel (the default launcher runs the jobs one after another)"),
    "slurm": (SUBMITIT, "Hydra's submitit launcher", "drop hydra/launcher=slurm (the default launcher runs the jobs here)"),
}
# hydra/launcher=vectorized's hydra.launcher.engine -> (module, what it is, the other way)
ENGINES = {
    "processes": ("pebble", "pebble's process pool", "add hydra.launcher.engine=sequential (the groups one after another in this process)"),
    "submitit": ("submitit", "submitit", "add hydra.launcher.engine=sequential (the groups one after another in this process)"),
}


# An engine's former name -> its name: `joblib` named the worker processes while joblib ran them (deprecated).
ENGINE_ALIASES = {"joblib": "processes"}
_warned: set[str] = set()


def engine_name(engine: str | None, quiet: bool = False) -> str | None:
    """``hydra.launcher.engine`` under its present name; a former one says so once (unless ``quiet``)."""
    if engine in ENGINE_ALIASES:
        if not quiet and engine not in _warned:
            _warned.add(engine)
            print(f"warning: hydra.launcher.engine={engine} is deprecated; it is now "
                  f"hydra.launcher.engine={ENGINE_ALIASES[engine]} (the same worker processes)", file=sys.stderr)
        return ENGINE_ALIASES[engine]
    return engine


def kind(node: Any) -> str | None:
    """What the launcher or sweeper of config ``node`` is (``basic``, ``vectorized``, ``local_parallel``, ``slurm``,
    ``search``), by the class its ``_target_`` names and that class's bases, not by how the name ends: a class of one's
    own that extends ours is ours. None for a class none of whose bases is known here, or a target that names no class
    (Hydra's own start says so). Hydra gives a plugin only as this string: ``KINDS`` is the one adapter from it."""
    import importlib

    target = node.get("_target_") if hasattr(node, "get") else None
    if not isinstance(target, str):
        return None
    if target in KINDS:
        return KINDS[target]
    module, _, name = target.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name) if module else None
    except Exception:  # not importable: Hydra's own start says so
        return None
    bases = found.__mro__ if isinstance(found, type) else ()
    return next((KINDS[f"{b.__module__}.{b.__qualname__}"] for b in bases if f"{b.__module__}.{b.__qualname__}" in KINDS), None)


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


def missing_extra(launcher: str | None, engine: str | None = None) -> str | None:
    """One line for a launcher (and, for ``vectorized``, an engine) this install cannot run; None if it can."""
    engine = engine_name(engine, quiet=True)
    need = NEEDS.get(launcher or "") or (ENGINES.get(engine or "") if launcher == "vectorized" else None)
    if need is None or installed(need[0]):
        return None
    module, what, other = need
    setting = f"hydra/launcher={launcher}" + (f" with hydra.launcher.engine={engine}" if launcher == "vectorized" else "")
    return f"{setting} needs {what} ({module}), which this install lacks: {EXTRA}, or {other}"


def register() -> None:
    from hydra.core.plugins import Plugins
    from hydra.utils import get_class

    for name, needs in PLUGINS.items():
        if needs is None or installed(needs):
            Plugins.instance().register(get_class(name))
