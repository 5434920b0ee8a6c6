"""Several jobs of a sweep trained as one stacked group: who may share a group, and the group's run.

Jobs that share every shape and the computation graph (family, width, depth, heads, norm
placement and type, context, batch size, steps, data, ...) differ only in numbers: the seed
(weights and batch order, each exactly as its own job draws them), learning rate, warmup,
schedule, init scheme and options, weight decay, Adam's betas and eps, SGD's momentum, and the
parameterisation's multipliers. ``group_key`` says which jobs can share a group; ``train_group``
trains one: each member built exactly as its job builds it, stacked into a ``StackedModule``
(``training/stacked.py``) and fitted by a Lightning ``Trainer`` with the config's callbacks, the
members' checkpoints and the stop-signal callback, as a job alone is; then each member's folder
gets the record a job alone writes (``training/record.py``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ProgressBar

from initnorm import tb
from initnorm.callbacks.progress import GroupProgress
from initnorm.config import validate
from initnorm.errors import ConfigError
from initnorm.models.build import MODELS, build_model
from initnorm.models.init_check import check_built
from initnorm.models.own import describe as describe_roles
from initnorm.results import write_atomic, write_metrics
from initnorm.tb import write_layout
from initnorm.training import trackers
from initnorm.training.checkpoints import CheckpointOnSignal, MemberCheckpoints
from initnorm.training.compiling import should_compile
from initnorm.training.record import hp_metrics, job_metrics, status_line
from initnorm.training.resume import inspect_folder, load_checkpoint, read_vec_checkpoint
from initnorm.training.stacked import StackedData, StackedModule
from initnorm.training.tasks import TASKS
from initnorm.training.validation import validation_interval
from initnorm.training.vec_optim import KINDS, NotStackable

__all__ = ["MEMBER_KEYS", "Abandoned", "Member", "NotStackable", "build_group", "group_key", "parameter_count", "train_group", "why_alone"]

# Keys whose values may differ inside a group: they change numbers, not shapes or the graph.
# Optimiser numbers need no list: the stacked step reads them from each member's own torch optimiser.
MEMBER_KEYS = ("seed", "lr", "warmup", "schedule", "init", "param", "model.mup", "optim.betas", "optim.eps", "optim.weight_decay",
               "optim.weight_decay_mode", "optim.momentum", "summary", "regularizer",
               "callbacks.coord.seed", "callbacks.coord.param")  # the coordinate check's labels for its table


def _drop(d: dict, dotted: str) -> None:
    node, *rest = dotted.split(".")
    if not rest:
        d.pop(node, None)
    elif isinstance(d.get(node), dict):
        _drop(d[node], ".".join(rest))


def group_key(c: Mapping[str, Any]) -> str:
    """Jobs with the same key can train as one group: the resolved config without the member-wise keys."""
    out = json.loads(json.dumps(dict(c), default=str))
    for k in MEMBER_KEYS:
        _drop(out, k)
    return json.dumps(out, sort_keys=True)


def why_alone(c: Mapping[str, Any]) -> str | None:
    """Why this job cannot be a member of a vectorised group (None: it can)."""
    if "dropout" in c["model"] and c["model"]["dropout"] > 0:  # only the window MLPs have dropout
        return "dropout draws its masks from the job's own random stream"
    if c["optim"]["name"] not in KINDS:
        return f"optim={c['optim']['name']} has no vectorised step (only {', '.join(KINDS)})"
    return None


def parameter_count(c: Mapping[str, Any]) -> int:
    """One member's parameter count: the family's model built on the meta device (no memory, no init)."""
    data = TASKS.get(c["data"]["kind"]).make_data(c)
    data.setup("fit")
    with torch.device("meta"):
        model = MODELS.get(c["model"]["family"]).build(c["model"], data.vocab_size)
    return sum(p.numel() for p in model.parameters())


@dataclass
class Member:
    """One job of a group: its composed config, job folder, and what the caller adds to its metrics."""

    cfg: Mapping[str, Any]  # the resolved config, plain dicts
    out_dir: Path
    meta: dict[str, Any] = field(default_factory=dict)  # job_num, overrides, swept, choices ... merged into metrics.json
    hparams: dict[str, Any] | None = None  # the HPARAMS entry (default: a few top-level keys)
    write_hparams: Callable[[Any, dict[str, Any], int], None] | None = None  # (writer, hp metrics, steps): the caller's HPARAMS writer
    loggers: list | None = None  # its Lightning loggers (default: the config's, training/trackers.py)


def _loggers(member: Member) -> list:
    if member.loggers is None:
        member.loggers = trackers.make(member.cfg["logger"], member.out_dir, f"seed={member.cfg['seed']}")
    return member.loggers


def _member_log(out_dir: Path, i: int) -> logging.Logger:
    log = logging.getLogger(f"initnorm.vectorized.{os.getpid()}.{i}")
    log.propagate = False
    log.setLevel(logging.INFO)
    for h in list(log.handlers):
        log.removeHandler(h)
        h.close()
    h = logging.FileHandler(out_dir / "train.log", encoding="utf-8")
    h.setFormatter(logging.Formatter("[%(asctime)s][initnorm.vectorized][%(levelname)s] - %(message)s"))
    log.addHandler(h)
    return log


class Abandoned(Exception):
    """The process that launched this group is gone: its results have no one to go to."""


# Steps between two calls of ``train_group``'s ``abandoned`` (a system call; ~2 s of a 6-member Decoder group).
ABANDON_CHECK_EVERY = 100


class AbandonCheck(L.Callback):
    """Every ABANDON_CHECK_EVERY steps, ask ``abandoned()``; True stops the group (its last checkpoints stay to resume from)."""

    def __init__(self, abandoned: Callable[[], bool], logs: Sequence[logging.Logger]):
        self.abandoned, self.logs = abandoned, logs

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        if step % ABANDON_CHECK_EVERY == 0 and self.abandoned():
            for log in self.logs:
                log.warning("the sweep's process is gone: stopped at step %d; rerun the command in this sweep folder to resume", step)
            raise Abandoned(step)


def build_group(members: Sequence[Member], device: str | torch.device = "cpu") -> tuple[StackedModule, StackedData]:
    """The members' stacked module and data, each member built exactly as its job builds it (nothing written yet but each ``train.log``)."""
    cs = [dict(m.cfg) for m in members]
    if len({group_key(c) for c in cs}) != 1:
        raise ConfigError("the members of a vectorised group differ in a key that changes shapes or the graph")
    for c in cs:
        validate(c)
        if reason := why_alone(c):
            raise ConfigError(f"job seed={c['seed']} cannot train in a vectorised group: {reason}")
    task = TASKS.get(cs[0]["data"]["kind"])
    datas, modules = [], []
    for c in cs:  # each member exactly as train() builds its job
        L.seed_everything(c["seed"], verbose=False)
        data = task.make_data(c)
        data.setup("fit")
        built = build_model(c["model"], c["init"], c["param"], data.vocab_size)
        check_built(built, c, data)  # model=custom: an init that ignores the table, before it is stacked
        modules.append(task.make_module(built.model, built.roles, built.table, lr=c["lr"], steps=c["steps"],
                                   warmup=c["warmup"], optim=c["optim"],
                                   schedule=c["schedule"], log_every=c["log_every"]))
        datas.append(data)
    for m, module in zip(members, modules):
        Path(m.out_dir).mkdir(parents=True, exist_ok=True)
        if hasattr(module.model, "role_table"):  # model=custom: its inferred roles and multipliers, as a job alone writes them
            write_atomic(Path(m.out_dir) / "roles.txt", describe_roles(module.model, module.table))
    logs = [_member_log(Path(m.out_dir), i) for i, m in enumerate(members)]
    module = StackedModule(cs, datas, modules, [m.out_dir for m in members], logs, device,
                           compiled=should_compile(cs[0]["compile"], cs[0]["steps"], len(cs)))  # auto: from GROUP_FROM member-steps on
    return module, StackedData(datas)


