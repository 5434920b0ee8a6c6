"""The package ships everything a user of a wheel needs: every module and the configs.

Builds a wheel of this checkout, installs it into a fresh virtual environment outside the checkout
(the environment borrows the test environment's installed dependencies, minus the launchers extra, through a
``.pth`` path, so nothing is downloaded), and trains three steps from another folder with ``initnorm.train.main()``
(what ``python -m`` runs) and with the console script; a sweep on a launcher that needs the extra is one line naming it.
"""

from __future__ import annotations

import os
import shutil
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
    # from a copy of the tracked tree: setuptools builds in the source folder (its build/), and the checkout stays as it was
    src = tmp_path_factory.mktemp("source") / "initnorm"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".*", "build", "outputs", "*.egg-info", "__pycache__"))
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(out), str(src)],
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


EXTRAS = ("joblib", "pebble", "submitit", "hydra_joblib_launcher", "hydra_submitit_launcher")  # what `initnorm[launchers]` adds


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


@pytest.fixture(scope="module")
def plain_install(wheel, tmp_path_factory):
    """The wheel installed by the venv's own ``pip install`` (its console script too) into a fresh venv whose dependencies
    are the test environment's minus the launchers extra (a ``.pth`` path: nothing is downloaded), once for both tests
    (each made its own venv and install); and a folder outside the checkout."""
    tmp = tmp_path_factory.mktemp("plain")
    python, site = fresh_venv(tmp)
    Path(site, "deps.pth").write_text(f"{site_without_extras(tmp / 'base')}\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    install = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], capture_output=True,
                             text=True, timeout=300, env=env)
    assert install.returncode == 0, install.stderr[-2000:]
    work = tmp / "elsewhere"
    work.mkdir()
    return python, site, work, env


def train_from(work: Path, env: dict, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run([*command, "steps=3", "callbacks=none", "trainer.enable_progress_bar=false",
                           f"hydra.run.dir={work / command[-1].replace('/', '_')}"],
                          cwd=work, capture_output=True, text=True, timeout=600, env=env)


def test_installed_wheel_trains_from_another_folder(plain_install):
    """The installed package is the one imported there, and its console script trains (``initnorm.train.main()``, what
    ``python -m initnorm.train`` runs, trains from the same folder in the next test)."""
    python, site, work, env = plain_install
    where = subprocess.run([str(python), "-c", "import initnorm; print(initnorm.__file__)"], cwd=work,
                           capture_output=True, text=True, env=env)
    assert where.stdout.strip().startswith(site), where.stdout + where.stderr
    run = train_from(work, env, str(python.parent / "initnorm-train"))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "final validation loss" in run.stdout


def test_a_plain_install_without_the_launchers_extra_trains_and_names_the_extra(plain_install):
    python, _, work, env = plain_install
    missing = subprocess.run([str(python), "-c", "import joblib"], capture_output=True, text=True, env=env)
    assert missing.returncode == 1 and "No module named 'joblib'" in missing.stderr  # the extra is not there
    # `python -m initnorm.train` is `initnorm.train.main()`: a run, then the three launchers' sweeps, each a main() in one
    # process of the installed package (four processes spent ~7 s of CPU each importing torch), each exit and stderr told
    # apart. The run comes first, in the process as fresh as `python -m` starts it.
    runs = {"run": ["steps=3", "callbacks=none", "trainer.enable_progress_bar=false", f"hydra.run.dir={work}/initnorm.train"]}
    runs |= {launcher: ["-m", "seed=1,2", "steps=3", f"hydra/launcher={launcher}", f"hydra.sweep.dir={work}/{launcher}"]
             for launcher in ("slurm", "local_parallel", "vectorized")}
    code = ("import sys\nfrom initnorm.train import main\n"
            f"for name, args in {runs!r}.items():\n"
            "    sys.argv = ['initnorm.train', *args]\n"
            "    try:\n        main()\n        code = 0\n    except SystemExit as exc:\n        code = exc.code\n"
            "    print('exit', name, code, flush=True)\n    print('-- end of', name, file=sys.stderr, flush=True)\n")
    ran = subprocess.run([str(python), "-c", code], cwd=work, capture_output=True, text=True, timeout=600, env=env)
    exits = [line for line in ran.stdout.splitlines() if line.startswith("exit ")]
    assert ran.returncode == 0 and exits == ["exit run 0", *(f"exit {name} 2" for name in list(runs)[1:])], ran.stdout[-2000:]
    assert "final validation loss" in ran.stdout.partition("exit run 0")[0], ran.stdout[-2000:]
    errs = ran.stderr.split("-- end of ")
    err_of = dict(zip(runs, [errs[0], *(e.partition("\n")[2] for e in errs[1:-1])]))
    assert "Traceback" not in err_of["run"] and "Error importing" not in err_of["run"], ran.stderr[-2000:]
    for launcher in list(runs)[1:]:
        lines = err_of[launcher].strip().splitlines()
        assert len(lines) == 1, ran.stderr[-2000:]
        assert "pip install 'initnorm[launchers]'" in lines[0] and f"hydra/launcher={launcher}" in lines[0], ran.stderr[-2000:]


def test_a_missing_extra_is_one_line_naming_it(monkeypatch):
    from initnorm.cli import launchers
    from initnorm.cli.preflight import check_command_line
    from initnorm.errors import ConfigError

    monkeypatch.setattr(launchers, "installed", lambda module: False)
    for argv, setting in ((["-m", "seed=1,2", "hydra/launcher=local_parallel"], "hydra/launcher=local_parallel"),
                          (["hydra/launcher=slurm"], "hydra/launcher=slurm"),
                          (["-m", "seed=1,2", "hydra/launcher=vectorized"],
                           "hydra/launcher=vectorized with hydra.launcher.engine=processes")):
        with pytest.raises(ConfigError) as err:
            check_command_line(argv)
        assert str(err.value).startswith(setting) and "pip install 'initnorm[launchers]'" in str(err.value) and "\n" not in str(err.value)
    assert launchers.missing_extra(None) is None and launchers.missing_extra("vectorized", "sequential") is None
