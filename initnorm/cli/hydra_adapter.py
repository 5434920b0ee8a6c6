"""Every private symbol of Hydra and OmegaConf that initnorm uses, in this one file: each with what it does for us and
why no public API does it. Read from hydra-core 1.3.8 and omegaconf 2.3.1 (the versions pyproject.toml allows from:
hydra-core 1.3, omegaconf 2.3); a Hydra that moves one breaks here, in one place, and ``tests/test_hydra_adapter.py``
says which.
"""

from __future__ import annotations

# Applies a job's overrides to a composed config, the step ``load_sweep_config`` runs after composing a job's config
# groups (hydra/_internal/config_loader_impl.py): a sweep composes each set of group choices once and applies each job's
# values with it (``composer.py``). ``get_overrides_dirname`` makes ``hydra.job.override_dirname`` as Hydra does.
# Public: ``compose`` only, which composes every job from scratch (a sweep of thousands of jobs took minutes).
from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname

# Hydra's own argument parser (hydra/_internal/utils.py): reads the command line as ``@hydra.main`` will (``-m``,
# ``--cfg``, the overrides) before Hydra runs, so the workers can start and the preflight check every job first.
# Public: none (``hydra.main`` builds and uses it inside).
from hydra._internal.utils import get_args_parser

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


__all__ = ["BASIC_SWEEPER", "apply_overrides", "basic_sweeper", "get_args_parser", "get_omega_conf_dumper",
           "get_overrides_dirname"]
