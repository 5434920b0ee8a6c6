"""The one LightningModule: E >= 1 jobs trained as one, a job alone being a group of one, so
divergence, validation, checkpoints, resume and the record are written once for every launcher.

``Engine`` holds its members over one flat parameter tensor (``training/stack.py``): each member is
the family's or the user's own module, ``engine.members[e]``, whose parameters view their rows of
it. One step, one validation, one optimiser, one divergence stop and one set of records serve every E,
under Lightning's ``Trainer`` with the config's callbacks. The optimiser is torch's (``training/optimizers.py``):
each member steps its own instance over its views, with its per-role rates, decays and ε from its
parameterisation's table; where a probe at set-up shows that ``vec_optim.VecOptimizer`` steps as that
optimiser does, bit for bit, the members step the flat tensor at once instead (``optimizer``: ``torch`` | ``flat``,
in the record). Either way the rate lives in one place, the groups' ``lr`` (``param_groups``), which the
schedule sets at each step as ``LambdaLR`` does and which the step reads.

A family's LightningModule is a small subclass that gives only what is the family's own:

- ``loss(model, batch, reduction)``: the training loss of ``model`` (a callable: one member) on ``batch``;
- ``evaluate(model, batch)``: the summed metrics of an evaluation batch (default: the summed loss);
  each becomes ``<Metric>/<set>`` in TensorBoard (``Loss/validation``, ``Accuracy/train sample``);
- ``extra_metrics(c, history)``: its own numbers for the record, from a member's ``History``.

Per member: divergence (a NaN/inf loss is recorded at its step, the member frozen, the others go on;
when none is left the fit stops), its horizon (``steps``: it retires at its own last step, frozen from
then on, its validations its own: ``training/horizons.py``), the train loss and learning rate in its own
events every ``log_every`` steps, every validation, every training loss. ``member_view()`` is what the
instruments read (``callbacks/members.py``, ``training/view.py``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import nn

from initnorm import tb
from initnorm.errors import ConfigError
from initnorm.training import vec_isa
from initnorm.training.checkpoints import resume_loop_at
from initnorm.training.compiling import hooked, submodules
from initnorm.training.distributed import check_same, mean_over_ranks, shard
from initnorm.training.divergence import Divergence
from initnorm.training.optim import optimiser_groups, overwritten_rate, schedule_factor
from initnorm.training.optimizers import build, entry, load_named_state, named_state
from initnorm.training.stack import Stack
from initnorm.training.validation import at_start, missing_at, scheduled, validate_now, validation_interval
from initnorm.training.vec_optim import VecOptimizer, probe


@dataclass
class History:
    """What a member's run leaves for its record: every training loss, every evaluation, the validation curve."""

    train_losses: list[float] = field(default_factory=list)
    evals: dict[str, list[tuple[int, dict[str, float]]]] = field(default_factory=dict)  # set -> [(step, {metric: value})]
    val: list[tuple[int, float]] = field(default_factory=list)  # (step, validation loss)
    diverged_step: int | None = None

    def state(self) -> dict[str, Any]:
        return {"train_losses": list(self.train_losses), "evals": {k: [(s, dict(m)) for s, m in v] for k, v in self.evals.items()},
                "val": [tuple(v) for v in self.val], "diverged_step": self.diverged_step}

    @classmethod
    def of(cls, s: Mapping[str, Any]) -> History:
        return cls([float(x) for x in s["train_losses"]], {k: [(int(st), dict(m)) for st, m in v] for k, v in s["evals"].items()},
                   [(int(st), float(x)) for st, x in s["val"]], s["diverged_step"])


@dataclass
class BuiltMember:
    """One member as its job builds it: its resolved config, data module, model (roles applied), roles and table."""

    config: Mapping[str, Any]
    data: L.LightningDataModule
    model: nn.Module
    roles: Mapping[str, Any]
    table: Any
    folder: Path
    log: logging.Logger


class EngineOptimizer(torch.optim.Optimizer):
    """The members' optimisers behind torch's interface, so Lightning drives them and calls its hooks as any
    optimiser's. ``param_groups``: every member's groups (``member``: whose; ``initial_lr``: its peak rate), the very
    groups the members' optimisers (or the flat step) read, each ``lr`` the rate its step takes now."""

    def __init__(self, engine: Engine, groups: Sequence[dict]):
        super().__init__(list(groups), {"lr": 0.0})
        self.engine = engine

    @torch.no_grad()
    def step(self, closure: Callable | None = None):
        if closure is not None:
            with torch.enable_grad():
                closure()  # Lightning's hooks before the step (on_before_optimizer_step) run here
        self.engine.take_step()


