"""What a sweep does before its first step: the parallel launchers' workers start from the command
line (initnorm/cli/workers.py, initnorm/launch/workers.py) and still get what the parent set later, and neither Hydra's sweeper
nor the vectorised launcher composes again the jobs the preflight checked (initnorm/cli/sweeper.py)."""

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import initialize_config_dir
from hydra._internal.core_plugins import basic_sweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import OmegaConf

from initnorm.cli import checked_plan, sweeper
from initnorm.cli import workers as early
from initnorm.cli.argv import parse
from initnorm.cli.compose import CONF_DIR
from initnorm.cli.preflight import check_command_line
from initnorm.errors import ConfigError
from initnorm.launch import workers
from tests.conftest import run_cli


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["-m", "seed=1,2", "hydra/launcher=vectorized"], (True, -1)),
        (["--multirun", "hydra/launcher=vectorized", "hydra.launcher.n_jobs=2"], (True, 2)),
        (["seed=1", "hydra/launcher=vectorized"], (False, None)),  # one run: no workers
        (["-m", "seed=1,2", "hydra/launcher=local_parallel"], (True, -1)),  # the same workers, a job a unit
        (["-m", "seed=1,2", "hydra/launcher=slurm"], (False, None)),
        (["-m", "seed=1,2", "hydra/launcher=vectorized", "hydra.launcher.engine=sequential"], (False, None)),
        (["-m", "seed=1,2", "hydra/launcher=vectorized", "hydra.launcher.engine=joblib"], (True, -1)),  # processes' former name
        (["-m", "seed=1,2", "hydra/launcher=vectorized", "hydra.launcher.n_jobs=many"], (False, None)),  # the launcher reports it
        (["-m", "seed=1,2", "hydra/launcher=vectorized", "--cfg", "job"], (False, None)),  # prints a config, runs nothing
        (["-m", "seed=1,2", "hydra/launcher=local_parallel", "hydra/launcher=vectorized"], (True, -1)),  # the last one counts
    ],
)
def test_workers_start_early_only_for_a_parallel_sweep_on_this_machine(argv, expected):
    assert early._launcher_args(parse(argv)) == expected


def test_the_command_line_is_read_once_as_hydra_reads_it():
    """One reading for the workers, the flag check and the preflight (cli/argv.py): the last value of a key counts,
    and a command line that prints instead of running (--help, --cfg, --info) runs no job."""
    cmd = parse(["-m", "hydra/launcher=local_parallel", "seed=1,2", "+hydra/launcher=vectorized", "hydra.launcher.n_jobs=2"])
    assert cmd.multirun and cmd.runs_jobs and cmd.value("hydra/launcher") == "vectorized" and cmd.value("lr", "x") == "x"
    assert cmd.overrides == ("hydra/launcher=local_parallel", "seed=1,2", "+hydra/launcher=vectorized", "hydra.launcher.n_jobs=2")
    for flags in (["--help"], ["--cfg", "job"], ["--info"], ["--config-dir", "x"]):
        assert not parse(["seed=1", *flags]).runs_jobs, flags
    assert parse(["--cfg", "hydra"]).cfg == "hydra" and not parse(["seed=1"]).multirun


def test_the_preflight_checks_exactly_the_jobs_hydras_sweeper_makes():
    """Preset sweep params and the command line, in Hydra's order: every job of Hydra's batches was checked by the preflight.
    (The basic sweeper's class is looked up when used: Hydra's plugin discovery executes its module again.)"""
    argv = ["-m", "experiment=norm_type", "seed=1,2", "steps=5"]
    jobs = check_command_line(argv)
    assert jobs and len({tuple(j.overrides) for j in jobs}) == len(jobs) == 2
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = GlobalHydra.instance().config_loader().load_configuration("train", argv[1:], run_mode=RunMode.MULTIRUN)
    basic = basic_sweeper.BasicSweeper(max_batch_size=None, params=dict(cfg.hydra.sweeper.get("params") or {}))
    basic.config = cfg
    arguments = basic._parse_config() + argv[1:]
    batches = basic_sweeper.BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(arguments), None)
    made = [tuple(job) for batch in batches for job in batch]
    with checked_plan.planned(jobs):
        assert set(made) == set(checked_plan.plan())
    assert checked_plan.plan() == {}  # handed over for Hydra's run of the command line only


