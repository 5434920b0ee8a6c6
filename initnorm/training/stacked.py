"""E >= 2 jobs of a sweep as one stacked model, trained by Lightning: a leading "member" dimension on every parameter.

``StackedModule`` is the LightningModule of a vectorised group (``training/group.py`` builds it
and runs it under the same ``Trainer`` and callbacks as a job alone):

- each member's model is built exactly as its job builds it, then the parameters are stacked
  into one flat tensor; one definition of each family serves all: ``torch.func.functional_call``
  runs the family's own module with a member's parameters and ``torch.func.vmap`` maps it over the
  members. Float attributes that differ between members (µP's logit multiplier, the attention
  scale, any forward multiplier a new parameterisation adds, model=custom's hook multipliers)
  become per-member buffers of the module, found by comparing the members' modules, so new
  multipliers need no code here;
- the loss is the task's own (``Trainable.loss``); the step is ``vec_optim.VecOptimizer`` with the
  numbers of each member's own torch optimiser, behind a ``torch.optim.Optimizer`` so that
  Lightning's hooks (``on_before_optimizer_step``) run as for a job alone;
- per member: divergence (NaN/inf loss: recorded at its step, the member frozen, the others go on;
  all frozen: the fit stops), train/val loss and lr in its own events, the classifier's records;
- ``members``: the member view every instrument reads (``callbacks/members.py``).

Losses equal the job run alone to float32 rounding (batched kernels sum in another order); see
docs/vectorized.md for how far they drift over a full run.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.func import functional_call, vmap
from torch.utils.data import DataLoader, IterableDataset

from initnorm.callbacks.probes import Points, capture, probe_points
from initnorm.tb import LEARNING_RATE, TRAIN_LOSS, VAL_LOSS
from initnorm.training.checkpoints import resume_loop_at
from initnorm.training.classifier import EVAL_LABELS, correct
from initnorm.training.divergence import Divergence
from initnorm.training.optim import schedule_factor
from initnorm.training.validation import at_start, missing_at, validate_now
from initnorm.training.vec_optim import NotStackable, VecOptimizer


def _plain_attributes(mod: torch.nn.Module) -> list[tuple[str, Any]]:
    """A module's own attributes that may differ between members: not private, not a tensor or submodule, and
    not a method bound to the module itself (``model=custom`` adds ``parameter_roles`` so: code, not a number)."""
    return [(k, v) for k, v in vars(mod).items()
            if not k.startswith("_") and not isinstance(v, (torch.Tensor, torch.nn.Module)) and getattr(v, "__self__", None) is not mod]


def stack_scalars(base: torch.nn.Module, models: Sequence[torch.nn.Module]) -> dict[str, torch.Tensor]:
    """Float attributes that differ between the members' modules become per-member buffers of ``base``
    (so ``functional_call`` can give each member its own); any other difference cannot be stacked."""
    stacked: dict[str, torch.Tensor] = {}
    named = [dict(m.named_modules()) for m in models]
    for name, mod in base.named_modules():
        for k, _ in _plain_attributes(mod):
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
        for k, _ in _plain_attributes(mod):
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


def _stack(batches, device=None):
    stacked = (torch.stack([b[k] for b in batches]) for k in range(2))
    return tuple(t if device is None else t.to(device) for t in stacked)


class _Zipped(IterableDataset):
    """Every member's training stream, batch by batch, stacked: batch ``s`` of member ``e`` is ``xs[e]``."""

    def __init__(self, datas):
        self.datas = datas

    def __iter__(self):
        streams = [iter(d.train_dataloader().dataset) for d in self.datas]
        while True:
            yield _stack([next(s) for s in streams])


