"""Train several jobs of a sweep as one stacked model: a leading "member" dimension on every parameter.

Jobs that share every shape and the computation graph (family, width, depth, heads, norm
placement and type, context, batch size, steps, data, ...) differ only in numbers: the seed
(weights and batch order, each exactly as its own job draws them), learning rate, warmup,
schedule, init scheme and options, weight decay, Adam's betas and eps, SGD's momentum, and the
parameterisation's multipliers. ``group_key`` says which jobs can share a group; ``train_group``
trains one group:

- each member's model is built exactly as its job builds it (``seed_everything(seed)``, data
  module, ``build_model``), then the parameters are stacked into one flat ``[E, N]`` tensor;
- one definition of each family serves all: ``torch.func.functional_call`` runs the family's own
  module with a member's parameters and ``torch.func.vmap`` maps it over the members. Float
  attributes that differ between members (µP's logit multiplier, the attention scale, any forward
  multiplier a new parameterisation adds) become per-member buffers of the module, found by
  comparing the members' modules, so new multipliers need no code here;
- the loss is the task's own (``Trainable.loss``); the step is ``vec_optim.VecOptimizer``;
- per member: divergence (NaN/inf loss: recorded at its step, the member frozen, the others go on),
  the instruments (``act_rms/``, ``grad_norm/``, ``grad_rms/``, ``update_ratio/`` over everything
  but the member dimension; the diagnostics and the coordinate check: ``member_instruments.py``),
  train/val loss and lr, TensorBoard events and HPARAMS in its own job folder, ``metrics.json``
  with the fields a job run alone writes, and a checkpoint (``checkpoints/vectorized.ckpt``) to
  resume from, bit for bit.

Losses equal the job run alone to float32 rounding (batched kernels sum in another order); see
docs/vectorized.md for how far they drift over a full run.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import lightning as L
import torch
from torch.func import functional_call, vmap

from initnorm.callbacks.stats import Record, capture, grouped, parameter_role, probe_points, rms
from initnorm.config import validate
from initnorm.errors import ConfigError
from initnorm.models.build import MODELS, build_model
from initnorm.tb import LEARNING_RATE, TRAIN_LOSS, VAL_LOSS, write_layout
from initnorm.training.classifier import EVAL_LABELS
from initnorm.training.compiling import should_compile
from initnorm.training.module import validation_interval
from initnorm.training.optim import schedule_factor
from initnorm.provenance import describe
from initnorm.training.resume import comparable, differences, read_vec_checkpoint, vec_checkpoint
from initnorm.results import write_metrics
from initnorm.training.member_instruments import member_instruments, unstackable_callbacks
from initnorm.training.tasks import TASKS
from initnorm.training.vec_optim import KINDS, NotStackable, VecOptimizer

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
    if others := unstackable_callbacks(c["callbacks"]):
        return f"callbacks {', '.join(others)} have no per-member version"
    return None


def parameter_count(c: Mapping[str, Any]) -> int:
    """One member's parameter count: the family's model built on the meta device (no memory, no init)."""
    data = TASKS.get(c["data"]["kind"]).make_data(c)
    data.setup("fit")
    with torch.device("meta"):
        model = MODELS.get(c["model"]["family"]).build(c["model"], data.vocab_size)
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------------------------- members


@dataclass
class Member:
    """One job of a group: its composed config, job folder, and what the caller adds to its metrics."""

    cfg: Mapping[str, Any]  # the resolved config, plain dicts
    out_dir: Path
    meta: dict[str, Any] = field(default_factory=dict)  # job_num, overrides, swept, choices ... merged into metrics.json
    hparams: dict[str, Any] | None = None  # the HPARAMS entry (default: a few top-level keys)
    write_hparams: Callable[[Any, dict[str, Any], int], None] | None = None  # (writer, hp metrics, steps): the caller's HPARAMS writer
    logger: Any = None  # a Lightning logger with .experiment (default: TensorBoard in out_dir/tb)


def checkpoint_step(folder: Path | str, c: Mapping[str, Any]) -> int:
    """The step a vectorised checkpoint in ``folder`` resumes from (0: none); a different config's checkpoint is refused."""
    path = vec_checkpoint(folder)
    if not path.is_file():
        return 0
    state = read_vec_checkpoint(path)
    if diff := differences(state["initnorm"].get("config"), c):
        raise ConfigError(f"{folder} holds a vectorised checkpoint (step {state.get('global_step')}) of a different config ({', '.join(diff[:3])}); "
                          f"rerun the command that made it, or pick a new folder with `hydra.sweep.dir=...`, or delete {folder}")
    return int(state["global_step"])


