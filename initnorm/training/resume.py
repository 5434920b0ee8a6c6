"""Nothing finished is lost: atomic checkpoints, resume after a kill, skip a finished job.

A job folder is the unit of work. What it holds says what to do when the same command runs
there again (``hydra.run.dir=...`` for one run, ``hydra.sweep.dir=...`` for a sweep):

- ``metrics.json`` with ``status: finished`` (diverged runs included): skip, return the result;
- ``checkpoints/initnorm.ckpt`` (``training/checkpoints.py``, one format whatever launcher wrote it):
  resume from it, so the final numbers are bit for bit those of an uninterrupted run on the CPU;
- nothing, or ``status: failed``: train from the start.

Either file carries the config that made it; a folder of a different config is refused with one
line rather than mixed with this one. Only keys both configs have are compared, so a key that a
newer version of initnorm adds (with a default that keeps the old behaviour) does not orphan old
folders.

The checkpoint is taken at the start of step ``s`` (``s`` a multiple of
``checkpoint.every_n_steps``): the validation of step ``s`` is done, no batch of step ``s`` is
used yet, and the RNG state saved there is the one that step starts from. On resume the data
module's ``start_step`` is set to ``s`` (its batch ``s`` is a function of (seed, s)) and the engine
restores the member's weights, optimiser state, history and random stream (``training/fit.py``).
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
from initnorm.own_errors import error_line
from initnorm.results import METRICS_FILE, read_record, write_metrics
from initnorm.safe_files import NotAFile, open_no_follow, planted

log = logging.getLogger(__name__)
CKPT_DIR = "checkpoints"
CKPT_FILE = "initnorm.ckpt"
FORMAT = "initnorm member checkpoint 2"  # what training/checkpoints.py writes; anything else is refused in one line
# Format 1 kept the flat optimiser's moments by parameter name and one step count; read, it is converted to format 2's
# optimiser state (torch's per-parameter state by parameter name: ``Engine.optimizer_state``).
FORMAT_1 = "initnorm member checkpoint 1"
# What a member's checkpoint holds, and the type of each field (checked before anything is loaded from it).
CKPT_FIELDS = {"format": str, "global_step": int, "config": dict, "rng": dict, "state_dict": dict, "optimizer": dict, "history": dict}


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
    """What a job folder holds already: a finished result, or a checkpoint to resume from (at ``step``), or neither."""

    finished: dict[str, Any] | None = None
    checkpoint: Path | None = None
    step: int = 0


def read_json(path: Path) -> dict[str, Any] | None:
    """A job's ``metrics.json`` as a dict; None for none, or (with one warning line) a foreign or damaged one."""
    return read_record(path) if Path(path).exists() else None


# What a rerun reads from a finished record; one written by an older version may lack some.
FINISHED_KEYS = ("final_val_loss", "diverged", "steps")


def inspect_folder(folder: Path | str, c: Mapping[str, Any]) -> Prior:
    """What to do in ``folder`` for the resolved config ``c``; a different config's work, or a checkpoint that is
    not one initnorm wrote for this job, raises ``ConfigError``."""
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
    path = checkpoint_path(folder)
    if what := planted(path):  # a folder there is found at the first checkpoint, after the steps before it were trained
        raise ConfigError(f"{path} is {what}, not a checkpoint initnorm wrote: the job would train, then fail to write its "
                          f"checkpoint there; delete it (or move it away) to train {folder}")
    if not path.is_file():
        return Prior()
    return Prior(checkpoint=path, step=read_member(path, c)["global_step"])


def checkpoint_path(folder: Path | str) -> Path:
    """Where a job's checkpoint lives in its folder."""
    return Path(folder) / CKPT_DIR / CKPT_FILE


def has_checkpoint(folder: Path | str) -> bool:
    """Whether ``folder`` holds a job's checkpoint as a regular file (a link or a FIFO there is not one)."""
    path = checkpoint_path(folder)
    return os.path.lexists(path) and planted(path) is None


def read_member(path: Path, c: Mapping[str, Any]) -> dict[str, Any]:
    """A member's checkpoint for the job of config ``c``, read as tensors and plain values only (``load_checkpoint``:
    a planted pickle cannot run code), its fields checked: one that is not initnorm's, of another config, or at a
    step the job does not have is refused in one line. (Its tensors' names and shapes are checked against the
    member's module where it is loaded: ``Engine.check_member_state``.)"""
    state = load_checkpoint(path)
    fix = f"delete it (or move it away) to train {path.parent.parent} from the start"
    wrong = [k for k, t in CKPT_FIELDS.items() if not isinstance(state.get(k), t) or isinstance(state.get(k), bool)]
    if not wrong and state["format"] == FORMAT_1:
        state = {**state, "format": FORMAT, "optimizer": from_format_1(state["optimizer"])}
    if wrong or state["format"] != FORMAT:
        what = f"its {', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} missing or of the wrong type" if wrong else \
            f"its format is {str(state['format'])[:40]!r}"
        raise ConfigError(f"{path} is not a checkpoint initnorm wrote ({what}); {fix}")
    step = state["global_step"]
    if not 0 <= step < int(c["steps"]):
        raise ConfigError(f"{path} is at step {step}, which a run of steps={c['steps']} does not have (a checkpoint is taken "
                          f"before a step of the run); {fix}")
    if diff := differences(state["config"], c):
        raise _refuse(path.parent.parent, f"a checkpoint (step {step})", diff)
    return state