def member_state_of_job(module: L.LightningModule, state: Mapping[str, Any]) -> dict[str, Any]:
    """A job alone's checkpoint (Lightning's: ``last.ckpt``) in a member's form (``vectorized.ckpt``'s), so a job
    checkpointed alone goes on inside a group: parameters in the flat layout (parameter by parameter, in the
    model's order), the optimiser's moments and step count, the records. ``module``: the member's own module."""
    model = module.model
    weights = {k.removeprefix("model."): v for k, v in state["state_dict"].items() if k.startswith("model.")}
    params = [weights[n] for n, _ in model.named_parameters()]
    opt = module.configure_optimizers()
    opt = opt["optimizer"] if isinstance(opt, dict) else opt
    opt.load_state_dict(state["optimizer_states"][0])  # the same groups as its job made: its own configure_optimizers
    moments = [opt.state.get(p, {}) for p in model.parameters()]
    first = "exp_avg" if "exp_avg" in moments[0] else "momentum_buffer"

    def flat(key: str) -> torch.Tensor:
        return torch.cat([(m.get(key) if m.get(key) is not None else torch.zeros_like(w)).flatten() for m, w in zip(moments, params)])

    optim = {"steps": torch.tensor(float(state["global_step"]), dtype=torch.float64), "exp_avg": flat(first)}
    if "exp_avg_sq" in moments[0]:
        optim["exp_avg_sq"] = flat("exp_avg_sq")
    records = state.get("classifier", {})
    return {
        "global_step": state["global_step"], "params": torch.cat([w.flatten() for w in params]), "optim": optim,
        "train_losses": list(records.get("train_losses", [])), "evals": dict(records.get("evals", {})), "initnorm": dict(state["initnorm"]),
    }