class Engine(L.LightningModule):
    """E >= 1 members trained as one; see the module docstring. Families subclass it with ``loss`` (and may add
    ``evaluate``, ``extra_metrics``)."""

    def __init__(self, built: Sequence[BuiltMember], device: str | torch.device = "cpu", compiled: bool = False):
        super().__init__()
        self.automatic_optimization = False  # the step is taken in training_step: Lightning's closure and hooks cost several %
        device = torch.device(device)
        self.configs = [b.config for b in built]
        self.datas, self.folders, self.logs = [b.data for b in built], [b.folder for b in built], [b.log for b in built]
        self.roles, self.tables = [b.roles for b in built], [b.table for b in built]
        self.stack = Stack([b.model for b in built], device)
        self.members = nn.ModuleList(self.stack.members)  # member e: its family's (or the user's) own module
        self.E, self.N = self.stack.E, self.stack.N
        c0 = self.configs[0]
        self.log_every = int(c0["log_every"])  # the same for every member (training/group.py)
        # Each member's horizon and validation interval, as its job alone has them; the fit runs to the longest, whose
        # interval is Lightning's own (the engine validates at the others' points: on_train_batch_end).
        self.horizons = [int(c["steps"]) for c in self.configs]
        self.intervals = [validation_interval(h, c["trainer"]["val_check_interval"]) for h, c in zip(self.horizons, self.configs)]
        self.steps = max(self.horizons)
        self.interval = self.intervals[self.horizons.index(self.steps)]
        self.retired = torch.zeros(self.E, dtype=torch.bool)  # members past their last step (training/horizons.py)
        self._active: torch.Tensor | None = None  # ``active``, kept until a member retires, diverges or is loaded
        groups = [optimiser_groups(m, r, t, c["lr"], c["optim"]) for m, r, t, c in zip(self.members, self.roles, self.tables, self.configs)]
        for e, member in enumerate(groups):
            for g in member:
                g["member"], g["initial_lr"] = e, g["lr"]
        self.vec, self.member_optimizers = self._optimizers(groups)
        self.optimizer = EngineOptimizer(self, [g for member in groups for g in member])
        self._collect_groups()
        self.divergence = Divergence(self.E)
        self.history = [History() for _ in range(self.E)]
        self.writers: list[list] = [[] for _ in range(self.E)]  # each member's tracker writers (training/trackers.py), set by fit
        self.resumed = 0
        self.compiled = compiled
        if compiled and torch.device(device).type == "cpu":  # the compiler's CPU check, once per machine (training/vec_isa.py)
            vec_isa.settle()
        self._fast = torch.compile(lambda xs, ys, live: self.stack.losses(self.loss, xs, ys, live=live)[0]) if compiled else None
        self._watched = submodules(self.members) if compiled else []  # where an instrument's hook would make a step eager
        self._capture: tuple | None = None  # an instrument's request for the next training forward (training/view.py)
        self._rates_at: torch.Tensor | None = None  # the schedule factors the groups' rates were last set with
        self._sums: list[dict[str, torch.Tensor]] = []
        self._validating = torch.zeros(self.E, dtype=torch.bool)  # the members recording the validation in progress
        self._counts: list[int] = []

    # ------------------------------------------------------------------ what a family gives

    def loss(self, model: Callable, batch, reduction: str = "mean") -> torch.Tensor:
        raise NotImplementedError

    def evaluate(self, model: Callable, batch) -> dict[str, torch.Tensor]:
        """The summed metrics of one evaluation batch; each is divided by the number of targets (``y.numel()``)."""
        return {"loss": self.loss(model, batch, "sum")}

    def extra_metrics(self, c: Mapping[str, Any], history: History) -> dict[str, Any]:
        """A family's own numbers for a member's record (``c``: its resolved config); numbers among them also go to
        its HPARAMS entry as ``hp/<name>``."""
        return {}

    # ------------------------------------------------------------------ the step

    @property
    def active(self) -> torch.Tensor:
        """Members still training: neither diverged nor retired (read a dozen times a step; made again only after a
        change: ``retire``, a divergence, a member loaded)."""
        if self._active is None:
            self._active = self.divergence.active & ~self.retired
        return self._active

    @property
    def over(self) -> bool:
        """No member is left to train."""
        return not bool(self.active.any())

    def retire(self, e: int) -> None:
        """Member ``e`` has taken its last step: frozen from now on (no update, no decay, no moment, no step count), no
        more losses, validations or instruments' records (its writers dropped, its trackers are finished)."""
        self.retired[e] = True
        self._active = None
        self.writers[e] = []

    def _live(self, alive: torch.Tensor) -> torch.Tensor | None:
        """The members to compute (indices on the members' device), None when it is every member."""
        return None if bool(alive.all()) else alive.nonzero().flatten().to(self.stack.flat.device)

    def factors(self, step: int) -> torch.Tensor:
        """Each member's schedule factor at ``step`` (float64: LambdaLR's base lr x factor is taken in double)."""
        return torch.tensor([schedule_factor(step, c["steps"], c["warmup"], c["schedule"]) for c in self.configs], dtype=torch.float64)

    def configure_optimizers(self):
        return self.optimizer

    def _optimizers(self, groups: list[list[dict]]) -> tuple[VecOptimizer | None, list | None]:
        """The flat step where the members' optimiser has one and the probe shows it equals torch's, bit for bit, with
        these groups' numbers; else each member's own torch optimiser over its views, with a stacked group's Muon
        matrices stepped at once where ``muon_group`` fits (``self.matrices``)."""
        self.matrices = None
        e0 = entry(self.configs[0]["optim"])
        flat = e0.flat
        if flat and all(entry(c["optim"]).flat == flat for c in self.configs):
            betas = [c["optim"].get("betas", (0.9, 0.999)) for c in self.configs]
            momentum = [c["optim"].get("momentum", 0.0) for c in self.configs]
            if probe(flat, groups, betas, momentum, lambda gs, e: build(gs, self.configs[e]["lr"], self.configs[e]["optim"])):
                where = [{id(p): self.stack.positions(e)[n] for n, p in m.named_parameters()} for e, m in enumerate(self.members)]
                return VecOptimizer.from_groups(flat, self.stack.flat, groups, where, betas, momentum), None
        if e0.stacked_matrices and all(entry(c["optim"]) is e0 for c in self.configs):
            from initnorm.training.muon_group import MuonMatrices

            ortho = [[g for g in member if g.get("muon")] for member in groups]
            if MuonMatrices.fits(self.configs, ortho):
                self.matrices = MuonMatrices(self.stack, ortho, self.configs[0]["optim"])
                groups = [[g for g in member if not g.get("muon")] for member in groups]
        return None, [build(gs, c["lr"], c["optim"]) for gs, c in zip(groups, self.configs)]

    @property
    def optimizer_path(self) -> str:
        """What steps the members: ``flat`` (``vec_optim``, equal to torch's by the probe), ``torch`` (each member's own),
        or ``muon_stack`` (each member's own AdamW, the Muon matrices of every member at once: ``muon_group``)."""
        return "flat" if self.vec is not None else "muon_stack" if self.matrices is not None else "torch"

    def _collect_groups(self) -> None:
        """The engine's groups are the members' optimisers' own (a torch ``load_state_dict`` makes new group dicts)."""
        if self.member_optimizers is not None:
            self.optimizer.param_groups = [g for o in self.member_optimizers for g in o.param_groups] + (
                self.matrices.groups if self.matrices is not None else [])

    def training_step(self, batch, batch_idx):
        xs, ys = shard(batch)  # this rank's rows of the global batch (one run across processes: training/distributed.py)
        step = self.global_step
        if self.over:  # the last members retired, the others diverged before
            self.trainer.should_stop = True
            return None
        request = self._capture
        live = self._live(self.active)  # only the members still training are computed
        if self._fast is not None and request is None and not hooked(self._watched):
            losses, seen = self._fast(xs, ys, live), {}
        else:
            losses, seen = self.stack.losses(self.loss, xs, ys, *(request[:2] if request else (None, None)), live=live)
        if request:
            request[2].update(seen)
        values = mean_over_ranks(losses.detach()).cpu()  # the global batch's loss, the same in every rank
        alive = self.active.tolist()
        for e, v in enumerate(values.tolist()):
            if alive[e]:
                self.history[e].train_losses.append(v if math.isfinite(v) else math.nan)
        for e in self.divergence.check(torch.where(self.active, values, 0.0), step):  # frozen at this step; the others go on
            self._active = None
            self.history[e].diverged_step = step
            self.logs[e].info("diverged at step %d (loss %s)%s", step, values[e].item(), "; the other members go on" if self.E > 1 else "")
        if self.over:
            self.trainer.should_stop = True
            return None
        total = torch.where(self.active.to(losses.device), losses, torch.zeros((), device=losses.device)).sum()
        self.stack.zero_grad()
        self.manual_backward(total)
        self._set_rates(step)
        self.optimizers().step()
        if step % self.log_every == 0:
            factors = self._rates_at.tolist()
            for e in range(self.E):
                if self.active[e]:
                    for w in self.writers[e]:
                        w.add_scalar(tb.TRAIN_LOSS, values[e].item(), step)
                        w.add_scalar(tb.LEARNING_RATE, self.configs[e]["lr"] * factors[e], step)
            self.log("loss", values[self.active].mean().item(), prog_bar=True, logger=False)
        return total

    def _set_rates(self, step: int) -> None:
        """Each group's rate for this step (base lr x its multiplier x its member's schedule factor), after checking at
        the logging steps that nothing else set them: a scheduler or callback that sets one rate for every group would
        silently undo µP (microsoft/mup's README warns of exactly this)."""
        groups = self.optimizer.param_groups
        if self._rates_at is not None and step % self.log_every == 0:
            for e, c in enumerate(self.configs):
                wrong = overwritten_rate([g for g in groups if g["member"] == e], c["lr"], float(self._rates_at[e]), step,
                                         self.tables[e].name)
                if wrong:
                    raise ConfigError(wrong)
        self._rates_at = self.factors(step)
        factors = self._rates_at.tolist()  # Python floats: the same doubles as float(factors[e]), without a tensor index per group
        for g in groups:
            g["lr"] = g["initial_lr"] * factors[g["member"]]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Lightning's (before a validation, say): the gradients are zeroed in place, never dropped (``Stack.zero_grad``)."""
        self.stack.zero_grad()

    def take_step(self) -> None:
        """The optimiser's step over every member (members that diverged or retired stay as they are)."""
        if self.vec is not None:
            self.vec.step(self.stack.grad, active=self.active)
            return
        for o, alive in zip(self.member_optimizers, self.active.tolist()):
            if alive:
                o.step()
        if self.matrices is not None:
            self.matrices.step(self.active)

    # ------------------------------------------------------------------ validation

    def on_fit_start(self) -> None:
        check_same(self)  # every rank's per-role rates and multipliers (one run across processes)
        if self.resumed:
            resume_loop_at(self.trainer, self.resumed)  # before any callback's on_train_start reads the step
        # The rates are set before any callback's on_train_start, so one that sets them is caught at the first step.
        self._set_rates(self.trainer.global_step)

    def on_train_start(self) -> None:
        if at_start(self, [h.val for h in self.history]):
            validate_now(self, self.stack.flat.device)  # every curve starts where training starts

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        """A member's own validation point that Lightning's loop (the longest member's interval) does not make: another
        member's interval, or its last step (before it retires at the next step's start, and before any checkpoint)."""
        step = self.global_step
        if step % self.interval and any(self._due(e, step) for e in range(self.E)):
            validate_now(self, self.stack.flat.device)

    def _due(self, e: int, step: int) -> bool:
        """Whether member ``e`` validates at ``step`` and has not yet."""
        h = self.history[e].val
        return bool(self.active[e]) and scheduled(step, self.horizons[e], self.intervals[e]) and not (h and h[-1][0] == step)

    def validate_last(self) -> None:
        """The last step's validation where the loop's interval missed it, for the members alive."""
        if not self.divergence.stopped and missing_at(self.global_step, [h.val for h in self.history], self.active.tolist()):
            validate_now(self, self.stack.flat.device)

    def on_validation_epoch_start(self) -> None:
        names = self.trainer.datamodule.eval_names
        self._sums, self._counts = [{} for _ in names], [0 for _ in names]
        # The members whose curve has a point here, each on its own schedule: none where Lightning's loop validates
        # off every schedule (a callback's stop), which records nothing, as a resumed run would not have it.
        self._validating = torch.tensor([self._due(e, self.global_step) for e in range(self.E)], dtype=torch.bool)

    def validation_step(self, batch, batch_idx, dataloader_idx: int = 0):
        xs, ys = batch
        if not self._validating.any():
            return
        sums = self._sums[dataloader_idx]
        for k, v in self.stack.evaluate(self.evaluate, xs, ys, self._live(self._validating)).items():
            # summed in Python doubles, batch by batch
            sums[k] = sums.get(k, torch.zeros(self.E, dtype=torch.float64)) + torch.tensor(v.tolist(), dtype=torch.float64)
        self._counts[dataloader_idx] += ys[0].numel()

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        step = self.global_step
        for name, sums, count in zip(self.trainer.datamodule.eval_names, self._sums, self._counts):
            label = tb.EVAL_LABELS.get(name, name)
            for e in range(self.E):
                if not self._validating[e]:
                    continue
                metrics = {k: v[e].item() / max(1, count) for k, v in sums.items()}
                self.history[e].evals.setdefault(name, []).append((step, metrics))
                if name == "val":
                    self.history[e].val.append((step, metrics["loss"]))
                for w in self.writers[e]:
                    for k, v in metrics.items():
                        w.add_scalar(f"{k.capitalize()}/{label}", v, step)
        alive = [h.val[-1][1] for h, a in zip(self.history, self._validating.tolist()) if a and h.val and h.val[-1][0] == step]
        if self.trainer.validating and alive:  # Lightning's own loop (step 0's, in a training hook, would stay in the bar)
            self.log("val_loss", sum(alive) / len(alive), prog_bar=True, logger=False)

    # ------------------------------------------------------------------ one member out and in (checkpoints)

    def member_state(self, e: int) -> dict[str, Any]:
        """Member ``e`` as its checkpoint holds it: its module's state by name, its optimiser's state by parameter name
        (``optimizer_state``: torch's ``state_dict()`` form, whichever path stepped it), its history, its random stream."""
        return {"state_dict": self.stack.state_dict(e),
                "optimizer": {"name": self.configs[e]["optim"]["name"], "state": self.optimizer_state(e)},
                "history": self.history[e].state(),
                "stream": self.stack.streams[e].clone() if self.stack.streams is not None else None}

    def optimizer_state(self, e: int) -> dict[str, dict[str, torch.Tensor]]:
        """Member ``e``'s optimiser state, parameter name -> torch's per-parameter state (``step``, ``exp_avg`` ...)."""
        if self.vec is None:
            return named_state(self.member_optimizers[e]) | (self.matrices.member_state(e) if self.matrices is not None else {})
        vec, trainable = self.vec, dict(zip(self.stack.names, self.stack.trainable))
        keys = (("momentum_buffer", vec.exp_avg),) if vec.name == "sgd" else (("exp_avg", vec.exp_avg), ("exp_avg_sq", vec.exp_avg_sq))
        views = {k: self.stack.views(t) for k, t in keys}
        step = torch.tensor(float(vec.steps[e]), dtype=torch.float32)  # torch's Adam keeps its step as a float32 tensor
        return {n: {**({} if vec.name == "sgd" else {"step": step.clone()}), **{k: views[k][n][e].detach().cpu().clone() for k, _ in keys}}
                for n in self.stack.names if trainable[n]}

    @torch.no_grad()
    def load_member_state(self, e: int, s: Mapping[str, Any]) -> None:
        """Member ``e`` from ``member_state``'s form (``resume.read_member`` and ``resume.check_state`` checked it)."""
        self.stack.load_state_dict(e, s["state_dict"])
        named = s["optimizer"]["state"]
        if self.vec is None:
            load_named_state(self.member_optimizers[e], named)
            if self.matrices is not None:
                self.matrices.load_member(e, named)
            self._collect_groups()
        else:
            vec = self.vec
            keys = (("momentum_buffer", vec.exp_avg),) if vec.name == "sgd" else (("exp_avg", vec.exp_avg), ("exp_avg_sq", vec.exp_avg_sq))
            for k, t in keys:
                for n, v in self.stack.views(t).items():
                    if k in named.get(n, {}):
                        v[e].copy_(named[n][k])
            steps = [float(st["step"]) for st in named.values() if "step" in st]
            vec.steps[e] = steps[0] if steps else 0.0
        self.history[e] = History.of(s["history"])
        self.divergence.restore(e, self.history[e].diverged_step)
        self._active = None
        if s["stream"] is not None and self.stack.streams is not None:
            self.stack.streams[e] = s["stream"].clone()

    def member_view(self):
        """What the instruments read of these members (``callbacks/members.py``)."""
        from initnorm.training.view import EngineView

        return EngineView(self)

    @property
    def final_losses(self) -> list[float]:
        return [h.val[-1][1] if h.val else math.nan for h in self.history]

