"""When a run is validated, for a job alone and a stacked group alike: every ``interval`` steps,
at step 0 of a fresh run and at the last step.

Lightning validates only after training steps, so step 0 and a last step off the interval are
validated here, through the module's own validation hooks: one code path makes every point of
every curve, for E >= 1 members (``training/engine.py``). Members of one group may end at different
steps, each with its own interval (``training/horizons.py``): Lightning's loop keeps the longest member's
interval, the engine validates at the other members' own points, and each member records only its own
(``scheduled``), so its curve is the one its job alone draws.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # annotations only: horizon forks read this module in a sweep's own process, which never imports Lightning
    import lightning as L


def validation_interval(steps: int, configured: int | None) -> int:
    """Steps between validations: ``trainer.val_check_interval`` when set, else 250 or a tenth of
    the run when that is shorter, so a 200-step run has a curve too (step 0 and the last step are always validated)."""
    if configured:
        return int(configured)
    return max(1, min(250, math.ceil(steps / 10)))


@torch.no_grad()
def validate_now(module: L.LightningModule, device: torch.device) -> None:
    """One validation of every evaluation set at the module's current step, outside Lightning's
    loop (which validates only after steps). The RNG state is restored afterwards, so the run's
    numbers are those of a run without it."""
    loaders = module.trainer.datamodule.val_dataloader()
    was_training = module.training
    module.eval()
    with torch.random.fork_rng(devices=[]):
        module.on_validation_epoch_start()
        for k, loader in enumerate(loaders if isinstance(loaders, (list, tuple)) else [loaders]):
            for batch in loader:
                module.validation_step([t.to(device) for t in batch], 0, k)
        module.on_validation_epoch_end()
    module.train(was_training)


def at_start(module: L.LightningModule, histories: Sequence[list]) -> bool:
    """Whether step 0 is still to be validated: a fresh run (not resumed) with no validation yet."""
    return module.global_step == 0 and not any(histories) and module.trainer.datamodule is not None


def scheduled(step: int, steps: int, interval: int) -> bool:
    """Whether a run of ``steps`` validated every ``interval`` steps has a point at ``step``: step 0, each multiple of the
    interval within the run, and its last step."""
    return step == 0 or step == steps or (0 < step < steps and step % interval == 0)


def missing_at(step: int, histories: Sequence[list], alive: Sequence[bool]) -> bool:
    """Whether a member still alive has no validation at ``step`` (the loop validates every n steps)."""
    return any(not h or h[-1][0] != step for h, a in zip(histories, alive) if a)
