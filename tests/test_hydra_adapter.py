"""Hydra's and OmegaConf's private symbols live in initnorm/cli/hydra_adapter.py alone; a Hydra that moves one fails here."""

import os
import subprocess

import pytest
import yaml
from omegaconf import OmegaConf, open_dict

from initnorm.cli import hydra_adapter
from tests.conftest import CONF, ROOT


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


def _compose(folder, *overrides):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(folder), version_base="1.3"):
            return compose(config_name="train", overrides=list(overrides))
    finally:
        GlobalHydra.instance().clear()


def test_a_config_file_is_parsed_once_per_version_and_each_composition_gets_its_own(tmp_path, monkeypatch):
    """parse_configs_once: a second composition reads no file again, yet a file edited in place (same size, a new mtime) or
    replaced is read anew, and a composition's config shares nothing with the next one's (Hydra merges the loaded nodes
    into the composed config)."""
    hydra_adapter.parse_configs_once()
    (tmp_path / "model").mkdir()
    (tmp_path / "train.yaml").write_text("defaults:\n  - model: a\n  - _self_\nlr: 1\n")
    (tmp_path / "model" / "a.yaml").write_text("width: 8\nsizes: [1, 2]\n")
    parsed = []
    load = OmegaConf.load
    monkeypatch.setattr(OmegaConf, "load", lambda f: parsed.append(getattr(f, "name", f)) or load(f))
    first = _compose(tmp_path)
    assert sorted(p for p in parsed if p.startswith(str(tmp_path))) == [str(tmp_path / "model" / "a.yaml"), str(tmp_path / "train.yaml")]
    first.model.sizes.append(3)  # the first caller's changes
    first.model.width = 99
    with open_dict(first):
        del first["lr"]
    parsed.clear()
    second = _compose(tmp_path)
    assert parsed == []  # Hydra's own files (pkg://hydra.conf) included
    assert OmegaConf.to_container(second) == {"model": {"width": 8, "sizes": [1, 2]}, "lr": 1}
    assert _compose(tmp_path, "model.width=16").model.width == 16 and second.model.width == 8

    a = tmp_path / "model" / "a.yaml"
    before = a.stat().st_mtime_ns
    a.write_text("width: 9\nsizes: [1, 2]\n")  # the same size: only the time tells
    os.utime(a, ns=(before + 10**9, before + 10**9))
    assert _compose(tmp_path).model.width == 9
    (tmp_path / "new.yaml").write_text("width: 7\nsizes: [1, 2]\n")
    os.utime(tmp_path / "new.yaml", ns=(before + 10**9, before + 10**9))
    os.replace(tmp_path / "new.yaml", a)  # an editor's atomic save: same size and time, another file
    assert _compose(tmp_path).model.width == 7


def test_a_composition_from_parsed_files_is_hydras(tmp_path, monkeypatch):
    """The same config and the same refusal as Hydra's own sources give, on the real conf/ tree."""
    from hydra.errors import ConfigCompositionException

    from initnorm.cli.sweep import register_resolvers

    register_resolvers()
    hydra_adapter.parse_configs_once()
    cases = [(), ("model=wide_mlp", "norm=post"), ("experiment=coord_check",), ("hydra/launcher=vectorized",)]

    def composed():
        out = [OmegaConf.to_yaml(_compose(CONF, *o)) for o in cases]
        with pytest.raises(ConfigCompositionException) as refused:
            _compose(CONF, "model=wide_mpl")
        return out, str(refused.value)

    ours = composed()
    types = hydra_adapter.SourcesRegistry.instance().types
    monkeypatch.setitem(types, "file", hydra_adapter.FileConfigSource)
    monkeypatch.setitem(types, "pkg", hydra_adapter.ImportlibResourcesConfigSource)
    assert composed() == ours
