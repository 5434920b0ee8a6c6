"""What an outside attack found (issue 13), one test per class: bad input stops before anything is
created, relative paths work in jobs, foreign or damaged files cost one line and no other job, no
file in a job folder runs code, writes are atomic with unique names and readable modes, a full
disk or an unwritable folder is one line naming the folder."""

import errno
import json
import logging
import os
import pickle
import stat
from pathlib import Path

import lightning as L
import pytest
import torch

from initnorm import results
from initnorm.cli import disk, preflight
from initnorm.cli.preflight import check_command_line
from initnorm.errors import ConfigError
from initnorm.summary import summarize
from initnorm.training.checkpoints import save_atomically
from initnorm.training.resume import inspect_folder
from tests.conftest import TINY
from tests.inproc import command


def refused(argv) -> str:
    with pytest.raises(ConfigError) as info:
        check_command_line(list(argv))
    assert "\n" not in str(info.value)
    return str(info.value)


# ---- every value checked before anything runs


@pytest.mark.parametrize("argv,says", [
    (["-m", "lr=0.01,nan", "seed=1,2"], "job lr=nan seed=1: lr=nan is invalid"),
    (["-m", "seed=1,2", "trainer.devices=2"], "trainer.devices=2 is invalid: 1 in a sweep"),
    (["-m", "seed=1,2", "hydra/launcher=local_parallel", "hydra.launcher.n_jobs=0"], "hydra.launcher.n_jobs=0 is invalid"),
    (["model=decoder", "data=clusters"], "fix it with `data=alice`"),
    (["model.n_heads=0"], "model.n_heads=0 is invalid"),
    (["width=16.0"], "fix it with `width=16`"),
    (["seed=-1"], "seed=-1 is invalid"),
    (["data.path=/dev/null/x.txt"], "does not exist"),
    # two jobs with one folder, on any launcher: a value listed twice, a subdir without the swept keys
    (["-m", "seed=1,2,1", "norm=pre,post", "hydra/launcher=vectorized"], "fix it with `seed=1,2` (each value once)"),
    (["-m", "seed=1,2", "hydra.sweep.subdir=x", "hydra/launcher=local_parallel"], "no `hydra.sweep.subdir=` override"),
])
def test_the_preflight_refuses_before_any_folder_exists(tmp_path, monkeypatch, argv, says):
    monkeypatch.chdir(tmp_path)
    assert says in refused([*argv, f"hydra.sweep.dir={tmp_path}/sweep" if "-m" in argv else f"hydra.run.dir={tmp_path}/run"])
    assert sorted(os.listdir(tmp_path)) == []


def test_two_jobs_with_one_folder_are_refused_before_the_sweep_folder_is_made(tmp_path, monkeypatch):
    """``seed=1,1``: basic ran the second as the first's finished job, local_parallel trained both into one folder at
    once, a stacked group stacked them; the generated sweep folder is named as such, and not made."""
    monkeypatch.chdir(tmp_path)
    line = refused(["-m", "seed=1,1", "steps=3"])
    assert "two jobs of this sweep have one folder, <the sweep folder>/default/seed=1 (seed=1 steps=3; seed=1 steps=3)" in line
    assert line.endswith("fix it with `seed=1` (each value once)") and os.listdir(tmp_path) == []
    check_command_line(["-m", "seed=1,2", "lr=0.01,0.02", "steps=3"])  # distinct values: a folder each
    with pytest.raises(ConfigError, match="fix it with `lr=0.01,0.02`"):  # 1e-2 is 0.01 to Hydra: one folder
        check_command_line(["-m", "seed=1,2", "lr=0.01,1e-2,0.02", "steps=3"])


def test_a_gpu_without_a_gpu_is_refused_first(monkeypatch):
    monkeypatch.setattr(preflight.devices, "gpu_count", lambda: 0)
    assert "trainer.accelerator='gpu' is invalid" in refused(["trainer.accelerator=gpu"])


def test_an_exception_in_a_check_is_still_one_line(monkeypatch):
    # a check of initnorm's own that raises (a function of the package called wrongly: no frame of the user's code; a
    # function defined here would be named as the user's, with its file and line: initnorm/own_errors.py)
    monkeypatch.setattr(preflight.schema, "check", preflight.data_options)
    line = refused(["lr=0.01"])
    assert line.startswith("TypeError: ") and "please report" in line and "your code" not in line