class StackedData(L.LightningDataModule):
    """The members' data modules as one: stacked training batches, and per evaluation set stacked batches."""

    def __init__(self, datas: Sequence[L.LightningDataModule]):
        super().__init__()
        self.datas = list(datas)
        self.eval_names = tuple(getattr(self.datas[0], "eval_names", ("val",)))
        self._evals: list[list] | None = None

    @property
    def start_step(self) -> int:
        return self.datas[0].start_step

    @start_step.setter
    def start_step(self, step: int) -> None:
        for d in self.datas:
            d.start_step = step  # batch s of each member is a function of (its seed, s)

    def train_dataloader(self):
        return DataLoader(_Zipped(self.datas), batch_size=None)

    def val_dataloader(self):
        if self._evals is None:  # fixed sets: stacked once
            per_member = []
            for d in self.datas:
                loaders = d.val_dataloader()
                per_member.append([list(loader) for loader in (loaders if isinstance(loaders, (list, tuple)) else [loaders])])
            self._evals = [[_stack([m[k][b] for m in per_member]) for b in range(len(per_member[0][k]))]
                           for k in range(len(self.eval_names))]
        loaders = [DataLoader(batches, batch_size=None) for batches in self._evals]
        return loaders if len(loaders) > 1 else loaders[0]


class StackedOptimizer(torch.optim.Optimizer):
    """``VecOptimizer`` behind torch's interface, so Lightning drives it (and calls its hooks) as any optimiser."""

    def __init__(self, module: StackedModule):
        super().__init__(list(module.params.values()), {"lr": 0.0})
        self.module = module

    @torch.no_grad()
    def step(self, closure: Callable | None = None):
        if closure is not None:
            with torch.enable_grad():
                closure()  # Lightning's hooks before the step (on_before_optimizer_step) run here
        m = self.module
        m.vec.step(m.grad, m.factors(m.global_step), m.active)


