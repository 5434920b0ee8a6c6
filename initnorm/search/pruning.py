"""``hydra.sweeper.pruner=median|successive_halving``: a search's trial stopped at a validation point.

A worker (``worker.py``) trains its trial's jobs in its own process, one after another; it adds
``Prune`` to each job's callbacks (``+callbacks.search_pruner._target_``: the callbacks are how a run is watched,
so a folder's resume ignores them) and sets ``CURRENT`` to the trial. At each validation point the callback
reports the job's validation loss to the trial and, where Optuna's pruner says so, stops the fit; the worker then
tells the trial ``PRUNED``, its remaining seeds untrained. The callback names the stop (``stop_status``), so the
job's record says ``pruned``, with where and why, instead of ``stopped`` (``training/fit.py``).

The trial's seeds train one after another, so seed k's validation at step s is reported at step
``k * steps + s``: every trial of the search has the same seeds in the same order, so the pruner compares each
trial with the others at the same seed and step.
"""

from __future__ import annotations

import math
from typing import Any

import lightning as L

TARGET = "initnorm.search.pruning.Prune"
# The worker's trial in progress: {"trial": optuna.Trial, "index": the job's place among its seeds, "pruner": its name}.
CURRENT: dict[str, Any] = {}


def make(name: str, startup_trials: int):
    """Optuna's pruner of that name. The median pruner waits for ``startup_trials`` finished trials (a median of one or two
    is noise); successive halving (Li et al. 2020, ASHA) keeps the best third at each rung, from the first validation."""
    import optuna

    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=startup_trials, n_warmup_steps=0)
    if name == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    return optuna.pruners.NopPruner()


class Prune(L.Callback):
    """The job's validation loss to the worker's trial at each validation point; the fit stopped where it is pruned."""

    stop_status: tuple[str, str] | None = None  # ("pruned", why) once it stopped the fit: what the job's record says

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        trial, history = CURRENT.get("trial"), getattr(pl_module, "history", None)
        if trainer.sanity_checking or trial is None or not history or not history[0].val:
            return
        step, loss = history[0].val[-1]
        if step == 0 or not math.isfinite(loss):  # the loss at init says nothing of the trial's values; a diverged one ends itself
            return
        trial.report(float(loss), CURRENT.get("index", 0) * int(trainer.max_steps) + int(step))
        if trial.should_prune():
            why = f"the search's {CURRENT.get('pruner')} pruner stopped it at step {step} (validation loss {loss:.4f})"
            self.stop_status = ("pruned", why)
            trainer.should_stop = True