def _resume(module: StackedModule, members: Sequence[Member]) -> int:
    """Restore every member from its checkpoint, a member's or a job alone's (all must be at one step: the launcher
    groups by it); 0 if none has one."""
    priors = [inspect_folder(m.out_dir, m.cfg) for m in members]
    have = [p.vectorized is not None or p.checkpoint is not None for p in priors]
    if not any(have):
        return 0
    if not all(have):
        raise ConfigError("some members of this group have a checkpoint and some do not; group them by step")
    states = [  # tensors and plain values only
        read_vec_checkpoint(p.vectorized) if p.vectorized is not None
        else member_state_of_job(module.member_modules[e], load_checkpoint(p.checkpoint))
        for e, p in enumerate(priors)
    ]
    steps = {s["global_step"] for s in states}
    if len(steps) != 1:
        raise ConfigError(f"the members' checkpoints are at different steps ({sorted(steps)}); group them by step")
    for e, s in enumerate(states):
        module.load_member_state(e, s)
    return steps.pop()


def _trainer_kwargs(c: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    """The config's ``trainer`` node for Lightning, on the group's device."""
    kw = {k: v for k, v in c["trainer"].items() if k != "_target_"}
    kw["accelerator"], kw["devices"] = ("gpu", [device.index or 0]) if device.type == "cuda" else ("cpu", 1)
    return kw


def train_group(members: Sequence[Member], device: str | torch.device = "cpu", on_done: Callable[[int, dict], None] | None = None,
                abandoned: Callable[[], bool] | None = None, callbacks: Sequence[L.Callback] | None = None,
                label: str | None = None) -> list[dict[str, Any]]:
    """Train ``members`` as one stacked model under Lightning; write each one's job folder; return their metrics in order.
    ``callbacks``: one instance of each for the group (each sees every member through ``pl_module.members``); None: the
    first member's ``callbacks`` config, instantiated.
    ``abandoned``: asked every ABANDON_CHECK_EVERY steps; True raises ``Abandoned``, with the last checkpoint left to resume from.
    ``label``: the group's name in its progress lines (default: its members' seeds)."""
    c0 = dict(members[0].cfg)
    if c0["threads"]:
        torch.set_num_threads(int(c0["threads"]))
    torch.set_flush_denormal(bool(c0["flush_denormal"]))
    device = torch.device(device)
    module, data = build_group(members, device)
    resumed = module.resumed = _resume(module, members)
    data.start_step = resumed
    module.check_forward()  # before anything is written: a family vmap cannot map runs its jobs alone
    module.member_writers = [trackers.writers(_loggers(m)) for m in members]
    for writer in (w for m in members for w in trackers.tensorboards(m.loggers)):
        write_layout(writer)
    for e, c in enumerate(module.cs):
        module.logs[e].info("vectorised group of %d jobs, member %d (seed=%s lr=%s warmup=%s), %d parameters each%s",
                            module.E, e, c["seed"], c["lr"],
                            c["warmup"], module.N, f"; resumed at step {resumed}" if resumed else "")
    if callbacks is None:
        from hydra.utils import instantiate  # the config's _target_ nodes, as train() makes them

        callbacks = [instantiate(node) for node in (c0["callbacks"] or {}).values()]
    saver = MemberCheckpoints(module, c0["checkpoint"]["every_n_steps"])
    extra = [cb for cb in callbacks if not isinstance(cb, ProgressBar)]  # a sweep prints one line per job instead
    extra += [saver, CheckpointOnSignal(lambda trainer: saver.save(trainer.global_step), members[0].out_dir),
              GroupProgress(label or "seed=" + ",".join(str(c["seed"]) for c in module.cs), c0["steps"])]
    if abandoned is not None:
        extra.append(AbandonCheck(abandoned, module.logs))
    steps = c0["steps"]
    trainer = L.Trainer(**_trainer_kwargs(c0, device) | {"logger": False, "callbacks": extra, "enable_progress_bar": False,
                                                         "val_check_interval": validation_interval(steps,
                                                                                                   c0["trainer"]["val_check_interval"]),
                                                         "default_root_dir": str(members[0].out_dir)})
    start = time.perf_counter()
    trainer.fit(module, datamodule=data)
    done_steps = trainer.global_step
    if done_steps == steps:
        module.validate_last()
    wall = time.perf_counter() - start
    results = []
    for e, (m, c) in enumerate(zip(members, module.cs)):
        own = module.member_modules[e]  # the member's own LightningModule computes its family's numbers from its records
        own.val_history, own.diverged_step = module.val_history[e], module.diverged[e]
        if module.classifier:
            own.train_losses, own.evals = module.train_losses[e], module.evals[e]
        group_ms = 1000.0 * wall / max(1, done_steps - resumed)
        extra_metrics = own.extra_metrics(c)
        metrics = job_metrics(c, val_history=module.val_history[e], diverged_step=module.diverged[e],
                              steps=module.diverged[e] if module.diverged[e] is not None else done_steps, resumed=resumed, wall=wall,
                              ms_per_step=group_ms / module.E,  # this member's share of the group's step
                              compiled=module.compiled, params=module.N, extra=extra_metrics, meta=m.meta)
        metrics["vectorized"] = {"group_size": module.E, "member": e, "compiled": module.compiled,
                                 "group_ms_per_step": group_ms, "device": str(device)}
        write_metrics(Path(m.out_dir), metrics)
        hp = hp_metrics(metrics, extra_metrics)
        hparams = m.hparams if m.hparams is not None else {k: c[k] for k in ("seed", "lr", "warmup", "steps") if k in c}
        trackers.record(m.loggers, hparams, hp, metrics["steps"], m.write_hparams or (
            lambda w, hp_, step, hparams=hparams, seed=c["seed"]: tb.write_hparams(w, hparams, hp_, list(hparams), f"seed={seed}", step)))
        trackers.finish(m.loggers)
        module.logs[e].info("%s (%d steps, group of %d: %.2f ms per member-step)", status_line(metrics), metrics["steps"],
                            module.E, metrics["ms_per_step"])
        for h in list(module.logs[e].handlers):
            module.logs[e].removeHandler(h)
            h.close()
        results.append(metrics)
        if on_done is not None:
            on_done(e, metrics)
    return results