class StackedModule(L.LightningModule):
    """E members' models as one flat tensor; see the module docstring."""

    def __init__(self, configs: Sequence[Mapping[str, Any]], datas: Sequence[L.LightningDataModule], modules: Sequence[L.LightningModule],
                 folders: Sequence[Path], logs: Sequence[logging.Logger], device: str | torch.device = "cpu", compiled: bool = False):
        super().__init__()
        self.automatic_optimization = False  # as Trainable: the step is taken in training_step
        self.cs, self.datas, self.member_modules = list(configs), list(datas), list(modules)
        self.folders, self.logs = [Path(f) for f in folders], list(logs)
        self.member_writers: list[list] = [[] for _ in folders]  # each member's TensorBoard writers, set before the fit
        models = [m.model for m in self.member_modules]
        self.base = models[0]
        self.parts = partition_by_attributes(models)  # who could share a model if these cannot
        device = torch.device(device)
        try:
            self.stacked_buffers = {k: v.to(device) for k, v in stack_scalars(self.base, models).items()}
        except NotStackable as exc:
            raise NotStackable(str(exc), self.parts) from None
        self.base.to(device).train()
        named = list(self.base.named_parameters())
        self.names = [n for n, _ in named]
        self.shapes = [tuple(p.shape) for _, p in named]
        for m in models[1:]:
            if [tuple(p.shape) for p in m.parameters()] != self.shapes:
                raise NotStackable("the members' parameter shapes differ; they cannot be stacked")
        self.sizes = [math.prod(s) for s in self.shapes]
        self.offsets = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        self.E, self.N = len(models), sum(self.sizes)
        # One flat tensor holds every member's parameters, parameter by parameter, each as a contiguous
        # [E, *shape] block: the model reads views of it (no copies), the optimiser steps it whole.
        # Each parameter is a leaf of its own that views ``flat``, and its ``.grad`` a view of one flat
        # gradient buffer, so backward writes every gradient in place. (Views of one flat leaf would
        # make every view's backward allocate, fill and add a zero tensor the size of the whole group.)
        per_param = zip(*(m.parameters() for m in models))  # each parameter of every member, member first
        self.flat = torch.cat([torch.stack([p.detach() for p in ps]).reshape(-1) for ps in per_param]).to(device)
        self.grad = torch.zeros_like(self.flat)
        self._bind()
        # The optimiser numbers come from each member's own optimiser (its LightningModule's
        # configure_optimizers): per-role lr, decay and eps of any parameterisation, as its job uses them.
        optimizers, columns = [], []
        for e, (module, model) in enumerate(zip(self.member_modules, models)):
            opt = module.configure_optimizers()
            optimizers.append(opt["optimizer"] if isinstance(opt, dict) else opt)
            where = {n: (self.E * o + e * s, s) for n, o, s in zip(self.names, self.offsets, self.sizes)}
            columns.append({id(p): where[n] for n, p in model.named_parameters()})
        self.vec = VecOptimizer.from_torch(self.flat, optimizers, columns)
        self.loss_fn = type(self.member_modules[0]).loss
        self.classifier = hasattr(self.member_modules[0], "evals")
        self.points = probe_points(self.base)
        self.compiled = compiled
        # The steps that measure activations (every callbacks.stats.every_n_steps) stay eager: hooks.
        self._fast = torch.compile(lambda xs, ys: self.losses(xs, ys)[0]) if compiled else None
        self.divergence = Divergence(self.E)
        self.val_history: list[list[tuple[int, float]]] = [[] for _ in range(self.E)]
        self.train_losses: list[list[float]] = [[] for _ in range(self.E)]
        self.evals: list[dict[str, list]] = [{} for _ in range(self.E)]
        self.resumed = 0
        self._capture: tuple[Points, Callable, dict] | None = None
        self._val: list | None = None
        self.members = StackedMembers(self)

    @property
    def active(self) -> torch.Tensor:
        return self.divergence.active

    @property
    def diverged(self) -> list[int | None]:
        return self.divergence.steps

    def _bind(self) -> None:
        """The parameter leaves (views of ``flat``) and their gradients (views of ``grad``)."""
        self.params = {n: v.requires_grad_() for n, v in self.views(self.flat).items()}
        for leaf, g in zip(self.params.values(), self.views(self.grad).values()):
            leaf.grad = g

    # ------------------------------------------------------------------ the stacked forward

    def views(self, t: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every parameter as a view [E, *shape] of ``t``, a tensor in the flat layout."""
        E = self.E
        return {n: t[E * o : E * (o + s)].view(E, *shape) for n, o, s, shape in zip(self.names, self.offsets, self.sizes, self.shapes)}

    def block(self, t: torch.Tensor, i: int) -> torch.Tensor:
        """Parameter ``i``'s elements of ``t`` (the flat layout) as [E, size]."""
        o, s = self.offsets[i], self.sizes[i]
        return t[self.E * o : self.E * (o + s)].view(self.E, s)

    def _model_of(self, params, bufs):
        return lambda x: functional_call(self.base, {**params, **bufs}, (x,))

    def losses(self, xs, ys, points: Points | None = None, reduce: Callable | None = None):
        """Each member's training loss on its own batch ([E]); with ``points`` also ``reduce`` of each point per member."""
        loss_fn = self.loss_fn

        def one(params, bufs, x, y):
            shim = _Shim(self._model_of(params, bufs))
            if not points:
                return loss_fn(shim, (x, y)), {}
            with capture(points, reduce) as seen:
                loss = loss_fn(shim, (x, y))
            return loss, dict(seen)

        return vmap(one)(self.params, self.stacked_buffers, xs, ys)

    @torch.no_grad()
    def evaluate(self, xs, ys):
        """Per member: summed loss and (classifiers) correct predictions on its own batch."""
        loss_fn, classifier = self.loss_fn, self.classifier

        def one(params, bufs, x, y):
            model = self._model_of(params, bufs)
            if classifier:
                logits = model(x)
                return torch.nn.functional.cross_entropy(logits, y, reduction="sum"), correct(logits, y)
            return loss_fn(_Shim(model), (x, y), reduction="sum"), torch.zeros((), dtype=torch.long, device=x.device)

        self.base.eval()
        try:
            return vmap(one)(self.params, self.stacked_buffers, xs, ys)
        finally:
            self.base.train()

    @torch.no_grad()
    def check_forward(self) -> None:
        """One stacked forward on two examples of each member's first batch, before anything is written:
        a family whose forward cannot be mapped over members (Python control flow on a multiplier
        that differs between them) is found here, and its jobs can still run alone."""
        first = [next(iter(d.train_dataloader().dataset)) for d in self.datas]
        xs, ys = _stack([(x[:2], y[:2]) for x, y in first], self.flat.device)
        try:
            self.losses(xs, ys)
        except RuntimeError as exc:
            if "vmap" not in str(exc):
                raise
            raise NotStackable(f"{type(self.base).__name__}'s forward cannot run over stacked members ({str(exc).splitlines()[0][:160]})",
                               self.parts) from exc

    def factors(self, step: int) -> torch.Tensor:
        return torch.tensor([schedule_factor(step, c["steps"], c["warmup"], c["schedule"]) for c in self.cs], dtype=torch.float64)

    # ------------------------------------------------------------------ Lightning

    def configure_optimizers(self):
        return StackedOptimizer(self)

    def training_step(self, batch, batch_idx):
        xs, ys = batch
        step = self.global_step
        request = self._capture
        if self._fast is not None and request is None:
            losses = self._fast(xs, ys)
        else:
            losses, seen = self.losses(xs, ys, *(request[:2] if request else (None, None)))
            if request:
                request[2].update(seen)
        values = losses.detach().cpu()
        if self.classifier:
            finite = torch.isfinite(values)
            for e in range(self.E):
                if self.active[e]:
                    self.train_losses[e].append(values[e].item() if finite[e] else math.nan)
        for e in self.divergence.check(values, step):  # frozen at this step; the others go on
            self.logs[e].info("diverged at step %d (loss %s); the other members go on", step, values[e].item())
        if self.divergence.stopped:
            self.trainer.should_stop = True
            return None
        mask = self.active.to(losses.device)
        total = torch.where(mask, losses, torch.zeros((), device=losses.device)).sum()
        self.grad.zero_()
        self.manual_backward(total)
        self.optimizers().step()
        if step % self.cs[0]["log_every"] == 0:
            f = self.factors(step)
            for e in range(self.E):
                if self.active[e]:
                    for w in self.member_writers[e]:
                        w.add_scalar(TRAIN_LOSS, values[e].item(), step)
                        w.add_scalar(LEARNING_RATE, self.cs[e]["lr"] * f[e].item(), step)
        return total

    def on_fit_start(self) -> None:
        if self.resumed:
            resume_loop_at(self.trainer, self.resumed)  # before any callback's on_train_start reads the step

    def on_train_start(self) -> None:
        if at_start(self, self.val_history):
            validate_now(self, self.flat.device)  # every curve starts where training starts, as a job alone's

    def validate_last(self) -> None:
        """The last step's validation where the loop's interval missed it, for the members alive."""
        if not self.divergence.stopped and missing_at(self.global_step, self.val_history, self.active.tolist()):
            validate_now(self, self.flat.device)

    def on_validation_epoch_start(self) -> None:
        self._val = [[torch.zeros(self.E, dtype=torch.float64), 0,
                      torch.zeros(self.E, dtype=torch.float64)] for _ in self.trainer.datamodule.eval_names]

    def validation_step(self, batch, batch_idx, dataloader_idx: int = 0):
        xs, ys = batch
        s, ok = self.evaluate(xs, ys)
        acc = self._val[dataloader_idx]
        acc[0] += torch.tensor(s.tolist(), dtype=torch.float64)  # summed in Python doubles, batch by batch, as the job does
        acc[2] += ok.double().cpu()
        acc[1] += ys[0].numel()

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        step = self.global_step
        for (totals, counts, right), name in zip(self._val, self.trainer.datamodule.eval_names):
            for e in range(self.E):
                if not self.active[e]:
                    continue
                loss = totals[e].item() / max(1.0, counts)
                if self.classifier:
                    acc = right[e].item() / counts
                    self.evals[e].setdefault(name, []).append((step, loss, acc))
                    label = EVAL_LABELS.get(name, name)
                    for w in self.member_writers[e]:
                        w.add_scalar(f"Loss/{label}", loss, step)
                        w.add_scalar(f"Accuracy/{label}", acc, step)
                    if name == "val":
                        self.val_history[e].append((step, loss))
                else:
                    self.val_history[e].append((step, loss))
                    for w in self.member_writers[e]:
                        w.add_scalar(VAL_LOSS, loss, step)
        self._val = None

    # ------------------------------------------------------------------ one member read out

    def member_state(self, e: int) -> dict[str, Any]:
        """What member ``e``'s checkpoint holds beside the step and config (``checkpoints.MemberCheckpoints.save``)."""
        return {"params": self.vec.member_values(self.flat, e).cpu(), "optim": self.vec.member_state(e),
                "train_losses": list(self.train_losses[e]),
                "evals": {k: list(v) for k, v in self.evals[e].items()}, "val_history": list(self.val_history[e]),
                "diverged_step": self.diverged[e]}

    @torch.no_grad()
    def load_member_state(self, e: int, s: Mapping[str, Any]) -> None:
        self.vec.set_member_values(self.flat, e, s["params"])
        self.vec.load_member_state(e, s["optim"])
        self.train_losses[e] = list(s["train_losses"])
        self.evals[e] = {k: [tuple(x) for x in v] for k, v in s["evals"].items()}
        self.val_history[e] = [tuple(v) for v in s["initnorm"]["val_history"]]
        self.divergence.restore(e, s["initnorm"]["diverged_step"])


class StackedMembers:
    """The member view of a ``StackedModule`` (the interface in ``callbacks/members.py``)."""

    def __init__(self, m: StackedModule):
        self.m = m
        self.E, self.model = m.E, m.base
        self.folders = m.folders
        self.configs = m.cs

    def datamodules(self) -> list:
        return self.m.datas

    def active(self) -> list[bool]:
        return self.m.active.tolist()

    def writers(self) -> list[list]:
        return self.m.member_writers

    def params(self) -> dict[str, torch.Tensor]:
        return {n: p.detach() for n, p in self.m.params.items()}

    def grads(self) -> dict[str, torch.Tensor]:
        return self.m.views(self.m.grad)

    def rates(self) -> dict[str, torch.Tensor]:
        m = self.m
        f = m.factors(m.global_step).to(device=m.vec.rates.device)
        return {n: m.block(m.vec.rates, i)[:, 0] * f for i, n in enumerate(m.names)}  # LambdaLR: base_lr x factor, in double

    def adam(self) -> dict[str, tuple] | None:
        m, vec = self.m, self.m.vec
        if vec.exp_avg_sq is None:
            return None
        return {n: (m.block(vec.exp_avg_sq, i), vec.steps, vec.beta2, m.block(vec.eps64, i)) for i, n in enumerate(m.names)}

    @contextlib.contextmanager
    def capture(self, points: Points, reduce: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[dict[str, torch.Tensor]]:
        seen: dict[str, torch.Tensor] = {}
        self.m._capture = (points, reduce, seen)  # the next training forward runs through the hooks, under vmap
        try:
            yield seen
        finally:
            self.m._capture = None

    def member_loss(self, e: int, batch) -> torch.Tensor:
        m = self.m
        member = {n: p[e] for n, p in m.params.items()} | {n: b[e] for n, b in m.stacked_buffers.items()}
        xs, ys = batch
        return m.loss_fn(_Shim(m._model_of(member, {})), (xs[e], ys[e]), reduction="sum")

    @torch.no_grad()
    def forward(self, inputs: torch.Tensor, points: Points, reduce: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        m = self.m

        def one(params, bufs, x):
            with capture(points, reduce) as seen:
                m._model_of(params, bufs)(x)
            return dict(seen)

        m.base.eval()  # as the callback measures a job alone: the model in eval mode
        try:
            return vmap(one)(m.params, m.stacked_buffers, inputs)
        finally:
            m.base.train()
