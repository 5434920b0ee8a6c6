"""Hydra's and OmegaConf's private symbols live in initnorm/cli/hydra_adapter.py alone; a Hydra that moves one fails here."""

import subprocess

import yaml
from omegaconf import OmegaConf

from initnorm.cli import hydra_adapter
from tests.conftest import ROOT


def test_no_private_hydra_or_omegaconf_symbol_is_imported_outside_the_adapter():
    found = subprocess.run(["grep", "-rlE", r"(hydra\._internal|omegaconf\._utils|(^|[^a-z])_forkserver)", "initnorm", "hydra_plugins",
                            "--include=*.py"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert found == ["initnorm/cli/hydra_adapter.py"], found


def test_the_adapters_symbols_do_what_initnorm_uses_them_for():
    assert hydra_adapter.get_args_parser().parse_args(["-m", "seed=1,2"]).multirun
    sweeper = hydra_adapter.basic_sweeper()
    assert hydra_adapter.BASIC_SWEEPER == f"{sweeper.__module__}.{sweeper.__qualname__}"
    values = {"a": "1", "b": {"c": "x"}}
    assert yaml.dump(values, Dumper=hydra_adapter.get_omega_conf_dumper(), sort_keys=False) == OmegaConf.to_yaml(values)
