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

The study lives in ``<sweep folder>/search.db`` (SQLite). The same command again (with
``hydra.sweep.dir`` pinned) loads it: trials it finished are not asked again, trials a killed run
left running are launched again with their own values (their job folders skip or resume, as in
any sweep), and it asks only the trials still missing up to ``n_trials``. The study is a file of the
sweep folder, so a trial launched again must hold exactly the space's keys, each value one the space
could ask (``resumed_trials``): a study can never name a key or a value the command line did not.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, ListConfig, OmegaConf

from initnorm.cli.launchers import installed
from initnorm.errors import ConfigError
from initnorm.results import read_record, write_atomic
from initnorm.safe_files import planted

EXTRA = "pip install 'initnorm[search]'"
STUDY_FILE = "search.db"
STUDY_NAME = "search"
SQLITE_SIDE_FILES = ("-journal", "-wal", "-shm")  # what SQLite keeps beside search.db while it writes


def missing_extra() -> str | None:
    """One line where this install lacks Optuna; None where it has it."""
    if installed("optuna"):
        return None
    return f"hparams_search needs Optuna (optuna>=3), which this install lacks: {EXTRA}, or drop hparams_search (a grid: lr=a,b,c)"


def distributions(params: dict[str, str]) -> dict[str, Any]:
    """``{lr: "tag(log, interval(1e-4, 0.1))"}`` -> Optuna distributions; Hydra's sweep syntax, as its Optuna sweeper reads it."""
    import optuna.distributions as d

    out = {}
    for key, text in params.items():
        sweep = OverridesParser.create().parse_override(f"{key}={text}").value()
        if isinstance(sweep, IntervalSweep):
            log = "log" in sweep.tags
            ints = isinstance(sweep.start, int) and isinstance(sweep.end, int)
            out[key] = (d.IntDistribution if ints else d.FloatDistribution)(sweep.start, sweep.end, log=log)
        elif isinstance(sweep, ChoiceSweep):
            out[key] = d.CategoricalDistribution(list(sweep.list))
        else:
            raise ConfigError(f"hydra.sweeper.params.{key}={text!r} is not a search space; allowed: interval(a, b), "
                              "tag(log, interval(a, b)), choice(a, b, ...); "
                              f"fix it with `'hydra.sweeper.params.{key}=\"tag(log, interval(1e-4, 0.1))\"'`")
    return out


def planned(config: DictConfig) -> tuple[int, int] | None:
    """(trials, seeds) of a search's command, None for any other sweep: its jobs are trials x seeds, asked as it goes,
    so the progress lines count against that (a resumed search's finished jobs among them)."""
    sweeper = config.hydra.get("sweeper") or {}
    if not str(sweeper.get("_target_", "")).endswith(".SearchSweeper"):
        return None
    return int(sweeper.get("n_trials", 24)), len(sweeper.get("seeds") or [1])


def job_state(ret, metric: str) -> tuple[float | None, str]:
    """(loss, why not) of one launched job: its ``metric``, or None with ``diverged`` / ``failed`` (a crash, or a record
    without the metric: TPE ignores a failed trial, where it ranks a pruned one below every other)."""
    record = read_record(Path(ret.working_dir) / "metrics.json") if ret.working_dir else None
    if record is None or record.get("status") != "finished" or metric not in record:
        return None, "failed"
    loss = None if record.get("diverged") else record.get(metric)
    return (float(loss), "") if isinstance(loss, float) and math.isfinite(loss) else (None, "diverged")


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


def _in_space(value: Any, dist) -> bool:
    """Whether ``value`` is one a search over ``dist`` (an Optuna distribution the command line made) could have asked."""
    import optuna.distributions as d

    if isinstance(dist, d.CategoricalDistribution):
        return any(type(value) is type(c) and value == c for c in dist.choices)
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if isinstance(dist, d.IntDistribution) and not isinstance(value, int):
        return False
    return number and dist.low <= value <= dist.high


def resumed_trials(study, space: dict[str, Any], where: Path) -> list[tuple[int, dict[str, Any]]]:
    """(number, values) of each trial a killed run left running, to launch again. The study is a file of the sweep
    folder, so its values are data: each trial must hold exactly the search space's keys (the command line's and the
    config's, ``space``), each value one the space could have asked; else ``ConfigError``, one line naming the file."""
    from optuna.trial import TrialState

    out = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        params = dict(t.params)
        if set(params) != set(space):
            problem = f"the keys {', '.join(sorted(params)) or '(none)'}, not the search space's ({', '.join(sorted(space))})"
        else:
            problem = next((f"{k}={v!r}, which the search space ({k}: {space[k]}) cannot ask" for k, v in params.items()
                            if not _in_space(v, space[k])), None)
        if problem:
            raise ConfigError(f"{where}: its trial {t.number}, left running, holds {problem}; a study's values are data and only "
                              "the command line sets what is searched: delete that file (or move it away) to search afresh, "
                              "or pick another folder with `hydra.sweep.dir=...`")
        out.append((t.number, params))
    return out


