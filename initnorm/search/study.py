"""A search's study: one Optuna journal file in the sweep folder, and what every process of the search does with it.

The study lives in ``<sweep folder>/search.journal`` (Optuna's ``JournalStorage`` over a ``JournalFileBackend``):
a file of appended lines that several processes, on several machines, may share through a network file system,
where SQLite's locks are not safe. A sweep folder from an earlier initnorm holds its study in ``search.db``
(SQLite): it is read once into the journal (``optuna.copy_study``, every trial in its state) and left as it was.

The asking and telling live here too, so that the sweep's own process (``cli/search.py``: the default, batches
through the launcher) and each worker (``worker.py``: ``hydra.sweeper.workers=N``) do the same:
``ask`` seeds TPE from the study's state, ``tell`` turns a trial's jobs into its objective, ``retry`` asks a
trial again whose worker died (Optuna's ``RetryFailedTrialCallback``). The search space arrives as Optuna's
distributions (the command line's sweep syntax read by ``cli/search_plan.py``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from initnorm.errors import ConfigError
from initnorm.results import read_record
from initnorm.safe_files import planted

STUDY_FILE = "search.journal"
LEGACY_FILE = "search.db"  # an earlier initnorm's SQLite study, read once into STUDY_FILE
STUDY_NAME = "search"
# The journal's lock (JournalFileSymlinkLock: a link made and removed beside it, atomic on a network file system too).
LOCK_SUFFIX = ".lock"
ASK_LOCK = "search.asking"  # workers count the trials and ask the next under it (a link search.asking.lock while held)
OTHER_WORKER = 7919  # a prime: worker k's sampler seed is apart from every other worker's for any realistic study


def _not_a_study(path: Path, exc: BaseException | str) -> ConfigError:
    what = exc if isinstance(exc, str) else type(exc).__name__
    return ConfigError(f"{path} is not a study initnorm wrote ({what}); delete it (or move it away) to search afresh, "
                       "or pick another folder with `hydra.sweep.dir=...`")


def storage(folder: Path):
    """The journal storage of ``folder``'s study (made on first use), an earlier ``search.db`` read into it first; a
    planted link or a file that is not a journal is one line naming it."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # a sweep prints one line per job (initnorm/cli/console.py)
    path = Path(folder).absolute() / STUDY_FILE
    legacy = path.with_name(LEGACY_FILE)
    for name in (path, Path(f"{path}{LOCK_SUFFIX}"), legacy):  # Optuna appends to the journal, links its lock, reads search.db
        if what := planted(name):
            raise ConfigError(f"{name} is {what}, not a study initnorm wrote, and Optuna would go through it; delete it (or "
                              "move it away), or pick another folder with `hydra.sweep.dir=...`")
    fresh = not path.exists()
    try:
        journal = JournalStorage(JournalFileBackend(str(path)))
    except Exception as exc:  # a text file, a damaged journal: Optuna's traceback says only that a line is not JSON
        raise _not_a_study(path, exc) from None
    if fresh and legacy.is_file():
        try:
            optuna.copy_study(from_study_name=STUDY_NAME, from_storage=f"sqlite:///{legacy}", to_storage=journal)
        except KeyError:  # no study of that name in it: the search makes one
            pass
        except Exception as exc:
            path.unlink(missing_ok=True)
            raise _not_a_study(legacy, exc) from None
        print(f"read the study of {legacy} into {path} (SQLite is not safe on a network file system; {LEGACY_FILE} is "
              "no longer written)")
    return journal


def open_study(folder: Path, direction: str = "minimize", pruner=None):
    """``folder``'s study, made where there is none; ``pruner``: the worker's (a pruner is no part of the stored study)."""
    import optuna

    try:
        return optuna.create_study(study_name=STUDY_NAME, storage=storage(folder), direction=direction, load_if_exists=True,
                                   pruner=pruner)
    except ConfigError:
        raise
    except Exception as exc:
        raise _not_a_study(Path(folder) / STUDY_FILE, exc) from None


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


