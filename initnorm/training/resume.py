"""Nothing finished is lost: atomic checkpoints, resume after a kill, skip a finished job.

A job folder is the unit of work. What it holds says what to do when the same command runs
there again (``hydra.run.dir=...`` for one run, ``hydra.sweep.dir=...`` for a sweep):

- ``metrics.json`` with ``status: finished`` (diverged runs included): skip, return the result;
- ``checkpoints/last.ckpt``: resume from it, so the final numbers are bit for bit those of an
  uninterrupted run on the CPU;
- nothing, or ``status: failed``: train from the start.

Either file carries the config that made it; a folder of a different config is refused with one
line rather than mixed with this one. Only keys both configs have are compared, so a key that a
newer version of initnorm adds (with a default that keeps the old behaviour) does not orphan old
folders.

The checkpoint is taken at the start of step ``s`` (``s`` a multiple of
``checkpoint.every_n_steps``): the validation of step ``s`` is done, no batch of step ``s`` is
used yet, and the RNG state saved there is the one that step starts from. On resume the data
module's ``start_step`` is set to ``s`` (its batch ``s`` is a function of (seed, s)), Lightning
restores model, optimiser, schedule and loop counters, this callback restores
``val_history``, ``diverged_step`` and the RNG states.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import random
import secrets
import traceback
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch

from initnorm.errors import ConfigError
from initnorm.results import METRICS_FILE, file_kind, read_record, write_metrics

log = logging.getLogger(__name__)
CKPT_DIR = "checkpoints"
CKPT_FILE = "last.ckpt"
VEC_CKPT = "vectorized.ckpt"  # a member of a stacked group (training/group.py)
STATE_KEY = "initnorm"
# Keys that change how a run is watched or where it runs, not the experiment: a rerun may change them.
IGNORED = (
    "callbacks", "logger", "checkpoint", "summary", "threads", "log_every",
    "trainer.enable_progress_bar", "trainer.enable_model_summary", "trainer.log_every_n_steps", "trainer.accelerator", "trainer.devices",
)


def comparable(c: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved config without the ``IGNORED`` keys, as JSON values: what must match for a folder to be reused."""
    out = json.loads(json.dumps(c, default=str))
    for dotted in IGNORED:
        node, *rest = dotted.split(".")
        if not rest:
            out.pop(node, None)
        elif isinstance(out.get(node), dict):
            out[node].pop(rest[0], None)
    return out


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out |= _flat(v, f"{prefix}.{k}" if prefix else str(k))
    return out


