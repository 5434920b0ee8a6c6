"""``fit(members)``: E >= 1 jobs from their configs to their records, one path for every launcher.

A job alone is ``fit([member])``; a vectorised group of twelve is ``fit(members)``: the same set-up
(each member's seed, data, model, roles, the check of its init), the same ``Engine``
(``training/engine.py``: step, validation, logging, divergence, optimiser, schedule), the same
checkpoints (``training/checkpoints.py``) and the same record (``training/record.py``), under one
Lightning ``Trainer`` with the config's callbacks and every member's loggers.

A folder that holds a finished result is skipped; one with a checkpoint resumes from it (every member
of one fit at the same step: the launcher groups by it).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar

from initnorm import tb
from initnorm.callbacks.progress import GroupProgress
from initnorm.errors import ConfigError
from initnorm.models.build import build_model
from initnorm.models.init_check import check_built
from initnorm.models.own import describe as describe_roles
from initnorm.results import write_atomic, write_metrics
from initnorm.training import forks, signals, trackers
from initnorm.training.batches import StackedData
from initnorm.training.checkpoints import CheckpointOnSignal, ForkPoints, MemberCheckpoints, set_rng_states
from initnorm.training.compiling import should_compile
from initnorm.training.distributed import Placement, other_rank, placement_of, scratch_folders, spawned, spawns, world
from initnorm.training.engine import BuiltMember, Engine
from initnorm.training.failure import job_failed
from initnorm.training.horizons import Retire
from initnorm.training.record import hp_metrics, job_metrics, ran, status_line
from initnorm.training.resume import check_state, inspect_folder, read_member
from initnorm.training.tasks import TASKS

__all__ = ["Abandoned", "Member", "fit"]


@dataclass
class Member:
    """One job to fit: its resolved config, its folder, and what its caller adds to its record."""

    cfg: Mapping[str, Any]  # the resolved config, plain dicts
    out_dir: Path
    label: str = ""  # its run's name in trackers and progress lines (default: seed=<seed>)
    base: Path = Path(".")  # the folder the command started in (a tracker URI without a scheme is a path from there)
    meta: dict[str, Any] = field(default_factory=dict)  # job_num, overrides, swept, choices ... merged into metrics.json
    hparams: dict[str, Any] | None = None  # the HPARAMS entry (default: a few top-level keys)
    write_hparams: Callable[[Any, dict[str, Any], int], None] | None = None  # (writer, hp metrics, steps): the caller's HPARAMS writer
    loggers: list | None = None  # its Lightning loggers, made when it trains (training/trackers.py)
    fork: forks.Fork | None = None  # its place in a sweep's horizon fork (training/forks.py): where it starts, what it provides

    @property
    def name(self) -> str:
        return self.label or f"seed={self.cfg['seed']}"


class Abandoned(Exception):
    """The process that launched this fit is gone: its results have no one to go to."""


# Steps between two calls of ``fit``'s ``abandoned`` (a system call; ~2 s of a 6-member Decoder group).
ABANDON_CHECK_EVERY = 100


class AbandonCheck(L.Callback):
    """Every ABANDON_CHECK_EVERY steps, ask ``abandoned()``; True stops the fit (its last checkpoints stay to resume from)."""

    def __init__(self, abandoned: Callable[[], bool], logs: Sequence[logging.Logger]):
        self.abandoned, self.logs = abandoned, logs

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        if step % ABANDON_CHECK_EVERY == 0 and self.abandoned():
            for log in self.logs:
                log.warning("the sweep's process is gone: stopped at step %d; rerun the command in this sweep folder to resume", step)
            raise Abandoned(step)


def member_log(out_dir: Path) -> logging.Logger:
    """The member's own lines in its folder's ``train.log``: its start, a resume, a divergence, its end."""
    log = logging.getLogger(f"initnorm.job.{os.getpid()}.{out_dir}")
    log.propagate = False
    log.setLevel(logging.INFO)
    for h in list(log.handlers):
        log.removeHandler(h)
        h.close()
    out_dir.mkdir(parents=True, exist_ok=True)
    if other_rank():  # one run across processes: rank 0 writes its lines
        log.addHandler(logging.NullHandler())
        return log
    h = logging.FileHandler(out_dir / "train.log", encoding="utf-8")
    h.setFormatter(logging.Formatter("[%(asctime)s][initnorm][%(levelname)s] - %(message)s"))
    log.addHandler(h)
    return log


def _close(log: logging.Logger) -> None:
    for h in list(log.handlers):
        log.removeHandler(h)
        h.close()


def build_member(m: Member, log: logging.Logger) -> tuple[BuiltMember, torch.Tensor]:
    """Member ``m`` built as its job builds it (seed, data, model, roles, the check of its init), and its random
    stream: the RNG state its job trains from."""
    c = m.cfg
    L.seed_everything(c["seed"], verbose=False)
    data = TASKS.get(c["data"]["kind"]).make_data(c)
    data.setup("fit")
    built = build_model(c["model"], c["init"], c["param"], data.vocab_size)
    if hasattr(built.model, "role_table"):  # model=custom: the inferred roles and their multipliers, beside the run
        write_atomic(Path(m.out_dir) / "roles.txt", describe_roles(built.model, built.table))
    check_built(built, c, data)  # model=custom: an init that ignores the table is one line, before training
    return BuiltMember(c, data, built.model, built.roles, built.table, Path(m.out_dir), log), torch.get_rng_state()


def _trainer_kwargs(c: Mapping[str, Any], place: Placement) -> dict[str, Any]:
    """The config's ``trainer`` node for Lightning, where ``place`` says (``training/devices.choose`` decided it for a job): what the
    config asks is what runs, and a config that asks for more processes or another strategy than ``place`` is one line."""
    kw = {k: v for k, v in c["trainer"].items() if k != "_target_"}
    asked = kw.get("devices", 1)
    count = len(asked) if isinstance(asked, (list, tuple)) else int(asked) if str(asked).isdigit() else place.processes
    strategy = str(kw.get("strategy") or "auto")
    if count != place.processes or strategy != place.strategy:
        raise ConfigError(f"trainer.devices={asked!r} trainer.strategy={strategy!r} is invalid here: this fit was given "
                          f"{place.processes} process(es) on {place.device} with strategy {place.strategy!r}; fix it with "
                          f"`trainer.devices={place.processes}` or give fit the placement training/devices.placement makes")
    return kw | place.trainer_kwargs()


@dataclass
class Prepared:
    """A member ready to stack: built as its job builds it, its random stream, and its checkpoint (checked against its own
    module) where it resumes."""

    member: Member
    log: logging.Logger
    built: BuiltMember
    stream: torch.Tensor
    state: dict[str, Any] | None = None
    build_s: float | None = None  # its build's seconds (seed, data, model, init check): the set-up a group cannot share

    @property
    def step(self) -> int:
        return self.state["global_step"] if self.state is not None else 0


def prepare(m: Member, prior, log: logging.Logger) -> Prepared:
    """Member ``m`` built, and its checkpoint read and checked against its own module, before it meets any other member:
    whatever fails here (its data, its model, its init, its checkpoint) fails it alone."""
    start = time.perf_counter()
    built, stream = build_member(m, log)
    build_s = time.perf_counter() - start
    state = read_member(prior.checkpoint, m.cfg) if prior.checkpoint is not None else None
    if state is not None:
        check_state(built.model, m.cfg["optim"]["name"], state, prior.checkpoint)
    return Prepared(m, log, built, stream, state, build_s)


STOPS = (signals.Interrupted,)  # a stop is not a failure: it is to be resumed (a KeyboardInterrupt: signals.interrupt_cause)


def fit(members: Sequence[Member], device: str | torch.device = "cpu", *, callbacks: Sequence[L.Callback] | None = None,
        progress_bar: bool = False, abandoned: Callable[[], bool] | None = None,
        on_done: Callable[[int, dict], None] | None = None, label: str | None = None,
        status: Callable[[float], str] | None = None) -> list[dict[str, Any]]:
    """Train ``members`` as one (E >= 1), write each one's job folder; return their metrics in order.

    A job is the unit of failure: a member whose folder, data, model or checkpoint fails is recorded failed (its
    ``metrics.json`` holds the error line and the traceback) before it meets the others, who go on; if the fit of
    several then fails (a callback or a data module raising mid-run), each member goes on alone from its last
    checkpoint, so only one that fails again is lost. Each member's own error goes in its own folder
    (``failure.job_failed``), every member failing included; only a job alone's is raised instead, for its launcher.

    ``callbacks``: one instance of each for the fit (each sees every member through ``members_of``); None: the
    first member's ``callbacks`` config, instantiated. ``progress_bar``: Lightning's bar (a job alone at a terminal);
    else a progress line every few seconds. ``abandoned``: asked every ABANDON_CHECK_EVERY steps; True raises
    ``Abandoned``, the last checkpoints left to resume from. ``label``: the fit's name in its progress lines; ``status``:
    what they end with in brackets (a sweep's done/total and time left, ``callbacks/progress.GroupProgress``)."""
    c0 = members[0].cfg
    if c0["threads"]:
        torch.set_num_threads(int(c0["threads"]))
    # Chapter 003 flushes denormals: vanishing activations (N(0, 0.01) through 30 layers) are otherwise very slow on a CPU.
    torch.set_flush_denormal(bool(c0["flush_denormal"]))
    device = placement_of(device)  # where the fit runs: Lightning's accelerator, devices and strategy, the members' device
    if spawns(device):  # ddp_spawn: the whole fit in each rank Lightning's spawn launcher starts; rank 0's records back
        results = spawned(fit, members, device, {"callbacks": callbacks, "progress_bar": progress_bar, "abandoned": abandoned,
                                                 "label": label, "status": status})
        for i, r in enumerate(results if on_done is not None else ()):
            on_done(i, r)
        return results
    results: list[dict[str, Any] | None] = [None] * len(members)
    failures: dict[int, BaseException] = {}
    ready: dict[int, list[tuple[int, Prepared]]] = {}  # by the step they resume from: the launcher groups by it
    logs = []
    try:
        for i, m in enumerate(members):
            try:
                prior = inspect_folder(m.out_dir, m.cfg)  # finished: skip; a checkpoint: resume
                if prior.finished is not None:
                    results[i] = prior.finished | {"skipped": True}
                    continue
                logs.append(log := member_log(Path(m.out_dir)))
                if prior.checkpoint is None and m.fork is not None and m.fork.branch:
                    prior = _from_fork(m, prior, log, {Path(o.out_dir).resolve() for o in members})
                p = prepare(m, prior, log)
                ready.setdefault(p.step, []).append((i, p))
            except STOPS:
                raise
            except KeyboardInterrupt as exc:
                failures[i] = _interrupt(exc)
            except Exception as exc:
                failures[i] = exc
        for part in ready.values():
            results_part = _fit_or_split(part, device, callbacks, progress_bar, abandoned, label, status, failures)
            for i, r in results_part.items():
                results[i] = r
    finally:
        for log in logs:
            _close(log)
    if failures and len(members) == 1:  # a job alone: its launcher decides (a single run's bad value exits 2, in one line)
        raise next(iter(failures.values()))
    for i, exc in failures.items():
        results[i] = _failed(members[i], exc)
    if on_done is not None:
        for i, r in enumerate(results):
            on_done(i, r)
    return results


def _from_fork(m: Member, prior, log: logging.Logger, here: set[Path]):
    """Member ``m``'s start from its horizon fork (``training/forks.py``): the provider's state at its branch step, waited
    for while the provider trains elsewhere; ``prior`` (from step 0) where there is none to take, or where the provider
    trains in this same fit."""
    f = m.fork
    if not forks.point(f.store, f.branch).is_file():
        if f.provider.resolve() in here:
            return prior
        stop = lambda: signals.Interrupted(signals.requested()) if signals.requested() is not None else None
        if not forks.wait(f, log, stop):
            log.info("no state at step %d from %s (it ended without reaching it): training from step 0", f.branch, f.provider)
            return prior
    if not forks.adopt(f, Path(m.out_dir), m.cfg, log):
        return prior
    m.meta["fork"] = {"from": str(f.provider), "step": f.branch}
    return inspect_folder(m.out_dir, m.cfg)


def _interrupt(exc: KeyboardInterrupt) -> Exception:
    """A KeyboardInterrupt of the job's own code as its failure; raised where it is a stop or Python's Ctrl-C."""
    cause = signals.interrupt_cause(exc, signals.handling())
    if isinstance(cause, Exception):
        return cause
    raise cause from None


def _failed(m: Member, exc: BaseException) -> dict[str, Any]:
    """Member ``m``'s folder records ``exc`` (unless it holds a finished result); its record says so."""
    return job_failed(m.out_dir, exc, {"seed": m.cfg["seed"], **m.meta})


def _fit_or_split(part, device, callbacks, progress_bar, abandoned, label, status, failures) -> dict[int, dict[str, Any]]:
    """Fit ``part`` (``(index, Prepared)`` pairs) as one; should that raise, each member alone (rebuilt from its folder, so
    from its last checkpoint), each one's failure kept in ``failures``."""
    try:
        return dict(zip((i for i, _ in part), _fit([p for _, p in part], device, callbacks, progress_bar, abandoned, label, status)))
    except (*STOPS, Abandoned):
        raise
    except Exception as exc:
        if len(part) == 1:
            failures[part[0][0]] = exc
            return {}
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        for _, p in part:
            p.log.warning("the group of %d failed (%s); this member goes on alone", len(part), why)
    out = {}
    for i, p in part:
        try:
            out[i] = fit([p.member], device, callbacks=callbacks, progress_bar=progress_bar, abandoned=abandoned, status=status)[0]
        except (*STOPS, Abandoned):
            raise
        except Exception as alone:
            failures[i] = alone
    return out


def assemble(members: Sequence[Member] | Sequence[Prepared],
             device: str | torch.device | Placement = "cpu") -> tuple[Engine, StackedData, list]:
    """The members (built here, or ``Prepared``) as their ``Engine`` (how they run decided by the probe) and their data
    as one, with each one's random stream; nothing written but each ``train.log`` and a model of one's own's ``roles.txt``."""
    prepared = []
    for p in members:
        if not isinstance(p, Prepared):
            log = member_log(Path(p.out_dir))
            p = Prepared(p, log, *build_member(p, log))
        prepared.append(p)
    c0 = prepared[0].member.cfg
    member_steps = sum(int(p.member.cfg["steps"]) for p in prepared)  # members of different horizons: their own steps
    compiled = should_compile(c0["compile"], member_steps // len(prepared), len(prepared))
    device = torch.device(placement_of(device).device)
    engine = TASKS.get(c0["data"]["kind"]).make_module([p.built for p in prepared], device, compiled)
    data = StackedData([p.built.data for p in prepared])
    data.check_evaluation()
    engine.stack.choose(data.first_batch(), engine.loss)  # how the members run: decided before any step
    if engine.stack.draws:
        engine.stack.seed_streams([p.stream for p in prepared])  # each member draws its dropout masks from its own stream
    return engine, data, [p.stream for p in prepared]


def _load(engine: Engine, prepared: Sequence[Prepared]) -> int:
    """Every member from its checkpoint (all at one step: ``fit`` parts them by step); 0 if none resumes."""
    for e, p in enumerate(prepared):
        if p.state is not None:
            engine.load_member_state(e, p.state)
    if prepared[0].state is None:
        return 0
    set_rng_states(prepared[0].state["rng"])  # the process's own RNG, as the first member's checkpoint left it
    return prepared[0].step


def _fit(prepared: Sequence[Prepared], device, callbacks, progress_bar, abandoned, label, status) -> list[dict[str, Any]]:
    members, logs = [p.member for p in prepared], [p.log for p in prepared]
    c0 = members[0].cfg
    engine, data, _ = assemble(prepared, device)
    if other_rank():  # one run across processes: rank 0 writes the members' folders
        engine.folders = scratch_folders(engine.E)
    steps = engine.steps  # the longest member's: each member retires at its own last step (training/horizons.py)
    forward = engine.stack.strategy
    resumed = engine.resumed = _load(engine, prepared)
    data.start_step = resumed
    for m in members:
        if m.loggers is None:  # rank 0's alone in one run across processes: the instruments log once
            m.loggers = trackers.make(m.cfg["logger"], m.out_dir, m.name, m.base) if not other_rank() else []
    engine.writers = [trackers.writers(m.loggers) for m in members]
    for writer in (w for m in members for w in trackers.tensorboards(m.loggers)):
        tb.write_layout(writer)
    for e, (m, log) in enumerate(zip(members, logs)):
        c = m.cfg
        log.info("%s: %s of %s (%d parameters), lr=%s warmup=%s schedule=%s steps=%d batch=%d seed=%s%s%s", m.name, c["param"]["name"],
                 c["model"]["family"], engine.N, c["lr"], c["warmup"], c["schedule"], c["steps"], c["batch_size"], c["seed"],
                 f"; member {e + 1} of {engine.E}, forward: {forward}" if engine.E > 1 else "",
                 f"; resumed at step {resumed}" if resumed else "")
    if callbacks is None:
        from hydra.utils import instantiate  # the config's _target_ nodes

        callbacks = [instantiate(node) for node in (c0["callbacks"] or {}).values()]
    written: dict[int, dict[str, Any]] = {}  # the records of members that retired before the fit's last step

    def retire(trainer: L.Trainer, e: int) -> None:
        m = members[e]
        written[e] = _record(engine, e, m, logs[e], done=trainer.global_step, wall=time.perf_counter() - start, trainer=trainer,
                             build_s=prepared[e].build_s)
        trainer.loggers = [lg for lg in trainer.loggers if all(lg is not own for own in m.loggers)]  # finished: Lightning leaves them

    # Lightning refuses a bar it does not draw; Retire first, so that every other callback sees a member retired at its step
    chosen = [Retire(engine, retire), *(cb for cb in callbacks if progress_bar or not isinstance(cb, ProgressBar))]
    saver = MemberCheckpoints(engine, c0["checkpoint"]["every_n_steps"])
    chosen += [saver, CheckpointOnSignal(saver.save, members[0].out_dir)]
    if any(m.fork is not None and m.fork.provide for m in members):
        chosen.append(ForkPoints(engine, [m.fork if m.fork is not None and m.fork.provide else None for m in members]))
    if not progress_bar:
        chosen.append(GroupProgress(label or " .. ".join(dict.fromkeys([members[0].name, members[-1].name])), steps, status=status))
    if abandoned is not None:
        chosen.append(AbandonCheck(abandoned, logs))
    trainer = L.Trainer(**_trainer_kwargs(c0, device) | {"max_steps": max(int(m.cfg["trainer"]["max_steps"]) for m in members),
        "logger": [lg for m in members for lg in m.loggers] or False, "callbacks": chosen, "enable_progress_bar": progress_bar,
        "val_check_interval": engine.interval,  # the longest member's; the engine validates at the others' points
        # Lightning's own checkpoints only where a callback of the user's asks for them (it refuses one otherwise)
        "enable_checkpointing": any(isinstance(cb, ModelCheckpoint) for cb in chosen),
        "default_root_dir": str(members[0].out_dir)})
    start = time.perf_counter()
    handled = signals.handling()  # before the fit: Lightning ignores SIGINT once it has caught a KeyboardInterrupt
    try:
        try:
            with forks.providing([m.fork for m in members]):  # its branches elsewhere wait while it trains
                trainer.fit(engine, datamodule=data)
        except SystemExit as exc:  # Lightning's answer to a KeyboardInterrupt (sys.exit(1)): the stop, or this fit's failure
            if not isinstance(exc.__context__, KeyboardInterrupt):
                raise
            signals.record_again()
            raise signals.interrupt_cause(exc.__context__, handled) from None
    except Exception:
        for m in (m for e, m in enumerate(members) if e not in written):  # a tracker's run is not left RUNNING; the next try
            trackers.finish(m.loggers, "failed")  # (alone, or a rerun) makes its loggers again; a retired member's are ended
            m.loggers = None
        raise
    done = trainer.global_step
    early, own = None, None
    if done == steps:
        engine.validate_last()
    elif not engine.over:
        # A callback ended the fit (trainer.should_stop: Lightning's EarlyStopping, or one's own), or a trainer.max_steps
        # below steps (forks.py: a max_steps of its own is part of the run): a decision, not a failure or an interruption
        # (a signal raises signals.Interrupted above), so the job is finished, early-stopped; its final loss is its last
        # validation's (EarlyStopping stops right after one), its state kept at the stop.
        saver.save(done)
        if done == trainer.max_steps:  # the schedule planned for steps ends here by the user's setting
            early = f"trainer.max_steps={done} ended the fit at step {done} of the schedule's {steps}"
        # a callback may say why it stopped and as what, (status, why): a search's pruner says "pruned" (search/pruning.py)
        elif (own := next((cb.stop_status for cb in chosen if getattr(cb, "stop_status", None)), None)) is None:
            early = f"a callback stopped the fit at step {done} of {steps} (trainer.should_stop)"
    wall = time.perf_counter() - start
    return [written[e] if e in written else _record(engine, e, m, log, done=done, wall=wall, trainer=trainer,
                                                    build_s=prepared[e].build_s, early=early, stopped=own)
            for e, (m, log) in enumerate(zip(members, logs))]


def _record(engine: Engine, e: int, m: Member, log: logging.Logger, *, done: int, wall: float, trainer: L.Trainer,
            build_s: float | None = None, early: str | None = None,
            stopped: tuple[str, str] | None = None) -> dict[str, Any]:
    """Member ``e``'s record once its training is over (at step ``done``, ``wall`` seconds into the fit): ``metrics.json``,
    its trackers' record and end, ``train.log``'s end line; at the fit's end, or where it retired (training/horizons.py)."""
    resumed, forward, compiled = engine.resumed, engine.stack.strategy, engine.compiled
    group_ms = 1000.0 * wall / max(1, done - resumed)
    c, h = m.cfg, engine.history[e]
    extra = engine.extra_metrics(c, h)
    metrics = job_metrics(c, val_history=h.val, diverged_step=h.diverged_step,
                          steps=h.diverged_step if h.diverged_step is not None else done, resumed=resumed, wall=wall,
                          ms_per_step=group_ms / engine.E,  # this member's share of the fit's step
                          compiled=compiled, params=engine.N, extra=extra, meta=m.meta)
    metrics["group"] = {"size": engine.E, "member": e, "forward": forward, "optimizer": engine.optimizer_path,
                        "ms_per_step": group_ms, "device": str(engine.stack.flat.device), "build_s": build_s}
    metrics["device"] = ran(trainer)  # what ran: accelerator, devices, world size, strategy, precision
    if world()[0] != 0 or other_rank():  # another rank of one run across processes: rank 0 writes the record
        return metrics
    if stopped and h.diverged_step is None:
        metrics |= {"status": stopped[0], stopped[0]: stopped[1]}  # a callback's own word (pruned) and why
    elif early and h.diverged_step is None:
        metrics["early_stopped"] = early
    hparams = m.hparams if m.hparams is not None else {k: c[k] for k in ("seed", "lr", "warmup", "steps")}
    trackers.record(m.loggers, hparams, hp_metrics(metrics, extra), metrics["steps"], m.write_hparams or (
        lambda w, hp_, step, hparams=hparams, name=m.name: tb.write_hparams(w, hparams, hp_, list(hparams), name, step)))
    trackers.finish(m.loggers)
    if failed := trackers.failures(m.loggers):  # a tracker that failed cost itself only; the record says which and how
        metrics["trackers_failed"] = failed
    write_metrics(Path(m.out_dir), metrics)
    log.info("%s (%d steps, %.2f ms a step%s)", status_line(metrics), metrics["steps"], metrics["ms_per_step"],
             f", a share of the group's {group_ms:.2f} ms" if engine.E > 1 else "")
    return metrics