def _writer(member: Member):
    if member.logger is None:
        from lightning.pytorch.loggers import TensorBoardLogger

        lg = member.cfg["logger"]  # the config's TensorBoard logger, as train() instantiates it
        member.logger = TensorBoardLogger(save_dir=str(member.out_dir), name=lg["name"], version=lg["version"], default_hp_metric=lg["default_hp_metric"])
    return member.logger.experiment


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


# ---------------------------------------------------------------------------------------------- stacking


def stack_scalars(base: torch.nn.Module, models: Sequence[torch.nn.Module]) -> dict[str, torch.Tensor]:
    """Float attributes that differ between the members' modules become per-member buffers of ``base``
    (so ``functional_call`` can give each member its own); any other difference cannot be stacked."""
    stacked: dict[str, torch.Tensor] = {}
    named = [dict(m.named_modules()) for m in models]
    for name, mod in base.named_modules():
        for k, v in list(vars(mod).items()):
            if k.startswith("_") or isinstance(v, (torch.Tensor, torch.nn.Module)):
                continue
            values = [getattr(n[name], k) for n in named]
            if all(x == values[0] for x in values):
                continue
            if not all(isinstance(x, float) or (isinstance(x, int) and not isinstance(x, bool)) for x in values):
                raise NotStackable(f"members differ in {name or 'model'}.{k} ({values[0]!r} vs others), which cannot be stacked")
            delattr(mod, k)
            mod.register_buffer(k, torch.tensor(float(values[0])), persistent=False)
            stacked[f"{name}.{k}" if name else k] = torch.tensor([float(x) for x in values])
    return stacked


def partition_by_attributes(models: Sequence[torch.nn.Module]) -> list[list[int]]:
    """Members grouped by the values of every module attribute (not a tensor) on which they differ."""
    named = [dict(m.named_modules()) for m in models]
    differing = []
    for name, mod in models[0].named_modules():
        for k, v in vars(mod).items():
            if k.startswith("_") or isinstance(v, (torch.Tensor, torch.nn.Module)):
                continue
            values = [repr(getattr(n[name], k, None)) for n in named]
            if len(set(values)) > 1:
                differing.append(values)
    parts: dict[tuple, list[int]] = {}
    for i in range(len(models)):
        parts.setdefault(tuple(v[i] for v in differing), []).append(i)
    return list(parts.values())


class _Shim:
    """What ``Trainable.loss`` reads of its module: ``.model`` (here one member's functional model)."""

    def __init__(self, model):
        self.model = model


