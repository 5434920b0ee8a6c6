"""A stand-in SLURM on one machine for tests/test_launchers.py: `sbatch`, `srun`, `sacct`, `scancel`
and `scontrol requeue`, one script called by those names (``install(bin_dir)`` writes them).

Where it behaves as the real one (checked against a real SLURM, tests/slurm/): an array job's
tasks are ``<id>_<k>``, a one-job sweep has no ``--array`` line and is job ``<id>``; sacct
reports RUNNING, COMPLETED, FAILED, CANCELLED (``CANCELLED by 0``), REQUEUED; `scancel` marks the
job CANCELLED, then sends SIGTERM to its processes (SIGKILL after a grace); `scancel --signal=USR2`
only signals; `scontrol requeue` ends the run (SIGTERM) and starts the job again. What it does not
do: time limits, memory limits, --export, accounting history (`sacct -D`).
State: one file per job in ``<bin_dir>/jobs/`` (state, then the process group of the running run),
and ``<job>.step`` with the pid of its srun.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
JOBS = HERE / "jobs"
GRACE_S = 10  # SIGTERM -> SIGKILL, SLURM's KillWait (30 s on most sites)
FIRST_ID = 4242


def state_file(job: str) -> Path:
    return JOBS / job


def read_state(job: str) -> tuple[str, int | None]:
    try:
        state, _, pgid = state_file(job).read_text().partition("\n")
    except FileNotFoundError:
        return "", None
    return state, int(pgid) if pgid.strip() else None


def write_state(job: str, state: str, pgid: int | None = None) -> None:
    tmp = state_file(job).with_suffix(".tmp")
    tmp.write_text(f"{state}\n{'' if pgid is None else pgid}")
    os.replace(tmp, state_file(job))


def sbatch(args: list[str]) -> None:
    script = Path(args[-1])
    text = script.read_text()
    (HERE / "submitted.sh").write_text(text)
    JOBS.mkdir(exist_ok=True)
    base = FIRST_ID + len([p for p in JOBS.iterdir() if "_" not in p.name and "." not in p.name])
    array = re.search(r"^#SBATCH --array=(\d+)-(\d+)", text, re.MULTILINE)
    tasks = range(int(array[1]), int(array[2]) + 1) if array else [None]
    for k, task in enumerate(tasks):
        job = str(base) if task is None else f"{base}_{task}"
        env = dict(os.environ, SLURM_JOB_ID=str(base + k + (1 if array else 0)), SLURM_NTASKS="1",
                   SLURM_JOB_NUM_NODES="1", SLURM_NODEID="0",
                   SLURM_JOB_NODELIST="localhost", SLURM_PROCID="0", SLURM_LOCALID="0", FAKE_SLURM_JOB=job)
        if array:
            env |= {"SLURM_ARRAY_JOB_ID": str(base), "SLURM_ARRAY_TASK_ID": str(task)}
        write_state(job, "PENDING")
        subprocess.Popen([sys.executable, __file__, "_run", job, str(script)], env=env, start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if array:
        (JOBS / str(base)).write_text("ARRAY\n")
    print(f"Submitted batch job {base}")


def run(job: str, script: str) -> None:
    """One job: run its script until it is not requeued; the state says how it ended."""
    while True:
        proc = subprocess.Popen(["bash", script], start_new_session=True)
        write_state(job, "RUNNING", proc.pid)
        code = proc.wait()
        state, _ = read_state(job)
        if state == "REQUEUED":
            continue
        if state == "RUNNING":
            write_state(job, "COMPLETED" if code == 0 else "FAILED")
        return


def srun(args: list[str]) -> None:
    with contextlib.ExitStack() as opened:  # the task's output files, open until it ends
        files = {}
        while args[0].startswith("--"):
            flag = args.pop(0)
            if flag in ("--output", "--error"):
                path = args.pop(0)
                for k, v in (("%A", os.environ.get("SLURM_ARRAY_JOB_ID", "")), ("%a", os.environ.get("SLURM_ARRAY_TASK_ID", "")),
                             ("%j", os.environ["SLURM_JOB_ID"]), ("%t", "0")):
                    path = path.replace(k, v)
                # A real queue starts a task seconds after sbatch answers, by when submitit has made the task's folder
                # (it does so once it has the job id); this stand-in starts it at once, so it waits for the folder.
                deadline = time.monotonic() + 30
                while not Path(path).parent.is_dir() and time.monotonic() < deadline:
                    time.sleep(0.05)
                files[flag] = opened.enter_context(open(path, "a"))
        # As srun does, pass signals on to the task; `scancel --signal` signals this step, not the batch script.
        proc = subprocess.Popen(args, stdout=files.get("--output"), stderr=files.get("--error"))
        (JOBS / f"{os.environ['FAKE_SLURM_JOB']}.step").write_text(str(os.getpid()))
        for s in (signal.SIGTERM, signal.SIGUSR2, signal.SIGINT):
            signal.signal(s, lambda signum, frame: proc.send_signal(signum))
        sys.exit(proc.wait())


def jobs_of(ids: list[str]) -> list[str]:
    """``4242`` names every task of array 4242; ``4242_1`` one task."""
    names = sorted(p.name for p in JOBS.iterdir() if "." not in p.name) if JOBS.is_dir() else []
    out = []
    for i in ids:
        out += [n for n in names if (n == i or n.startswith(f"{i}_")) and read_state(n)[0] != "ARRAY"]
    return out


def sacct(args: list[str]) -> None:
    ids = [args[i + 1] for i, a in enumerate(args) if a == "-j"]
    fields = args[args.index("-o") + 1].split(",") if "-o" in args else ["JobID", "State"]
    if "-n" not in args:
        print("|".join(fields))
    for job in jobs_of(ids):
        state = read_state(job)[0]
        values = {"JobID": job, "State": "CANCELLED by 0" if state == "CANCELLED" else state, "NodeList": "localhost"}
        print("|".join(values.get(f, "") for f in fields))


def signal_job(job: str, signum: int) -> int | None:
    pgid = read_state(job)[1]
    if pgid is not None:
        try:
            os.killpg(pgid, signum)
        except ProcessLookupError:
            return None
    return pgid


def scancel(args: list[str]) -> None:
    signame = next((a.split("=", 1)[1] for a in args if a.startswith("--signal=")), None)
    ids = [a for a in args if not a.startswith("-")]
    if signame:  # only a signal to the job's step, as `scancel --signal=USR2` does
        signum = signal.Signals[signame if signame.startswith("SIG") else f"SIG{signame}"]
        for job in jobs_of(ids):
            step = JOBS / f"{job}.step"
            if step.is_file():
                os.kill(int(step.read_text()), signum)
        return
    running = []
    for job in jobs_of(ids):
        state, pgid = read_state(job)
        if state in ("PENDING", "RUNNING"):
            write_state(job, "CANCELLED", pgid)
            if signal_job(job, signal.SIGTERM) is not None:
                running.append(job)
    if running:  # SIGKILL after the grace, in the background as slurmd does
        subprocess.Popen([sys.executable, __file__, "_kill_later", *running], start_new_session=True)


def kill_later(jobs: list[str]) -> None:
    time.sleep(GRACE_S)
    for job in jobs:
        signal_job(job, signal.SIGKILL)


def scontrol(args: list[str]) -> None:
    if args[:1] != ["requeue"]:
        sys.exit(f"scontrol {' '.join(args)}: only `scontrol requeue <job>` is in this stand-in")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # called from inside the job: it is in the group it ends
    for job in jobs_of(args[1:]):
        _state, pgid = read_state(job)
        write_state(job, "REQUEUED", pgid)
        signal_job(job, signal.SIGTERM)


def install(bin_dir: Path) -> None:
    """``bin_dir`` with this script as sbatch, srun, sacct, scancel and scontrol (put it first on PATH)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "fake_slurm.py").write_text(Path(__file__).read_text())
    for name in ("sbatch", "srun", "sacct", "scancel", "scontrol"):
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.argv[1:1] = "
                        f"[{name!r}]\nrunpy.run_path({str(bin_dir / 'fake_slurm.py')!r}, run_name='__main__')\n")
        path.chmod(0o755)


def main() -> None:
    name, args = sys.argv[1], sys.argv[2:]  # `fake_slurm.py sbatch ...`, as the wrappers call it
    {"sbatch": sbatch, "srun": srun, "sacct": sacct, "scancel": scancel, "scontrol": scontrol,
     "_run": lambda a: run(*a), "_kill_later": kill_later}[name](args)


if __name__ == "__main__":
    main()
