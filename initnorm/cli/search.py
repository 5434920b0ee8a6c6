"""``hparams_search=lr_base`` (the ``search`` extra: Optuna >= 3): a seeded TPE search as a Hydra sweeper.

Hydra's own Optuna sweeper pins ``optuna<3``, whose SQLite storage fails with SQLAlchemy 2, so this
drives Optuna directly through its ask/tell interface. Each batch asks ``n_jobs`` trials and hands
all their jobs (a trial is one job per seed of ``seeds``) to the configured launcher at once: under
``hydra/launcher=vectorized`` a batch trains as one stacked group. The objective is the mean over
those seeds of the experiment's own summary metric (``summary.metrics[0]``: the final validation loss
by default, ``final_loss`` for the chapter's MLPs), the number its sweep summary and transfer report
score: one seed's loss at a small width moves by about as much as neighbouring learning rates differ,
so a single-seed search chases noise (results/: the seed tables).

The space is ``hydra.sweeper.params`` less every key the command line sets to one value: a preset
with a grid of its own (``experiment=mup_mlp_sweep``: param, width and lr) merges it into the space,
and ``param=mup width=64`` fix those. A search runs at one size, so a width or depth left in the space
is refused.

The study lives in ``<sweep folder>/search.journal``, one Optuna journal file (``search/study.py``; an
earlier ``search.db`` is read into it). The same command again (with ``hydra.sweep.dir`` pinned) loads it:
trials it finished are not asked again, trials a killed run left running are launched again with their own
values (their job folders skip or resume, as in any sweep), and it asks only the trials still missing up to
``n_trials``. The study is a file of the sweep folder, so a trial launched again must hold exactly the space's
keys, each value one the space could ask (``resumed_trials``): a study can never name a key or a value the
command line did not.

``hydra.sweeper.workers=N`` drops the batches: N workers (``cli/search_workers.py``, ``search/workers.py``: local
processes, or SLURM tasks under ``hydra/launcher=slurm``) each ask a trial, train its jobs, tell it and ask the next, sharing the
journal; an optional pruner stops a trial at a validation point (docs/search.md). Unset (the default), the
batches above.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import IntervalSweep
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, ListConfig, OmegaConf

from initnorm.cli.launchers import installed, kind
from initnorm.cli.search_plan import distributions
from initnorm.errors import ConfigError
from initnorm.results import write_atomic
from initnorm.search import study as search_study
from initnorm.search.study import STUDY_FILE, job_state, resumed_trials

EXTRA = "pip install 'initnorm[search]'"


def missing_extra() -> str | None:
    """One line where this install lacks Optuna; None where it has it."""
    if installed("optuna"):
        return None
    return f"hparams_search needs Optuna (optuna>=3), which this install lacks: {EXTRA}, or drop hparams_search (a grid: lr=a,b,c)"



def space_of(arguments: list[str], params: dict[str, str]) -> dict[str, str]:
    """``params`` less the keys the command line fixes; a size in what is left is refused (a search runs at one size)."""
    given = {a.partition("=")[0].lstrip("+~") for a in arguments if "=" in a}
    space = {k: v for k, v in params.items() if k not in given}
    for key in ("width", "depth"):
        if key in space:
            first = space[key].split(",")[0]
            raise ConfigError(f"hydra.sweeper.params.{key}={space[key]!r}: a search runs at one {key} (µP's promise is that "
                              f"its best value holds at the others: initnorm-transfer takes it there); fix it with `{key}={first}`")
    if not space:
        raise ConfigError(f"the command line fixes every key of the search space ({', '.join(params) or 'none'}): nothing is "
                          "left to search; fix it by leaving the one to search off the command line (its `lr=`, say)")
    return space


def fixed_overrides(arguments: list[str], params: dict[str, str]) -> list[str]:
    """The command line's overrides, which every job shares; a search sweeps nothing else and sets its own seeds."""
    out = []
    for a in arguments:
        key, _, value = a.partition("=")
        key = key.lstrip("+~")
        if key == "seed":
            raise ConfigError(f"{a!r}: a search trains every trial at each seed of hydra.sweeper.seeds; "
                              f"fix it with `hydra.sweeper.seeds=[{value}]`")
        if "," in value.replace("[", "(").split("(")[0]:
            raise ConfigError(f"{a!r}: a search sweeps only hydra.sweeper.params, not a grid beside it; "
                              f"fix it with one value (`{key}={value.split(',')[0]}`) or a search space "
                              f"(`'+hydra.sweeper.params.{key}=\"choice({value})\"'`)")
        out.append(a)
    return out


def check_study(folder: Path, space: dict[str, str]) -> None:
    """The trials a rerun would launch again from ``folder``'s study (``resumed_trials``), before Hydra starts; a file
    there that is not an Optuna study is one line."""
    path = Path(folder) / STUDY_FILE
    if (study := search_study.existing(folder)) is not None:
        resumed_trials(study, distributions(space), path if path.is_file() else path.with_name(search_study.LEGACY_FILE))


