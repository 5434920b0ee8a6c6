"""The coordinate check's measurement, apart from Lightning: the probe points it watches, the fixed inputs it
runs at every step, the RMS change of each point from step 0, and its flat records and CSV. The callback
(``callback.py``: a job or every member of a stacked group under Lightning) and ``initnorm.coord_check``
(``check.py``: a plain loop over a model of one's own) measure with these, so their numbers are one.

Records are flat, ``(step, layer, role, "coord_delta_rms", value)``; ``to_csv`` writes one job's with its
width, depth, parameterisation and seed (``coord.csv``), which ``analysis.py`` reads back.
"""

from __future__ import annotations

import csv
import io

import torch

from initnorm.callbacks.probes import Points, Record, probe_points
from initnorm.errors import ConfigError
from initnorm.instruments.coord.analysis import FIELDS, STAT


def clone(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()


def member_rms(t: torch.Tensor) -> torch.Tensor:
    """The RMS of each member's slice of ``t`` [E, ...] ([E])."""
    return t.detach().float().pow(2).reshape(t.shape[0], -1).mean(1).sqrt()


def member_records(step: int, names: list[str], now: dict[str, torch.Tensor], reference: dict[str, torch.Tensor],
                   last_stream: str | None, active: list[bool]) -> list[list[Record]]:
    """Each member's records after optimiser step ``step``: the RMS change of every watched point from step 0
    (``now`` and ``reference``: ``{"layer/role": [E, ...]}``), none for a member that is frozen."""
    values = torch.stack([member_rms(now[n] - reference[n]) for n in names], 1).tolist()  # [E][points]: one transfer
    return [delta_records(step, names, member, last_stream) if alive else [] for member, alive in zip(values, active)]


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
