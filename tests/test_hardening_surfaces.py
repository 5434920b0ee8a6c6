"""What issue 23 found around the stacked path, one test per class: launcher values, damaged
checkpoints, a stop signal while the command line is checked, a full disk while the summary is
written, files in a job folder that are not records, read-only folders and caches, memory that a
probe cannot have, inputs that are not what they claim."""

import errno
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from initnorm import results
from initnorm.cli import console, disk
from initnorm.cli.preflight import check_command_line
from initnorm.errors import ConfigError
from initnorm.summary import summarize
from initnorm.training.resume import inspect_folder
from tests.conftest import ROOT, TINY, run_cli
from tests.inproc import command
from tests.test_hardening import refused

# ---- launcher values: one line from the preflight, before multirun.yaml or any folder


@pytest.mark.parametrize("launcher,value,says", [
    ("vectorized", "max_group=0", "hydra.launcher.max_group=0 is invalid: a positive integer"),
    ("vectorized", "max_group=-1", "hydra.launcher.max_group=-1 is invalid"),
    ("vectorized", "max_group=abc", "hydra.launcher.max_group='abc' is invalid"),
    ("vectorized", "max_group=1.5", "hydra.launcher.max_group=1.5 is invalid: an integer"),
    ("vectorized", "max_params=0", "hydra.launcher.max_params=0 is invalid"),
    ("vectorized", "max_params=-1", "hydra.launcher.max_params=-1 is invalid"),
    ("vectorized", "engine=bogus", "hydra.launcher.engine='bogus' is invalid: one of processes, sequential, submitit, joblib"),
    ("vectorized", "slurm.mem_gb=0 hydra.launcher.engine=submitit", "hydra.launcher.slurm.mem_gb=0 is invalid"),
    ("local_parallel", "n_jobs=abc", "hydra.launcher.n_jobs='abc' is invalid: an integer"),  # Hydra's typed node refuses it first
    ("slurm", "mem_gb=abc", "hydra.launcher.mem_gb='abc' is invalid: an integer; fix it with `hydra.launcher.mem_gb=4`"),
    ("local_parallel", "n_jobs=0", "hydra.launcher.n_jobs=0 is invalid"),
    ("slurm", "timeout_min=0", "hydra.launcher.timeout_min=0 is invalid"),
])
def test_launcher_values_are_refused_before_any_folder(tmp_path, monkeypatch, launcher, value, says):
    monkeypatch.chdir(tmp_path)
    line = refused(["-m", "seed=1,2", f"hydra/launcher={launcher}", *f"hydra.launcher.{value}".split(),
                    f"hydra.sweep.dir={tmp_path}/sweep"])
    assert says in line and "fix it with `hydra.launcher." in line, line
    assert os.listdir(tmp_path) == []


def test_a_vectorised_launchers_slurm_keys_count_only_for_engine_submitit(tmp_path):
    # threads=0 makes slurm.cpus_per_task=0
    check_command_line(["-m", "seed=1,2", "threads=0", "hydra/launcher=vectorized", f"hydra.sweep.dir={tmp_path}/sweep"])
    assert "hydra.launcher.slurm.cpus_per_task=0 is invalid" in refused(
        ["-m", "seed=1,2", "threads=0", "hydra/launcher=vectorized", "hydra.launcher.engine=submitit", f"hydra.sweep.dir={tmp_path}/sweep"])


# ---- a truncated checkpoint


