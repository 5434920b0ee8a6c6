"""What a job and a sweep print: one line as a job starts, one as it ends (with its final loss and
the sweep's progress), nothing from the libraries.

Each job calls :func:`quiet` itself (in a joblib worker or a SLURM job the filters of the parent
process are not there), then :func:`job_started` and :func:`job_finished`. The progress of a sweep
is read from its folder (finished ``metrics.json`` files), so it is right whichever process or
machine ran the other jobs; the total and the start time come from the parent through the
environment (set in ``sweep.SummaryCallback.on_multirun_start``).
"""

from __future__ import annotations

import logging
import os
import stat
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from initnorm import envvars
from initnorm.results import MAX_RECORD_BYTES, METRICS_FILE, PROGRESS_FILE, duration, fmt
from initnorm.safe_files import NotAFile, read_bounded
from initnorm.training.distributed import other_rank
from initnorm.training.record import status_line
from initnorm.transfer import HEADING_RE as TRANSFER_HEADING

TOTAL_ENV = envvars.SWEEP_TOTAL  # jobs in this sweep (set by the parent before launching)
START_ENV = envvars.SWEEP_START  # time.time() when the sweep started
PROGRESS_BYTES = 1024  # a .progress is ``step steps``: a few bytes
# Loggers whose INFO lines are noise in every job: accelerator banners, "Trainer.fit stopped", tips.
QUIET_LOGGERS = ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning", "lightning_fabric")
QUIET_WARNINGS = (
    r".*LeafSpec.*is deprecated",
    r".*does not have many workers.*",
    r".*The number of training batches.*",
    r".*`isinstance\(treespec, LeafSpec\)`.*",
    r".*The `srun` command is available on your system.*",
)


def versions() -> str:
    """``initnorm-train --version``: initnorm's version, then the two frameworks' it runs on (read from their installed
    metadata, so nothing heavy is imported), where Hydra's own flag printed only Hydra's."""
    from importlib import metadata

    from initnorm import __version__

    def installed(package: str) -> str:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return "not installed"

    return f"initnorm {__version__} (Hydra {installed('hydra-core')}, Lightning {installed('lightning')})"


