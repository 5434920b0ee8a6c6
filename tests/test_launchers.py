"""Sweeps at scale: the parallel launcher matches the sequential one, a job that dies costs only itself on every
launcher, the SLURM launcher submits what its config says (on a fake cluster), and sweeps started in the same second
never share a folder.

A launcher's processes are the point here, so its sweeps run as processes; the sequential sweep (Hydra's basic launcher
runs its jobs in the command's own process) runs in this process (tests/inproc.py). The three SLURM tests share two
sweeps, each run once per module (``array_sweep``, ``one_job_sweep``), and a job is held at a step (tests/stop_at.py
``HoldAt``) until the cluster's signal comes, instead of a long run raced to its end."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from initnorm.cli.sweep import register_resolvers, unique_dir
from tests.conftest import CONF, ROOT, TINY
from tests.fake_slurm import install
from tests.inproc import command

# two jobs: one per worker of the parallel sweep; the summaries' tables are compared, their figures not drawn (0.5 s of CPU each)
SWEEP = ["-m", "norm=pre,post", "seed=1", *TINY, "summary.plots=[]"]


def start(*args: str, cwd, env=None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "initnorm.train", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen, timeout: int = 240) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-3000:]
    return out


def table(sweep) -> str:
    """summary.md without its first line (which names the folder)."""
    return (sweep / "summary.md").read_text().split("\n", 1)[1]


def test_parallel_sweep_writes_the_sequential_summary_and_the_basic_launcher_runs_its_jobs_through_run(tmp_path, monkeypatch):
    """Both sweeps ask for the same folder name, as two sweeps started in the same second do, and run at the same time:
    each must get its own folder with its own two jobs.

    The sequential one is Hydra's basic launcher (the default), which hands its jobs to ``run.run``, one unit each, in this
    process; Hydra still names its own launcher and writes each job's folder, ``.hydra/`` files and multirun.yaml, and
    ``hydra.job.id`` is the job's number, as Hydra's basic launcher sets it. (Two tests ran the same sequential sweep, one
    for each half: one sweep less, ~1.5 s of CPU.)"""
    from omegaconf import OmegaConf

    from initnorm.cli import run
    from initnorm.cli.hydra_adapter import BASIC_LAUNCHER

    seen, real = [], run.run

    def spy(units, executor, *args, **kwargs):
        seen.append((type(executor).__name__, [[j.num for j in u] for u in units]))
        return real(units, executor, *args, **kwargs)

    same = "hydra.sweep.dir=${initnorm.unique_dir:sweeps/same_second}"
    par = start(*SWEEP, same, "hydra/launcher=local_parallel", "hydra.launcher.n_jobs=2", cwd=tmp_path)
    try:
        monkeypatch.setattr(run, "run", spy)
        seq = command(*SWEEP, same, cwd=tmp_path)  # while the parallel one starts its workers and runs
    finally:
        out = finish(par)
    assert seq.returncode == 0, seq.stderr[-3000:]
    folders = sorted((tmp_path / "sweeps").iterdir())
    assert len(folders) == 2 and all(f.name.startswith("same_second_") for f in folders), out[-3000:]
    for f in folders:
        assert len(list(f.rglob("metrics.json"))) == 2
        assert (f / "norm=post" / "seed=1" / "metrics.json").is_file()  # folder names from the swept keys
    assert table(folders[0]) == table(folders[1])
    assert "| pre |" in table(folders[0]) and "| post |" in table(folders[0])

    assert seen == [("InProcess", [[0], [1]])]
    (sequential,) = [f for f in folders if OmegaConf.load(f / "multirun.yaml").hydra.launcher._target_ == BASIC_LAUNCHER]
    for num, norm in enumerate(("pre", "post")):
        folder = sequential / f"norm={norm}" / "seed=1"
        hydra = OmegaConf.load(folder / ".hydra" / "hydra.yaml").hydra
        assert (hydra.job.id, hydra.job.num, hydra.launcher._target_) == (str(num), num, BASIC_LAUNCHER)  # Hydra types the id str
        assert list(OmegaConf.load(folder / ".hydra" / "overrides.yaml"))[:2] == [f"norm={norm}", "seed=1"]
        assert json.loads((folder / "metrics.json").read_text())["status"] == "finished"


@pytest.mark.parametrize("launcher,how,reason", [
    ("local_parallel", "exit", "exited with status 3"),
    ("vectorized", "kill", "killed by SIGKILL (the out-of-memory killer's signal"),
    ("basic", "interrupt", "RaisedInterrupt: KeyboardInterrupt raised by the job's own code"),
])
def test_a_job_whose_process_dies_fails_alone_and_the_sweep_ends_with_its_summary(tmp_path, launcher, how, reason):
    """os._exit in a job, SIGKILL of its worker (the OOM killer's way), a KeyboardInterrupt raised by its own code: that
    job is recorded failed with why, the other job finishes, the summary and the line that reruns it; exit 1, no
    traceback (joblib's pool ended every job with TerminatedWorkerError; basic ended silently). The command runs in this
    process (tests/inproc.py); under local_parallel and the vectorised launcher the job that dies is a worker process,
    as from a shell (a command process of its own imported torch for nothing)."""
    sweep = tmp_path / "sweep"
    die = ["+callbacks.die._target_=tests.die_at.DieAt", "+callbacks.die.step=2", f"+callbacks.die.how={how}", "+callbacks.die.seed=1"]
    chosen = [] if launcher == "basic" else [f"hydra/launcher={launcher}", "hydra.launcher.n_jobs=2"]
    chosen += ["hydra.launcher.max_group=1"] if launcher == "vectorized" else []
    args = ["-m", "seed=1,2", *TINY, "steps=4", "trainer.val_check_interval=2", "summary.plots=[]", *die, *chosen,
            f"hydra.sweep.dir={sweep}"]
    ran = command(*args, cwd=tmp_path)
    code, out = ran.returncode, ran.stdout + ran.stderr
    assert code == 1 and "Traceback" not in out, out[-3000:]
    failed, done = (json.loads((sweep / "default" / f"seed={s}" / "metrics.json").read_text()) for s in (1, 2))
    assert failed["status"] == "failed" and reason in failed["error"], failed.get("error")
    assert done["status"] == "finished" and (sweep / "summary.md").is_file()
    assert f"error: job 0 failed: {failed['error']}" in out
    assert "this trains them again (the finished jobs are skipped): python -m initnorm.train -m seed=1,2" in out


def test_unique_dir_never_returns_a_taken_folder(tmp_path):
    base = str(tmp_path / "multirun" / "2026-11-29_08-20-07")
    picked = {unique_dir(base) for _ in range(50)}
    assert len(picked) == 50 and all(os.path.isdir(p) and p.startswith(base + "_") for p in picked)


def test_default_sweep_folder_has_time_and_suffix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    register_resolvers()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        dirs = [str(compose(config_name="train", return_hydra_config=True).hydra.sweep.dir) for _ in range(2)]
    stamp = time.strftime("%Y-%m-%d")
    assert dirs[0] != dirs[1] and all(d.startswith(f"outputs/multirun/{stamp}_") for d in dirs)
    assert all((tmp_path / d).is_dir() for d in dirs)


def slurm_env(tmp_path) -> dict:
    """PATH with the stand-in SLURM (tests/fake_slurm.py) first."""
    install(tmp_path / "bin")
    return {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}


def wait_for(path, proc: subprocess.Popen) -> None:
    """Until ``path`` exists (a held job's marker); fail with the command's output if it ends first."""
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"ended before {path} existed:\n{proc.stdout.read()[-3000:]}")
        time.sleep(0.05)


def held(marker, where: str = "") -> list[str]:
    """The overrides that hold a job (the one whose folder holds ``where``) after step 3 until a stop signal comes;
    ``marker`` appears once it waits there. No periodic checkpoint: the one it has is the one the signal made."""
    return ["checkpoint.every_n_steps=0", "+callbacks.hold._target_=tests.stop_at.HoldAt", "+callbacks.hold.step=3",
            f"+callbacks.hold.marker={marker}", f"+callbacks.hold.where='{where}'"]


def checkpoint_step(folder) -> int:
    import torch

    return int(torch.load(folder / "checkpoints" / "initnorm.ckpt", map_location="cpu", weights_only=True)["global_step"])


def ran(proc: subprocess.Popen) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=240)
    return proc.returncode, out


ARRAY = ["-m", "norm=pre,post", "seed=1", *TINY, "hydra/launcher=slurm", "hydra.launcher.partition=tiny_gpu",
         "hydra.launcher.timeout_min=20", "hydra.launcher.mem_gb=3", "hydra.launcher.gpus_per_node=1", "threads=2"]


@pytest.fixture(scope="module")
def array_sweep(tmp_path_factory):
    """One SLURM array sweep (two jobs, the queue keys of the config set), run once for the tests of this module: the
    job norm=post is held until `scancel` (SLURM marks it CANCELLED and sends SIGTERM). What it left: exit status,
    output, the submitted script, the summary, the held job's record and checkpoint step; and how to run it again."""
    tmp = tmp_path_factory.mktemp("array")
    env, sweep = slurm_env(tmp), tmp / "sweep"
    args = [*ARRAY, f"hydra.sweep.dir={sweep}", *held(tmp / "held", "norm=post")]
    long = sweep / "norm=post" / "seed=1"
    proc = start(*args, cwd=tmp, env=env)
    wait_for(tmp / "held", proc)
    subprocess.run([tmp / "bin" / "scancel", "4242_1"], check=True)
    code, out = ran(proc)
    yield {"code": code, "out": out, "script": (tmp / "bin" / "submitted.sh").read_text(), "table": table(sweep),
           "cut": json.loads((long / "metrics.json").read_text()), "checkpoint_step": checkpoint_step(long),
           "sweep": sweep, "again": lambda: start(*args, cwd=tmp, env=env)}
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.slurm
def test_slurm_launcher_submits_what_its_config_says(array_sweep):
    script, sweep = array_sweep["script"], array_sweep["sweep"]
    for line in ["--partition=tiny_gpu", "--time=20", "--mem=3GB", "--gpus-per-node=1", "--cpus-per-task=2",
                 "--ntasks-per-node=1", "--array=0-1%2"]:
        assert f"#SBATCH {line}\n" in script, script
    # What a job needs from this machine reaches it also where sbatch exports nothing (--export=NONE).
    assert "export SLURM_EXPORT_ENV=ALL" in script and "export INITNORM_SWEPT_KEYS=norm\n" in script, script
    assert "#SBATCH --signal=USR2@120\n" in script  # checkpoint and requeue this long before the time limit
    # The jobs ran through submitit's own entry point, in the sweep's folder, named by the swept key (the held one
    # recorded its stop there; the summary of both, after its resume, is checked below).
    assert "-m submitit.core._submit" in script
    assert (sweep / "norm=pre" / "seed=1" / "metrics.json").is_file() and (sweep / "norm=post" / "seed=1" / "metrics.json").is_file()
    assert "| pre |" in array_sweep["table"]


@pytest.mark.slurm
def test_slurm_job_cancelled_is_checkpointed_summarised_and_resumed(array_sweep):
    # scancel: SLURM marks the job CANCELLED and sends SIGTERM. The job checkpoints at the next step
    # and records `cancelled`; the command writes the summary of what finished, names the job and
    # the command that resumes it, exits 1 without a traceback; that command resumes the job.
    out, sweep = array_sweep["out"], array_sweep["sweep"]
    assert array_sweep["code"] == 1 and "Traceback" not in out, out[-3000:]
    assert "| pre |" in array_sweep["table"]
    cut = array_sweep["cut"]
    assert cut["status"] == "cancelled" and array_sweep["checkpoint_step"] == cut["steps"] > 0, cut
    assert any("norm=post/seed=1 did not finish: cancelled" in line for line in out.splitlines()), out[-3000:]
    assert f"hydra.sweep.dir={sweep}" in out, out[-3000:]
    again = finish(array_sweep["again"]())
    done = json.loads((sweep / "norm=post" / "seed=1" / "metrics.json").read_text())
    assert done["status"] == "finished" and done["resumed_from_step"] == cut["steps"], again[-3000:]
    assert "| pre |" in table(sweep) and "| post |" in table(sweep)  # both jobs summarised, once the held one finished


@pytest.mark.slurm
def test_slurm_usr2_checkpoints_and_requeues_a_one_job_sweep(tmp_path):
    # A one-job sweep is a plain job (no --array). SLURM's USR2 (before a time limit or a preemption):
    # checkpoint at the next step, submitit requeues (`scontrol requeue`), the requeued run resumes.
    env, sweep = slurm_env(tmp_path), tmp_path / "sweep"
    proc = start("-m", *TINY, "seed=1", *held(tmp_path / "held"), f"hydra.sweep.dir={sweep}", "hydra/launcher=slurm", cwd=tmp_path, env=env)
    folder = sweep / "default" / "seed=1"
    wait_for(tmp_path / "held", proc)
    subprocess.run([tmp_path / "bin" / "scancel", "--signal=USR2", "4242"], check=True)
    finish(proc)
    assert "--array" not in (tmp_path / "bin" / "submitted.sh").read_text()
    done = json.loads((folder / "metrics.json").read_text())
    assert done["status"] == "finished" and done["steps"] == 12 and done["resumed_from_step"] > 0, done


def test_slurm_jobs_get_the_commands_variables_where_sbatch_exports_none():
    from initnorm.launch.slurm import forwarded_environment, status_of

    lines = forwarded_environment({"INITNORM_DATA_DIR": "/data/my corpora", "INITNORM_SWEPT_KEYS": "",
                                   "PYTHONPATH": "/src", "HOME": "/root"})
    assert lines[0].startswith("export SLURM_EXPORT_ENV=ALL ")  # srun passes the script's environment (submitit's variable) on
    assert lines[1:] == ["export INITNORM_DATA_DIR='/data/my corpora'", "export INITNORM_SWEPT_KEYS=''", "export PYTHONPATH=/src"]
    assert [status_of(s) for s in ("CANCELLED by 0", "TIMEOUT", "OUT_OF_MEMORY", "PREEMPTED",
                                   "")] == ["cancelled", "timeout", "out_of_memory", "preempted", "unknown"]


@pytest.mark.slurm
def test_slurm_array_tasks_of_a_horizon_sweep_branch_from_the_provider(tmp_path):
    # Each job its own SLURM task, all at once: the shorter horizons wait for the longest run's state at their branch
    # step (training/forks.py) and equal their separate runs bit for bit (tests/test_forks.py has those)
    sweep = tmp_path / "sweep"
    finish(start("-m", "schedule=wsd:0.25", "steps=16,32", "seed=1", "trainer.val_check_interval=8", "callbacks=none",
                 "checkpoint.every_n_steps=0", "hydra/launcher=slurm", f"hydra.sweep.dir={sweep}", cwd=tmp_path, env=slurm_env(tmp_path)))
    branch = json.loads((sweep / "steps=16" / "seed=1" / "metrics.json").read_text())
    assert branch["status"] == "finished" and branch["fork"] == {"from": str(sweep / "steps=32" / "seed=1"), "step": 13}, branch
    assert (sweep / ".submitit").is_dir() and (sweep / ".forks" / "plan.json").is_file()  # through submitit, planned