def differences(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    """``["lr: 0.01 -> 0.03", ...]``: the keys both configs have whose values differ (none if ``old`` is unknown)."""
    if old is None:
        return []
    a, b = _flat(comparable(old)), _flat(comparable(new))
    return [f"{k}: {a[k]} -> {b[k]}" for k in a if k in b and a[k] != b[k]]


def _refuse(folder: Path, what: str, diff: list[str]) -> ConfigError:
    return ConfigError(
        f"{folder} holds {what} of a different config ({', '.join(diff[:3])}); rerun the command that made it, or pick a new "
        f"folder with `hydra.run.dir=...` (`hydra.sweep.dir=...` for -m), or delete {folder}"
    )


@dataclass(frozen=True)
class Prior:
    """What a job folder holds already: a finished result, or a checkpoint to resume from, or neither."""

    finished: dict[str, Any] | None = None
    checkpoint: Path | None = None
    step: int = 0
    vectorized: Path | None = None  # a stacked group's checkpoint of this job (the vectorised launcher resumes it)


def read_json(path: Path) -> dict[str, Any] | None:
    """A job's ``metrics.json`` as a dict; None for none, or (with one warning line) a foreign or damaged one."""
    return read_record(path) if Path(path).exists() else None


# What a rerun reads from a finished record; one written by an older version may lack some.
FINISHED_KEYS = ("final_val_loss", "diverged", "steps")


def inspect_folder(folder: Path | str, c: Mapping[str, Any]) -> Prior:
    """What to do in ``folder`` for the resolved config ``c``; a different config's work, or a
    checkpoint that does not load as tensors and plain values, raises ``ConfigError``."""
    folder = Path(folder)
    record = folder / METRICS_FILE
    if record.exists() and not record.is_file():  # a FIFO would hang the job's read, a folder its write
        raise ConfigError(f"{record} is {file_kind(record.stat().st_mode)}, not a job's record; delete it (or move it away) to train "
                          f"{folder} again")
    done = read_json(record)
    if done is not None and done.get("status") == "finished":
        if diff := differences(done.get("config") if isinstance(done.get("config"), dict) else None, c):
            raise _refuse(folder, "a finished run", diff)
        if missing := [k for k in FINISHED_KEYS if k not in done]:
            log.warning("%s is a finished record without %s (an older initnorm?): kept as that job's result; "
                        "delete it to train the job again", folder / METRICS_FILE, ", ".join(missing))
        return Prior(finished=done)
    # Two formats, one job: a job alone's (Lightning's, last.ckpt) and a group member's (vectorized.ckpt).
    # Either resumes under any launcher; where both are there (a job that moved between the two), the later.
    ckpt, vec = folder / CKPT_DIR / CKPT_FILE, vec_checkpoint(folder)
    job = member = None
    if ckpt.is_file():
        state = load_checkpoint(ckpt)
        mine = state.get(STATE_KEY) if isinstance(state.get(STATE_KEY), dict) else {}
        if diff := differences(mine.get("config") if isinstance(mine.get("config"), dict) else None, c):
            raise _refuse(folder, f"a checkpoint (step {state.get('global_step')})", diff)
        step = state.get("global_step", 0)
        job = Prior(checkpoint=ckpt, step=step if isinstance(step, int) else 0)
    if vec.is_file():
        member = Prior(vectorized=vec, step=checkpoint_step(folder, c))
    if job is not None and member is not None:
        return member if member.step > job.step else job
    return job or member or Prior()


def load_checkpoint(ckpt: Path) -> dict[str, Any]:
    """A checkpoint's content, read with ``weights_only=True``: tensors and plain values only, so a
    file planted in a shared folder cannot run code when it is read. Anything else is refused in one line."""
    refuse = f"delete it (or move it away) to train {ckpt.parent.parent} from the start"
    try:
        state = torch.load(ckpt, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise ConfigError(f"{ckpt} is not a checkpoint initnorm wrote: it holds more than tensors and plain values, so it is not "
                          f"loaded (loading it could run code); {refuse}") from None
    except Exception as exc:  # written atomically, so only a foreign, damaged or truncated file
        reason = error_line(exc).split(". ")[0]  # torch's zip reader adds three sentences of advice
        raise ConfigError(f"{ckpt} cannot be read ({reason}); {refuse}") from None
    if not isinstance(state, dict):
        raise ConfigError(f"{ckpt} is not a checkpoint initnorm wrote (it holds a {type(state).__name__}); {refuse}")
    return state


def vec_checkpoint(folder: Path | str) -> Path:
    return Path(folder) / CKPT_DIR / VEC_CKPT


# What a member's checkpoint holds (``MemberCheckpoints.save``); a file without them was not written by initnorm.
VEC_KEYS = ("vectorized", "global_step", "params", "optim", "train_losses", "evals", "initnorm")


def read_vec_checkpoint(path: Path) -> dict[str, Any]:
    """A stacked group member's checkpoint, read as tensors and plain values only (``load_checkpoint``:
    a planted pickle cannot run code); one that lacks what ``MemberCheckpoints.save`` writes is refused in one line."""
    state = load_checkpoint(path)
    missing = [k for k in VEC_KEYS if k not in state]
    if (missing or not isinstance(state["initnorm"], dict) or type(state["global_step"]) is not int
            or not isinstance(state["params"], torch.Tensor)):
        what = f"it lacks {', '.join(missing)}" if missing else "its fields have the wrong types"
        raise ConfigError(f"{path} is not a vectorised checkpoint initnorm wrote ({what}); delete it (or move it away) to train "
                          f"{path.parent.parent} from the start")
    return state


def resume_loop_at(trainer: L.Trainer, step: int) -> None:
    """Lightning's loop counters at ``step`` optimiser steps, for a module that restores its own state
    (a stacked group from its members' checkpoints): the step count (``global_step``, ``max_steps``)
    and the batch count (validation every n batches) go on from there, as from a Lightning checkpoint."""
    loop = trainer.fit_loop.epoch_loop
    total = loop.batch_progress.total
    total.ready = total.started = total.processed = total.completed = step
    steps = loop.manual_optimization.optim_step_progress.total
    steps.ready = steps.completed = step


def checkpoint_step(folder: Path | str, c: Mapping[str, Any]) -> int:
    """The step a member's checkpoint in ``folder`` resumes from (0: none); a different config's checkpoint is refused."""
    path = vec_checkpoint(folder)
    if not path.is_file():
        return 0
    state = read_vec_checkpoint(path)
    if diff := differences(state["initnorm"].get("config") if isinstance(state["initnorm"].get("config"), dict) else None, c):
        raise _refuse(Path(folder), f"a vectorised checkpoint (step {state['global_step']})", diff)
    return state["global_step"]


EVENTS_GLOB = "events.out.tfevents.*"


def tensorboard_logger(save_dir: str, **kwargs):
    """The job's TensorBoard logger (``conf/logger/tensorboard.yaml``), consistent with what the job
    does in its folder: resumed from a checkpoint at step ``s``, TensorBoard drops the events the
    killed attempt wrote after ``s`` (``purge_step``), so no step is drawn twice; trained from step 0
    (no checkpoint: killed before the first, failed, or another config's unfinished attempt, whose
    ``steps`` may differ), the event files of the earlier attempt are removed, so the folder's
    curves are this run's alone. (A folder holding another config's checkpoint is refused before.)"""
    from lightning.pytorch.loggers import TensorBoardLogger

    folder = Path(save_dir)
    ckpt, vec = folder / CKPT_DIR / CKPT_FILE, vec_checkpoint(folder)
    if ckpt.is_file() or vec.is_file():  # a job's own checkpoint, or a group member's: the later one resumes
        steps = [load_checkpoint(ckpt).get("global_step") if ckpt.is_file() else 0,
                 read_vec_checkpoint(vec)["global_step"] if vec.is_file() else 0]
        step = max(s for s in steps if isinstance(s, int))
        if step > 0:
            kwargs.setdefault("purge_step", step)
    else:
        stale = sorted(p for p in folder.glob(EVENTS_GLOB) if p.is_file())
        for p in stale:
            p.unlink()
        if stale:
            log.info("removed %d TensorBoard event file(s) of an earlier attempt in %s: it left no checkpoint, this run starts from step 0",
                     len(stale), folder)
    return TensorBoardLogger(save_dir=save_dir, **kwargs)


def rng_states() -> dict[str, Any]:
    """torch, Python and numpy RNG states, as tensors and plain values (Lightning loads with ``weights_only``)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": (name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached)}


def set_rng_states(states: Mapping[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    random.setstate(tuple(states["python"][:1]) + (tuple(states["python"][1]),) + tuple(states["python"][2:]))
    name, keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))


class Checkpoint(L.Callback):
    """Every ``every_n_steps`` steps, write ``checkpoints/last.ckpt`` atomically (temporary file in
    the same folder, then ``os.replace``); on resume, restore what Lightning does not."""

    def __init__(self, folder: Path | str, every_n_steps: int, c: Mapping[str, Any]):
        self.path = Path(folder) / CKPT_DIR / CKPT_FILE
        self.every = int(every_n_steps)
        self.config = comparable(c)
        self._restore_rng: dict[str, Any] | None = None
        self._resumed_at = -1
        self._saving = False

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        if self._restore_rng is not None:
            set_rng_states(self._restore_rng)  # here, not at load: loading and iterator setup draw from the RNG
            self._restore_rng = None
        elif self.every > 0 and step > 0 and step % self.every == 0 and step != self._resumed_at:
            self.save(trainer)

    def save(self, trainer: L.Trainer) -> None:
        self._saving = True
        try:
            # A temporary name no other process uses: two runs in one folder by mistake must not write one file.
            # the full state: optimiser, schedule, loops
            save_atomically(self.path, lambda tmp: trainer.save_checkpoint(tmp, weights_only=False))
        finally:
            self._saving = False

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        checkpoint[STATE_KEY] = {
            "val_history": list(pl_module.val_history),
            "diverged_step": pl_module.diverged_step,
            "rng": rng_states(),
            "config": self.config,
        }
        progress = checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_loop.batch_progress")
        if self._saving and progress:
            # Lightning has counted this step's batch as ready before on_train_batch_start; count it
            # as not begun, so the resumed run takes it from the top and validates at the same steps.
            for part in ("total", "current"):
                progress[part]["ready"] = progress[part]["completed"]

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        mine = checkpoint.get(STATE_KEY, {})
        pl_module.val_history = [tuple(v) for v in mine.get("val_history", [])]
        pl_module.diverged_step = mine.get("diverged_step")
        self._restore_rng = mine.get("rng")
        self._resumed_at = int(checkpoint["global_step"])
        datamodule = trainer.datamodule
        if datamodule is not None and hasattr(datamodule, "start_step"):
            datamodule.start_step = self._resumed_at  # batch s is a function of (seed, s)
        # The stream restarts at the right batch by itself; Lightning cannot know that.
        warnings.filterwarnings("ignore", message=".*resuming from a checkpoint that ended before the epoch ended.*")


def save_atomically(path: Path, write) -> None:
    """``write(tmp)`` into a temporary file beside ``path`` (a name no other process uses), on disk, then renamed onto ``path``:
    a reader sees the old file or the new one, never half; a failed write leaves neither a half file nor the temporary one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())  # on disk before the rename: a crash leaves the old checkpoint or the new one
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class MemberCheckpoints(L.Callback):
    """A stacked group's checkpoints: every ``every_n_steps`` steps (and on a stop signal, through
    ``CheckpointOnSignal``), each member's ``checkpoints/vectorized.ckpt`` in its own folder, taken at
    the start of the step as ``Checkpoint`` takes a job's. ``module``: a ``StackedModule``."""

    def __init__(self, module, every_n_steps: int):
        self.module, self.every = module, int(every_n_steps)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        if self.every > 0 and step > 0 and step % self.every == 0 and step != self.module.resumed:
            self.save(step)

    def save(self, step: int) -> None:
        m = self.module
        for e, (folder, c) in enumerate(zip(m.folders, m.cs)):
            own = m.member_state(e)
            state = {"vectorized": True, "global_step": int(step), "params": own["params"], "optim": own["optim"],
                     "train_losses": own["train_losses"],
                     "evals": own["evals"], "initnorm": {"config": comparable(c), "val_history": own["val_history"],
                                                         "diverged_step": own["diverged_step"]}}
            save_atomically(vec_checkpoint(folder), lambda tmp, state=state: torch.save(state, tmp))


def error_line(exc: BaseException) -> str:
    """``ValueError: bad thing``: the exception's type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def record_failure(folder: Path | str, exc: BaseException, job: Mapping[str, Any]) -> str:
    """Write ``status: failed`` with the error line (and the traceback) into the job's metrics.json,
    unless the folder already holds a finished result. Returns the error line."""
    folder = Path(folder)
    line = error_line(exc)
    done = read_json(folder / METRICS_FILE)
    if done is None or done.get("status") != "finished":
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        write_metrics(folder, {**job, "status": "failed", "error": line, "traceback": tb})
    return line
