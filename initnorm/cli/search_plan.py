"""What a search's command line plans, read with Hydra: its space (``hydra.sweeper.params`` in Hydra's sweep syntax, as
Optuna's distributions for ``search/study.py``), its trials x seeds, and what trains it with ``hydra.sweeper.workers``."""

from __future__ import annotations

from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep

from initnorm.cli import launchers
from initnorm.errors import ConfigError


def planned(config) -> tuple[int, int] | None:
    """(trials, seeds) of a search's command, None for any other sweep: its jobs are trials x seeds, asked as it goes,
    so the progress lines count against that (a resumed search's finished jobs among them)."""
    sweeper = config.hydra.get("sweeper") or {}
    if launchers.kind(sweeper) != "search":
        return None
    return int(sweeper.get("n_trials", 24)), len(sweeper.get("seeds") or [1])


def workers_line(config) -> str | None:
    """``2 workers, local processes, each asking its next trial as its last one ends``: what trains a search with
    ``hydra.sweeper.workers`` set (its header line); None for any other sweep."""
    workers = (config.hydra.get("sweeper") or {}).get("workers") if planned(config) else None
    if not isinstance(workers, int):
        return None
    where = "SLURM tasks" if launchers.kind(config.hydra.launcher) == "slurm" else "local processes"
    return f"{workers} worker{'s' * (workers != 1)}, {where}, each asking its next trial as its last one ends"


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
