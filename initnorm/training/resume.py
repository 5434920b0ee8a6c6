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

import logging
import os
import pickle
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from initnorm.config import comparable
from initnorm.errors import ConfigError
from initnorm.results import METRICS_FILE, read_record, write_metrics
from initnorm.safe_files import NotAFile, open_no_follow, planted

log = logging.getLogger(__name__)
CKPT_DIR = "checkpoints"
CKPT_FILE = "last.ckpt"
VEC_CKPT = "vectorized.ckpt"  # a member of a stacked group (training/group.py)
STATE_KEY = "initnorm"
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
    if what := planted(record):  # a FIFO would hang the job's read, a folder its write, a link be followed
        raise ConfigError(f"{record} is {what}, not a job's record; delete it (or move it away) to train {folder} again")
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
    try:  # a link or a FIFO at its name is not opened (initnorm/safe_files.py)
        with open(open_no_follow(ckpt), "rb") as f:
            state = torch.load(f, map_location="cpu", weights_only=True)
    except NotAFile as exc:
        raise ConfigError(f"{ckpt} is {exc}, not a checkpoint initnorm wrote; {refuse}") from None
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


def has_checkpoint(folder: Path | str) -> bool:
    """Whether ``folder`` holds a checkpoint of a job, alone or a group member's, as a regular file (a link is not one)."""
    return any(os.path.lexists(p) and planted(p) is None for p in (Path(folder) / CKPT_DIR / CKPT_FILE, vec_checkpoint(folder)))


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