def check_study(folder: Path, space: dict[str, str]) -> None:
    """The trials a rerun would launch again from ``folder``'s study (``resumed_trials``), before Hydra starts; a file
    there that is not an Optuna study is one line."""
    path = Path(folder) / STUDY_FILE
    if not path.is_file():
        return
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=STUDY_NAME, storage=f"sqlite:///{path.absolute()}")
    except KeyError:  # no study of that name in it: the search makes one
        return
    except Exception as exc:
        raise ConfigError(f"{path} is not a study initnorm wrote ({type(exc).__name__}); delete it (or move it away) to search "
                          "afresh, or pick another folder with `hydra.sweep.dir=...`") from None
    resumed_trials(study, distributions(space), path)


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
        check_counts(config.hydra.sweeper)
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


def check_counts(sweeper: DictConfig) -> None:
    """``hydra.sweeper.n_trials`` and ``n_jobs`` positive integers, ``seeds`` a list of at least one seed; one line each."""
    from initnorm import schema

    for key in ("n_trials", "n_jobs"):
        value = sweeper.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"hydra.sweeper.{key}={value!r} is invalid: a positive integer; fix it with `hydra.sweeper.{key}=4`")
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
                 params: dict[str, str] | None = None, direction: str = "minimize") -> None:
        self.seed, self.n_trials, self.n_jobs = int(seed), int(n_trials), int(n_jobs)
        self.seeds = [int(s) for s in (seeds or [1])]
        self.params = {str(k): str(v) for k, v in (params or {}).items()}
        self.direction = direction
        self.launcher = self.config = None
        for key, value in (("n_trials", self.n_trials), ("n_jobs", self.n_jobs)):
            if value < 1:
                raise ConfigError(f"hydra.sweeper.{key}={value} must be a positive integer; fix it with `hydra.sweeper.{key}=4`")

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context, task_function=task_function, config=config)

    def study(self, folder: Path):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)  # a sweep prints one line per job (initnorm/cli/console.py)
        for name in (STUDY_FILE, *(STUDY_FILE + end for end in SQLITE_SIDE_FILES)):  # SQLite writes through a link
            if what := planted(folder / name):
                raise ConfigError(f"{folder / name} is {what}, not a study initnorm wrote, and SQLite would write through it; delete "
                                  "it (or move it away), or pick another folder with `hydra.sweep.dir=...`")
        path = folder / STUDY_FILE
        try:
            return optuna.create_study(study_name=STUDY_NAME, storage=f"sqlite:///{path.absolute()}",
                                       direction=self.direction, load_if_exists=True)
        except Exception as exc:  # a text file, a damaged database: SQLAlchemy's 80-line traceback said only that
            raise ConfigError(f"{path} is not a study initnorm wrote ({type(exc).__name__}); delete it (or move it away) to "
                              "search afresh, or pick another folder with `hydra.sweep.dir=...`") from None

    def ask(self, study, space: dict[str, Any]):
        """The next trial, from a sampler seeded by the study's own state (its number of trials): a resumed search asks
        what the uninterrupted one asked. One sampler for the whole run drew on from wherever its seed was set, so a
        rerun (seeded at load) asked other values than the run it continued (and seeded as new, trial 4 repeated
        trial 0's lr)."""
        import optuna

        study.sampler = optuna.samplers.TPESampler(seed=self.seed + len(study.trials))
        return study.ask(space)

    def sweep(self, arguments: list[str]) -> Any:
        from initnorm.search_report import write_report

        folder = Path(str(self.config.hydra.sweep.dir))
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / "multirun.yaml", OmegaConf.to_yaml(self.config))  # a rename: never through a planted link
        fixed, space = fixed_overrides(arguments, self.params), distributions(space_of(arguments, self.params))
        metric = str(self.config.summary.metrics[0])  # what the experiment's summary and transfer report score
        study = self.study(folder)
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
                states = [job_state(r, metric) for r in rets[i * len(self.seeds):(i + 1) * len(self.seeds)]]
                self.tell(study, number, states)
        write_report(study, folder, fixed, self.seeds, metric)
        return returns

    @staticmethod
    def tell(study, number: int, states: list[tuple[float | None, str]]) -> None:
        """A trial's mean loss over its seeds. A diverged seed prunes the trial: TPE ranks a pruned trial
        below every completed one (its learning rate is too high), where a failed one (a crash) it ignores."""
        from optuna.trial import TrialState

        losses = [loss for loss, _ in states if loss is not None]
        why = [w for _, w in states if w]
        if "failed" in why:
            study.tell(number, state=TrialState.FAIL)
        elif why:
            study.tell(number, state=TrialState.PRUNED)
        else:
            study.tell(number, sum(losses) / len(losses))