def options_with(group: str, leaf: str) -> list[str]:
    """The options of config group ``group`` (conf/<group>/*.yaml) that have the key ``leaf``, their defaults included."""
    from initnorm.cli.compose import CONF_DIR

    out = []
    for f in sorted(Path(CONF_DIR, group).glob("*.yaml")) if group and "." not in group else ():
        node = OmegaConf.load(f)
        bases = [d for d in node.get("defaults", []) if isinstance(d, str) and d != "_self_"]
        if leaf in node or any(leaf in OmegaConf.load(Path(CONF_DIR, group, f"{b}.yaml")) for b in bases):
            out.append(f.stem)
    return out


def check(arguments: list[str], params: dict[str, str], config: DictConfig | None = None, folder: Path | None = None) -> None:
    """What the preflight asks before Hydra starts: Optuna installed, the overrides and the space valid, every searched
    key one the composed ``config`` has (``param.output_mult`` exists under param=mup, not under param=sp), the trials a
    rerun in ``folder`` (a named sweep folder) would launch again; one line each."""
    if problem := missing_extra():
        raise ConfigError(problem)
    fixed_overrides(arguments, params)
    space = space_of(arguments, params)
    distributions(space)
    if config is not None:
        check_counts(config.hydra.sweeper, config.hydra.launcher)
        check_space_values(space, config)
    if folder is not None:
        check_study(folder, space)
    absent = object()
    for key in space if config is not None else ():
        if OmegaConf.select(config, key, default=absent) is absent:
            group, _, leaf = key.rpartition(".")
            node = OmegaConf.select(config, group) if group else config
            has = f"{group}={node.get('name')} has {', '.join(map(str, node))}" if group and hasattr(node, "keys") else "no such key"
            raise ConfigError(f"the search space's {key} is not a key of this config ({has}); fix it with "
                              + (" or ".join(f"`{group}={o}`" for o in options_with(group, leaf)) or f"a space without {key}"))


PRUNERS = ("none", "median", "successive_halving")


def check_counts(sweeper: DictConfig, launcher: Any = None) -> None:
    """``hydra.sweeper.n_trials`` and ``n_jobs`` positive integers, ``seeds`` a list of at least one seed, ``workers``
    unset or a positive integer (under the default launcher or ``slurm``: a worker trains its trials itself),
    ``retries`` and ``startup_trials`` counts, ``pruner`` one of ``PRUNERS``; one line each."""
    from initnorm import schema

    for key, least, fix in (("n_trials", 1, 4), ("n_jobs", 1, 4), ("retries", 0, 2), ("startup_trials", 0, 4)):
        value = sweeper.get(key, least)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"hydra.sweeper.{key}={value!r} is invalid: {'a positive integer' if least else 'an integer from 0'}; "
                              f"fix it with `hydra.sweeper.{key}={fix}`")
    hang = sweeper.get("hang_timeout_s")
    if hang is not None and (isinstance(hang, bool) or not isinstance(hang, (int, float)) or hang <= 0):
        raise ConfigError(f"hydra.sweeper.hang_timeout_s={hang!r} is invalid: seconds > 0 a worker may spend no CPU before it "
                          "is ended as hung, or null for never; fix it with `hydra.sweeper.hang_timeout_s=900`")
    workers = sweeper.get("workers")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ConfigError(f"hydra.sweeper.workers={workers!r} is invalid: a positive integer, or null for batches of n_jobs "
                          "trials through the launcher; fix it with `hydra.sweeper.workers=2`")
    if workers is not None and launcher is not None and kind(launcher) not in ("basic", "slurm"):
        name = str(launcher.get("_target_")).rpartition(".")[2]
        raise ConfigError(f"hydra.sweeper.workers={workers} trains each trial in its worker (a local process, or a SLURM task "
                          f"under hydra/launcher=slurm), not through {name}; fix it with `hydra/launcher=basic`, or "
                          "`~hydra.sweeper.workers` for batches of n_jobs trials through it")
    if (pruner := sweeper.get("pruner", "none")) not in PRUNERS:
        raise ConfigError(f"hydra.sweeper.pruner={pruner!r} is invalid: one of {', '.join(PRUNERS)}; fix it with "
                          "`hydra.sweeper.pruner=median`")
    if pruner != "none" and workers is None:
        raise ConfigError(f"hydra.sweeper.pruner={pruner} stops a trial inside its worker; fix it with `hydra.sweeper.workers=1` "
                          "(or more), or `hydra.sweeper.pruner=none`")
    seeds = sweeper.get("seeds")
    if not isinstance(seeds, (list, tuple, ListConfig)) or not seeds:
        raise ConfigError(f"hydra.sweeper.seeds={_shown(seeds)} is invalid: a list of at least one seed; fix it with "
                          "`hydra.sweeper.seeds=[1,2]`")
    for seed in seeds:
        try:
            schema.check_value("seed", seed, schema.RULES["seed"])
        except ConfigError as exc:
            raise ConfigError(f"hydra.sweeper.seeds={_shown(seeds)}: {exc}") from None