def test_the_sweeper_composes_only_jobs_the_preflight_did_not(monkeypatch):
    from types import SimpleNamespace

    composed = []
    monkeypatch.setattr(basic_sweeper.BasicSweeper, "validate_batch_is_legal", lambda self,
                        batch: composed.append([list(j) for j in batch]))
    s = sweeper.CheckedSweeper(max_batch_size=None)
    with checked_plan.planned([SimpleNamespace(overrides=["seed=1"]), SimpleNamespace(overrides=["seed=2"])]):
        s.basic.validate_batch_is_legal([["seed=1"], ["seed=2"]])
        assert composed == []
        s.basic.validate_batch_is_legal([["seed=1"], ["seed=3"]])  # seed=3 was not checked: Hydra composes the batch
        assert composed == [[["seed=1"], ["seed=3"]]]
    s.basic.validate_batch_is_legal([["seed=1"]])  # outside the command line's run: nothing is known checked
    assert composed[-1] == [["seed=1"]]


@pytest.fixture(scope="module")
def parallel_sweep(tmp_path_factory):
    """One sweep of two groups in joblib's workers started from the command line, in its default folder (no
    ``hydra.sweep.dir``): the launching folder, the sweep's folder and the finished command."""
    tmp = tmp_path_factory.mktemp("parallel")
    proc = run_cli("-m", "norm=pre,post", "seed=1,2", "steps=10", "trainer.val_check_interval=5", "callbacks=none",
                   "trainer.enable_progress_bar=false", "hydra/launcher=vectorized", "hydra.launcher.n_jobs=2", cwd=tmp)
    sweeps = list((tmp / "outputs" / "multirun").iterdir()) if (tmp / "outputs" / "multirun").is_dir() else []
    return tmp, sweeps, proc


def test_early_workers_get_what_the_parent_set_after_they_started(parallel_sweep):
    """Two groups in joblib's workers (started from the command line): job folders named by the swept
    keys, and progress counted against the sweep's size, both set by the parent after the workers started."""
    _, sweeps, proc = parallel_sweep
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (sweep,) = sweeps
    folders = sorted(str(p.parent.relative_to(sweep)) for p in sweep.rglob("metrics.json"))
    assert folders == ["norm=post/seed=1", "norm=post/seed=2", "norm=pre/seed=1", "norm=pre/seed=2"]
    records = [json.loads((sweep / f / "metrics.json").read_text()) for f in folders]
    assert all(r["group"]["size"] == 2 for r in records)
    # The launcher took the preflight's compositions: each job's .hydra/ is still Hydra's own for that job.
    for f, r in zip(folders, records):
        hydra = OmegaConf.load(sweep / f / ".hydra" / "hydra.yaml").hydra
        assert hydra.mode == "MULTIRUN" and hydra.job.name == "train"
        assert hydra.job.id == f"train_{r['job_num']}" and hydra.job.num == r["job_num"]
        assert "hydra.mode=MULTIRUN" in hydra.overrides.hydra and set(f.split("/")) <= set(hydra.overrides.task)
        assert OmegaConf.load(sweep / f / ".hydra" / "config.yaml").norm == f.split("/")[0].split("=")[1]
    assert "[4/4 done]" in proc.stdout and "vectorized: 4 jobs in 2 stacked groups (2 of 2) and 0 alone" in proc.stdout, proc.stdout[-2000:]
    assert "leaked semaphore" not in proc.stderr and "could not start the workers" not in proc.stderr + proc.stdout, proc.stderr[-2000:]


def _where_am_i() -> tuple[int, str, int, bool, bool, int]:
    """In a worker: the parent process, its command line, its thread count, whether the library is imported, whether
    the garbage collector runs and how many objects it leaves frozen (initnorm/collector.py)."""
    parent = os.getppid()
    with open(f"/proc/{parent}/cmdline", "rb") as f:
        cmdline = f.read().replace(b"\0", b" ").decode()
    return (parent, cmdline, len(os.listdir(f"/proc/{parent}/task")), all(m in sys.modules for m in early.WORKER_MODULES),
            gc.isenabled(), gc.get_freeze_count())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is used on Linux only")
def test_workers_are_forked_from_one_single_threaded_server_that_imported_the_library(monkeypatch):
    """Forking is safe only from a process that started no threads (OpenMP's pool included); the server
    only imports. After the sweep nothing of it is left."""
    monkeypatch.delenv(workers.FORKSERVER_ENV, raising=False)
    assert workers.start_method() == "forkserver"
    try:
        seen = workers.pool(2, modules=early.WORKER_MODULES).run(_where_am_i, [()] * 4, stopping=lambda: False)
    finally:
        workers.end()
    parents = {p for p, *_ in seen}
    assert len(parents) == 1 and os.getpid() not in parents, seen
    assert all("forkserver" in cmd and threads == 1 and imported for _, cmd, threads, imported, *_ in seen), seen
    # the server imported with the collector off; each worker runs it, over the server's objects frozen (not walked)
    assert all(collecting and frozen > 100_000 for *_, collecting, frozen in seen), [s[-2:] for s in seen]
    assert not workers.alive(parents.pop()), "the fork server outlived the sweep"  # killed by end()
    monkeypatch.setenv(workers.FORKSERVER_ENV, "0")
    assert workers.start_method() == "spawn"