def truncated(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"vectorized": True, "global_step": 5, "params": torch.zeros(20000)}, path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_a_truncated_checkpoint_is_one_line_and_exit_2(tmp_path):
    truncated(tmp_path / "run" / "checkpoints" / "initnorm.ckpt")
    line = refused(["steps=5", f"hydra.run.dir={tmp_path}/run"])
    assert "initnorm.ckpt cannot be read" in line and "delete it" in line
    truncated(tmp_path / "sweep" / "default" / "seed=1" / "checkpoints" / "initnorm.ckpt")
    # the whole command, in this process (tests/inproc.py): its checks refuse it before any worker would train
    proc = command("-m", "seed=1,2", *TINY, "hydra/launcher=vectorized", f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "initnorm.ckpt cannot be read" in lines[0], proc.stderr[-2000:]
    assert "delete it" in lines[0] and not (tmp_path / "sweep" / "default" / "seed=2").exists()


# ---- a stop signal while the command line is checked: nothing outlives the command


def session_processes(sid: int) -> list[str]:
    """The command lines of the live processes of session ``sid`` (zombies left out)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()
            if int(stat[3]) == sid and stat[0] != b"Z":
                out.append(Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except (OSError, IndexError, ValueError):
            continue
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server and /proc are Linux's")
# SIGTERM in `make test`; SIGINT, a second whole sweep stopped from outside, in `make test-signals` (marked `matrix`)
@pytest.mark.parametrize("signum", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.matrix)])
def test_a_signal_during_the_preflight_leaves_no_process(tmp_path, signum):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "initnorm.train", "-m", "seed=range(1,60)", "steps=1", "callbacks=none", "hydra/launcher=vectorized",
            f"hydra.sweep.dir={tmp_path}/sweep"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.time() + 30
        while not any("forkserver" in c for c in session_processes(proc.pid)) and time.time() < deadline:
            time.sleep(0.1)  # the workers' fork server is up: the preflight is under way
        assert time.time() < deadline, "no fork server started"
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 128 + signum, err[-2000:]
        assert f"stopped by {signal.Signals(signum).name}: before any job started" in err
        deadline = time.time() + 15  # about a second on a quiet machine; more under a parallel test run
        while session_processes(proc.pid) and time.time() < deadline:
            time.sleep(0.1)
        assert session_processes(proc.pid) == []
        assert not (tmp_path / "sweep").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in [int(e) for e in os.listdir("/proc") if e.isdigit()]:
            try:
                if os.getsid(pid) == proc.pid:
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


# ---- a full disk while the summary is written; TensorBoard's writer thread


def test_a_full_disk_while_the_summary_is_written_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys):
    from omegaconf import OmegaConf

    from initnorm.cli import sweep

    results.write_metrics(tmp_path / "seed=1", {"status": "finished", "seed": 1, "overrides": {"seed": "1"},
                                                "swept": ["seed"], "final_val_loss": 2.0})

    def full(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr("initnorm.summary.write_atomic", full)
    with pytest.raises(SystemExit) as info:
        sweep.SummaryCallback().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}))
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 1 and len(err) == 1, err
    assert "No space left on device" in err[0] and f"python -m initnorm.summarize {tmp_path}" in err[0]


def test_a_write_that_names_no_file_names_its_folder(tmp_path):
    err = disk.disk_error(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), within=tmp_path)
    assert str(err) == f"cannot write in {tmp_path}: No space left on device" and err.folder == str(tmp_path)
    assert "None" not in str(disk.disk_error(OSError(errno.ENOSPC, "x")))


def test_tensorboards_writer_thread_is_quiet_about_a_full_disk(monkeypatch):
    """TensorBoard's writer thread is told by its type, not its class's name (issue 48: behaviour decided by strings)."""
    from tensorboard.summary.writer.event_file_writer import _AsyncWriterThread

    printed = []
    monkeypatch.setattr(threading, "excepthook", lambda args: printed.append(type(args.thread).__name__))  # what prints a traceback
    disk.quiet_writer_thread()

    class Writer(_AsyncWriterThread):  # TensorBoard's thread, failing on a full disk
        def __init__(self):
            threading.Thread.__init__(self, daemon=True)

        def run(self):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    class _AsyncWriterThread(threading.Thread):  # another thread that only bears its name
        def run(self):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    for cls in (Writer, _AsyncWriterThread):
        t = cls()
        t.start()
        t.join()
    assert printed == ["_AsyncWriterThread"]


# ---- files in a job folder that are not records


def good(seed: int) -> dict:
    return {"status": "finished", "seed": seed, "overrides": {"seed": str(seed)}, "swept": ["seed"], "diverged": False,
            "final_val_loss": 2.0, "job_num": seed - 1}


def test_files_that_are_not_records_are_not_read(tmp_path, caplog, alarm):
    for seed in (1, 2, 3, 4, 5, 6):
        results.write_metrics(tmp_path / f"seed={seed}", good(seed))
    os.unlink(tmp_path / "seed=2" / "metrics.json")
    os.mkfifo(tmp_path / "seed=2" / "metrics.json")
    os.unlink(tmp_path / "seed=3" / "metrics.json")
    os.symlink("/dev/zero", tmp_path / "seed=3" / "metrics.json")
    os.unlink(tmp_path / "seed=4" / "metrics.json")
    (tmp_path / "seed=4" / "metrics.json").mkdir()
    with open(tmp_path / "seed=5" / "metrics.json", "r+b") as f:
        f.truncate(results.MAX_RECORD_BYTES + 1)  # sparse: no disk used
    (tmp_path / "seed=6" / "metrics.json").write_text(json.dumps(good(6) | {"final_val_loss": "2.0", "diverged": "no"}))
    with caplog.at_level(logging.WARNING):
        table = summarize(tmp_path)
    warned = [r.getMessage() for r in caplog.records]
    for seed, what in [(2, "a FIFO"), (3, "a symbolic link to /dev/zero"), (4, "a folder"), (5, "larger than 16 MiB"),
                       (6, "its final_val_loss is a JSON string, its diverged is a JSON string")]:
        assert sum(f"seed={seed}/metrics.json: {what}" in w for w in warned) == 1, (seed, warned)
    assert "1 jobs" in (tmp_path / "summary.md").read_text() and "2.000" in table
    os.environ[console.TOTAL_ENV] = "6"
    try:
        assert console.sweep_progress(tmp_path) == "2/6 done"  # seed 1 and 6 (status finished); nothing hung
    finally:
        del os.environ[console.TOTAL_ENV]
    # a rerun: refused, it cannot replace them
    for seed, what in [(2, "is a FIFO"), (3, "is a symbolic link to /dev/zero"), (4, "is a folder")]:
        with pytest.raises(ConfigError, match=f"metrics.json {what}, not a job's record; delete it"):
            inspect_folder(tmp_path / f"seed={seed}", {})
    assert inspect_folder(tmp_path / "seed=6", {}).finished is None  # damaged: trained again


def test_a_bool_is_not_a_number_in_a_record():
    assert "its final_val_loss is a JSON boolean" in results.shape_problem({"final_val_loss": True})
    assert results.shape_problem({"final_val_loss": float("nan"), "diverged": True, "diverged_step": None, "steps": 5}) is None


# ---- read-only folders, caches and homes


def test_summarize_and_diagnose_on_a_read_only_folder_are_one_line(tmp_path, monkeypatch, capsys):
    from initnorm.cli import diagnose
    from initnorm.cli import summarize as summarize_cli

    results.write_metrics(tmp_path / "seed=1", good(1))

    def read_only(path, text):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setattr("initnorm.summary.write_atomic", read_only)
    assert summarize_cli.main([str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"cannot write {tmp_path}/summary.md (Read-only file system)" in err[0], err

    monkeypatch.setattr(diagnose, "departures", lambda *a: ("width", {"x": 1}, {}))
    monkeypatch.setattr(diagnose, "render", lambda *a: "text\n")
    monkeypatch.setattr(diagnose, "write_atomic", read_only)
    assert diagnose.main([str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "diagnose.md (Read-only file system)" in err[0], err


def test_an_unusable_compiler_cache_costs_only_the_runs_that_compile(tmp_path):
    from initnorm.training.compiling import CACHE_ENV

    assert disk.COMPILER_CACHE_ENV == CACHE_ENV
    env = {"TORCHINDUCTOR_CACHE_DIR": "/proc/x", "PYTHONWARNINGS": "ignore"}
    ok = run_cli(*TINY, "steps=5", f"hydra.run.dir={tmp_path}/eager", cwd=tmp_path, env=env)  # torch makes that folder at import
    assert ok.returncode == 0 and (tmp_path / "eager" / "metrics.json").is_file(), ok.stderr[-2000:]


def test_an_unwritable_compiler_cache_is_refused_for_compile_true(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "file" / "cache"))  # below a file: cannot be made
    monkeypatch.delenv(disk.UNUSABLE_CACHE_ENV, raising=False)
    disk.set_aside_compiler_cache()
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ and os.environ[disk.UNUSABLE_CACHE_ENV] == str(tmp_path / "file" / "cache")
    assert "cannot be made or written" in refused(["steps=5", "compile=true", f"hydra.run.dir={tmp_path}/run"])
    check_command_line(["steps=5", "compile=false", f"hydra.run.dir={tmp_path}/run"])


def test_a_read_only_cache_folder_for_the_corpus_says_which_and_how(tmp_path, monkeypatch):
    (tmp_path / "home").write_text("")  # a cache below a file cannot be made, as on a read-only HOME
    monkeypatch.setenv("INITNORM_CACHE", str(tmp_path / "home" / ".cache" / "initnorm"))
    monkeypatch.setenv("INITNORM_DATA_DIR", str(tmp_path / "empty"))
    line = refused(["steps=5", f"hydra.run.dir={tmp_path}/run"])
    assert "the corpus cache folder" in line and "cannot be written" in line and "INITNORM_DATA_DIR" in line, line
    assert "a bug in initnorm" not in line


# ---- memory a probe or a coordinate check cannot have


def test_probe_and_coord_check_say_the_memory_needed_before_any_folder(tmp_path, capsys):
    from initnorm.cli import coord_check, probe

    assert probe.main(["mlp", "--mlp-width", "10000000", "--out", str(tmp_path / "pr")]) == 2
    err = capsys.readouterr().err
    assert "needs about" in err and "GiB of memory" in err and "--mlp-width 256" in err
    assert coord_check.main(["--widths", "16,1000000", "--out", str(tmp_path / "cc")]) == 2
    err = capsys.readouterr().err
    assert "width-1000000" in err and "GiB of memory" in err and "--widths 16,32,64,128,256`" in err  # one width: no exponent
    assert coord_check.main(["--widths", "16,32,1000000", "--out", str(tmp_path / "cc")]) == 2
    assert "`--widths 16,32`" in capsys.readouterr().err
    assert coord_check.main(["--tolerance", "-1", "--out", str(tmp_path / "cc")]) == 2
    assert "--tolerance=-1.0 is invalid" in capsys.readouterr().err
    for bad, said in ((["--widths", "16"], "--widths='16' is invalid: two widths or more"), (["--seeds", "1,1"], "`--seeds 1`"),
                      (["--steps", "0"], "--steps=0 is invalid: a positive integer"), (["--lr", "-1"], "--lr=-1.0 is invalid"),
                      (["--params", "sp,bogus"], "'bogus' is neither; fix it with `--params sp`")):  # not the job's `param=sp`
        assert coord_check.main([*bad, "--out", str(tmp_path / "cc")]) == 2
        assert said in capsys.readouterr().err
    assert probe.main(["mlp", "--mlp-width", "0", "--out", str(tmp_path / "pr")]) == 2
    assert "--mlp-width=0 is invalid: a positive integer; fix it with `--mlp-width 256`" in capsys.readouterr().err
    for main, own, flag in ((probe.main, "norm=post", "--norms post"), (probe.main, "init.std=0.1", "--stds 0.1"),
                            (coord_check.main, "width=64", "--widths 64"), (coord_check.main, "+lr=0.1", "--lr 0.1")):
        assert main(["decoder"] * (main is probe.main) + ["--out", str(tmp_path / "pr"), "--", own]) == 2  # every job that value
        assert f"fix it with `{flag}`" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse's own line, naming the value (it said "invalid <lambda> value")
        coord_check.main(["--widths", "16,abc"])
    assert "'abc' in '16,abc' is not an integer" in capsys.readouterr().err
    assert not (tmp_path / "pr").exists() and not (tmp_path / "cc").exists()


# ---- inputs that are not what they claim


@pytest.mark.parametrize("what,says", [("folder", "is a folder"), ("/dev/null", "is a character device"), ("fifo", "is a FIFO")])
def test_a_data_path_that_is_not_a_file_says_what_it_is(tmp_path, what, says, alarm):
    path = {"folder": str(tmp_path), "/dev/null": "/dev/null", "fifo": str(tmp_path / "text.fifo")}[what]
    if what == "fifo":
        os.mkfifo(path)
    line = refused(["data=text", f"data.path={path}", f"hydra.run.dir={tmp_path}/run"])
    assert f"data.path={path!r} {says}, not a text file" in line, line


def test_the_progress_counts_jobs_in_the_default_sweep_folder(tmp_path):
    proc = command("-m", "seed=1,2", *TINY, "steps=5", "summary.plots=[]", cwd=tmp_path)  # no hydra.sweep.dir: outputs/multirun/<time>_<id>
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "[2/2 done]" in proc.stdout, proc.stdout
    assert len(list((tmp_path / "outputs" / "multirun").glob("*/default/seed=2/metrics.json"))) == 1  # the sweep was there


def test_the_transfer_reports_the_measured_best_loss_on_an_uneven_grid():
    from initnorm import transfer

    # Three seeds, lr 2^-9, 2^-8, 2^-4: the parabola through the three means has its vertex deep in the gap.
    by_size = {16: {s: {-9.0: 3.2 + d, -8.0: 2.78 + d, -4.0: 2.81 + d} for s, d in ((1, 0.0), (2, 0.01), (3, -0.01))},
               32: {s: {-9.0: 3.1 + d, -8.0: 2.70 + d, -4.0: 2.75 + d} for s, d in ((1, 0.0), (2, 0.01), (3, -0.01))}}
    rows = transfer.transfer_rows({(("param", "sp"),): by_size}, n_boot=20)
    base = rows[0]
    assert base.fit.method == "parabola" and base.fit.loss < 2.7  # the vertex: below every measured mean
    assert base.fit.measured == pytest.approx(2.78)
    table = transfer.render_markdown(rows)
    assert "| 2.780 |" in table and f"{base.fit.loss:.3f}" not in table and "lowest seed-mean measured" in table
    csv_row = transfer.render_csv(rows).splitlines()[1].split(",")
    header = transfer.render_csv(rows).splitlines()[0].split(",")
    assert float(csv_row[header.index("best_loss")]) == pytest.approx(2.78)
    assert float(csv_row[header.index("fitted_loss")]) == pytest.approx(base.fit.loss)


def record(lr: float, width: int, seed: int, diverged: bool) -> dict:
    return {"status": "finished", "seed": seed, "overrides": {"lr": str(lr), "width": str(width), "seed": str(seed)},
            "swept": ["lr", "width", "seed"],
            "diverged": diverged, "diverged_step": 3 if diverged else None, "final_loss": float("nan") if diverged else 2.0,
            "summary_metrics": ["final_loss"], "job_num": 0}


def test_diagnose_on_an_all_diverged_sweep_says_so(tmp_path, monkeypatch, capsys):
    from initnorm.cli import diagnose

    for lr in (0.01, 0.1):
        for width in (16, 32):
            results.write_metrics(tmp_path / f"lr={lr},width={width}" / "seed=1", record(lr, width, 1, True))
    monkeypatch.setattr(diagnose, "departures", lambda *a: ("width", {(("param", "sp"),): -5.0}, []))
    assert diagnose.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Every job of this sweep diverged (4 of 4): there is no optimal learning rate") and "--lr 2^-7" in out


def test_a_summary_names_the_jobs_without_a_record(tmp_path):
    for seed in (1, 2, 3, 4):
        (tmp_path / "default" / f"seed={seed}" / ".hydra").mkdir(parents=True)  # Hydra made every job's folder
    for seed in (1, 2, 3):
        results.write_metrics(tmp_path / "default" / f"seed={seed}", good(seed))
    summarize(tmp_path)
    assert "3 of 4 jobs finished; missing: default/seed=4 (no metrics.json)." in (tmp_path / "summary.md").read_text()


def grow(w, role, ctx):
    """An init that swaps a weight for one of another shape (``w.data = ...``), as a user's might by mistake."""
    w.data = torch.zeros(*w.shape[:-1], w.shape[-1] + 1)


def test_an_init_that_changes_a_shape_is_one_line_naming_the_parameter():
    from initnorm.config import to_plain
    from initnorm.models.build import build_model
    from tests.conftest import compose_cfg

    c = to_plain(compose_cfg("init=custom", "init.fn=tests.test_hardening_surfaces.grow"))
    with pytest.raises(ConfigError) as info:
        build_model(c["model"], c["init"], c["param"], 28)
    line = str(info.value)
    assert "init.fn=tests.test_hardening_surfaces.grow changed the shape of parameter" in line and "\n" not in line
    assert "parameter tok_emb.weight from [28, 16] to [28, 17]" in line and "`init=normal`" in line, line


def test_an_init_that_changes_a_shape_is_refused_before_any_folder_exists(tmp_path, monkeypatch):
    """The preflight builds a user's own code once on the meta device, so the line comes before the job folder."""
    from initnorm.cli.preflight import check_command_line

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        check_command_line(["init=custom", "+init.fn=tests.test_hardening_surfaces.grow", f"hydra.run.dir={tmp_path}/run"])
    assert "changed the shape of parameter tok_emb.weight" in str(info.value) and "\n" not in str(info.value)
    assert os.listdir(tmp_path) == []


def test_a_second_command_on_a_folder_in_use_is_refused_and_a_dead_ones_lock_is_taken_over(tmp_path):
    from initnorm.cli import lock

    holder = subprocess.Popen([sys.executable, "-c", ("import sys, time; sys.path.insert(0, sys.argv[2]); from initnorm.cli import lock; "
                               "lock.claim(sys.argv[1], 'hydra.sweep.dir'); print('held', flush=True); time.sleep(60)"),
                               str(tmp_path / "sweep"), str(ROOT)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        # the second command in this process (tests/inproc.py): the holder is the other process that matters
        proc = command("-m", "seed=1,2", *TINY, "steps=5", f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
        assert f"is in use by another initnorm command (process {holder.pid})" in lines[0] and "hydra.sweep.dir=" in lines[0]
        assert sorted(os.listdir(tmp_path / "sweep")) == [lock.LOCK_FILE]  # no multirun.yaml, no job folder
    finally:
        holder.kill()
        holder.wait()
    lock.claim(tmp_path / "sweep", "hydra.sweep.dir")  # the dead process's lock: taken over, no file to delete
    assert (tmp_path / "sweep" / lock.LOCK_FILE).read_text().strip() == str(os.getpid())


def test_a_rerun_from_step_0_starts_its_events_afresh_and_a_resumed_one_purges_past_its_checkpoint(tmp_path):
    from initnorm.training.resume import tensorboard_logger
    from tests.conftest import compose_cfg

    assert compose_cfg().logger.tensorboard._target_ == "initnorm.training.resume.tensorboard_logger"  # what train() instantiates
    old = tmp_path / "events.out.tfevents.1796000000.host.1.0"  # an attempt killed before its first checkpoint
    old.write_bytes(b"stale")
    tensorboard_logger(str(tmp_path), name="", version="", default_hp_metric=False)
    assert not old.exists()
    (tmp_path / "checkpoints").mkdir()
    torch.save({"global_step": 20, "state_dict": {}}, tmp_path / "checkpoints" / "initnorm.ckpt")
    old.write_bytes(b"kept")
    logger = tensorboard_logger(str(tmp_path), name="", version="", default_hp_metric=False)
    assert old.exists() and logger._kwargs["purge_step"] == 20


@pytest.fixture
def small_disk(tmp_path):
    """A 200 kB tmpfs (root only): a disk that fills during a short sweep, for real."""
    folder = tmp_path / "full"
    folder.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(folder)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root and mount for a small tmpfs")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def test_a_really_full_disk_is_one_line_and_exit_1(small_disk, tmp_path):
    """A real full disk, met by the command run in this process (tests/inproc.py): the disk is the point, not the process."""
    proc = command("-m", "seed=1,2,3", *TINY, f"hydra.sweep.dir={small_disk}/sweep", cwd=tmp_path)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode == 1 and len(errors) == 1 and "No space left on device" in errors[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "cannot write None" not in proc.stderr
