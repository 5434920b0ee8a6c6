"""Horizon forks: a sweep over ``steps`` whose runs share their first stretch (wsd's stable phase, a constant rate)
trains that stretch once, and each shorter horizon branches from the longest run's state where its own run departs.

A *family* is the jobs of one sweep whose resolved configs differ only in ``steps`` and what follows from it
(``trainer.max_steps``, the validation interval, the ``transfer`` node's note of what it carried). Its longest member,
the *provider*, writes its state at the start of each other member's *branch step* into the family's store,
``<sweep>/.forks/<family>/<step>.ckpt`` (a job's own checkpoint format) beside a copy of its TensorBoard events so far;
that member's job then starts from it as it would from its own checkpoint (``training/resume.py``), so its
``metrics.json`` history and its events are its job alone's, and its record names the fork (``fork``).

A member's branch step ``b`` is the last step at which its run alone and the provider's are still the same run: the
schedule's factor equal at every step before ``b``, and the validations equal up to ``b`` (a checkpoint holds the
validation of its step). Under ``wsd:F`` that is where the member's decay begins (Hägele et al. 2024: the stable
phase is shared, so one run gives every horizon). A member forks only where ``b`` is at least ``FORK_MIN`` of its run
(wsd with F <= 0.5, ``constant``); under ``cosine`` and ``linear_to_zero`` two horizons part at the first step, and
every job trains from step 0 as before. ``forks=false`` turns it off.

Equal to separate runs: a job alone resumes bit for bit on the CPU, so a branch of a job alone equals its separate
run bit for bit; a provider inside a stacked group has its group's float32 rounding (docs/vectorized.md), and its
branches carry it. The store's files are read as a job's own checkpoint is (tensors only, its config checked against
the branch's own), so a file planted there is refused in one line and the branch trains from step 0.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from initnorm.config import comparable
from initnorm.errors import ConfigError
from initnorm.results import METRICS_FILE, read_record, write_atomic
from initnorm.safe_files import NotAFile, read_bounded, real_folder
from initnorm.training.group import drop_key, get_key
from initnorm.training.optim import schedule_factor
from initnorm.training.resume import EVENTS_GLOB, FORMAT, checkpoint_path, differences, load_checkpoint
from initnorm.training.validation import scheduled, validation_interval

_console = logging.getLogger(__name__)

FORK_MIN = 0.5  # a member forks only where it shares at least half its run with the provider
STORE = ".forks"  # in the sweep folder
PLAN = "plan.json"
PLAN_FORMAT = "initnorm forks 1"
# What may differ between members of one family: the horizon and what follows from it.
HORIZON_KEYS = ("steps", "trainer.max_steps", "trainer.val_check_interval", "transfer")
WAIT_S = 0.5  # between two looks at the store while the provider trains
GONE_S = 2.0  # a provider's lock released this long without its record: it was killed (a record follows its fit at once)
START_GRACE_S = 60.0  # how long a branch waits for a provider that has not begun (a worker still setting up)


@dataclass(frozen=True)
class Fork:
    """A member's place in its family: the store, the step it starts from (None: the provider), the steps at which it
    writes its state for the others (the provider's), and the provider's job folder."""

    store: Path
    branch: int | None
    provide: tuple[int, ...]
    provider: Path


def family(c: Mapping[str, Any]) -> str | None:
    """The family a resolved config belongs to (a hash of it without the horizon keys); None where ``forks`` is off."""
    if not c.get("forks"):
        return None
    out = json.loads(json.dumps(dict(c), default=str))
    own_max = get_key(out, "trainer.max_steps") != out.get("steps")  # a max_steps of its own is part of the run, not its horizon
    for k in HORIZON_KEYS:
        if k != "trainer.max_steps" or not own_max:
            drop_key(out, k)
    return hashlib.sha256(json.dumps(out, sort_keys=True).encode()).hexdigest()[:16]


def horizon(c: Mapping[str, Any]) -> tuple[int, int]:
    """(steps, validation interval) of a resolved config."""
    steps = int(c["steps"])
    return steps, validation_interval(steps, c["trainer"]["val_check_interval"])


def shared_until(short: tuple[int, int], long: tuple[int, int], warmup: int, schedule: str) -> int:
    """The last step ``b`` whose start is the same in both runs (``(steps, interval)`` each, one warmup and schedule): the
    schedule's factor equal at every step before ``b``, the validations equal up to ``b``; below the shorter's steps."""
    (h, i), (big, j) = short, long
    b = 0
    for s in range(1, h):
        if schedule_factor(s - 1, h, warmup, schedule) != schedule_factor(s - 1, big, warmup, schedule):
            break
        if scheduled(s, h, i) != scheduled(s, big, j):
            break
        b = s
    return b


def branch_step(c: Mapping[str, Any], provider: tuple[int, int]) -> int | None:
    """Where member ``c`` starts from the provider's run (``(steps, interval)``); None where it shares too little."""
    own = horizon(c)
    b = shared_until(own, provider, int(c["warmup"]), str(c["schedule"]))
    return b if b > 0 and b >= FORK_MIN * own[0] else None


# ------------------------------------------------------------------ the sweep's plan


def plan(jobs: Sequence[tuple[str, Mapping[str, Any], str]]) -> dict[str, Any]:
    """The families among ``jobs`` (``(folder relative to the sweep, resolved config, its family)``): each with two or more
    members of which at least one branches; its provider (the longest), every member's ``(steps, interval)`` and the
    steps its branches share with the provider (``shared``: what the forks do not train again)."""
    by: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for rel, c, f in jobs:
        by.setdefault(f, []).append((rel, c))
    families = {}
    for f, members in by.items():
        rel, top = max(members, key=lambda m: int(m[1]["steps"]))
        shared = [b for _, c in members if int(c["steps"]) < int(top["steps"]) and (b := branch_step(c, horizon(top)))]
        if shared:
            families[f] = {"provider": rel, "members": sorted({horizon(c) for _, c in members}), "shared": sum(shared)}
    return {"format": PLAN_FORMAT, "families": families}


def write_plan(sweep_dir: Path, p: Mapping[str, Any]) -> None:
    # .forks/ a real folder: a link planted in its place is taken away, not written through
    write_atomic(real_folder(Path(sweep_dir) / STORE) / PLAN, json.dumps(p, indent=1, sort_keys=True))


def providers(p: Mapping[str, Any]) -> set[str]:
    """The provider folders (relative to the sweep) of a plan: the jobs to start first."""
    return {fam["provider"] for fam in p["families"].values()}


def read_plan(sweep_dir: Path) -> dict[str, Any]:
    """The sweep's plan, its fields checked; an empty plan for none, or (one warning) a foreign or damaged one."""
    path, empty = Path(sweep_dir) / STORE / PLAN, {"format": PLAN_FORMAT, "families": {}}
    why = "its fields"
    try:
        p = json.loads(read_bounded(path, 16 * 2**20))
        families = p["families"]
        if p["format"] == PLAN_FORMAT and isinstance(families, dict) and all(
                isinstance(f, str) and f.isalnum() and isinstance(v, dict) and _relative(v.get("provider"))
                and isinstance(v.get("members"), list) and all(_pair(m) for m in v["members"]) for f, v in families.items()):
            return p
    except FileNotFoundError:
        return empty
    except (NotAFile, ValueError, KeyError, TypeError) as exc:
        why = str(exc)
    logging.getLogger(__name__).warning("%s is not a plan initnorm wrote (%s); no horizon forks in this sweep", path, why)
    return empty


def _relative(rel: Any) -> bool:
    return isinstance(rel, str) and bool(rel) and not os.path.isabs(rel) and ".." not in Path(rel).parts


def _pair(m: Any) -> bool:
    return isinstance(m, list) and len(m) == 2 and all(type(v) is int and v > 0 for v in m)


def fork_of(sweep_dir: Path, folder: Path, c: Mapping[str, Any], p: Mapping[str, Any] | None = None) -> Fork | None:
    """Job ``c`` in ``folder``'s place in the sweep's plan (``p``, or the one in ``sweep_dir``); None outside any family."""
    f = family(c)
    fam = (p if p is not None else read_plan(sweep_dir))["families"].get(f) if f is not None else None
    if fam is None:
        return None
    sweep_dir = Path(sweep_dir).resolve()
    provider = sweep_dir / fam["provider"]
    top = max((tuple(m) for m in fam["members"]), key=lambda m: m[0])
    own = horizon(c)
    store = sweep_dir / STORE / f
    if Path(folder).resolve() == provider.resolve():
        if own != top:
            return None
        warmup, schedule = int(c["warmup"]), str(c["schedule"])
        steps = {b for m in fam["members"] if tuple(m) != top
                 and (b := shared_until(tuple(m), top, warmup, schedule)) and b >= FORK_MIN * m[0]}
        return Fork(store, None, tuple(sorted(steps)), provider) if steps else None
    if own not in {tuple(m) for m in fam["members"]} or own[0] >= top[0]:
        return None
    b = branch_step(c, top)
    return Fork(store, b, (), provider) if b else None


# ------------------------------------------------------------------ the provider's side


def point(store: Path, step: int) -> Path:
    return Path(store) / f"{int(step)}.ckpt"


def events_at(store: Path, step: int) -> Path:
    return Path(store) / f"{int(step)}.events"


@contextlib.contextmanager
def providing(forks: Sequence[Fork | None]) -> Iterator[None]:
    """While a fit trains providers: a shared lock on each one's store, which tells its branches that it is alive."""
    held = []
    try:
        for f in {f.store for f in forks if f is not None and f.branch is None}:
            try:
                fd = os.open(real_folder(f) / "provider.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
            except OSError as exc:  # something planted at its name: the branches wait out the grace, or see it end
                logging.getLogger(__name__).warning("no provider lock in %s (%s); its branches will not see it train", f, exc)
                continue
            fcntl.flock(fd, fcntl.LOCK_SH)
            held.append(fd)
        yield
    finally:
        for fd in held:
            os.close(fd)


def provider_alive(store: Path) -> bool:
    """Whether a process holds the store's provider lock."""
    try:
        fd = os.open(Path(store) / "provider.lock", os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


# Kept under a name TensorBoard does not read as events ("tfevents" in it): `tensorboard --logdir <sweep>` shows the jobs only.
KEPT, SHOWN = "tf-kept-events", "tfevents"


def copy_events(src_folder: Path, dest: Path) -> None:
    """The provider's TensorBoard event files so far into ``dest`` (made whole, then renamed into place)."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for p in sorted(Path(src_folder).glob(EVENTS_GLOB)):
        if p.is_file() and not p.is_symlink():
            shutil.copyfile(p, tmp / p.name.replace(SHOWN, KEPT))
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)


# ------------------------------------------------------------------ the branch's side


def _over(provider: Path) -> bool:
    """Whether the provider's job has ended (finished, diverged or failed): its record is written."""
    record = read_record(provider / METRICS_FILE) if (provider / METRICS_FILE).is_file() else None
    return record is not None and record.get("status") in ("finished", "failed")


def wait(fork: Fork, log: logging.Logger, stop) -> bool:
    """Wait while the provider trains towards this member's branch step; whether its state there is in the store.
    ``stop()``: a stop signal's exception to raise, or None."""
    ckpt, started, told = point(fork.store, fork.branch), time.monotonic(), False
    seen, gone = False, None  # the provider seen training; when its lock was first found released
    while not ckpt.is_file():
        if _over(fork.provider):
            return ckpt.is_file()
        if (exc := stop()) is not None:
            raise exc
        alive = provider_alive(fork.store)
        gone = None if alive or not seen else (gone or time.monotonic())
        if gone is not None and time.monotonic() - gone > GONE_S and not ckpt.is_file() and not _over(fork.provider):
            # Seen training, then gone without its record (kill -9, the out-of-memory killer): said within seconds,
            # not after the start-up grace left to a provider that has not begun.
            log.warning("the provider %s ended without a record before step %d (killed?): training from step 0",
                        fork.provider, fork.branch)
            return False
        seen = seen or alive
        if not alive and time.monotonic() - started > START_GRACE_S:
            return False
        if not told:
            log.info("waiting for the state at step %d of %s (horizon fork)", fork.branch, fork.provider)
            told = True
        time.sleep(WAIT_S)
    return True


def adopt(fork: Fork, folder: Path, c: Mapping[str, Any], log: logging.Logger) -> bool:
    """The provider's state at this member's branch step made its own checkpoint (its config the member's), with the
    provider's events so far; False (one warning line) where the store's file is not one to start from."""
    import torch

    src = point(fork.store, fork.branch)
    try:
        state = load_checkpoint(src, refuse=f"delete it (or the sweep's {STORE}/ folder) to be rid of it")
        theirs = state.get("config")
        if state.get("format") != FORMAT or not isinstance(theirs, dict) or state.get("global_step") != fork.branch:
            raise ConfigError(f"{src} is not the state at step {fork.branch} of a run of this family")
        moved = {d.split(":")[0] for d in differences(theirs, c)}
        if other := [k for k in moved if not any(k == h or k.startswith(h + ".") for h in HORIZON_KEYS)]:
            raise ConfigError(f"{src} is another config's state ({', '.join(sorted(other)[:3])} differ)")
        their_horizon = horizon({"steps": theirs.get("steps"), "trainer": theirs.get("trainer", {})})
        if shared_until(horizon(c), their_horizon, int(c["warmup"]), str(c["schedule"])) < fork.branch:
            raise ConfigError(f"{src} comes from a run that departs from this one before step {fork.branch}")
    except (ConfigError, TypeError, ValueError, KeyError) as exc:
        # in the job's train.log and on the console: a branch that trains from step 0 costs the sweep its saving
        for where in (log, _console):
            where.warning("%s: not starting from the horizon fork, training from step 0: %s", folder, exc)
        return False
    state["config"] = comparable(c)
    folder = Path(folder)
    for stale in folder.glob(EVENTS_GLOB):  # an earlier attempt's, from step 0: this run's curve is the fork's up to b
        if stale.is_file() or stale.is_symlink():
            stale.unlink()
    events = events_at(fork.store, fork.branch)
    if events.is_dir() and not events.is_symlink():
        for p in sorted(events.glob(EVENTS_GLOB.replace(SHOWN, KEPT))):
            if p.is_file() and not p.is_symlink():  # renamed into place: a link planted at the name is replaced, not followed
                write_atomic(folder / p.name.replace(KEPT, SHOWN), p.read_bytes())
    buffer = io.BytesIO()
    torch.save(state, buffer)
    path = checkpoint_path(folder)
    real_folder(path.parent)  # checkpoints/ itself: a link planted there would carry the file into its target
    write_atomic(path, buffer.getvalue())
    log.info("starts at step %d from the state of %s (horizon fork: the same run up to there)", fork.branch, fork.provider)
    return True