def test_a_relative_data_path_works_in_every_job_of_a_sweep(tmp_path):
    """Each job runs in its own folder (Hydra's chdir): the path is resolved against where the command started. The
    command runs in this process, in tmp_path (tests/inproc.py)."""
    (tmp_path / "plain.txt").write_text("the quick brown fox jumps over the lazy dog. " * 200)
    run = command("-m", "seed=1,2", "data=text", "data.path=plain.txt", *TINY, "steps=10", "summary.plots=[]",
                  f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    records = results.read_metrics(tmp_path / "sweep")
    assert [r["status"] for r in records] == ["finished", "finished"]
    assert records[0]["config"]["data"]["path"] == str(tmp_path.resolve() / "plain.txt")


def test_probe_and_coord_check_check_everything_before_creating_their_folder(tmp_path, capsys):
    from initnorm.cli import coord_check, probe

    assert coord_check.main(["--params", "sp,bogus", "--widths", "16,32", "--out", str(tmp_path / "cc")]) == 2
    assert "'bogus' is neither; fix it with `--params sp`" in capsys.readouterr().err  # the flag, not the job's param=
    assert probe.main(["decoder", "--out", str(tmp_path / "pr"), "--", "foo=1"]) == 2
    err = capsys.readouterr().err  # Hydra's refusal restated in one line (cli/bad_override.py)
    assert "foo is not a key initnorm reads" in err and "drop `foo=1`" in err
    assert probe.main(["decoder", "--out", str(tmp_path / "pr"), "--prompt", "XYZ"]) == 2
    assert not (tmp_path / "cc").exists() and not (tmp_path / "pr").exists()


# ---- foreign or damaged files


def test_foreign_metrics_files_cost_one_line_and_nothing_else(tmp_path, caplog):
    good = {"status": "finished", "seed": 1, "overrides": {"seed": "1"}, "swept": ["seed"], "diverged": False, "final_val_loss": 2.0}
    results.write_metrics(tmp_path / "seed=1", good)
    (tmp_path / "seed=2").mkdir()
    (tmp_path / "seed=2" / "metrics.json").write_text("[1, 2, 3]")  # valid JSON, wrong shape
    (tmp_path / "seed=3").mkdir()
    (tmp_path / "seed=3" / "metrics.json").write_text('{"status": "finished", "overrides": ["x"]}')
    old = {"status": "finished", "seed": 4, "overrides": {"seed": "4"}}  # an older version's record: no loss, no config
    results.write_metrics(tmp_path / "seed=4", old)
    with caplog.at_level(logging.WARNING):
        table = summarize(tmp_path)
    warned = [r.getMessage() for r in caplog.records]
    assert any("seed=2/metrics.json" in w and "a JSON list" in w and "delete it" in w for w in warned)
    assert any("seed=3/metrics.json" in w and "its overrides is a JSON list" in w for w in warned)
    assert "2.000" in table and (tmp_path / "summary.md").is_file()

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert inspect_folder(tmp_path / "seed=2", {"lr": 0.01}).finished is None  # trains again
        prior = inspect_folder(tmp_path / "seed=4", {"lr": 0.01})
    assert prior.finished["seed"] == 4
    assert any("without final_val_loss, diverged, steps" in r.getMessage() for r in caplog.records)


class Planted:
    """A pickle that makes a folder when it is loaded: what a hostile checkpoint would do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


@pytest.mark.parametrize("content", ["planted", "bare pickle", "foreign"])
def test_a_planted_checkpoint_is_refused_and_runs_nothing(tmp_path, content):
    """A job's checkpoint is read as tensors and plain values only, and must be what initnorm writes: in the preflight of
    a job alone and of a vectorised sweep (the launcher's grouping reads it too), and where it is loaded."""
    from initnorm.training.resume import checkpoint_path, read_member

    marker = tmp_path / "pwned"
    for job, args in ((tmp_path / "job", ["steps=5", f"hydra.run.dir={tmp_path / 'job'}"]),
                      (tmp_path / "sweep" / "default" / "seed=1",
                       ["-m", "seed=1,2", "steps=5", "hydra/launcher=vectorized", f"hydra.sweep.dir={tmp_path}/sweep"])):
        path = checkpoint_path(job)
        path.parent.mkdir(parents=True)
        if content == "planted":
            torch.save({"format": "x", "global_step": 5, "x": Planted(marker)}, path)
        elif content == "bare pickle":
            path.write_bytes(pickle.dumps(Planted(marker)))
        else:  # loads as tensors, but is not what initnorm writes
            torch.save({"x": torch.zeros(3)}, path)
        line = refused(args)
        assert "initnorm.ckpt" in line and "delete it" in line, line
        with pytest.raises(ConfigError, match="delete it"):
            read_member(path, {"seed": 1, "steps": 5})
    assert not marker.exists()


def test_a_planted_checkpoint_stops_a_vectorised_sweep_in_one_line(tmp_path):
    """The command's checks refuse it before any worker trains; they run in the command's own process, so here in this
    one (tests/inproc.py; no worker is started in process)."""
    job = tmp_path / "sweep" / "default" / "seed=2"
    (job / "checkpoints").mkdir(parents=True)
    marker = tmp_path / "pwned"
    torch.save({"x": Planted(marker)}, job / "checkpoints" / "initnorm.ckpt")
    proc = command("-m", "seed=1,2", *TINY, "hydra/launcher=vectorized", f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path)
    assert proc.returncode == 2 and not marker.exists(), proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "initnorm.ckpt is not a checkpoint initnorm wrote" in lines[0], proc.stderr[-2000:]
    assert not (tmp_path / "sweep" / "default" / "seed=1").exists()  # refused before any job trained


# ---- atomic writes: unique names, fsync before rename, readable modes


def test_checkpoint_temporary_names_are_unique(tmp_path):
    names = []

    def write(tmp):
        names.append(tmp)
        tmp.write_bytes(b"state")

    path = tmp_path / "checkpoints" / "initnorm.ckpt"
    save_atomically(path, write), save_atomically(path, write)  # two processes on one folder, by mistake
    first, second = names
    assert first != second and first.parent == second.parent and str(os.getpid()) in first.name
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["initnorm.ckpt"]


def test_writes_fsync_before_rename_and_respect_the_umask(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    old = os.umask(0o022)
    try:
        results.write_metrics(tmp_path, {"status": "finished"})
        assert events == ["fsync", "replace"]
        assert stat.S_IMODE((tmp_path / "metrics.json").stat().st_mode) == 0o644
        os.umask(0o077)
        results.write_atomic(tmp_path / "private.txt", "x")
        assert stat.S_IMODE((tmp_path / "private.txt").stat().st_mode) == 0o600
    finally:
        os.umask(old)
    events.clear()
    save_atomically(tmp_path / "checkpoints" / "initnorm.ckpt", lambda tmp: tmp.write_bytes(b"state"))
    assert events == ["fsync", "replace"]


# ---- full disk, unwritable folder


class FillDisk(L.Callback):
    """From the job whose folder has ``seed=<seed_to_fail>`` on, every result file written below that
    folder fails with ENOSPC: a disk that fills during job 2 of a sweep (the earlier folders stay writable)."""

    def __init__(self, seed_to_fail: int):
        self.seed_to_fail = seed_to_fail

    def setup(self, trainer, pl_module, stage) -> None:
        here = os.getcwd()
        if not here.endswith(f"seed={self.seed_to_fail}"):
            return
        real = results.write_atomic

        def full(path, text):
            if str(Path(path).absolute()).startswith(here):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
            return real(path, text)

        results.write_atomic = full


def no_space(*args):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_hydra_config_files_are_never_left_empty(tmp_path, monkeypatch):
    import hydra.core.utils as hydra_utils
    from omegaconf import OmegaConf

    monkeypatch.setattr(hydra_utils, "_save_config", hydra_utils._save_config)  # undone after the test
    disk.hydra_saves_atomically()
    monkeypatch.setattr(os, "fsync", no_space)  # the disk fills while the file is written
    with pytest.raises(disk.DiskError) as info:
        hydra_utils._save_config(OmegaConf.create({"lr": 0.01}), "config.yaml", tmp_path / ".hydra")
    assert "No space left on device" in str(info.value) and str(tmp_path / ".hydra") in info.value.folder
    assert os.listdir(tmp_path / ".hydra") == []  # no 0-byte config.yaml, no temporary file


def test_an_unwritable_output_folder_is_one_line_naming_it(tmp_path, monkeypatch):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(disk.tempfile, "mkstemp", read_only)
    line = refused(["-m", "seed=1,2", f"hydra.sweep.dir={tmp_path}/sweep"])
    assert line == (f"cannot write in {tmp_path} (Read-only file system); free space, fix its permissions, or pick another folder with "
                    "`hydra.sweep.dir=/a/writable/folder`")


def test_a_full_disk_mid_sweep_stops_with_one_line_and_keeps_what_finished(tmp_path, monkeypatch):
    """The sweep runs in this process (tests/inproc.py): FillDisk replaces results.write_atomic, put back after the test."""
    monkeypatch.setattr(results, "write_atomic", results.write_atomic)
    sweep = tmp_path / "sweep"
    fill = ["+callbacks.fill._target_=tests.test_hardening.FillDisk", "+callbacks.fill.seed_to_fail=2"]
    run = command("-m", "seed=1,2,3", *TINY, "steps=10", f"hydra.sweep.dir={sweep}", *fill, cwd=tmp_path)
    assert run.returncode == 1, run.stderr[-3000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "No space left on device" in errors[0] and "seed=2" in errors[0], run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    assert json.loads((sweep / "default" / "seed=1" / "metrics.json").read_text())["status"] == "finished"
    assert not (sweep / "default" / "seed=2" / "metrics.json").exists() and not (sweep / "default" / "seed=3").exists()
    # the job the disk stopped
    assert "1 of 2 jobs finished; missing: default/seed=2 (no metrics.json)." in (sweep / "summary.md").read_text()
    assert "resume with: python -m initnorm.train" in run.stderr
    empty = [p for p in sweep.rglob("*") if p.is_file() and p.stat().st_size == 0 and p.suffix != ".log"]  # Hydra's job log may be empty
    assert empty == []