def load_checkpoint(ckpt: Path, refuse: str | None = None) -> dict[str, Any]:
    """A checkpoint's content, read with ``weights_only=True``: tensors and plain values only, so a
    file planted in a shared folder cannot run code when it is read. Anything else is refused in one line, which ends
    with ``refuse`` (what to do; default: delete it to train the job from the start)."""
    refuse = refuse or f"delete it (or move it away) to train {ckpt.parent.parent} from the start"
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


def from_format_1(opt: dict[str, Any]) -> dict[str, Any]:
    """A format-1 checkpoint's optimiser (``{name, step, exp_avg: {param: t}, exp_avg_sq: ...}``, AdamW, Adam or SGD) as
    format 2's: torch's per-parameter state by name. What is not of that form is left for ``check_state`` to refuse."""
    name, moments = opt.get("name"), opt.get("exp_avg")
    if not isinstance(moments, dict) or type(opt.get("step")) not in (int, float):
        return {"name": name, "state": None}
    if name == "sgd":
        return {"name": name, "state": {n: {"momentum_buffer": t} for n, t in moments.items()}}
    squares = opt.get("exp_avg_sq") if isinstance(opt.get("exp_avg_sq"), dict) else {}
    step = torch.tensor(float(opt["step"]), dtype=torch.float32)
    return {"name": name, "state": {n: {"step": step.clone(), "exp_avg": t, "exp_avg_sq": squares.get(n)} for n, t in moments.items()}}


# torch's per-parameter state that has the parameter's own shape (the others, Adafactor's factored moments say, need not)
SHAPED = ("exp_avg", "exp_avg_sq", "momentum_buffer")


def check_state(model, optim: str, state: dict[str, Any], path: Path) -> None:
    """Refuse, in one line, a checkpoint whose tensors do not fit ``model`` (the member's own module, trained by
    ``optim``): another module's names or shapes, another optimiser's state, a history or stream of the wrong form."""
    own = model.state_dict()
    got = state["state_dict"]
    bad = [k for k in own if not isinstance(got.get(k), torch.Tensor) or got[k].shape != own[k].shape] + [k for k in got if k not in own]
    opt = state["optimizer"]
    if not bad and (opt.get("name") != optim or not isinstance(opt.get("state"), dict)):
        bad = [f"optimizer {str(opt.get('name'))[:20]!r}"]
    params = dict(model.named_parameters())
    if not bad:
        for n, st in opt["state"].items():
            shaped = n in params and isinstance(st, dict) and all(
                not isinstance(v, torch.Tensor) or k not in SHAPED or v.shape == params[n].shape for k, v in st.items())
            if not shaped or any(not isinstance(v, (torch.Tensor, int, float)) or (k in SHAPED and not isinstance(v, torch.Tensor))
                                 for k, v in st.items()):
                bad = [f"optimizer state of {str(n)[:40]}"]
                break
    history = state["history"]
    fields = {"train_losses": list, "evals": dict, "val": list}
    if not bad and not (isinstance(history, dict) and all(isinstance(history.get(k), t) for k, t in fields.items())
                        and type(history.get("diverged_step")) in (int, type(None))):
        bad = ["history"]
    if not bad and not isinstance(state.get("stream"), (torch.Tensor, type(None))):
        bad = ["stream"]
    if bad:
        raise ConfigError(f"{path} holds a checkpoint that does not fit this job's model ({', '.join(bad[:3])}); delete it "
                          f"(or move it away) to train {path.parent.parent} from the start")


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
    path = checkpoint_path(folder)
    if path.is_file():
        step = load_checkpoint(path).get("global_step")
        if isinstance(step, int) and step > 0:
            kwargs.setdefault("purge_step", step)
    else:
        stale = sorted(p for p in folder.glob(EVENTS_GLOB) if p.is_file())
        for p in stale:
            p.unlink()
        if stale:
            log.info("removed %d TensorBoard event file(s) of an earlier attempt in %s: it left no checkpoint, this run starts from step 0",
                     len(stale), folder)
    return TensorBoardLogger(save_dir=save_dir, **kwargs)


def record_failure(folder: Path | str, exc: BaseException, job: Mapping[str, Any]) -> str:
    """Write ``status: failed`` with the error line (and the traceback) into the job's metrics.json,
    unless the folder already holds a finished result. Returns the error line. (The job's tracker runs still open: ``trackers.fail``,
    called by the callers; trackers reads this module's ``has_checkpoint``.)"""
    folder = Path(folder)
    line = error_line(exc)
    done = read_json(folder / METRICS_FILE)
    if done is None or done.get("status") != "finished":
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        write_metrics(folder, {**job, "status": "failed", "error": line, "traceback": tb})
    return line
