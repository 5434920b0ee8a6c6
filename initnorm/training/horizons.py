"""Members of one group that end at different steps: each retires at its own last step, its record as if it ran alone.

Jobs that differ only in ``steps`` (and what follows from it: the schedule's decay, the validation interval) share one
stacked group (``training/group.py``). The fit runs to the longest member's last step; a member whose ``steps`` come
first retires at the start of the step after its last one, before any other callback sees that step:

- its last step's validation is done (Lightning's loop, or the engine's own at a point off Lightning's interval:
  ``Engine.on_train_batch_end``), so its curve and final loss are its job alone's;
- it is frozen from then on (``Engine.retire``): no forward, no update, no weight decay, no Adam moment, no step
  count, no instrument's record (a diverged member is frozen the same way);
- its record is written then (``record(trainer, e)``: ``metrics.json``, HPARAMS, its trackers finished, ``train.log``'s
  end line), so a stop signal after it finds the job finished, and a rerun skips it;
- no checkpoint is written for it again (``checkpoints.MemberCheckpoints``: a member's checkpoint is taken before a
  step of its own run): its folder keeps the last one its job alone writes.
"""

from __future__ import annotations

from collections.abc import Callable

import lightning as L


class Retire(L.Callback):
    """At the start of step ``s``, every member whose ``steps`` is ``s`` retires and ``record(trainer, e)`` writes its
    record. First among the fit's callbacks, so that the others see it retired at that step."""

    def __init__(self, engine, record: Callable[[L.Trainer, int], None]):
        self.engine, self.record = engine, record

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        for e, h in enumerate(self.engine.horizons):
            if h == step and not self.engine.retired[e]:
                self.engine.retire(e)
                self.record(trainer, e)  # a member that diverged before is finished here too, its record the diverged one
