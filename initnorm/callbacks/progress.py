"""Progress of a fit in a sweep, where no bar is drawn: a group's first line as it starts, then a line at each
quarter of its steps or every few seconds, and each member's share done.

A group of E members trains for as long as one of its jobs would take E times over, and prints its
members' end lines only at its end; without this a vectorised sweep read as nothing, then every member
``[40/40 done]`` at once. The callback prints ``group of 6 (norm=pre warmup=0 seed=1 .. seed=3): 1500 steps
[2/12 done]`` as the group's training starts, then ``group of 6 (...): step 375/1500 (25%), 6/6 alive, about
40s left [2/12 done, about 3m left]`` at each ``every_pct`` of its steps (a group only) or ``every_s`` seconds,
whichever comes first (a job alone: ``norm=pre seed=1: step 500/1500, about 40s left`` every ``every_s``
seconds; its own start line says it began). Time left is the fit's own measured step time; the bracket is
``status(left)``, the sweep's done/total and time left (``cli/console.sweep_progress``: the library names no command
line). Each line writes ``PROGRESS_FILE`` (``step steps``) into each member's folder first, which the sweep's
progress counts, so its time left accounts for fits that run side by side. Members of different horizons
(``training/horizons.py``) each count their own steps, and one that retired is counted as done
(``..., 2/3 alive, 1 done at its last step``).

A compiled fit (``compile=true``, or ``auto`` on a long run) spends its first compiled step compiling: about a minute on a
cold cache, against milliseconds a step after. Counted in the rate, the first line of the canonical sweep compiled
said "step 2/1500, about 5h25m left" for a group that ended a minute later. So a compiled fit says at its start that it
compiles first, and its rate leaves out its slowest step (the compile), which its first line after it names.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import lightning as L

from initnorm.callbacks.members import members_of
from initnorm.results import PROGRESS_FILE, duration, write_atomic


class GroupProgress(L.Callback):
    """Lines on ``stream`` (default: standard output) as a fit advances, and each member's ``.progress``."""

    def __init__(self, label: str, steps: int, every_s: float = 10.0, stream=None, every_pct: float = 25.0,
                 status: Callable[[float], str] | None = None):
        self.label, self.steps, self.every_s, self.every_pct = label, int(steps), float(every_s), float(every_pct)
        self.stream, self.status = stream, status
        self._start = self._last = self._prev = 0.0
        self._from = 0
        self._next_pct = math.inf
        self._compiled, self._slowest, self._said_compile = False, 0.0, False

    def _write(self, text: str, left: float = 0.0) -> None:
        bracket = self.status(left) if self.status is not None else ""  # the sweep's, never shorter than this fit's ``left``
        stream = self.stream or sys.stdout
        stream.write(text + (f" [{bracket}]" if bracket else "") + "\n")  # one write per line: other groups share the terminal
        stream.flush()

    def on_train_start(self, trainer, pl_module):
        self._view = members_of(pl_module, trainer)
        self._start = self._last = self._prev = time.monotonic()
        self._from = trainer.global_step
        self._compiled = getattr(pl_module, "compiled", False) is True  # the engine's flag, not another module's attribute
        first = ", its step compiled first (torch.compile)" if self._compiled else ""
        if self._view.E > 1:  # the members' start lines came as the group was assembled; this one says it trains now
            self._next_pct = self._mark_after(self._from)
            resumed = f", resumed at step {self._from}" if self._from else ""
            self._write(f"group of {self._view.E} ({self.label}): {self.steps} steps{resumed}{first}")
        elif first:
            self._write(f"{self.label}: {self.steps} steps{first}")

    def _mark_after(self, step: int) -> float:
        """The next share of the steps, in percent, that earns a line (none for a job alone)."""
        if self.every_pct <= 0 or self.steps <= 0:
            return math.inf
        return (math.floor(100.0 * step / self.steps / self.every_pct) + 1) * self.every_pct

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        now = time.monotonic()
        step = trainer.global_step
        if self._compiled:
            self._slowest = max(self._slowest, now - self._prev)
        self._prev = now
        pct = 100.0 * step / self.steps if self.steps > 0 else 0.0
        if step >= self.steps or (now - self._last < self.every_s and pct < self._next_pct):
            return  # the last step's lines are the members' own end lines
        self._last = now
        self._next_pct = self._mark_after(step)
        horizons = [int(c["steps"]) if c and "steps" in c else self.steps for c in self._view.configs]
        for folder, h in zip(self._view.folders, horizons):  # before the line: the sweep's time left counts this group's share
            if h < step:
                continue  # retired at the start of the step after its last: its record is written
            try:
                write_atomic(Path(folder) / PROGRESS_FILE, f"{step} {h}\n")
            except OSError:  # only an estimate: a full disk is reported where the results are written
                pass
        alive, ended = sum(self._view.active()), sum(h < step for h in horizons)
        E = self._view.E
        who = f"group of {E} ({self.label}): step {step}/{self.steps} ({pct:.0f}%), {alive}/{E} alive" if E > 1 else \
            f"{self.label}: step {step}/{self.steps}"
        who += f", {ended} done at {'its' if ended == 1 else 'their'} last step" if ended else ""
        done = step - self._from
        if not self._compiled:
            per_step = (now - self._start) / max(1, done)
        elif done <= 1:  # one step, the compile: no rate yet
            self._write(f"{who}, estimating time left")
            return
        else:  # the compile left out: it is not paid again
            per_step = (now - self._start - self._slowest) / (done - 1)
            if not self._said_compile:
                self._said_compile = True
                who += f", compiled in {duration(self._slowest)}"
        left = per_step * (self.steps - step)
        self._write(f"{who}, about {duration(left)} left", left)
