"""The coordinate check as a callback (deck §7d; Yang et al. 2022, "Tensor Programs V", §D.1).

Before the first step the callback runs a fixed set of windows (the first ``windows`` of the
validation set) through the model and keeps every probe point's activation (``probe_points``,
see ``instruments/stats/callback.py``); after each of the first ``steps`` optimiser steps it runs the same
windows again and records the RMS change, ``rms(a_t - a_0)``, per point (``record.py``, which
``initnorm.coord_check`` measures with too). Under µP these changes are the same at every width; under SP
they grow with it.

Records are flat, ``(step, layer, role, "coord_delta_rms", value)``, written to TensorBoard and,
at the end of the fit, to ``coord.csv`` in the job folder with the run's width, depth and
parameterisation, so ``initnorm.coord_check`` can put many jobs side by side. Every member of a
stacked group is measured at once, on its own windows, through the module's member view
(``callbacks/members.py``), and gets its own records and ``coord.csv``. Any LightningModule with a
``.model`` (or that is the model) gets it: ``from initnorm.callbacks import CoordCheck``.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch

from initnorm.callbacks.members import members_of
from initnorm.callbacks.probes import Record, flush, write_members
from initnorm.errors import bad_value
from initnorm.instruments.coord.analysis import COORD_FILE
from initnorm.instruments.coord.record import clone, fixed_windows, member_records, resumed_error, to_csv, watched_points
from initnorm.results import write_atomic


class CoordCheck(L.Callback):
    """RMS change of every probe point from step 0, after each of the first ``steps`` optimiser steps.

    steps: the optimiser steps recorded (1 to ``steps``); windows: how many of the data module's first validation
    inputs are run at every step (the same ones each time). width, depth, param, seed: written beside each row of
    ``coord.csv`` (in the trainer's ``default_root_dir``), so ``initnorm-coord-check --from`` can set runs side by side;
    initnorm's own jobs take them from their config. Records: ``coord_delta_rms/<layer>/<role>``."""

    def __init__(self, steps: int = 10, windows: int = 16, width: int | None = None, depth: int | None = None,
                 param: str | None = None, seed: int | None = None):
        if not isinstance(steps, int) or steps <= 0:
            raise bad_value("callbacks.coord.steps", steps, "a positive integer", "callbacks.coord.steps=10")
        if not isinstance(windows, int) or windows <= 0:
            raise bad_value("callbacks.coord.windows", windows, "a positive integer", "callbacks.coord.windows=16")
        self.steps, self.n_windows = steps, windows
        self.meta = {"width": width, "depth": depth, "param": param, "seed": seed}
        self.records: list[list[Record]] = []  # per member
        self._last = 0
        self._sinks: list[list] = []

    def _metas(self, view) -> list[dict]:
        """Each member's (width, depth, param, seed) for coord.csv: its own config's ``callbacks.coord``, else this callback's."""
        out = []
        for c in view.configs:
            node = ((c or {}).get("callbacks") or {}).get("coord") if c is not None else None
            out.append({k: node.get(k) for k in self.meta} if node else dict(self.meta))
        return out

    def on_train_start(self, trainer, pl_module):
        if trainer.global_step != 0:  # a resumed job: its step 0 is gone
            raise resumed_error(trainer.global_step, trainer.default_root_dir)
        self._view = view = members_of(pl_module, trainer)
        self.points, self.last_stream = watched_points(view.model)
        self.inputs = torch.stack([fixed_windows(d, self.n_windows) for d in view.datamodules()]).to(pl_module.device)
        self.reference = view.forward(self.inputs, self.points, clone)
        self.records, self._last = [[] for _ in range(view.E)], 0
        self._sinks = view.writers()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step  # optimiser steps taken so far
        if step == self._last or step > self.steps:
            return
        self._last = step
        view = self._view
        active = view.active()
        records = member_records(step, list(self.points), view.forward(self.inputs, self.points, clone), self.reference,
                                 self.last_stream, active)
        for mine, recs in zip(self.records, records):
            mine += recs
        write_members(records, self._sinks, active)

    def on_fit_end(self, trainer, pl_module):
        flush(self._sinks)
        view = self._view
        for folder, records, meta in zip(view.folders, self.records, self._metas(view)):
            write_atomic(Path(folder) / COORD_FILE, to_csv(records, meta))
