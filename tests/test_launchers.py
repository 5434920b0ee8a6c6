"""Sweeps at scale: the parallel launcher matches the sequential one, the SLURM launcher submits
what its config says (on a fake cluster), and sweeps started in the same second never share a folder."""

import os
import subprocess
import sys
import textwrap
import time

from hydra.core.global_hydra import GlobalHydra
from hydra import compose, initialize_config_dir

from initnorm.cli.sweep import register_resolvers, unique_dir
from tests.conftest import CONF, ROOT, TINY

SWEEP = ["-m", "norm=pre,post", "seed=1,2", *TINY]


def start(*args: str, cwd, env=None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "initnorm.train", *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen, timeout: int = 240) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-3000:]
    return out


def table(sweep) -> str:
    """summary.md without its first line (which names the folder)."""
    return (sweep / "summary.md").read_text().split("\n", 1)[1]


def test_parallel_sweep_writes_the_sequential_summary_in_its_own_folder(tmp_path):
    # Both sweeps ask for the same folder name, as two sweeps started in the same second do,
    # and run at the same time: each must get its own folder with its own four jobs.
    same = "hydra.sweep.dir=${initnorm.unique_dir:sweeps/same_second}"
    seq = start(*SWEEP, same, cwd=tmp_path)
    par = start(*SWEEP, same, "hydra/launcher=local_parallel", "hydra.launcher.n_jobs=2", cwd=tmp_path)
    finish(seq), finish(par)
    folders = sorted((tmp_path / "sweeps").iterdir())
    assert len(folders) == 2 and all(f.name.startswith("same_second_") for f in folders)
    for f in folders:
        assert len(list(f.rglob("metrics.json"))) == 4
        assert (f / "norm=post" / "seed=2" / "metrics.json").is_file()  # folder names from the swept keys
    assert table(folders[0]) == table(folders[1])
    assert "| pre |" in table(folders[0]) and "| post |" in table(folders[0])


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


FAKE_SBATCH = """\
    #!{python}
    # A one-machine SLURM: keeps the script, starts each array task in the background, as sbatch does.
    import os, re, subprocess, sys
    script = open(sys.argv[1]).read()
    open(os.path.join(os.path.dirname(__file__), "submitted.sh"), "w").write(script)
    first, last = map(int, re.search(r"^#SBATCH --array=(\\d+)-(\\d+)", script, re.M).groups())
    for task in range(first, last + 1):
        env = dict(os.environ, SLURM_JOB_ID=str(5000 + task), SLURM_ARRAY_JOB_ID="4242", SLURM_ARRAY_TASK_ID=str(task),
                   SLURM_NTASKS="1", SLURM_JOB_NUM_NODES="1", SLURM_NODEID="0", SLURM_JOB_NODELIST="localhost",
                   SLURM_PROCID="0", SLURM_LOCALID="0")
        subprocess.Popen(["bash", sys.argv[1]], env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print("Submitted batch job 4242")
"""
FAKE_SRUN = """\
    #!{python}
    # srun --unbuffered --output OUT --error ERR command...: run the command with its output in OUT/ERR.
    import os, subprocess, sys
    args, files = sys.argv[1:], {{}}
    while args[0].startswith("--"):
        flag = args.pop(0)
        if flag in ("--output", "--error"):
            path = args.pop(0)
            for k, v in (("%A", os.environ["SLURM_ARRAY_JOB_ID"]), ("%a", os.environ["SLURM_ARRAY_TASK_ID"]), ("%j", os.environ["SLURM_JOB_ID"]), ("%t", "0")):
                path = path.replace(k, v)
            files[flag] = open(path, "a")
    sys.exit(subprocess.call(args, stdout=files.get("--output"), stderr=files.get("--error")))
"""


def fake_slurm(bin_dir):
    bin_dir.mkdir()
    for name, text in (("sbatch", FAKE_SBATCH), ("srun", FAKE_SRUN), ("sacct", "#!/bin/sh\necho 'JobID|State|NodeList'\n")):
        path = bin_dir / name
        path.write_text(textwrap.dedent(text).format(python=sys.executable))
        path.chmod(0o755)


def test_slurm_launcher_submits_what_its_config_says(tmp_path):
    fake_slurm(tmp_path / "bin")
    sweep = tmp_path / "sweep"
    args = ["-m", "norm=pre,post", "seed=1", *TINY, f"hydra.sweep.dir={sweep}", "hydra/launcher=slurm", "hydra.launcher.partition=tiny_gpu",
            "hydra.launcher.timeout_min=20", "hydra.launcher.mem_gb=3", "hydra.launcher.gpus_per_node=1", "threads=2"]
    finish(start(*args, cwd=tmp_path, env={"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}))
    script = (tmp_path / "bin" / "submitted.sh").read_text()
    for line in ["--partition=tiny_gpu", "--time=20", "--mem=3GB", "--gpus-per-node=1", "--cpus-per-task=2", "--ntasks-per-node=1", "--array=0-1%2"]:
        assert f"#SBATCH {line}\n" in script, script
    # The jobs ran through submitit's own entry point, in the sweep's folder, named by the swept key.
    assert "-m submitit.core._submit" in script
    assert (sweep / "norm=pre" / "seed=1" / "metrics.json").is_file() and (sweep / "norm=post" / "seed=1" / "metrics.json").is_file()
    assert "| pre |" in table(sweep) and "| post |" in table(sweep)