def test_a_vectorised_sweep_in_its_default_folder_writes_every_job_there(parallel_sweep):
    """The default sweep folder draws a new random suffix each time it is resolved
    (initnorm.unique_dir): the jobs the preflight composed must carry the sweep's resolved value,
    or every job lands in a folder of its own and the summary finds none."""
    _, sweeps, proc = parallel_sweep
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert len(sweeps) == 1, sweeps
    assert len(list(sweeps[0].rglob("metrics.json"))) == 4 and (sweeps[0] / "summary.md").is_file()
    assert "[4/4 done]" in proc.stdout, proc.stdout[-2000:]


def _with_mark(mark: str) -> list[int]:
    """The processes whose environment holds ``mark``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if mark.encode() in f.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:  # gone meanwhile, or not ours
                pass
    return found


def survivors(mark: str, within: float) -> list[int]:
    """The processes that hold ``mark`` in their environment once none is left, or ``within`` seconds have passed."""
    import time

    deadline = time.monotonic() + within
    while _with_mark(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _with_mark(mark)


def end_marked(mark: str) -> None:
    """Kill what a test left (a failed test must not leave a sweep running)."""
    import signal

    for pid in _with_mark(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.matrix  # a real signal to a real sweep from outside, a minute on 2 cores: `make test-signals`
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("forkserver", ["1", "0"] if os.environ.get("INITNORM_TEST_FULL_MATRIX") else ["1"])
def test_workers_stop_when_the_sweep_process_is_killed_alone(tmp_path, forkserver):
    """kill -9 of the launching process alone: its joblib workers stop (leaving their checkpoints to
    resume from) instead of training on and writing the folders that a rerun writes too. By default the fork server's
    workers (Linux's start, where the server, not the sweep's process, is their parent); INITNORM_TEST_FULL_MATRIX=1
    adds spawned workers (other platforms' start, INITNORM_FORKSERVER=0), whose abandon check is the same call."""
    import secrets
    import signal
    import subprocess
    import time

    from tests.conftest import ROOT

    mark = f"INITNORM_TEST_MARK={secrets.token_hex(8)}"
    sweep = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": str(ROOT), workers.FORKSERVER_ENV: forkserver, mark.split("=")[0]: mark.split("=")[1]}
    command = [sys.executable, "-m", "initnorm.train", "-m", "norm=pre,post", "seed=1,2", "steps=100000", "compile=false", "callbacks=none",
               "trainer.enable_progress_bar=false",
               "checkpoint.every_n_steps=100", "hydra/launcher=vectorized", "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300  # at a load of 12 on 2 cores the workers' start alone took 100 s
        while len(list(sweep.rglob("initnorm.ckpt"))) < 4:
            assert proc.poll() is None and time.monotonic() < deadline, "the sweep ended before its first checkpoints"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        left = survivors(mark, 60)  # a worker notices at its next abandon check (every few steps), slower under load
    finally:
        proc.kill()
        end_marked(mark)
    assert not left, f"processes of the killed sweep still running: {left}"
    logs = [p.read_text() for p in sweep.rglob("train.log")]
    assert len(logs) == 4 and all("the sweep's process is gone" in t for t in logs)


def test_help_a_bad_value_and_a_vectorised_sweeps_checks_never_import_lightning(tmp_path):
    """Lightning (with torchmetrics) is most of a command's start: ``--help``, a bad value and the commands that only read
    finished folders answer without it (cli/job.py, training/checkpoints.py and the instruments' callbacks load it).

    And the vectorised sweep's own process checks every job (the memory floor counts each model's parameters), then groups
    them (the groups' ``max_params``, horizon forks) and leaves training to its workers: it never imports Lightning, 2-5 s of
    CPU (torchmetrics and what it finds installed) on the path to the first group; nor for a decay held in tokens per
    parameter (``optim.weight_decay_rule=tokens_per_param``), whose check counts the model at the job's and at the base's
    width. Both in one fresh Python (each was a process of its own, ~2 s of CPU importing torch): the checks run after the
    commands above, and Lightning is still not imported at the end."""
    code = (
        "import sys\n"
        "import initnorm.cli.summarize\n"
        "print('torch' in sys.modules)\n"  # initnorm-summarize reads folders: no torch (2.3 s of its start)
        "from initnorm.train import main\n"
        "for argv in (['--help'], ['steps=abc'], ['data.kind=nope']):\n"
        "    sys.argv = ['initnorm-train', *argv]\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit as exc:\n"
        "        print('exit', exc.code)\n"
        "import initnorm.cli.summarize, initnorm.cli.diagnose, initnorm.cli.coord_check, initnorm.cli.roles, initnorm.cli.probe\n"
        "print('lightning' in sys.modules)\n"
        "from initnorm.cli.preflight import check_command_line\n"
        "import initnorm.cli.vectorized, initnorm.cli.sweeper\n"
        "from initnorm.training.group import parameter_count\n"
        "jobs = check_command_line(['-m', 'norm=pre,post', 'seed=1,2', 'hydra/launcher=vectorized'])\n"
        "others = check_command_line(['experiment=deep_mlp_train']) + check_command_line(['experiment=regularization'])\n"
        "check_command_line(['optim.weight_decay=0.1', 'optim.weight_decay_rule=tokens_per_param', 'width=64',"
        " 'transfer.base.width=16', 'transfer.base.steps=1000', 'transfer.base.batch_size=32'])\n"  # a count at each point
        "print(len(jobs), len({parameter_count(j.config) for j in [*jobs, *others]}), 'lightning' in sys.modules)\n"
    )
    out = fresh_python(code, tmp_path)
    lines = out.splitlines()
    assert lines[0] == "False" and lines[-5:-1] == ["exit 0", "exit 2", "exit 2", "False"], out[-2000:]
    assert lines[-1].split() == ["4", "3", "False"], out[-2000:]


def fresh_python(code: str, cwd: Path) -> str:
    """What ``code`` prints, run by a Python of its own (nothing imported yet), which must exit 0."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_the_summary_after_the_last_job_finds_its_figures_imports_done_ahead_and_a_few_seeds_skip_tensorboard(tmp_path):
    """A sweep's process draws a figure ahead while its workers train (``plots.draw_ahead``): the summary after the last job
    imports nothing more of matplotlib, and a sweep of a handful of seeds a setting never imports TensorBoard (its
    per-setting runs are for more seeds: tb.write_setting_runs)."""
    code = (
        "import sys\n"
        "from initnorm import plots\n"
        "from initnorm.results import write_metrics\n"
        "from initnorm.summary import summarize\n"
        "plots.draw_ahead().join()\n"
        "for norm in ('pre', 'post'):\n"
        "    for s in (1, 2):\n"
        "        write_metrics(f'sweep/norm={norm}/seed={s}', {'overrides': {'norm': norm, 'seed': str(s)}, 'swept': ['norm', 'seed'],"
        " 'seed': s, 'final_val_loss': 2 + s / 10, 'status': 'finished', 'summary_plots': ['val_curves'],"
        " 'val_history': [[0, 3.0], [10, 2.5]], 'config': {'seed': s, 'norm': norm, 'steps': 10}})\n"
        "before = set(sys.modules)\n"
        "summarize('sweep')\n"
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in ('matplotlib', 'PIL', 'cycler')),"
        " 'tensorboard' in sys.modules)\n"
    )
    assert fresh_python(code, tmp_path).split() == ["[]", "False"]
    assert (tmp_path / "sweep" / "val_curves.png").stat().st_size > 0 and not (tmp_path / "ahead.png").exists()


def test_each_distinct_config_is_checked_once_the_seeds_copies_included(tmp_path, monkeypatch):
    """experiment=coord_check copies the seed into its callback's node (callbacks.coord.seed: ${seed}): the seeds of one
    width are one config to check, and each job still holds its own seed in both places, as its check alone gives."""
    from initnorm.cli import preflight

    widths, real = [], preflight._check_config
    monkeypatch.setattr(preflight, "_check_config", lambda c, seen: widths.append(c["model"]["width"]) or real(c, seen))
    jobs = check_command_line(["-m", "experiment=coord_check", "width=16,32", "seed=1,2,3", f"hydra.sweep.dir={tmp_path}"])
    assert sorted(widths) == [16, 32] and len(jobs) == 6
    for job in jobs:
        alone = preflight.check_overrides([job.overrides])[0]  # composed by Hydra, checked alone
        assert job.config == alone and job.config["callbacks"]["coord"]["seed"] == job.config["seed"]
    with pytest.raises(ConfigError, match="seed"):  # a seed out of its range is still refused in a job that shares a check
        check_command_line(["-m", "experiment=coord_check", "seed=1,-1", f"hydra.sweep.dir={tmp_path}"])