class Group:
    """The stacked state of E members: flat parameters, optimiser, per-member records."""

    def __init__(self, members: Sequence[Member], device: str | torch.device = "cpu"):
        self.members = list(members)
        self.cs = [dict(m.cfg) for m in self.members]
        c0 = self.cs[0]
        keys = {group_key(c) for c in self.cs}
        if len(keys) != 1:
            raise ConfigError("the members of a vectorised group differ in a key that changes shapes or the graph")
        for c in self.cs:
            validate(c)
            if reason := why_alone(c):
                raise ConfigError(f"job seed={c['seed']} cannot train in a vectorised group: {reason}")
        self.device = torch.device(device)
        self.task = TASKS.get(c0["data"]["kind"])
        self.datas, self.modules, models, tables, roles = [], [], [], [], []
        for c in self.cs:  # each member exactly as train() builds its job
            L.seed_everything(c["seed"], verbose=False)
            data = self.task.make_data(c)
            data.setup("fit")
            built = build_model(c["model"], c["init"], c["param"], data.vocab_size)
            module = self.task.module(built.model, built.roles, built.table, lr=c["lr"], steps=c["steps"], warmup=c["warmup"], optim=c["optim"], schedule=c["schedule"], log_every=c["log_every"])
            self.datas.append(data)
            self.modules.append(module)
            models.append(built.model)
            tables.append(built.table)
            roles.append(built.roles)
        self.base = models[0]
        self.parts = partition_by_attributes(models)  # who could share a model if these cannot
        try:
            self.stacked_buffers = {k: v.to(self.device) for k, v in stack_scalars(self.base, models).items()}
        except NotStackable as exc:
            raise NotStackable(str(exc), self.parts) from None
        self.base.to(self.device).train()
        self.names = [n for n, _ in self.base.named_parameters()]
        self.shapes = [tuple(p.shape) for _, p in self.base.named_parameters()]
        for m in models[1:]:
            if [tuple(p.shape) for p in m.parameters()] != self.shapes:
                raise NotStackable("the members' parameter shapes differ; they cannot be stacked")
        self.sizes = [math.prod(s) for s in self.shapes]
        self.offsets = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        self.E, self.N = len(models), sum(self.sizes)
        # One flat leaf holds every member's parameters, parameter by parameter, each as a contiguous
        # [E, *shape] block: the model reads views of it (no copies), the optimiser steps it whole.
        stacked = [torch.stack([p.detach() for p in ps]).reshape(-1) for ps in zip(*(m.parameters() for m in models))]
        self.flat = torch.cat(stacked).to(self.device)  # written in place by the step, under no_grad
        # Each parameter is a leaf of its own that views ``flat``, and its ``.grad`` a view of one flat
        # gradient buffer, so backward writes every gradient in place. (Views of one flat leaf would
        # make every view's backward allocate, fill and add a zero tensor the size of the whole group.)
        self.grad = torch.zeros_like(self.flat)
        self.params = {n: v.requires_grad_() for n, v in self.views(self.flat).items()}
        for leaf, g in zip(self.params.values(), self.views(self.grad).values()):
            leaf.grad = g
        # The optimiser numbers come from each member's own optimiser (its LightningModule's
        # configure_optimizers): per-role lr, decay and eps of any parameterisation, as its job uses them.
        optimizers, columns = [], []
        for module, model in zip(self.modules, models):
            opt = module.configure_optimizers()
            optimizers.append(opt["optimizer"] if isinstance(opt, dict) else opt)
            e = len(columns)
            where = {n: (self.E * o + e * s, s) for n, o, s in zip(self.names, self.offsets, self.sizes)}
            columns.append({id(p): where[n] for n, p in model.named_parameters()})
        self.opt = VecOptimizer.from_torch(self.flat, optimizers, columns)
        self.loss_fn = type(self.modules[0]).loss
        self.classifier = hasattr(self.modules[0], "evals")
        self.points = probe_points(self.base)
        self.compiled = should_compile(c0["compile"], c0["steps"], self.E)  # auto: from GROUP_FROM member-steps on
        # The steps that measure activations (every callbacks.stats.every_n_steps) stay eager: hooks.
        self._fast = torch.compile(lambda xs, ys: self.losses(xs, ys)[0]) if self.compiled else None
        self.step = 0
        self.active = torch.ones(self.E, dtype=torch.bool)
        self.diverged: list[int | None] = [None] * self.E
        self.val_history: list[list[tuple[int, float]]] = [[] for _ in range(self.E)]
        self.train_losses: list[list[float]] = [[] for _ in range(self.E)]
        self.evals: list[dict[str, list]] = [{} for _ in range(self.E)]

    # ------------------------------------------------------------------ the stacked forward

    def views(self, t: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Every parameter as a view [E, *shape] of the flat tensor (the leaves; gradients flow into ``grad``),
        or of ``t``, another tensor in the flat layout (a copy from before the step, say)."""
        if t is None:
            return self.params
        E = self.E
        return {n: t[E * o : E * (o + s)].view(E, *shape) for n, o, s, shape in zip(self.names, self.offsets, self.sizes, self.shapes)}

    def backward(self, total: torch.Tensor) -> torch.Tensor:
        """Every member's gradient of ``total`` in the flat layout (the buffer ``grad``, refilled)."""
        self.grad.zero_()
        total.backward()
        return self.grad

    def block(self, t: torch.Tensor, i: int) -> torch.Tensor:
        """Parameter ``i``'s elements of ``t`` (the flat layout) as [E, size]."""
        o, s = self.offsets[i], self.sizes[i]
        return t[self.E * o : self.E * (o + s)].view(self.E, s)

    def _model_of(self, params, bufs):
        return lambda x: functional_call(self.base, {**params, **bufs}, (x,))

    def losses(self, xs, ys, acts: bool = False):
        """Each member's training loss on its own batch ([E]); with ``acts`` also act_rms per probe point ([E] each)."""
        loss_fn, points = self.loss_fn, self.points

        def one(params, bufs, x, y):
            shim = _Shim(self._model_of(params, bufs))
            if not acts:
                return loss_fn(shim, (x, y)), {}
            with capture(points, rms) as seen:
                loss = loss_fn(shim, (x, y))
            return loss, dict(seen)

        return vmap(one)(self.views(), self.stacked_buffers, xs, ys)

    @torch.no_grad()
    def evaluate(self, xs, ys):
        """Per member: summed loss and (classifiers) correct predictions on its own batch."""
        loss_fn, classifier = self.loss_fn, self.classifier

        def one(params, bufs, x, y):
            model = self._model_of(params, bufs)
            if classifier:
                logits = model(x)
                return torch.nn.functional.cross_entropy(logits, y, reduction="sum"), (logits.argmax(-1) == y).sum()
            return loss_fn(_Shim(model), (x, y), reduction="sum"), torch.zeros((), dtype=torch.long, device=x.device)

        self.base.eval()
        try:
            return vmap(one)(self.views(), self.stacked_buffers, xs, ys)
        finally:
            self.base.train()

    @torch.no_grad()
    def check_forward(self) -> None:
        """One stacked forward on two examples of each member's first batch, before anything is written:
        a family whose forward cannot be mapped over members (Python control flow on a multiplier
        that differs between them) is found here, and its jobs can still run alone."""
        first = [next(iter(d.train_dataloader().dataset)) for d in self.datas]
        xs, ys = _stack([(x[:2], y[:2]) for x, y in first], self.device)
        try:
            self.losses(xs, ys)
        except RuntimeError as exc:
            if "vmap" not in str(exc):
                raise
            raise NotStackable(f"{type(self.base).__name__}'s forward cannot run over stacked members ({str(exc).splitlines()[0][:160]})", self.parts) from exc

    def factors(self, step: int) -> torch.Tensor:
        return torch.tensor([schedule_factor(step, c["steps"], c["warmup"], c["schedule"]) for c in self.cs], dtype=torch.float64)

    # ------------------------------------------------------------------ checkpoints

    def save(self, step: int) -> None:
        for i, (m, c) in enumerate(zip(self.members, self.cs)):
            path = vec_checkpoint(m.out_dir)
            path.parent.mkdir(parents=True, exist_ok=True)
            state = {
                "vectorized": True,
                "global_step": step,
                "params": self.opt.member_values(self.flat, i).cpu(),
                "optim": self.opt.member_state(i),
                "train_losses": list(self.train_losses[i]),
                "evals": {k: list(v) for k, v in self.evals[i].items()},
                "initnorm": {"config": comparable(c), "val_history": list(self.val_history[i]), "diverged_step": self.diverged[i]},
            }
            tmp = path.with_name(f".{path.name}.tmp")
            torch.save(state, tmp)
            os.replace(tmp, path)  # atomic: the old checkpoint or the new one, never half

    @torch.no_grad()
    def load(self) -> int:
        """Restore every member from its checkpoint; all must be at one step (the launcher groups by it)."""
        states = [read_vec_checkpoint(vec_checkpoint(m.out_dir)) for m in self.members]  # tensors and plain values only
        steps = {int(s["global_step"]) for s in states}
        if len(steps) != 1:
            raise ConfigError(f"the members' checkpoints are at different steps ({sorted(steps)}); group them by step")
        for i, s in enumerate(states):
            self.opt.set_member_values(self.flat, i, s["params"])
            self.opt.load_member_state(i, s["optim"])
            self.train_losses[i] = list(s["train_losses"])
            self.evals[i] = {k: [tuple(e) for e in v] for k, v in s["evals"].items()}
            self.val_history[i] = [tuple(v) for v in s["initnorm"]["val_history"]]
            self.diverged[i] = s["initnorm"]["diverged_step"]
            self.active[i] = self.diverged[i] is None
        return steps.pop()


# ---------------------------------------------------------------------------------------------- instruments


def gradient_records(g: Group, grad: torch.Tensor, step: int, per_param: bool) -> list[list[Record]]:
    """``callbacks.stats.gradient_records`` for every member: norm and RMS per layer over the member's gradients."""
    rows = []  # (layer, role, [E] squared sum, numel)
    index = {n: i for i, n in enumerate(g.names)}
    for layer, named in grouped(g.base).items():
        parts = []
        for n, _ in named:
            i = index[n]
            sq = g.block(grad, i).float().pow(2).sum(1)
            parts.append((n, sq, g.sizes[i]))
        rows.append((layer, "params", torch.stack([p[1] for p in parts]).sum(0), sum(p[2] for p in parts)))
        if per_param:
            rows += [(layer, parameter_role(n), sq, s) for n, sq, s in parts]
    if not rows:
        return [[] for _ in range(g.E)]
    sq_all = torch.stack([r[2] for r in rows], 1).tolist()  # [E][rows]
    out = []
    for e in range(g.E):
        recs = []
        for (layer, role, _, numel), s in zip(rows, sq_all[e]):
            recs += [Record(step, layer, role, "grad_norm", s**0.5), Record(step, layer, role, "grad_rms", (s / numel) ** 0.5)]
        out.append(recs)
    return out


def update_records(g: Group, before: torch.Tensor, step: int) -> list[list[Record]]:
    """‖ΔW‖/‖W‖ per layer over its weight matrices, for every member."""
    index = {n: i for i, n in enumerate(g.names)}
    layers, ratios = [], []
    for layer, named in grouped(g.base, weights_only=True).items():
        old = torch.cat([g.block(before, index[n]) for n, _ in named], 1).float()
        new = torch.cat([g.block(g.flat, index[n]) for n, _ in named], 1).float()
        ratios.append((new - old).pow(2).sum(1).sqrt() / old.pow(2).sum(1).sqrt().clamp_min(1e-30))
        layers.append(layer)
    if not layers:
        return [[] for _ in range(g.E)]
    values = torch.stack(ratios, 1).tolist()
    return [[Record(step, layer, "weights", "update_ratio", v) for layer, v in zip(layers, values[e])] for e in range(g.E)]


# ---------------------------------------------------------------------------------------------- training


def _stack(batches, device):
    return tuple(torch.stack([b[k] for b in batches]).to(device) for k in range(2))


def _eval_sets(data) -> list[tuple[str, list]]:
    loaders = data.val_dataloader()
    loaders = loaders if isinstance(loaders, (list, tuple)) else [loaders]
    names = getattr(data, "eval_names", ("val",))
    return [(name, list(loader)) for name, loader in zip(names, loaders)]


class Abandoned(Exception):
    """The process that launched this group is gone: its results have no one to go to."""


# Steps between two calls of ``train_group``'s ``abandoned`` (a system call; ~2 s of a 6-member Decoder group).
ABANDON_CHECK_EVERY = 100


def train_group(members: Sequence[Member], device: str | torch.device = "cpu", on_done: Callable[[int, dict], None] | None = None,
                abandoned: Callable[[], bool] | None = None) -> list[dict[str, Any]]:
    """Train ``members`` as one stacked model; write each one's job folder; return their metrics in order.
    ``abandoned``: asked every ABANDON_CHECK_EVERY steps; True raises ``Abandoned``, with the last checkpoint left to resume from."""
    c0 = dict(members[0].cfg)
    if c0["threads"]:
        torch.set_num_threads(int(c0["threads"]))
    torch.set_flush_denormal(bool(c0["flush_denormal"]))
    for m in members:
        Path(m.out_dir).mkdir(parents=True, exist_ok=True)
    logs = [_member_log(Path(m.out_dir), i) for i, m in enumerate(members)]
    g = Group(members, device)
    resumed = 0
    if all(vec_checkpoint(m.out_dir).is_file() for m in members):
        resumed = g.load()
    elif any(vec_checkpoint(m.out_dir).is_file() for m in members):
        raise ConfigError("some members of this group have a vectorised checkpoint and some do not; group them by step")
    for d in g.datas:
        d.start_step = resumed
    g.check_forward()
    writers = [_writer(m) for m in members]
    for w in writers:
        write_layout(w)
    for i, (log, c) in enumerate(zip(logs, g.cs)):
        log.info("vectorised group of %d jobs, member %d (seed=%s lr=%s warmup=%s), %d parameters each%s", g.E, i, c["seed"], c["lr"], c["warmup"],
                 g.N, f"; resumed at step {resumed}" if resumed else "")
    streams = [iter(d.train_dataloader().dataset) for d in g.datas]
    evalsets = [_eval_sets(d) for d in g.datas]
    steps = c0["steps"]
    every_val = validation_interval(steps, c0["trainer"]["val_check_interval"])
    log_every = c0["log_every"]
    ckpt_every = c0["checkpoint"]["every_n_steps"]
    stats = (c0["callbacks"] or {}).get("stats")  # callbacks=none has no node
    stats_every = stats["every_n_steps"] if stats else 0
    diag, coord = member_instruments(g)  # callbacks.diagnostics and callbacks.coord, per member

    def write(e: int, records) -> None:
        for r in records:
            writers[e].add_scalar(r.tag, r.value, r.step)

    def validate_now(step: int) -> None:
        for k, (name, _) in enumerate(evalsets[0]):
            totals = torch.zeros(g.E, dtype=torch.float64)
            counts, correct = 0, torch.zeros(g.E, dtype=torch.float64)
            for b in range(len(evalsets[0][k][1])):
                xs, ys = _stack([evalsets[e][k][1][b] for e in range(g.E)], g.device)
                s, ok = g.evaluate(xs, ys)
                totals += torch.tensor(s.tolist(), dtype=torch.float64)  # summed in Python doubles, batch by batch, as the job does
                correct += ok.double().cpu()
                counts += ys[0].numel()
            for e in range(g.E):
                if not g.active[e]:
                    continue
                loss = totals[e].item() / max(1.0, counts)
                if g.classifier:
                    acc = correct[e].item() / counts
                    g.evals[e].setdefault(name, []).append((step, loss, acc))
                    label = EVAL_LABELS.get(name, name)
                    writers[e].add_scalar(f"Loss/{label}", loss, step)
                    writers[e].add_scalar(f"Accuracy/{label}", acc, step)
                    if name == "val":
                        g.val_history[e].append((step, loss))
                else:
                    g.val_history[e].append((step, loss))
                    writers[e].add_scalar(VAL_LOSS, loss, step)

    start = time.perf_counter()
    if coord is not None:
        coord.start(resumed, [m.out_dir for m in members])
    if resumed == 0:
        validate_now(0)  # every curve starts where training starts (as Trainable.on_train_start)
    step = resumed
    while step < steps and bool(g.active.any()):
        if abandoned is not None and step % ABANDON_CHECK_EVERY == 0 and abandoned():
            for log in logs:
                log.warning("the sweep's process is gone: stopped at step %d; rerun the command in this sweep folder to resume", step)
            raise Abandoned(step)
        if ckpt_every > 0 and step > 0 and step % ckpt_every == 0 and step != resumed:
            g.save(step)
        xs, ys = _stack([next(s) for s in streams], g.device)
        measure = stats_every and step % stats_every == 0
        want_acts = bool(measure and stats["activations"] and g.points)
        if g._fast is not None and not want_acts:
            losses, acts = g._fast(xs, ys), {}
        else:
            losses, acts = g.losses(xs, ys, acts=want_acts)
        values = losses.detach().cpu()
        finite = torch.isfinite(values)
        newly = g.active & ~finite
        if g.classifier:
            for e in range(g.E):
                if g.active[e]:
                    g.train_losses[e].append(values[e].item() if finite[e] else math.nan)
        for e in newly.nonzero().flatten().tolist():
            g.diverged[e] = step  # a result, not a crash: frozen here, recorded at this step
            g.active[e] = False
            logs[e].info("diverged at step %d (loss %s); the other members go on", step, values[e].item())
        if not bool(g.active.any()):
            break
        mask = g.active.to(g.device)
        total = torch.where(mask, losses, torch.zeros((), device=g.device)).sum()
        grad = g.backward(total)
        if measure and stats["gradients"]:
            for e, recs in enumerate(gradient_records(g, grad, step, stats["per_param"])):
                if g.active[e]:
                    write(e, recs)
        diagnose = diag is not None and diag.due(step)
        if diagnose:
            for e, recs in enumerate(diag.before_step(step, g.factors(step))):
                if g.active[e]:
                    write(e, recs)
        before = g.flat.clone() if (measure and stats["updates"]) or (diagnose and diag.want_spectral) else None
        g.opt.step(grad, g.factors(step), g.active)
        if measure:
            act_names = list(acts)
            act_vals = torch.stack([acts[n] for n in act_names], 1).tolist() if act_names else [[] for _ in range(g.E)]
            ups = update_records(g, before, step) if stats["updates"] else [[] for _ in range(g.E)]
            for e in range(g.E):
                if g.active[e]:
                    write(e, [Record(step, *n.split("/", 1), "act_rms", v) for n, v in zip(act_names, act_vals[e])] + ups[e])
        for e, recs in enumerate(diag.after_step(step, before) if diagnose else []):
            if g.active[e]:
                write(e, recs)
        for e, recs in enumerate(coord.after_step(step + 1, g.active) if coord is not None else []):
            write(e, recs)  # empty for a frozen member
        if step % log_every == 0:
            f = g.factors(step)
            for e in range(g.E):
                if g.active[e]:
                    writers[e].add_scalar(TRAIN_LOSS, values[e].item(), step)
                    writers[e].add_scalar(LEARNING_RATE, g.cs[e]["lr"] * f[e].item(), step)
        step += 1
        if step % every_val == 0:
            validate_now(step)
    if step == steps and bool(g.active.any()) and any(not g.val_history[e] or g.val_history[e][-1][0] != step for e in range(g.E) if g.active[e]):
        validate_now(step)
    wall = time.perf_counter() - start
    if coord is not None:
        coord.finish([m.out_dir for m in members])

    results = []
    for e, (m, c) in enumerate(zip(members, g.cs)):
        module = g.modules[e]
        module.val_history, module.diverged_step = g.val_history[e], g.diverged[e]
        if g.classifier:
            module.train_losses, module.evals = g.train_losses[e], g.evals[e]
        diverged = g.diverged[e] is not None
        done = g.diverged[e] if diverged else step
        metrics = {
            "status": "finished",
            "final_val_loss": math.nan if diverged else (g.val_history[e][-1][1] if g.val_history[e] else math.nan),
            "best_val_loss": min((v for _, v in g.val_history[e]), default=math.nan),
            "val_history": g.val_history[e],
            "diverged": diverged,
            "diverged_step": g.diverged[e],
            "steps": done,
            "ms_per_step": 1000.0 * wall / max(1, step - resumed) / g.E,  # this member's share of the group's step
            "resumed_from_step": resumed,
            "wall_s": wall,
            "params": g.N,
            "seed": c["seed"],
            "vectorized": {"group_size": g.E, "member": e, "compiled": g.compiled, "group_ms_per_step": 1000.0 * wall / max(1, step - resumed), "device": str(g.device)},
            "summary_metrics": list(c["summary"]["metrics"]),
            "summary_plots": list(c["summary"]["plots"]),
            "provenance": describe(),
            "config": comparable(c),
        }
        metrics |= m.meta
        extra = module.extra_metrics(c)
        metrics |= extra
        write_metrics(Path(m.out_dir), metrics)
        hp = {"hp/final_val_loss": metrics["final_val_loss"], "hp/best_val_loss": metrics["best_val_loss"], "hp/diverged": float(diverged),
              "hp/diverged_step": g.diverged[e]}
        hp |= {f"hp/{k}": float(v) for k, v in extra.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        hparams = m.hparams if m.hparams is not None else {k: c[k] for k in ("seed", "lr", "warmup", "steps") if k in c}
        if m.write_hparams is not None:
            m.write_hparams(m.logger.experiment, hp, done)
        else:
            m.logger.log_hyperparams(hparams, {k: v for k, v in hp.items() if v is not None})  # no diverged_step for a run that did not diverge
        m.logger.finalize("success")
        status = f"diverged at step {g.diverged[e]}" if diverged else f"final validation loss {metrics['final_val_loss']:.4f}"
        logs[e].info("%s (%d steps, group of %d: %.2f ms per member-step)", status, done, g.E, metrics["ms_per_step"])
        for h in list(logs[e].handlers):
            logs[e].removeHandler(h)
            h.close()
        results.append(metrics)
        if on_done is not None:
            on_done(e, metrics)
    return results
