"""E >= 1 members' parameters in one flat tensor, each member still the user's own module, and how they run.

Every parameter of every member lives in ``flat``, parameter by parameter, each as a contiguous
``[E, *shape]`` block (the member dimension first, as in weights, batches,
statistics and checkpoints, so a member's numbers read out as if it had run alone). Each member's module keeps its
own class, names and buffers; its ``nn.Parameter``s are replaced by parameters that view its rows
of ``flat`` (no copy), and their ``.grad`` views the same rows of one flat gradient buffer, so
backward writes every gradient in place and the optimiser steps the whole group as one tensor
(``vec_optim.VecOptimizer``). A parameter tied to another (a readout that is the embedding) stays
tied: both names hold the one new parameter.

How the members' forwards run is decided once, by a probe on a tiny batch before anything is
written, never by reading an exception (a message's text changes between torch versions):

- ``vmap``: ``torch.func.vmap`` over a call of one template module (a copy of member 0, its tensors swapped for the
  stacked ones: ``_call``), with every member's parameters and the buffers and float attributes in which members differ
  stacked. Chosen when E > 1, the stacked forward runs (no batching rule missing, no
  data-dependent control flow, no random numbers) and gives every member's own loss to float32
  rounding on the probe batch;
- ``loop``: each member's own module in turn, each drawing from its own random stream (dropout
  masks exactly as its job alone draws them). Any model trains this way; a job alone is a loop
  of one.

Either way the losses come back ``[E]`` and the gradients land in the same flat buffer.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, vmap

from initnorm.callbacks.probes import Points, capture

LossFn = Callable[[Callable, tuple, str], torch.Tensor]  # (model, (x, y), reduction) -> loss
EvalFn = Callable[[Callable, tuple], dict[str, torch.Tensor]]  # (model, (x, y)) -> summed metrics of the batch


class NotStackable(ValueError):
    """The members cannot share one flat tensor (their parameters' shapes differ): each must train in a group of its own."""


def _attributes(mod: nn.Module) -> list[tuple[str, Any]]:
    """A module's own attributes that may differ between members: not private, not a tensor or submodule, not a
    method bound to the module itself (``model=custom`` adds ``parameter_roles`` so: code, not a number)."""
    return [(k, v) for k, v in vars(mod).items()
            if not k.startswith("_") and not isinstance(v, (torch.Tensor, nn.Module)) and getattr(v, "__self__", None) is not mod]


def _number(x: Any) -> bool:
    return isinstance(x, float) or (isinstance(x, int) and not isinstance(x, bool))


def differing_attributes(models: Sequence[nn.Module]) -> tuple[dict[str, list[float]], bool]:
    """The float attributes in which the members' modules differ (``{"blocks.0.attn.forward_mult": [E values]}``:
    µP's multipliers, a hook's scale), and whether any other attribute differs (then no template serves all)."""
    named = [dict(m.named_modules()) for m in models]
    numbers, other = {}, False
    for name, mod in models[0].named_modules():
        for k, _ in _attributes(mod):
            values = [getattr(n[name], k, None) for n in named]
            if all(v == values[0] for v in values):
                continue
            if all(_number(v) for v in values):
                numbers[f"{name}.{k}" if name else k] = [float(v) for v in values]
            else:
                other = True
    return numbers, other


class Stack:
    """``E`` members' models over one flat parameter tensor; see the module docstring."""

    def __init__(self, models: Sequence[nn.Module], device: torch.device):
        self.E = len(models)
        self.members = list(models)
        named = list(models[0].named_parameters())
        self.names = [n for n, _ in named]
        self.shapes = [tuple(p.shape) for _, p in named]
        for m in models[1:]:
            if [tuple(p.shape) for p in m.parameters()] != self.shapes:
                raise NotStackable("the members' parameter shapes differ")
        self.sizes = [math.prod(s) for s in self.shapes]
        self.offsets = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        self.N = sum(self.sizes)
        self.trainable = [p.requires_grad for _, p in named]
        self.template = copy.deepcopy(models[0]).to(device)  # what vmap calls; the instruments' names and layers
        self.numbers, self.other_attributes = differing_attributes(models)
        with torch.no_grad():
            columns = zip(*(m.parameters() for m in models))  # each parameter of every member, member first
            self.flat = torch.cat([torch.stack([p.detach() for p in ps]).reshape(-1) for ps in columns]).to(device)
        self.grad = torch.zeros_like(self.flat)
        for m in models:
            m.to(device)  # buffers; the parameters are replaced next
        self.stacked = {n: v.requires_grad_(t) for (n, v), t in zip(self.views(self.flat).items(), self.trainable)}
        for n, g, t in zip(self.names, self.views(self.grad).values(), self.trainable):
            if t:
                self.stacked[n].grad = g
        self._grads: list[tuple[nn.Parameter, torch.Tensor]] = []  # each member parameter and the view of ``grad`` that is its .grad
        for e, m in enumerate(models):
            self._bind(e, m)
        self.buffers = self._stacked_buffers(device)
        self._slots = self._owners()
        # functional_call re-ties tied tensors (a readout that is the embedding) by walking the template at every call;
        # a template with none has nothing to re-tie, so the walk is left out (its cost: bench/RESULTS.md, "Where a stacked
        # group's CPU goes")
        every = [*self.template.named_parameters(remove_duplicate=False), *self.template.named_buffers(remove_duplicate=False)]
        self._tied = len({id(v) for _, v in every}) != len(every)  # one tensor under two names, as functional_call finds ties
        self.strategy = "loop"
        self.draws = False  # whether the models draw random numbers in training (dropout): the probe says
        self.streams: list[torch.Tensor] | None = None  # each member's random stream, where its model draws from one

    # ------------------------------------------------------------------ the flat layout

    def views(self, t: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every parameter as a view ``[E, *shape]`` of ``t``, a tensor in the flat layout."""
        E = self.E
        return {n: t[E * o : E * (o + s)].view(E, *shape) for n, o, s, shape in zip(self.names, self.offsets, self.sizes, self.shapes)}

    def block(self, t: torch.Tensor, i: int) -> torch.Tensor:
        """Parameter ``i``'s elements of ``t`` (the flat layout) as ``[E, size]``."""
        o, s = self.offsets[i], self.sizes[i]
        return t[self.E * o : self.E * (o + s)].view(self.E, s)

    def positions(self, e: int) -> dict[str, tuple[int, int]]:
        """Member ``e``'s elements of each parameter: ``name -> (start, size)`` in ``flat.view(-1)``."""
        return {n: (self.E * o + e * s, s) for n, o, s in zip(self.names, self.offsets, self.sizes)}

    def _bind(self, e: int, model: nn.Module) -> None:
        """Member ``e``'s parameters become views of its rows of ``flat`` (gradients: of ``grad``), ties kept."""
        new = {}
        for (name, p), view, gview in zip(model.named_parameters(), self.views(self.flat).values(), self.views(self.grad).values()):
            q = nn.Parameter(view[e], requires_grad=p.requires_grad)
            if p.requires_grad:
                q.grad = gview[e]
                self._grads.append((q, q.grad))
            new[id(p)] = q
        for mod in model.modules():
            for k, p in list(mod._parameters.items()):
                if p is not None:
                    mod._parameters[k] = new[id(p)]

    def _stacked_buffers(self, device: torch.device) -> dict[str, torch.Tensor]:
        """What vmap hands the template besides the parameters: buffers and float attributes in which members differ, ``[E, ...]``."""
        out = {}
        named = [dict(m.named_buffers()) for m in self.members]
        for name, b in named[0].items():
            if any(n[name].shape != b.shape or not torch.equal(n[name], b) for n in named[1:]):
                out[name] = torch.stack([n[name] for n in named]).to(device)
        for path, values in self.numbers.items():
            mod_name, _, attr = path.rpartition(".")
            mod = self.template.get_submodule(mod_name)
            delattr(mod, attr)
            mod.register_buffer(attr, torch.tensor(values[0], device=device), persistent=False)
            out[path] = torch.tensor(values, device=device)
        return out

    def zero_grad(self) -> None:
        """Every gradient to zero, in place: the members' ``.grad`` stay views of ``grad`` (a ``zero_grad(set_to_none=True)``
        of anyone's, Lightning's before a validation say, is undone here, so backward keeps writing into ``grad``)."""
        self.grad.zero_()
        for p, g in self._grads:
            if p.grad is not g:
                p.grad = g

    # ------------------------------------------------------------------ the probe

    @torch.no_grad()
    def choose(self, batch: tuple[torch.Tensor, torch.Tensor], loss_fn: LossFn) -> str:
        """Decide how the members run, on two examples of each member's batch (``[E, B, ...]``): ``vmap`` where
        it runs and agrees with each member's own forward, else ``loop``; and whether the models draw random numbers."""
        xs, ys = (t[:, :2].to(self.flat.device) for t in batch)
        before = torch.get_rng_state()
        own = torch.stack([loss_fn(m, (x, y), "mean") for m, x, y in zip(self.members, xs, ys)])
        self.draws = not torch.equal(before, torch.get_rng_state())
        torch.set_rng_state(before)
        self.strategy = "loop"
        if self.E > 1 and not self.draws and not self.other_attributes:
            try:
                mapped = self._vmapped(loss_fn, xs, ys)
            except Exception:  # any reason at all (no batching rule, data-dependent control flow ...): the members loop
                mapped = None
            if mapped is not None and bool(torch.allclose(mapped, own, rtol=1e-4, atol=1e-6, equal_nan=True)):
                self.strategy = "vmap"
        return self.strategy

    def seed_streams(self, states: Sequence[torch.Tensor]) -> None:
        """Each member's random stream (its job's torch RNG state after building), for models that draw from it in the loop."""
        self.streams = [s.clone() for s in states]

    # ------------------------------------------------------------------ forwards

    def _owners(self) -> dict[str, tuple[dict, str]]:
        """Where each stacked name lives in the template: (its module's ``_parameters`` or ``_buffers``, the key there)."""
        out = {}
        for name in [*self.stacked, *self.buffers]:
            path, _, key = name.rpartition(".")
            mod = self.template.get_submodule(path)
            out[name] = (mod._parameters if key in mod._parameters else mod._buffers, key)
        return out

    def _call(self, params: dict, bufs: dict) -> Callable:
        """The template, called on ``params`` and ``bufs`` in place of its own tensors. Without ties, the swap is written
        here over the owners found once (``_owners``): ``functional_call`` walks every name's path and checks it again at
        each call, about 700 Python calls a forward of the default Decoder, and as many steps of Dynamo's trace
        (26,885 bytecodes traced at a compiled group's first step, 18,472 without them: 1.03-1.15 s -> 0.73-0.85 s). The same
        tensors reach the same modules: the numbers are unchanged. With ties, ``functional_call`` re-ties them."""
        if self._tied:
            return lambda x: functional_call(self.template, {**params, **bufs}, (x,), tie_weights=True)
        return lambda x: self._swapped(x, params, bufs)

    def _swapped(self, x: torch.Tensor, params: dict, bufs: dict) -> Any:
        olds = []
        try:
            for values in (params, bufs):
                for name, t in values.items():
                    where, key = self._slots[name]
                    olds.append((where, key, where[key]))
                    where[key] = t
            return self.template(x)
        finally:
            for where, key, old in reversed(olds):
                where[key] = old

    def _vmapped(self, fn: Callable, xs, ys, points: Points | None = None, reduce: Callable | None = None,
                 live: torch.Tensor | None = None):
        def one(params, bufs, x, y):
            if not points:
                return fn(self._call(params, bufs), (x, y), "mean")
            with capture(points, reduce) as seen:
                out = fn(self._call(params, bufs), (x, y), "mean")
            return out, dict(seen)

        return vmap(one)(*self._rows(live), xs, ys)

    def _rows(self, live: torch.Tensor | None) -> tuple[dict, dict]:
        """The stacked parameters and buffers of the members ``live`` (indices; None: every member). A subset is a copy
        whose gradient flows back into the members' own rows of ``grad``."""
        if live is None:
            return self.stacked, self.buffers
        return ({n: v.index_select(0, live) for n, v in self.stacked.items()},
                {n: b.index_select(0, live) for n, b in self.buffers.items()})

    @contextlib.contextmanager
    def _stream(self, e: int) -> Iterator[None]:
        """Member ``e``'s own random stream for the duration (only where the models draw random numbers)."""
        if self.streams is None:
            yield
            return
        outer = torch.get_rng_state()
        torch.set_rng_state(self.streams[e])
        try:
            yield
        finally:
            self.streams[e] = torch.get_rng_state()
            torch.set_rng_state(outer)

    def member_points(self, points: Points, e: int) -> Points:
        """``points`` (modules of the template) as member ``e``'s own modules of the same names."""
        where = {id(m): n for n, m in self.template.named_modules()}
        own = dict(self.members[e].named_modules())
        return {k: (own[where[id(mod)]], side) for k, (mod, side) in points.items()}

    def losses(self, loss_fn: LossFn, xs: torch.Tensor, ys: torch.Tensor, points: Points | None = None,
               reduce: Callable | None = None, live: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Each member's training loss on its own batch (``[E]``, with its graph); with ``points`` also ``reduce`` of
        each point per member (``{"layer/role": [E, ...]}``). ``live`` (member indices): only those members run, the
        others' entries are zeros with no graph (members that retired or diverged: nothing of theirs is computed)."""
        if live is not None:
            xs, ys = xs.index_select(0, live.to(xs.device)), ys.index_select(0, live.to(ys.device))
        if self.strategy == "vmap":
            out = self._vmapped(loss_fn, xs, ys, points, reduce, live)
            out, seen = out if points else (out, {})
        else:
            order = range(self.E) if live is None else live.tolist()
            losses, per_member = [], []
            for k, e in enumerate(order):
                with self._stream(e), capture(self.member_points(points, e), reduce) if points else contextlib.nullcontext({}) as got:
                    losses.append(loss_fn(self.members[e], (xs[k], ys[k]), "mean"))
                per_member.append(dict(got))
            out, seen = torch.stack(losses), _stack_dicts(per_member)
        if live is None:
            return out, seen
        return _spread(out, live, self.E), {k: _spread(v, live, self.E) for k, v in seen.items()}

    @torch.no_grad()
    def evaluate(self, eval_fn: EvalFn, xs: torch.Tensor, ys: torch.Tensor, live: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Each member's summed metrics on its own evaluation batch (``{"loss": [E], ...}``), models in eval mode;
        ``live`` as in ``losses``."""
        if live is not None:
            xs, ys = xs.index_select(0, live.to(xs.device)), ys.index_select(0, live.to(ys.device))
        self.set_training(False)
        try:
            if self.strategy == "vmap":
                out = vmap(lambda p, b, x, y: eval_fn(self._call(p, b), (x, y)))(*self._rows(live), xs, ys)
            else:
                order = range(self.E) if live is None else live.tolist()
                out = _stack_dicts([eval_fn(self.members[e], (x, y)) for e, x, y in zip(order, xs, ys)])
        finally:
            self.set_training(True)
        return out if live is None else {k: _spread(v, live, self.E) for k, v in out.items()}

    @torch.no_grad()
    def forward(self, inputs: torch.Tensor, points: Points, reduce: Callable) -> dict[str, torch.Tensor]:
        """Each member in eval mode on its own ``inputs[e]``: ``reduce`` of each of ``points`` (template modules), ``[E, ...]``."""
        self.set_training(False)
        try:
            if self.strategy == "vmap":
                def one(params, bufs, x):
                    with capture(points, reduce) as seen:
                        self._call(params, bufs)(x)
                    return dict(seen)

                return vmap(one)(self.stacked, self.buffers, inputs)
            seen = []
            for e, (m, x) in enumerate(zip(self.members, inputs)):
                with capture(self.member_points(points, e), reduce) as got:
                    m(x)
                seen.append(dict(got))
            return _stack_dicts(seen)
        finally:
            self.set_training(True)

    def member_loss(self, loss_fn: LossFn, e: int, batch, points: Points | None = None,
                    reduce: Callable | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Member ``e``'s summed loss on its part of a training batch, with its graph (nothing accumulated into ``.grad``
        unless the caller backpropagates into the parameters), and ``reduce`` of each of ``points`` (template modules)."""
        xs, ys = batch
        with self._stream(e), capture(self.member_points(points, e), reduce) if points else contextlib.nullcontext({}) as seen:
            loss = loss_fn(self.members[e], (xs[e], ys[e]), "sum")
        return loss, dict(seen)

    def set_training(self, mode: bool) -> None:
        self.template.train(mode)
        for m in self.members:
            m.train(mode)

    # ------------------------------------------------------------------ one member read out and back

    def state_dict(self, e: int) -> dict[str, torch.Tensor]:
        """Member ``e``'s module state (parameters and persistent buffers), on the CPU, as its own module names it."""
        return {k: v.detach().cpu().clone() for k, v in self.members[e].state_dict().items()}

    @torch.no_grad()
    def load_state_dict(self, e: int, state: dict[str, torch.Tensor]) -> None:
        """Member ``e``'s parameters and buffers from ``state`` (its rows of ``flat``: written in place)."""
        self.members[e].load_state_dict(state)
        for name, b in self.members[e].named_buffers():
            if name in self.buffers:  # a buffer in which members differ: vmap reads the stacked copy
                self.buffers[name][e].copy_(b)


def _spread(t: torch.Tensor, live: torch.Tensor, E: int) -> torch.Tensor:
    """``t`` (``[len(live), ...]``, the members ``live`` computed) as ``[E, ...]``, zeros for the others (the graph kept)."""
    return t.new_zeros((E, *t.shape[1:])).index_copy(0, live.to(t.device), t)


def _stack_dicts(per_member: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    if not per_member or not per_member[0]:
        return {}
    return {k: torch.stack([d[k] for d in per_member]) for k in per_member[0]}