def existing(folder: Path):
    """``folder``'s study as it stands (the journal, else an earlier ``search.db``), read without writing; None where there
    is none. What the preflight checks before the search opens it; a file that is not a study is one line."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    path = Path(folder).absolute() / STUDY_FILE
    legacy = path.with_name(LEGACY_FILE)
    if path.is_file() and not planted(path):
        where, make = path, lambda: JournalStorage(JournalFileBackend(str(path)))
    elif legacy.is_file() and not planted(legacy):
        where, make = legacy, lambda: f"sqlite:///{legacy}"
    else:
        return None
    try:
        return optuna.load_study(study_name=STUDY_NAME, storage=make())
    except KeyError:  # no study of that name in it: the search makes one
        return None
    except Exception as exc:
        raise _not_a_study(where, exc) from None


def ask(study, space: dict[str, Any], seed: int, worker: int = 0, workers: int = 1):
    """The next trial, from a sampler seeded by the study's own state (its number of trials): a resumed search asks
    what the uninterrupted one asked. One sampler for the whole run drew on from wherever its seed was set, so a
    rerun (seeded at load) asked other values than the run it continued (and seeded as new, trial 4 repeated
    trial 0's lr). Several workers ask while others' trials run: each its own seed (two asking at one count
    would ask one value), and TPE's constant liar counts a running trial as a poor one, so that the next worker
    asks elsewhere; which worker asks at which count depends on timing, so only ``workers=1`` asks the same
    trials run after run."""
    import optuna

    study.sampler = optuna.samplers.TPESampler(seed=seed + len(study.trials) + OTHER_WORKER * worker,
                                               constant_liar=workers > 1)
    return study.ask(space)


def job_state(working_dir: str | None, metric: str) -> tuple[float | None, str]:
    """(loss, why not) of one launched job (its folder): its ``metric``, or None with ``pruned``, ``diverged`` or
    ``failed`` (a crash, or a record without the metric: TPE ignores a failed trial, where it ranks a pruned one below
    every other)."""
    record = read_record(Path(working_dir) / "metrics.json") if working_dir else None
    if record is not None and record.get("status") == "pruned":
        return None, "pruned"
    if record is None or record.get("status") != "finished" or metric not in record:
        return None, "failed"
    loss = None if record.get("diverged") else record.get(metric)
    return (float(loss), "") if isinstance(loss, float) and math.isfinite(loss) else (None, "diverged")


def tell(study, number: int, states: list[tuple[float | None, str]]) -> None:
    """A trial's mean loss over its seeds. A diverged seed prunes the trial: TPE ranks a pruned trial
    below every completed one (its learning rate is too high), where a failed one (a crash) it ignores.
    A trial the pruner stopped is pruned too, with the last validation loss it reported."""
    from optuna.trial import TrialState

    losses = [loss for loss, _ in states if loss is not None]
    why = [w for _, w in states if w]
    if "failed" in why:
        study.tell(number, state=TrialState.FAIL)
    elif why:
        study.tell(number, state=TrialState.PRUNED)
    else:
        study.tell(number, sum(losses) / len(losses))


def retry(study, number: int, retries: int) -> bool:
    """Trial ``number``, whose worker died, recorded failed and asked again with its values (a WAITING trial the next ask
    takes), at most ``retries`` times in all; False where it has been retried that often."""
    from optuna.storages import RetryFailedTrialCallback
    from optuna.trial import TrialState

    study.tell(number, state=TrialState.FAIL, skip_if_finished=True)
    frozen = next(t for t in study.get_trials(deepcopy=False) if t.number == number)
    before = len(study.trials)
    RetryFailedTrialCallback(max_retry=retries)(study, frozen)
    return len(study.trials) > before


def replaced(trials) -> set[int]:
    """The numbers of the trials asked again (each a failed trial whose retry is in the study): not counted in ``n_trials``."""
    return {n for t in trials for n in (t.system_attrs.get("retry_history") or [])}  # RetryFailedTrialCallback's record


def counted(trials) -> int:
    """Trials that count against ``n_trials``: every one but those asked again."""
    gone = replaced(trials)
    return sum(t.number not in gone for t in trials)
