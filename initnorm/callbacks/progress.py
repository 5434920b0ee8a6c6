"""Progress of a fit in a sweep, where no bar is drawn: a line every few seconds, and each member's share done.

A group of E members trains for as long as one of its jobs would take E times over, and prints its
members' end lines only at its end; without this a vectorised sweep is silent for minutes. Every
``every_s`` seconds the callback prints ``group of 6 (norm=pre warmup=0 seed=1 .. seed=3): step
500/1500, 6/6 alive, about 40s left`` (a job alone: ``norm=pre seed=1: step 500/1500, about 40s
left``; time left from the fit's own measured step time) and writes ``PROGRESS_FILE`` (``step
steps``) into each member's folder, which the sweep's progress counts (``cli/console.sweep_progress``),
so its time left accounts for fits that run side by side.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import lightning as L

from initnorm.callbacks.members import members_of
from initnorm.results import PROGRESS_FILE, duration, write_atomic


class GroupProgress(L.Callback):
    """A line every ``every_s`` seconds on ``stream`` (default: standard output) and each member's ``.progress``."""

    def __init__(self, label: str, steps: int, every_s: float = 10.0, stream=None):
        self.label, self.steps, self.every_s = label, int(steps), float(every_s)
        self.stream = stream
        self._start = self._last = 0.0
        self._from = 0

    def on_train_start(self, trainer, pl_module):
        self._view = members_of(pl_module, trainer)
        self._start = self._last = time.monotonic()
        self._from = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        now = time.monotonic()
        if now - self._last < self.every_s:
            return
        self._last = now
        step = trainer.global_step
        alive = sum(self._view.active())
        per_step = (now - self._start) / max(1, step - self._from)
        stream = self.stream or sys.stdout
        # one write per line: groups in other processes print to the same terminal
        E = self._view.E
        who = f"group of {E} ({self.label})" if E > 1 else self.label
        who += f": step {step}/{self.steps}" + (f", {alive}/{E} alive" if E > 1 else "")
        stream.write(f"{who}, about {duration(per_step * (self.steps - step))} left\n")
        stream.flush()
        for folder in self._view.folders:
            try:
                write_atomic(Path(folder) / PROGRESS_FILE, f"{step} {self.steps}\n")
            except OSError:  # only an estimate: a full disk is reported where the results are written
                pass