def _shown(value: Any) -> str:
    return str(OmegaConf.to_container(value)) if isinstance(value, ListConfig) else repr(value)


def check_space_values(space: dict[str, str], config: DictConfig) -> None:
    """Every value the space could ask (an interval's ends, each choice) is one the key's rule allows (``lr`` above 0,
    ``warmup`` from 0 to ``steps``): one line naming the space, not a failed trial after the search began."""
    from initnorm import schema

    values = {k: config.get(k) for k in ("steps", "batch_size", "width", "depth") if k in config}
    for key, text in space.items():
        rule = schema.RULES.get(key)
        if rule is None:
            continue
        sweep = OverridesParser.create().parse_override(f"{key}={text}").value()
        ends = [sweep.start, sweep.end] if isinstance(sweep, IntervalSweep) else list(sweep.list)
        for value in ends:
            try:
                schema.check_value(key, value, rule, values)
            except ConfigError as exc:
                raise ConfigError(f"hydra.sweeper.params.{key}={text!r} could ask {value!r}: {exc}") from None


class SearchSweeper(Sweeper):
    def __init__(self, seed: int = 0, n_trials: int = 24, n_jobs: int = 4, seeds: list[int] | None = None,
                 params: dict[str, str] | None = None, direction: str = "minimize", workers: int | None = None,
                 pruner: str = "none", startup_trials: int = 4, retries: int = 2, hang_timeout_s: float | None = 900) -> None:
        self.seed, self.n_trials, self.n_jobs = int(seed), int(n_trials), int(n_jobs)
        self.seeds = [int(s) for s in (seeds or [1])]
        self.params = {str(k): str(v) for k, v in (params or {}).items()}
        self.direction = direction
        self.workers, self.pruner, self.startup_trials, self.retries = workers, str(pruner), int(startup_trials), int(retries)
        self.hang_timeout_s = None if hang_timeout_s is None else float(hang_timeout_s)  # a worker's (search/hang.py)
        self.launcher = self.config = self.hydra_context = self.task_function = None
        for key, value in (("n_trials", self.n_trials), ("n_jobs", self.n_jobs)):
            if value < 1:
                raise ConfigError(f"hydra.sweeper.{key}={value} must be a positive integer; fix it with `hydra.sweeper.{key}=4`")

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function
        from initnorm.cli.basic import adopt

        # Hydra's basic launcher's jobs through run.run (cli/basic.py)
        self.launcher = adopt(Plugins.instance().instantiate_launcher(hydra_context=hydra_context, task_function=task_function,
                                                                      config=config))

    def study(self, folder: Path):
        return search_study.open_study(folder, self.direction)

    def ask(self, study, space: dict[str, Any]):
        return search_study.ask(study, space, self.seed)

    tell = staticmethod(search_study.tell)

    def sweep(self, arguments: list[str]) -> Any:
        from initnorm.search_report import write_report

        folder = Path(str(self.config.hydra.sweep.dir))
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / "multirun.yaml", OmegaConf.to_yaml(self.config))  # a rename: never through a planted link
        fixed, space = fixed_overrides(arguments, self.params), distributions(space_of(arguments, self.params))
        metric = str(self.config.summary.metrics[0])  # what the experiment's summary and transfer report score
        study = self.study(folder)
        if self.workers is not None:
            from initnorm.cli.search_workers import run_workers

            returns = run_workers(self, study, folder, fixed, space_of(arguments, self.params), metric)
        else:
            returns = self.batches(study, folder, fixed, space, metric)
        write_report(study, folder, fixed, self.seeds, metric)
        return returns

    def batches(self, study, folder: Path, fixed: list[str], space: dict[str, Any], metric: str) -> list:
        """``n_jobs`` trials at a time, all their jobs to the launcher at once, each batch told before the next is asked."""
        # A killed run's trials were asked, not told: launch them again with their own values (checked: the file is data).
        pending = resumed_trials(study, space, folder / STUDY_FILE)
        job_idx, returns = 0, []
        while True:
            batch = pending[: self.n_jobs]
            pending = pending[len(batch):]
            for _ in range(min(self.n_jobs - len(batch), self.n_trials - len(study.trials))):
                trial = self.ask(study, space)
                batch.append((trial.number, trial.params))
            if not batch:
                break
            jobs = [[*fixed, *(f"{k}={v!r}" for k, v in values.items()), f"seed={s}"] for _, values in batch for s in self.seeds]
            rets = self.launcher.launch(jobs, initial_job_idx=job_idx)
            job_idx += len(jobs)
            returns.append(rets)
            for i, (number, _) in enumerate(batch):
                states = [job_state(r.working_dir, metric) for r in rets[i * len(self.seeds):(i + 1) * len(self.seeds)]]
                self.tell(study, number, states)
        return returns
