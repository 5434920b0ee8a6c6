"""A sweep's job configs composed once per choice of config groups (initnorm/cli/composer.py) are Hydra's own.

Every preset's sweep (conf/experiment/*) and every sweep of the README and docs/ is expanded as Hydra's basic
sweeper expands it; for each distinct group choice and each distinct value of each swept key, one job is composed
both ways: the full config (unresolved, hydra node included), the resolved task config the preflight checks, the
job's folder name, and a refusal's words must be the same; and the job's config as plain values made without a copy
(what a vectorised group's member saves in its folder) is the full config's. Hydra takes 0.1-0.4 s a job, so not every job of a
324-job preset is composed by it: a job's config depends on its group choices and on each value, which this covers.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

from initnorm.cli.compose import CONF_DIR
from initnorm.cli.composer import Composer
from initnorm.cli.preflight import expand
from initnorm.cli.sweep import SWEPT_ENV, parse_sweep, register_resolvers, sweep_overrides
from tests.test_docs_commands import every_command, module_of, why_not

REFUSED = [  # sweeps whose jobs Hydra refuses: the composer must refuse them in the same words
    "-m seed=1 lrr=0.1,0.2",  # a key the config does not have
    "-m init=normal,xavir",  # an unknown group option
    "-m +seed=3,4",  # appending a key that exists
    "-m model=deep_mlp,decoder",  # an interpolation that cannot be resolved (data.dim: Alice has none)
]
OTHER = [  # overrides the presets do not use: adds, deletes, lists, a value set on an interpolated key, a folder named
    "-m seed=1,2 +trainer.gradient_clip_val=1.0 ~checkpoint",
    "-m seed=1,2 optim.betas=[0.8,0.9],[0.9,0.95] model.width=24",
    "-m norm=pre,post seed=3 hydra.sweep.dir=SWEEP",
    "-m width=16,32 param=mup seed=1",
]


def sweeps() -> list[list[str]]:
    presets = [f"-m experiment={p.stem}" for p in sorted(Path(CONF_DIR, "experiment").glob("*.yaml"))]
    pages = [shlex.join(args) for page, cmd in every_command() if not why_not(cmd)
             for module, args in [module_of(cmd)] if module == "initnorm.train" and "-m" in args and "<" not in cmd]
    return [shlex.split(s) for s in dict.fromkeys(presets + pages + OTHER + REFUSED)]


def covering(jobs: list[list[str]], composer: Composer) -> list[list[str]]:
    """Jobs that hold every group choice and every distinct override line of the sweep at least once: each
    next one the job that adds the most not yet held (a 4 x 9 x 3 grid takes 9, not 108)."""
    chosen, held = [], set()
    todo = {tuple(job): {composer.split(job)[0], *job} for job in jobs}
    while todo:
        job, new = max(todo.items(), key=lambda kv: len(kv[1] - held))
        if not new - held:
            break
        chosen.append(list(job))
        held |= new
        del todo[job]
    return chosen


def _outcome(make, *args):
    try:
        return make(*args), None
    except Exception as exc:  # what Hydra raises is the point: its type and words, and its cause's
        return None, (type(exc).__name__, str(exc), str(exc.__cause__))


@pytest.fixture(scope="module")
def loader():
    register_resolvers()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        yield GlobalHydra.instance().config_loader()
    GlobalHydra.instance().clear()


SWEEPS = sweeps()


@pytest.mark.parametrize("argv", SWEEPS, ids=[" ".join(a[1:])[:60] for a in SWEEPS])
def test_a_jobs_config_and_refusal_are_hydras_own(loader, tmp_path, monkeypatch, argv):
    overrides = [a.replace("SWEEP", str(tmp_path / "sweep")) for a in argv if a != "-m"]
    if not any(o.startswith("hydra.sweep.dir=") for o in overrides):
        overrides.append(f"hydra.sweep.dir={tmp_path / 'sweep'}")
    master = loader.load_configuration("train", overrides, run_mode=RunMode.MULTIRUN)
    monkeypatch.setenv(SWEPT_ENV, ",".join(parse_sweep(sweep_overrides(master))))
    composer = Composer(loader, master)
    compared = fast = refused = in_place = 0
    for job in covering(expand(master), composer):
        theirs, their_exc = _outcome(loader.load_sweep_config, master, job)
        ours, our_exc = _outcome(composer.job_config, job)
        made_task, task_exc = _outcome(composer.task, job)
        task, made = made_task or (None, None)
        assert our_exc == their_exc, (argv, job)
        if their_exc is not None:
            refused += 1
            assert task_exc == their_exc, (argv, job)
            continue
        assert OmegaConf.to_container(ours, resolve=False) == OmegaConf.to_container(theirs, resolve=False), (argv, job)
        plain = composer.job_plain(job)  # what a vectorised group's member saves in its folder (cli/member_setup.py)
        assert plain is None or plain == OmegaConf.to_container(theirs, resolve=False, enum_to_str=True), (argv, job)
        in_place += plain is not None
        their_task, their_task_exc = _outcome(
            lambda cfg: OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=True), theirs)
        assert task_exc == their_task_exc and task == their_task, (argv, job)
        if task is None:
            refused += 1  # refused as it is resolved (an interpolation the chosen options cannot fill)
            continue
        compared += 1
        fast += made is None
        assert composer.subdir(job, task) == str(theirs.hydra.sweep.subdir), (argv, job)
    # The refused sweeps are refused; the others' jobs are made in place (only OTHER's adds and deletes need a copy).
    assert (refused > 0) == (" ".join(argv) in REFUSED), (refused, compared)
    # A value that interpolates another key (`trainer.val_check_interval=${steps}`, the transfer recipes' horizon
    # forks) is resolved per job as Hydra resolves it: those jobs take the composed path, equal to Hydra's above.
    interpolated = any("${" in a for a in argv)
    assert compared == 0 or (fast > 0 and in_place > 0) or "~checkpoint" in argv or interpolated, (compared, fast, in_place)


def test_the_sweeps_compared_hold_every_preset_and_a_documented_one():
    presets = {p.stem for p in Path(CONF_DIR, "experiment").glob("*.yaml")}
    assert presets <= {a[1].removeprefix("experiment=") for a in SWEEPS} and len(SWEEPS) > len(presets) + len(OTHER) + len(REFUSED)


NUMBERS = ["1", "0", "-3", "+4", "007", "1_000", "12345678901234567890", "0.1", "1e-3", "1.", ".5", "-2.5E+3", "1.e5", "00.5",
           "0x10", "inf", "nan", "1e", "5 ", " 5", "1,2", "[1]", "${seed}", "'7'", "3.0e-05", "+.5e1", "1__0", "ab1"]


def test_a_sweeps_numbers_are_read_as_hydras_parser_reads_them_and_it_runs_once_a_key(loader, monkeypatch):
    """Thousands of job lines differ in one number (seed=1 .. seed=10000): the parser reads the first line of each key
    and the others are read without it, to the same Override (value and its type included), whatever the text."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    composer = Composer(loader, loader.load_configuration("train", [], run_mode=RunMode.MULTIRUN))
    keys = ["seed", "lr", "+trainer.gradient_clip_val", "model.width", "++x"]
    lines = [f"{key}={text}" for key in keys for text in ["2", *NUMBERS]]
    theirs = OverridesParser.create().parse_overrides(lines)
    ours = [composer.parse([line])[0] for line in lines]  # a job's lines at a time, as a sweep hands them over
    assert [(repr(o), type(o.value())) for o in ours] == [(repr(o), type(o.value())) for o in theirs]  # repr: nan != nan
    parsed = []
    parse_rule = OverridesParser.parse_rule
    monkeypatch.setattr(OverridesParser, "parse_rule", lambda self, s, rule: parsed.append(s) or parse_rule(self, s, rule))
    fresh = Composer(loader, composer.master)
    for seed in range(1, 10_001):
        fresh.split([f"seed={seed}", "steps=1"])
    assert parsed == ["seed=1", "steps=1"]
