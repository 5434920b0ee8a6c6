"""Every private symbol of Hydra and OmegaConf that initnorm uses, in this one file: each with what it does for us and
why no public API does it. Read from hydra-core 1.3.8 and omegaconf 2.3.1 (the versions pyproject.toml allows from:
hydra-core 1.3, omegaconf 2.3); a Hydra that moves one breaks here, in one place, and ``tests/test_hydra_adapter.py``
says which.
"""

from __future__ import annotations

import os
import pickle
from importlib import resources
from pathlib import Path

# Applies a job's overrides to a composed config, the step ``load_sweep_config`` runs after composing a job's config
# groups (hydra/_internal/config_loader_impl.py): a sweep composes each set of group choices once and applies each job's
# values with it (``composer.py``). ``get_overrides_dirname`` makes ``hydra.job.override_dirname`` as Hydra does.
# Public: ``compose`` only, which composes every job from scratch (a sweep of thousands of jobs took minutes).
from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname

# Hydra's two sources that read YAML files (hydra/_internal/core_plugins/: file:// and pkg://) and its registry of source
# classes by scheme (hydra/_internal/sources_registry.py), through which every loader picks its sources: the preflight's,
# a Composer's and Hydra's own run. Hydra parses every file of a composition anew at each ``load_configuration`` (a new
# CachingConfigRepository each time), a third of its CPU; :func:`parse_configs_once` keeps each parse for the process.
# Public: none (a ConfigSource of our own needs a scheme of its own, which .hydra/hydra.yaml's config_sources records).
from hydra._internal.core_plugins.file_config_source import FileConfigSource
from hydra._internal.core_plugins.importlib_resources_config_source import ImportlibResourcesConfigSource
from hydra._internal.sources_registry import SourcesRegistry

# Hydra's own argument parser (hydra/_internal/utils.py): reads the command line as ``@hydra.main`` will (``-m``,
# ``--cfg``, the overrides) before Hydra runs, so the workers can start and the preflight check every job first.
# Public: none (``hydra.main`` builds and uses it inside).
from hydra._internal.utils import get_args_parser
from hydra.plugins.config_source import ConfigResult

# OmegaConf's YAML dumper (omegaconf/_utils.py), for plain values: a stacked group's members write ``.hydra/*.yaml``
# byte for byte as ``OmegaConf.to_yaml`` would, without making a config of each first (``member_setup.py``).
# Public: ``OmegaConf.to_yaml``, which takes a config (~6 ms a member to make).
from omegaconf._utils import get_omega_conf_dumper

# Hydra's default sweeper (hydra/_internal/core_plugins/basic_sweeper.py): the checked sweeper delegates to it, and the
# preflight expands a command line's sweep into its jobs exactly as it does (``split_arguments``).
# Public: only by ``_target_`` (``hydra/sweeper=basic``), which gives no access to the expansion. Imported when used:
# Hydra's plugin scan imports its core plugins' modules anew, and a class imported before it is not the one whose
# ``super()`` the instance then meets ("super(type, obj): obj must be an instance or subtype of type").
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"  # its _target_ in hydra/sweeper=basic
# Hydra's default launcher (hydra/_internal/core_plugins/basic_launcher.py), by its ``_target_`` in hydra/launcher=basic:
# ``launchers.kind`` tells a launcher by its class and bases, and ``basic.adopt`` takes Hydra's own instance (its jobs through
# run.run); Hydra names its class only by this private path.
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


def basic_sweeper() -> type:
    """Hydra's ``BasicSweeper`` class."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return BasicSweeper


def apply_overrides(values, cfg) -> None:
    """``values`` (parsed overrides) applied to ``cfg`` in place, as Hydra's ``load_sweep_config`` does."""
    ConfigLoaderImpl._apply_overrides_to_config(values, cfg)


_PARSED: dict[tuple, tuple[bytes, dict]] = {}  # (file, its stat) -> (its parsed config, pickled; its header)


def _stat(path: Path) -> tuple | None:
    """What changes when the file is edited or replaced: a notebook that edits a YAML between two compositions sees it."""
    try:
        st = path.stat()
    except OSError:
        return None
    return str(path), st.st_ino, st.st_size, st.st_mtime_ns


def _parsed_once(source, path: Path | None, read) -> ConfigResult:
    """``read()`` (the source's own load) once per version of the file at ``path`` (None: always read). Each caller gets
    a config of its own: Hydra's merge takes the loaded nodes into the composed config, and its repository deletes the
    ``defaults`` key. An unpickled copy costs ~1/30 of the parse (~0.03 ms a file; a deepcopy ~0.15 ms)."""
    key = _stat(path) if path is not None else None
    if key in _PARSED:
        config, header = _PARSED[key]
        return ConfigResult(config=pickle.loads(config), path=f"{source.scheme()}://{source.path}", provider=source.provider,
                            header=dict(header))
    result = read()
    if key is not None and _stat(path) == key:  # not edited while it was read
        _PARSED[key] = pickle.dumps(result.config), dict(result.header)
    return result


class ParsedFileSource(FileConfigSource):
    """Hydra's ``file://`` source, each file parsed once per version. A ``.yml`` name (Hydra warns at each load) is read
    as Hydra reads it."""

    def load_config(self, config_path: str) -> ConfigResult:
        if config_path.endswith(".yml"):
            return super().load_config(config_path)
        path = Path(os.path.realpath(os.path.join(self.path, self._normalize_file_name(config_path))))
        return _parsed_once(self, path, lambda: super(ParsedFileSource, self).load_config(config_path))


class ParsedPackageSource(ImportlibResourcesConfigSource):
    """Hydra's ``pkg://`` source (its own configs: ``hydra/output``, ``hydra/job_logging`` ...), each file parsed once per
    version where it is a file on disk (not inside a zip)."""

    def load_config(self, config_path: str) -> ConfigResult:
        if config_path.endswith(".yml"):
            return super().load_config(config_path)
        res = resources.files(self.path).joinpath(self._normalize_file_name(config_path))
        path = res if isinstance(res, Path) else None
        return _parsed_once(self, path, lambda: super(ParsedPackageSource, self).load_config(config_path))


# Named as Hydra's: its registry keeps a source of the same class name when a later plugin scan registers its own (as
# ``Singleton.set_state`` runs one in a sweep's worker), and refuses any other ("file is already registered with a
# different class"). Pickle finds them by their qualified names, which stay.
ParsedFileSource.__name__ = FileConfigSource.__name__
ParsedPackageSource.__name__ = ImportlibResourcesConfigSource.__name__


def parse_configs_once() -> None:
    """Every Hydra loader made from now on in this process reads each config file once per version (``_parsed_once``).
    After Hydra's plugin scan, which registers its own sources (importing their modules anew) and runs once a process."""
    from hydra.core.plugins import Plugins

    registry = SourcesRegistry.instance()
    if registry.types.get("file") is not ParsedFileSource:
        Plugins.instance()
        registry.types.update({"file": ParsedFileSource, "pkg": ParsedPackageSource})


__all__ = ["BASIC_SWEEPER", "apply_overrides", "basic_sweeper", "get_args_parser", "get_omega_conf_dumper",
           "get_overrides_dirname", "parse_configs_once"]
