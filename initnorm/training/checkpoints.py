"""The checkpoints themselves: a job's (``Checkpoint``, Lightning's own file with what Lightning does not
keep) and a stacked group's (``MemberCheckpoints``, one file per member), both written atomically.

What a folder's checkpoint means for the next run there, and how it is read back, is ``resume.py``; this
module is the Lightning half (with ``CheckpointOnSignal``, the stop signal's checkpoint), kept apart so that
the commands that only inspect folders (the preflight, ``--help``, a config error) never import Lightning.
"""

from __future__ import annotations

import os
import random
import secrets
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch

from initnorm.config import comparable
from initnorm.safe_files import real_folder
from initnorm.training import signals
from initnorm.training.resume import CKPT_DIR, CKPT_FILE, STATE_KEY, vec_checkpoint


def resume_loop_at(trainer: L.Trainer, step: int) -> None:
    """Lightning's loop counters at ``step`` optimiser steps, for a module that restores its own state
    (a stacked group from its members' checkpoints): the step count (``global_step``, ``max_steps``)
    and the batch count (validation every n batches) go on from there, as from a Lightning checkpoint."""
    loop = trainer.fit_loop.epoch_loop
    total = loop.batch_progress.total
    total.ready = total.started = total.processed = total.completed = step
    steps = loop.manual_optimization.optim_step_progress.total
    steps.ready = steps.completed = step


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
    real_folder(path.parent)  # checkpoints/ itself: a link planted there would carry the file into its target
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


class CheckpointOnSignal(L.Callback):
    """At the first step boundary after a stop signal (``signals.requested``): write the job's checkpoint, then
    raise ``Interrupted``.

    ``save(trainer)`` writes the checkpoint of the job in ``folder`` (``Checkpoint.save``). Put this callback
    after the one that restores RNG states on resume, so a stop on the first resumed step saves the
    restored state. Lightning sets its own SIGTERM handler when ``fit`` starts; ``on_train_start`` puts the
    recording handler back.
    """

    def __init__(self, save, folder):
        self.save, self.folder = save, str(folder)

    def on_train_start(self, trainer, pl_module) -> None:
        signals.record_again()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if signals.requested() is None:
            return
        self.save(trainer)
        raise signals.stopped_at(self.folder, trainer.global_step)