def quiet() -> None:
    """No warnings or advertisements from libraries in this process (idempotent; every job calls it)."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    for pattern in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    # Lightning's hints (``srun`` is on PATH, few dataloader workers ...) come as warnings from its own modules.
    warnings.filterwarnings("ignore", module=r"(lightning|pytorch_lightning|lightning_fabric|torch)(\.|$)")
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")  # processes this one starts


def _share_done(folder: Path) -> float:
    """How much of an unfinished job is done, from the ``.progress`` its group writes (0: none)."""
    try:  # read_bounded: a FIFO there hung the sweep (and a stop signal with it), a link to /dev/zero filled its memory
        step, steps = (int(v) for v in read_bounded(folder / PROGRESS_FILE, PROGRESS_BYTES).decode("utf-8").split()[:2])
    except (OSError, ValueError, NotAFile):
        return 0.0
    return min(1.0, max(0.0, step / steps)) if steps > 0 else 0.0


# Job folders whose record this process found ended (finished or failed), with when it ended (its mtime), by sweep folder.
# An ended record stays so and a job's folder holds no other job's, so neither is read again: each progress line of a
# sweep of 1,000 jobs read every record (~0.1 s a line, every member's end line: the sweep's time grew as N squared).
_ENDED: dict[str, dict[str, tuple[float, bool, float]]] = {}
ESTIMATING = "estimating time left"


def sweep_progress(sweep_dir: Path | str, now: float | None = None, at_least: float = 0.0, done: int | None = None) -> str:
    """``5/12 done, about 1m20s left`` from the finished jobs in the sweep folder ('' outside a sweep).
    Time left counts the share done of jobs still training in groups (their ``.progress``), so groups
    that run side by side and end together are not read as the sweep's first half. ``at_least``: the seconds the
    fit that asks still needs by its own step time: the sweep cannot end before it, though a rate from its smaller
    first jobs says so (make reproduce's §7e printed ``about 48s left`` beside a group's own ``about 1m22s``).
    ``done``: the end lines printed so far (:func:`announced`), to which the failed jobs add; else the ended records."""
    total = int(os.environ.get(TOTAL_ENV, "0") or 0)
    if not total:
        return ""
    import json

    folder = str(launch_relative(sweep_dir))
    ended, training = _ENDED.setdefault(folder, {}), []
    for parent, dirs, files in os.walk(folder):  # links to folders not followed, as Path.rglob
        dirs[:] = [d for d in dirs if os.path.join(parent, d) not in ended]
        if METRICS_FILE in files:
            try:  # read_bounded: a FIFO or a link to /dev/zero named metrics.json must not hang a progress line
                path = Path(parent, METRICS_FILE)
                rec, when = json.loads(read_bounded(path, MAX_RECORD_BYTES)), os.lstat(path).st_mtime
            except (OSError, ValueError, NotAFile):
                rec = None
            if isinstance(rec, dict) and rec.get("status") in ("finished", "failed"):
                wall = rec.get("wall_s")
                ended[parent] = when, rec["status"] == "failed", float(wall) if isinstance(wall, (int, float)) else 0.0
                dirs[:] = []
                continue
        if PROGRESS_FILE in files:
            training.append(Path(parent))
    finished = min(len(ended), total)
    work = min(float(total), finished + sum(_share_done(p) for p in training))
    start = float(os.environ.get(START_ENV, "0") or 0)
    ends = sorted(when for when, *_ in ended.values())
    cycle = min((wall for when, _, wall in ended.values() if when >= start and wall > 0), default=0.0)
    left = f", {time_left(ends, work, total, start, now or time.time(), at_least, cycle)}" if start and finished < total else ""
    count = finished if done is None else min(done + sum(failed for _, failed, _ in ended.values()), total)
    return f"{count}/{total} done{left}"


def time_left(ends: list[float], work: float, total: int, start: float, now: float, at_least: float = 0.0,
              cycle: float = 0.0) -> str:
    """``about 1m20s left`` at the rate the jobs have ended at since this command's first job (or group) ended: before
    it go the imports, the checks, the workers' start and compiling, which a rate from the sweep's start counted as
    training (a canonical sweep said "about 11m51s left" and took 2m32s). Jobs side by side end a few seconds apart,
    so the rate waits until the ends span ``cycle`` (the shortest ended job's own wall time): two workers' first two
    ends, 3 s apart, made 12 jobs "about 23s left". Until then ``estimating time left``. Records that ended before
    ``start`` (a resumed sweep's finished jobs) are no part of it."""
    ends = [t for t in ends if t >= start]
    if not ends:
        return ESTIMATING
    first, last = ends[0], ends[-1]
    since = sum(1 for t in ends if t > first + 1.0)  # a group's members end within a second of each other: one end
    span = last - first
    if since == 0 or span < max(1.0, 0.9 * cycle):
        return ESTIMATING
    return f"about {duration(max((total - work) * span / since, at_least))} left"


def announced(sweep_dir: Path | str) -> int | None:
    """This end line's number among the command's end lines, 1, 2, ... whichever process prints it: one byte appended to
    ``<sweep>/.done-<start>`` (O_APPEND: each append lands whole, so two processes never get one number), its size the
    count. The ended records counted the lines of a group that had not printed yet, and another group's ending beside
    it: a vectorised canonical sweep's first six lines read 7, 7, 8, 8, 8, 8 of 12. None where it cannot be written
    (the caller counts the records then); a link or anything but a file at the name is not followed (safe_files)."""
    start = os.environ.get(START_ENV)
    if not start:
        return None
    path = launch_relative(sweep_dir) / f".done-{start}"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        os.write(fd, b".")
        return os.fstat(fd).st_size
    except OSError:
        return None
    finally:
        os.close(fd)


def launch_relative(folder: Path | str) -> Path:
    """``folder`` as Hydra means it: a relative ``hydra.sweep.dir`` (the default one) is relative to
    the folder the command started in, not to the job's folder, where a job runs (it read
    "[0/2 done]" after the last job)."""
    from hydra.core.hydra_config import HydraConfig

    folder = Path(folder)
    if folder.is_absolute() or not HydraConfig.initialized():
        return folder
    return Path(HydraConfig.get().runtime.cwd) / folder


def in_sweep() -> bool:
    """True inside a job of a Hydra multirun (whichever launcher runs it)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def check_flags(cmd) -> None:
    """Flag combinations Hydra refuses with a traceback, as one line that says what to do (``cmd``: ``argv.CommandLine``)."""
    from initnorm.errors import ConfigError

    if cmd.multirun and cmd.cfg:
        first = [o.split("=", 1)[0] + "=" + o.split("=", 1)[1].split(",")[0] if "=" in o and "," in o else o for o in cmd.overrides]
        raise ConfigError(
            f"--cfg {cmd.cfg} prints one job's config and does not combine with -m; drop -m and give one value per key, "
            f"e.g. `initnorm-train {' '.join(first)} --cfg {cmd.cfg}`".replace("  ", " ")
        )


class CheckProgress:
    """``checked 4,000 of 10,000 jobs`` while the preflight checks a sweep's jobs, and the time it took once done.

    On a terminal it is one line that updates in place (at most every ``tick`` seconds); in a log (a file, a pipe, a
    SLURM output) a line of its own at most every ``every`` seconds, so a log of a long check stays a few lines.
    Nothing for a sweep checked within the first interval: its plan follows at once. ``end()`` finishes a line left
    open on a terminal (an error or a stop signal during the checks prints after it, not on it).
    """

    def __init__(self, every: float = 3.0, clock=time.monotonic, stream=None, tick: float = 0.25) -> None:
        self.every, self.clock, self._stream, self.tick = every, clock, stream, tick
        self.start = self.last = clock()
        self.printed = False
        self.open = 0  # characters of the updating line on the terminal, 0 when none is open

    @property
    def stream(self):
        return self._stream if self._stream is not None else sys.stdout  # read late: pytest's capture replaces sys.stdout

    def _terminal(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if done == 0:
            self.start = self.last = now
            return
        terminal = self._terminal()
        if done < total and now - self.last >= (self.tick if terminal else self.every):
            self._show(f"checked {done:,} of {total:,} jobs", terminal, final=False)
            self.last, self.printed = now, True
        elif done == total and self.printed:
            self._show(f"checked {total:,} jobs in {duration(now - self.start)}", terminal, final=True)

    def _show(self, text: str, terminal: bool, final: bool) -> None:
        if not terminal:
            print(text, file=self.stream, flush=True)
            return
        # Padded to the last line's length: a shorter text (the final one) leaves none of the longer one behind.
        self.stream.write("\r" + text.ljust(self.open) + ("\n" if final else ""))
        self.stream.flush()
        self.open = 0 if final else max(self.open, len(text))

    def end(self) -> None:
        """Close the updating line if one is open (checks cut short by an error or a signal)."""
        if self.open:
            self.stream.write("\n")
            self.stream.flush()
            self.open = 0


def groups_line(jobs: int, sizes: list[int], alone: int) -> str:
    """``vectorized: 10,000 jobs in 834 stacked groups (833 of 12, 1 of 4) and 0 jobs alone``."""
    counts: dict[int, int] = {}
    for size in sizes:
        counts[size] = counts.get(size, 0) + 1
    of = ", ".join(f"{n:,} of {size}" for size, n in sorted(counts.items(), key=lambda kv: -kv[0]))
    return (f"vectorized: {jobs:,} job{'s' * (jobs != 1)} in {len(sizes):,} stacked group{'s' * (len(sizes) != 1)}"
            + (f" ({of})" if of else "") + f" and {alone:,} alone")


def job_started(label: str, job_num: int) -> None:
    total = os.environ.get(TOTAL_ENV)
    of = f" (job {job_num + 1} of {total})" if total else f" (job {job_num + 1})"
    print(f"start {label}{of}", flush=True)


def job_finished(label: str, metrics: dict[str, Any], folder: Path | str, sweep_dir: Path | str | None) -> None:
    """In a sweep: ``done  norm=post warmup=200 seed=3: final validation loss 2.8570 (100 steps, 24.90 ms/step)
    [5/12 done, about 1m20s left]``; a single run: ``final validation loss 1.8157 (1500 steps, 6.55 ms/step) -> <folder>``.
    The loss is the one the sweep's table scores (``summary.metrics``), named; pruned, diverged or early-stopped as
    ``train.log``'s end line says (``training/record.status_line``). Another rank of one run across processes (DDP's
    child) prints nothing: rank 0 prints the run's line."""
    if other_rank():
        return
    status = status_line(metrics)
    done = "already finished: " if metrics.get("skipped") else ""
    fork = metrics.get("fork")  # a horizon fork's branch (training/forks.py): its first steps were the longest run's
    fork = f", from step {fork.get('step')} of a longer run" if isinstance(fork, dict) else ""
    line = f"{done}{status} ({metrics.get('steps', '?')} steps{fork}, {fmt(metrics.get('ms_per_step'), 2)} ms/step)"
    if sweep_dir is None:
        print(f"{line} -> {folder}", flush=True)
        return
    progress = sweep_progress(sweep_dir, done=announced(sweep_dir))
    print(f"done  {label}: {line}" + (f" [{progress}]" if progress else ""), flush=True)


def summary_text(folder: Path | str, table: str) -> str:
    """A summary for the terminal: the table (the figures' markdown is for summary.md), the transfer
    verdicts where the sweep has a transfer table (its rows stay in summary.md), then the figures' paths."""
    found = TRANSFER_HEADING.search(table)  # the section of whichever rate the sweep tuned (lr, weight decay)
    transfer = table[found.end():] if found else ""
    verdicts = [line for line in transfer.partition("\n|")[0].splitlines() if line.startswith("- ")]
    table = table[:found.start() if found else len(table)].partition("\n![")[0].rstrip()
    if verdicts:
        table += f"\n\n{found.group(1)} transfer (the table in summary.md and transfer.csv):\n" + "\n".join(verdicts)
    pictures = sorted(str(p) for p in Path(folder).glob("*.png"))
    return table + "\n" + (f"\nFigures: {', '.join(pictures)} (and .svg)\n" if pictures else "")


def sweep_header(sweep_dir: str, launcher: str, n_jobs: Any, trials: tuple[int, int] | None = None, how: str | None = None) -> str:
    """``sweep of 12 jobs -> outputs/multirun/<time>_<id> (local_parallel, 2 at a time)``; a search (``trials``: trials,
    seeds): ``search of 24 trials x 2 seeds = 48 jobs -> ...``; ``launcher``: what it is (``cli/launchers.kind``: basic,
    local_parallel, vectorized, slurm), or a class of one's own's name; ``how``: what runs them, where the launcher does not
    (a search's workers)."""
    total = os.environ.get(TOTAL_ENV)
    at_once = "one worker per core" if n_jobs in (None, -1) else f"{n_jobs} at a time"
    how = how or {"basic": "one job after another", "local_parallel": f"local_parallel, {at_once}"}.get(launcher, launcher)
    if trials is not None:
        n, seeds = trials
        return f"search of {n} trial{'s' * (n != 1)} x {seeds} seed{'s' * (seeds != 1)} = {n * seeds} jobs -> {sweep_dir} ({how})"
    return f"sweep of {total or 'the'} jobs -> {sweep_dir} ({how})"
