"""Where the configs are, and composing them outside a Hydra app.

``conf/`` sits beside the package in a source checkout and inside it (``initnorm/conf``) in an
installed wheel (pyproject.toml maps it there); this module finds it once for every command.
"""

from __future__ import annotations

from pathlib import Path


def _find_conf_dir() -> str:
    package = Path(__file__).resolve().parents[1]
    for folder in (package / "conf", package.parent / "conf"):  # installed wheel, then source checkout
        if (folder / "train.yaml").is_file():
            return str(folder)
    raise FileNotFoundError(f"initnorm's configs (train.yaml) are neither in {package / 'conf'} nor in {package.parent / 'conf'}; "
                            "reinstall initnorm")


CONF_DIR = _find_conf_dir()


_COMPOSER = None  # initnorm.cli.composer.Composer of the training config, made at the first composition


def compose_train(overrides: list[str]):
    """The training config with ``overrides``, composed outside a Hydra app (for commands such as
    ``initnorm.probe`` and ``initnorm.coord_check`` that build or train several models in one process), as Hydra's
    ``compose`` gives it (no ``hydra`` node). Made by one Composer per process (``cli/composer.py``; tests/test_composer.py
    holds it equal to Hydra's own composition): Hydra composes once per distinct choice of config groups and each list's
    value overrides are applied to a copy, with Hydra's own function. Hydra's composition of each list cost ~0.1-0.4 s of
    CPU: a coordinate check composes every job (widths x parameterisations x seeds) before the first trains. Every caller
    gets its own config."""
    global _COMPOSER
    from omegaconf import open_dict

    if _COMPOSER is None:
        from hydra import initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra
        from hydra.types import RunMode

        from initnorm.cli.composer import Composer
        from initnorm.cli.hydra_adapter import parse_configs_once

        parse_configs_once()
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            loader = GlobalHydra.instance().config_loader()
            _COMPOSER = Composer(loader, loader.load_configuration("train", [], run_mode=RunMode.RUN))
        GlobalHydra.instance().clear()
    cfg = _COMPOSER.job_config(list(overrides))
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


def split_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    """A command's own arguments, and the training-config overrides after ``--``."""
    if "--" not in argv:
        return list(argv), []
    i = argv.index("--")
    return list(argv[:i]), list(argv[i + 1 :])


def refuse_own_keys(extra: list[str], flags: dict[str, str], command: str) -> None:
    """An override after ``--`` of a key ``command`` sets from a flag of its own (``flags``: key -> flag): every job
    would take that one value under the labels of the flag's values (``initnorm-probe -- norm=post`` printed a "pre"
    row that was post-LN; ``initnorm-coord-check -- width=64`` trained every width at 64). One line naming the flag."""
    from initnorm.errors import bad_value

    for o in extra:
        key, _, value = o.lstrip("+~").partition("=")
        if key in flags:
            raise bad_value("override after --", o, f"a key {command} does not set itself ({key} is its {flags[key]})",
                            f"{flags[key]} {value}")


KIND_NAMES = {int: ("an integer", "integers", "16,32"), float: ("a number", "numbers", "0.02,0.25"), str: ("a name", "names", "pre,post")}


def comma_list(kind=str):
    """An argparse type for ``16,32,64``: a value that is not one of ``kind``, or none at all, is argparse's one line
    naming it (``argument --widths: 'abc' in '16,abc' is not an integer: give comma-separated integers, as 16,32``),
    not ``invalid <lambda> value``."""
    import argparse

    one, many, example = KIND_NAMES.get(kind, (f"a {kind.__name__}", f"{kind.__name__} values", "a,b"))
    what = f"comma-separated {many}"

    def convert(text: str) -> list:
        values = []
        for x in filter(None, (x.strip() for x in text.split(","))):
            try:
                values.append(kind(x))
            except ValueError:
                raise argparse.ArgumentTypeError(f"{x!r} in {text!r} is not {one}: give {what}, as {example}") from None
        if not values:
            raise argparse.ArgumentTypeError(f"{text!r} holds none: give {what}, as {example}")
        return values

    convert.__name__ = what
    return convert
