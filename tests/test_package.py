"""The package ships everything a user of a wheel needs: every module and the configs.

Builds a wheel of this checkout, installs it into a fresh virtual environment outside the checkout
(the environment borrows the test environment's installed dependencies through a ``.pth`` path,
so nothing is downloaded), and trains five steps from another folder with ``python -m`` and with
the console script.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(out), str(ROOT)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PIP_NO_INPUT": "1"},
    )
    assert build.returncode == 0, build.stderr[-2000:]
    (path,) = out.glob("initnorm-*.whl")
    return path


def test_wheel_holds_every_module_and_config(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "initnorm").rglob("*.py")}
    configs = {"initnorm/conf/" + str(p.relative_to(ROOT / "conf")) for p in (ROOT / "conf").rglob("*.yaml")}
    assert not modules - names, f"modules missing from the wheel (add their package to pyproject.toml): {sorted(modules - names)}"
    assert not configs - names, f"configs missing from the wheel: {sorted(configs - names)}"


def fresh_venv(tmp_path: Path) -> tuple[Path, str]:
    """A new venv without pip in ``tmp_path/venv``: its python and its site-packages folder."""
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=120)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True,
                          text=True, check=True).stdout.strip()
    return python, site


def test_installed_wheel_trains_from_another_folder(wheel, tmp_path):
    python, site = fresh_venv(tmp_path)
    # The dependencies (torch, lightning, hydra ...) come from the test environment, after the venv's own packages.
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    install = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], capture_output=True,
                             text=True, timeout=300, env=env)
    assert install.returncode == 0, install.stderr[-2000:]
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = subprocess.run([str(python), "-c", "import initnorm; print(initnorm.__file__)"], cwd=work,
                           capture_output=True, text=True, env=env)
    assert where.stdout.strip().startswith(site), where.stdout + where.stderr
    for command in ([str(python), "-m", "initnorm.train"], [str(python.parent / "initnorm-train")]):
        run = subprocess.run(
            [*command, "steps=5", "callbacks=none", "trainer.enable_progress_bar=false",
             f"hydra.run.dir={work / command[-1].replace('/', '_')}"],
            cwd=work, capture_output=True, text=True, timeout=600, env=env,
        )
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        assert "final validation loss" in run.stdout


EXTRAS = ("joblib", "submitit", "hydra_joblib_launcher", "hydra_submitit_launcher")  # what `initnorm[launchers]` adds


def site_without_extras(folder: Path) -> Path:
    """The test environment's installed packages as a folder of links, minus the launchers extra:
    what a plain ``pip install initnorm`` has (Hydra's plugin scan walks the folders themselves, so
    hiding the extras from ``import`` alone would not be the same)."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    folder.mkdir()
    for entry in purelib.iterdir():
        if entry.name.split("-")[0].lower() in EXTRAS or entry.suffix == ".pth" or entry.name.startswith("__editable__"):
            continue
        if entry.name == "hydra_plugins":
            (folder / entry.name).mkdir()
            for plugin in entry.iterdir():
                if plugin.name not in EXTRAS:
                    (folder / entry.name / plugin.name).symlink_to(plugin)
            continue
        (folder / entry.name).symlink_to(entry)
    return folder


def test_a_plain_install_without_the_launchers_extra_trains_and_names_the_extra(wheel, tmp_path):
    python, site = fresh_venv(tmp_path)
    Path(site, "deps.pth").write_text(f"{site_without_extras(tmp_path / 'base')}\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", site, str(wheel)],
                             capture_output=True, text=True, timeout=300, env=env)
    assert install.returncode == 0, install.stderr[-2000:]
    work = tmp_path / "elsewhere"
    work.mkdir()
    missing = subprocess.run([str(python), "-c", "import joblib"], capture_output=True, text=True, env=env)
    assert missing.returncode == 1 and "No module named 'joblib'" in missing.stderr  # the extra is not there
    run = subprocess.run([str(python), "-m", "initnorm.train", "steps=3", "callbacks=none", "trainer.enable_progress_bar=false",
                          f"hydra.run.dir={work / 'one'}"],
                         cwd=work, capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0 and "final validation loss" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "Error importing" not in run.stderr, run.stderr[-2000:]
    for launcher in ("slurm", "local_parallel", "vectorized"):
        sweep = subprocess.run([str(python), "-m", "initnorm.train", "-m", "seed=1,2", "steps=3", f"hydra/launcher={launcher}",
                                f"hydra.sweep.dir={work / launcher}"],
                               cwd=work, capture_output=True, text=True, timeout=600, env=env)
        lines = sweep.stderr.strip().splitlines()
        assert sweep.returncode == 2 and len(lines) == 1, sweep.stderr[-2000:]
        assert "pip install 'initnorm[launchers]'" in lines[0] and f"hydra/launcher={launcher}" in lines[0], sweep.stderr[-2000:]


def test_a_missing_extra_is_one_line_naming_it(monkeypatch):
    from initnorm.cli import launchers
    from initnorm.cli.preflight import check_command_line
    from initnorm.errors import ConfigError

    monkeypatch.setattr(launchers, "installed", lambda module: False)
    for argv, setting in ((["-m", "seed=1,2", "hydra/launcher=local_parallel"], "hydra/launcher=local_parallel"),
                          (["hydra/launcher=slurm"], "hydra/launcher=slurm"),
                          (["-m", "seed=1,2", "hydra/launcher=vectorized"], "hydra/launcher=vectorized with hydra.launcher.engine=joblib")):
        with pytest.raises(ConfigError) as err:
            check_command_line(argv)
        assert str(err.value).startswith(setting) and "pip install 'initnorm[launchers]'" in str(err.value) and "\n" not in str(err.value)
    assert launchers.missing_extra(None) is None and launchers.missing_extra("vectorized", "sequential") is None
