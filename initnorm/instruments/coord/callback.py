"""The coordinate check as a callback (deck §7d; Yang et al. 2022, "Tensor Programs V", §D.1).

Before the first step the callback runs a fixed set of windows (the first ``windows`` of the
validation set) through the model and keeps every probe point's activation (``probe_points``,
see ``instruments/stats/callback.py``); after each of the first ``steps`` optimiser steps it runs the same
windows again and records the RMS of the change, ``rms(a_t - a_0)``, per point. Under µP these
changes are the same at every width; under SP they grow with it.

Records are flat, ``(step, layer, role, "coord_delta_rms", value)``, written to TensorBoard and,
at the end of the fit, to ``coord.csv`` in the job folder with the run's width, depth and
parameterisation, so ``initnorm.coord_check`` can put many jobs side by side. Every member of a
stacked group is measured at once, on its own windows, through the module's member view
(``callbacks/members.py``), and gets its own records and ``coord.csv``.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import lightning as L
import torch

from initnorm.callbacks.members import members_of
from initnorm.callbacks.probes import Points, Record, probe_points, write_members
from initnorm.errors import ConfigError, bad_value
from initnorm.instruments.coord.analysis import COORD_FILE, FIELDS
from initnorm.results import write_atomic

STAT = "coord_delta_rms"


def _clone(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()


def member_rms(t: torch.Tensor) -> torch.Tensor:
    """The RMS of each member's slice of ``t`` [E, ...] ([E])."""
    return t.detach().float().pow(2).reshape(t.shape[0], -1).mean(1).sqrt()


class CoordCheck(L.Callback):
    """RMS change of every probe point from step 0, after each of the first ``steps`` optimiser steps."""

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
        self.reference = view.forward(self.inputs, self.points, _clone)
        self.records, self._last = [[] for _ in range(view.E)], 0
        self._sinks = view.writers()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step  # optimiser steps taken so far
        if step == self._last or step > self.steps:
            return
        self._last = step
        view = self._view
        now = view.forward(self.inputs, self.points, _clone)
        names = list(self.points)
        values = torch.stack([member_rms(now[n] - self.reference[n]) for n in names], 1).tolist()  # [E][points]
        active = view.active()
        records = [delta_records(step, names, member, self.last_stream) if alive else [] for member, alive in zip(values, active)]
        for mine, recs in zip(self.records, records):
            mine += recs
        write_members(records, self._sinks, active)

    def on_fit_end(self, trainer, pl_module):
        view = self._view
        for folder, records, meta in zip(view.folders, self.records, self._metas(view)):
            write_atomic(Path(folder) / COORD_FILE, to_csv(records, meta))


def resumed_error(step: int, folder) -> ConfigError:
    return ConfigError(f"the coordinate check measures from step 0, but this job resumes at step {step}; delete {folder} and run it again")


def watched_points(model) -> tuple[Points, str | None]:
    """The probe points the check watches, and the last residual stream's name (None: no stream)."""
    points = probe_points(model)
    if not points:
        raise ConfigError(f"{type(model).__name__} has no probe_points(), so the coordinate check has nothing to watch; add the method "
                          "(see initnorm/instruments/stats/callback.py)")
    # a block's input is the previous block's output: keep only the first (the embedded input)
    first_in = next((k for k in points if k.endswith("/stream_in")), None)
    watched = {k: v for k, v in points.items() if not k.endswith("/stream_in") or k == first_in}
    last = [k for k in points if k.endswith("/stream_out")][-1:]
    return watched, (last[0] if last else None)


def fixed_windows(datamodule, n: int) -> torch.Tensor:
    """The first ``n`` inputs of the data module's validation set: what the check runs at every step (a
    LightningDataModule may return one loader or a list of them, as the classification tasks do)."""
    if datamodule is None:
        raise ConfigError("the coordinate check reads its fixed windows from the data module's validation set; train with a "
                          "LightningDataModule")
    loaders = datamodule.val_dataloader()
    if isinstance(loaders, (list, tuple)):  # several evaluation sets (the MLP families' data): the one named "val"
        names = list(getattr(datamodule, "eval_names", ()))
        loaders = loaders[names.index("val") if "val" in names else 0]
    return next(iter(loaders))[0][:n]


def delta_records(step: int, names: list[str], values: list[float], last_stream: str | None) -> list[Record]:
    """One record per watched point, and the last residual stream once more under one name at every depth."""
    records = [Record(step, *n.split("/", 1), STAT, v) for n, v in zip(names, values)]
    if last_stream:
        records.append(Record(step, "stream", "last", STAT, values[names.index(last_stream)]))
    return records


def to_csv(records: list[Record], meta: dict) -> str:
    """Long form: one row per (step, layer, role), with the run's width, depth, param and seed."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(FIELDS)
    for r in records:
        w.writerow([meta["width"], meta["depth"], meta["param"], meta["seed"], r.step, r.layer, r.role, repr(r.value)])
    return out.getvalue()
