"""A member's checkpoint, one format whatever launcher trained it: written here, atomically, one file per member.

``<job>/checkpoints/initnorm.ckpt`` holds, at the start of step ``s``: the step, the job's config
(what a rerun must match), the member's module state by its own parameter names, its optimiser's
moments by the same names and its step count, its history (every loss and evaluation so far, the
divergence step), its random stream and the process's RNG states. A job checkpointed inside a group
resumes alone and the other way round, since a member is the same thing in either. (Lightning's own
``ModelCheckpoint``, if a user adds it, writes its own files; initnorm never reads them back.)

What a folder's checkpoint means for the next run there, and how it is read back, is ``resume.py``; the
callbacks live here, apart, so that the commands that only inspect folders never import Lightning.
"""

from __future__ import annotations

import os
import random
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch

from initnorm.config import comparable
from initnorm.safe_files import real_folder
from initnorm.training import forks, signals
from initnorm.training.resume import FORMAT, checkpoint_path


def resume_loop_at(trainer: L.Trainer, step: int) -> None:
    """Lightning's loop counters at ``step`` optimiser steps, for a module that restores its own state: the step
    count (``global_step``, ``max_steps``) and the batch count (validation every n batches) go on from there."""
    loop = trainer.fit_loop.epoch_loop
    total = loop.batch_progress.total
    total.ready = total.started = total.processed = total.completed = step
    steps = loop.manual_optimization.optim_step_progress.total
    steps.ready = steps.completed = step


def rng_states() -> dict[str, Any]:
    """torch, Python and numpy RNG states, as tensors and plain values (read back with ``weights_only``)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": (name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached)}


def set_rng_states(states: Mapping[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    random.setstate(tuple(states["python"][:1]) + (tuple(states["python"][1]),) + tuple(states["python"][2:]))
    name, keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))


def save_atomically(path: Path, write: Callable[[Path], None]) -> None:
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


def save_member(engine, e: int, step: int, path: Path | None = None) -> None:
    """Member ``e`` of ``engine`` (an ``Engine``) at the start of ``step`` into its folder's checkpoint (or ``path``)."""
    state = {"format": FORMAT, "global_step": int(step), "config": comparable(engine.configs[e]), "rng": rng_states(),
             **engine.member_state(e)}
    save_atomically(path or checkpoint_path(engine.folders[e]), lambda tmp: torch.save(state, tmp))


class MemberCheckpoints(L.Callback):
    """Every ``every_n_steps`` steps (and on a stop signal, through ``CheckpointOnSignal``), each member's
    checkpoint, taken at the start of the step: the validation of that step is done, no batch of it is used yet,
    and the RNG state saved is the one the step starts from. ``engine``: the ``Engine``."""

    def __init__(self, engine, every_n_steps: int):
        self.engine, self.every = engine, int(every_n_steps)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        if self.every > 0 and step > 0 and step % self.every == 0 and step != self.engine.resumed:
            self.save(step)

    def save(self, step: int) -> None:
        """Each member whose run has a step ``step`` (a member of a shorter horizon that retired keeps its last one)."""
        for e, horizon in enumerate(self.engine.horizons):
            if step < horizon:
                save_member(self.engine, e, step)


class CheckpointOnSignal(L.Callback):
    """At the first step boundary after a stop signal (``signals.requested``): every member's checkpoint, then
    ``Interrupted``. Lightning sets its own SIGTERM handler when ``fit`` starts; ``on_train_start`` puts the
    recording handler back."""

    def __init__(self, save: Callable[[int], None], folder: Path | str):
        self.save, self.folder = save, str(folder)

    def on_train_start(self, trainer, pl_module) -> None:
        signals.record_again()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if signals.requested() is None:
            return
        self.save(trainer.global_step)
        raise signals.stopped_at(self.folder, trainer.global_step)


class ForkPoints(L.Callback):
    """At the start of each step a provider's branches start from (``training/forks.py``): its state there into the
    family's store, after its TensorBoard events so far (the state last: a branch that sees it finds the events too).
    ``forks[e]``: member ``e``'s ``Fork`` or None."""

    def __init__(self, engine, forks):
        self.engine, self.forks = engine, list(forks)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        for e, f in enumerate(self.forks):
            if f is None or step not in f.provide or not bool(self.engine.active[e]) or forks.point(f.store, step).is_file():
                continue
            for w in self.engine.writers[e]:
                if hasattr(w, "flush"):
                    w.flush()
            try:
                real_folder(f.store)  # a link planted in its place is taken away, not written through
                forks.copy_events(self.engine.folders[e], forks.events_at(f.store, step))
                save_member(self.engine, e, step, forks.point(f.store, step))
            except OSError as exc:  # the provider's own run goes on; its branch trains from step 0 when it ends
                self.engine.logs[e].warning("could not write the state at step %d for its horizon forks (%s)", step, exc)
