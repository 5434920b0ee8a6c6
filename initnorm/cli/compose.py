"""Where the configs are, and composing them outside a Hydra app.

``conf/`` sits beside the package in a source checkout and inside it (``initnorm/conf``) in an
installed wheel (pyproject.toml maps it there); this module finds it once for every command.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any


def _find_conf_dir() -> str:
    package = Path(__file__).resolve().parents[1]
    for folder in (package / "conf", package.parent / "conf"):  # installed wheel, then source checkout
        if (folder / "train.yaml").is_file():
            return str(folder)
    raise FileNotFoundError(f"initnorm's configs (train.yaml) are neither in {package / 'conf'} nor in {package.parent / 'conf'}; "
                            "reinstall initnorm")


CONF_DIR = _find_conf_dir()


_COMPOSED: dict[tuple[str, ...], Any] = {}


def compose_train(overrides: list[str]):
    """The training config with ``overrides``, composed outside a Hydra app (for commands such as
    ``initnorm.probe`` and ``initnorm.coord_check`` that build or train several models in one process).
    Each distinct list is composed once per process and every caller gets its own deep copy: coord_check
    composed every job twice (checked before the first trains, then trained), ~0.4 s of CPU each time."""
    key = tuple(overrides)
    if key not in _COMPOSED:
        from hydra import compose, initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra

        from initnorm.cli.hydra_adapter import parse_configs_once

        parse_configs_once()
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            _COMPOSED[key] = compose(config_name="train", overrides=list(key))
    return copy.deepcopy(_COMPOSED[key])


def split_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    """A command's own arguments, and the training-config overrides after ``--``."""
    if "--" not in argv:
        return list(argv), []
    i = argv.index("--")
    return list(argv[:i]), list(argv[i + 1 :])


def comma_list(kind=str):
    """An argparse type for ``16,32,64``."""
    return lambda text: [kind(x) for x in text.split(",") if x]
