"""The flat fast path: one AdamW, Adam or SGD step for E stacked jobs at once on a flat [E, N] parameter.

A job steps torch's own optimiser (``training/optimizers.py``); this step is used instead only where
``probe`` shows, at set-up, on tiny tensors carrying the job's own groups' numbers, that it steps as torch's
does, bit for bit (``Engine``: ``optimizer: flat`` in the record), as ``training/stack.py`` probes vmap.

The engine (``training/engine.py``; a job alone is a group of one) keeps every member's parameters as one row of a
flat ``[E, N]`` tensor, so a step is a dozen element-wise operations on the whole group instead
of a dozen per parameter tensor per job. Every number that may differ between jobs is a column
or a row here, not a Python scalar:

- the learning rate per (member, element): its parameter group's ``lr`` as the group holds it at this step (base
  lr x the table's multiplier x the member's schedule factor: the one place the rate lives, read at each step);
- weight decay per (member, element): the member's decay on matrices, 0 on vectors (the rule of
  ``optim.param_groups``: ``p.dim() >= 2``); Adam has none;
- betas, eps (Adam), momentum (SGD) per member.

The arithmetic follows ``torch.optim``'s single-tensor CPU path operation for operation, with
the scalars it computes in Python double precision computed here in float64 and rounded to float32
where torch rounds them, so a member's update is the one ``torch.optim`` takes for that job alone
(``tests/test_ensemble.py`` checks it against ``torch.optim`` on separate tensors). A member that
is not ``active`` (it diverged) keeps its parameters and its state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

STEPS = ("adamw", "adam", "sgd")  # the steps written here (an optimiser's entry names its own: ``Optimiser.flat``)


class VecOptimizer:
    """``name`` in adamw | adam | sgd over ``flat`` (float32, any layout), every number per element.

    The elements fall into segments: ``seg`` (``flat``'s shape) says each element's segment, and a
    segment is one member's elements that share every optimiser number (one parameter group of one
    member's optimiser, say). Per segment: ``member`` (long), ``rates`` (float64: the group's
    learning rate, base lr x role multiplier), ``wd`` (float64: its weight decay, decoupled for
    adamw, added to the gradient for adam and sgd, as torch does) and ``eps``. Per member:
    ``betas`` ([E, 2]) and ``momentum`` ([E]). ``from_groups`` reads them all from the members' parameter
    groups (``optim.optimiser_groups``).

    A step computes its per-segment numbers in double precision (a few hundred values at most) and
    spreads them over the elements once; every element-wise operation writes into buffers kept from
    step to step. A 12-member group of width-1,024 MLPs has 27 million elements: float64 temporaries
    and fresh allocations per operation, not the arithmetic, were most of its step.
    """

    def __init__(self, name: str, flat: torch.Tensor, seg: torch.Tensor, member: torch.Tensor, rates: torch.Tensor,
                 wd: torch.Tensor, eps: torch.Tensor,
                 betas: torch.Tensor, momentum: torch.Tensor):
        if name not in STEPS:
            raise ValueError(f"{name!r} has no flat step here; allowed: {', '.join(STEPS)}")
        dev = flat.device
        self.E = int(betas.shape[0])
        self.name, self.flat = name, flat
        # int32 where it fits: the index is read once per spread coefficient per step
        self.seg = seg.reshape(-1).to(device=dev, dtype=torch.int32 if len(member) < 2**31 else torch.long)
        self.member = member.to(device=dev, dtype=torch.long)  # [S]
        self.seg_rates = rates.to(device=dev, dtype=torch.float64)  # [S]
        self.seg_wd = wd.to(device=dev, dtype=torch.float64)
        self.seg_eps = eps.to(device=dev, dtype=torch.float64)
        self.beta1 = betas[:, 0].to(device=dev, dtype=torch.float64)  # [E]
        self.beta2 = betas[:, 1].to(device=dev, dtype=torch.float64)
        decayed = bool(self.seg_wd.any())
        self._coupled, self._decays = decayed and name != "adamw", decayed and name == "adamw"
        self.steps = torch.zeros(self.E, dtype=torch.float64, device=dev)  # optimiser steps taken per member
        self.exp_avg = torch.zeros_like(flat)  # Adam's m, or SGD's momentum buffer
        self.exp_avg_sq = torch.zeros_like(flat) if name != "sgd" else None
        m = self.member
        # Numbers fixed for the whole run, as a Python float where every segment agrees (the common case)
        self._wd_f32 = self._spread(self.seg_wd.float())
        self._one_m_b1 = self._spread((1.0 - self.beta1).float()[m])
        self._one_m_b2 = self._spread((1.0 - self.beta2).float()[m])
        self._b2 = self._spread(self.beta2.float()[m])
        self._eps = self._spread(self.seg_eps.float())
        self._momentum = self._spread(momentum.to(device=dev, dtype=torch.float32)[m])
        self._bufs: dict[str, torch.Tensor] = {}
        self.owners: list | None = None  # each segment's parameter group (None: frozen), where built from groups
        self._cache: dict[str, torch.Tensor] = {}

    # ------------------------------------------------------------------ per-segment numbers over the elements

    def _spread(self, values: torch.Tensor, out: str | None = None):
        """A per-segment value per element (``flat``'s shape), or one Python float if all segments agree;
        ``out`` names a buffer kept from step to step."""
        if bool((values == values[0]).all()):
            return float(values[0])
        if out is None:
            return self._per_element(values)
        buf = self._buf(out, values.dtype)
        torch.index_select(values, 0, self.seg, out=buf.view(-1))
        return buf

    def _per_element(self, values: torch.Tensor) -> torch.Tensor:
        """A per-segment value for every element, in ``flat``'s shape (a new tensor)."""
        return torch.index_select(values, 0, self.seg).view(self.flat.shape)

    def _buf(self, name: str, dtype=torch.float32) -> torch.Tensor:
        b = self._bufs.get(name)
        if b is None or b.dtype != dtype:
            b = self._bufs[name] = torch.empty(self.flat.shape, dtype=dtype, device=self.flat.device)
        return b

    @property
    def rates(self) -> torch.Tensor:
        """Every element's group learning rate (float64, ``flat``'s shape; made once, when asked)."""
        if "rates" not in self._cache:
            self._cache["rates"] = self._per_element(self.seg_rates)
        return self._cache["rates"]

    @property
    def eps64(self) -> torch.Tensor:
        """Every element's eps as its group holds it (float64, ``flat``'s shape; made once, when asked)."""
        if "eps64" not in self._cache:
            self._cache["eps64"] = self._per_element(self.seg_eps)
        return self._cache["eps64"]

    def member_mask(self, members: torch.Tensor) -> torch.Tensor:
        """Per element: does it belong to one of ``members`` (a [E] bool)?"""
        return self._per_element(members.to(self.member.device)[self.member])

    @classmethod
    def from_groups(cls, name: str, flat: torch.Tensor, groups: Sequence[Sequence[Mapping[str, Any]]],
                    where: Sequence[Mapping[int, tuple[int, int]]], betas: Sequence[Sequence[float]],
                    momentum: Sequence[float]) -> VecOptimizer:
        """Every member's parameter groups (``optim.param_groups``: per-role lr, weight decay and ε of any
        parameterisation), element by element: ``groups[e]`` member ``e``'s groups, ``where[e]``: id(parameter) ->
        (start, size) of its elements in ``flat.view(-1)``; ``betas[e]`` (Adam) and ``momentum[e]`` (SGD). A parameter
        that does not train (``requires_grad`` false) gets a segment of its own that no step moves."""
        seg = torch.full((flat.numel(),), -1, dtype=torch.long)
        member, rates, wd, eps, owners = [], [], [], [], []  # per segment: one parameter group of one member
        for e, (member_groups, pos) in enumerate(zip(groups, where)):
            for g in member_groups:
                for frozen in (False, True):  # a group's frozen parameters: a segment that no step moves
                    ps = [p for p in g["params"] if p.requires_grad != frozen]
                    if not ps:
                        continue
                    s = len(member)
                    member.append(e)
                    rates.append(0.0 if frozen else g.get("initial_lr", g["lr"]))  # the base rate (a scheduler keeps it there)
                    owners.append(None if frozen else g)
                    wd.append(0.0 if frozen else g["weight_decay"])
                    eps.append(g.get("eps", 1.0))
                    for p in ps:
                        o, n = pos[id(p)]
                        seg[o : o + n] = s
        if bool((seg < 0).any()):
            raise ValueError("the members' parameter groups do not hold every stacked parameter")
        f64 = lambda v: torch.tensor(v, dtype=torch.float64)
        vec = cls(name, flat, seg.view(flat.shape), torch.tensor(member), f64(rates), f64(wd), f64(eps),
                  f64([list(b) for b in betas]).view(-1, 2), torch.tensor(list(momentum), dtype=torch.float32))
        vec.owners = owners
        return vec

    def group_rates(self) -> torch.Tensor:
        """Each segment's rate now, as its parameter group holds it (float64; a frozen segment's is 0)."""
        return torch.tensor([0.0 if g is None else g["lr"] for g in self.owners], dtype=torch.float64, device=self.flat.device)

    @torch.no_grad()
    def step(self, grad: torch.Tensor, factors: torch.Tensor | None = None, active: torch.Tensor | None = None) -> None:
        """One step with ``grad`` (``flat``'s layout) at the groups' rates now (``from_groups``; or, built without groups,
        the base rates x ``factors`` ([E], float64)); members not ``active`` stay as they are."""
        p = self.flat
        if factors is None:
            lr = self.group_rates()  # [S], float64: (lr x mult) x factor, as LambdaLR sets it
        else:
            lr = self.seg_rates * factors.to(self.seg_rates)[self.member]
        if active is not None and not bool(active.all()):
            keep = self.member_mask(~active)
            old = (p.clone(), self.exp_avg.clone(), None if self.exp_avg_sq is None else self.exp_avg_sq.clone(), self.steps.clone())
        else:
            keep = None
        if self.name == "sgd":
            self._sgd(p, grad, lr)
        else:
            self._adam(p, grad, lr)
        if keep is not None:
            p.copy_(torch.where(keep, old[0], p))
            self.exp_avg.copy_(torch.where(keep, old[1], self.exp_avg))
            if self.exp_avg_sq is not None:
                self.exp_avg_sq.copy_(torch.where(keep, old[2], self.exp_avg_sq))
            self.steps.copy_(torch.where(~active.to(p.device), old[3], self.steps))

    # torch.optim's single-tensor CPU arithmetic, operation for operation; the scalars it computes in
    # Python doubles are computed per segment in float64 and rounded to float32 where its kernels round.
    def _adam(self, p, grad, lr):
        self.steps += 1
        m = self.member
        if self._decays:
            p.mul_(self._spread((1.0 - lr * self.seg_wd).float(), "decay"))  # decoupled decay; exactly 1 where there is none
        elif self._coupled:
            grad = self._plus(grad, p, self._wd_f32)  # Adam's L2 term: grad.add(param, alpha=wd)
        self.exp_avg.lerp_(grad, self._one_m_b1)
        t1, t2 = self._buf("t1"), self._buf("t2")
        torch.mul(grad, self._one_m_b2, out=t1)
        # torch's addcmul_(grad, grad, value=1 - beta2) is self + (value x grad) x grad, its last multiply-add fused
        # where the CPU has FMA: addcmul_(value x grad, grad) rounds exactly as it does, whatever value is per element.
        self.exp_avg_sq.mul_(self._b2).addcmul_(t1, grad)
        step_size = self._spread((lr / (1.0 - self.beta1**self.steps)[m]).float().neg(), "step")  # -lr / bias_correction1
        bc2_sqrt = self._spread(((1.0 - self.beta2**self.steps) ** 0.5).float()[m], "bc2")
        torch.sqrt(self.exp_avg_sq, out=t2)
        t2.div_(bc2_sqrt).add_(self._eps)  # denom
        torch.mul(self.exp_avg, step_size, out=t1)
        p.add_(t1.div_(t2))  # addcdiv: self + (value * t1) / t2

    def _sgd(self, p, grad, lr):
        self.steps += 1
        g = self._plus(grad, p, self._wd_f32) if self._coupled else grad  # grad.add(param, alpha=wd)
        buf = self.exp_avg
        buf.mul_(self._momentum).add_(g)  # first step: 0 * m + g = g, torch's clone of the gradient
        self._plus(p, buf, self._spread(lr.float().neg(), "step"), out=p)  # param.add_(buf, alpha=-lr)

    @staticmethod
    def _plus(a: torch.Tensor, b: torch.Tensor, alpha: float | torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``a + alpha x b`` rounded as torch's ``add(a, b, alpha=...)`` rounds it (one fused multiply-add where the CPU
        has FMA), for ``alpha`` one number or one per element."""
        if isinstance(alpha, float):
            return torch.add(a, b, alpha=alpha, out=out) if out is not None else torch.add(a, b, alpha=alpha)
        return torch.addcmul(a, b, alpha, out=out) if out is not None else torch.addcmul(a, b, alpha)


def probe(name: str, groups: Sequence[Sequence[Mapping[str, Any]]], betas: Sequence[Sequence[float]],
          momentum: Sequence[float], make: Callable[[list[dict], int], torch.optim.Optimizer], steps: int = 3) -> bool:
    """Whether the ``name`` step equals torch's optimiser bit for bit with these members' groups' numbers (``groups[e]``:
    member ``e``'s; ``make(groups, e)`` builds member ``e``'s torch optimiser): a few steps on tiny random tensors,
    one per group, at the groups' rates scaled by a few schedule factors, every parameter compared with ``torch.equal``."""
    gen = torch.Generator().manual_seed(0)
    ours, theirs, where, size = [], [], [], 0
    for e, member in enumerate(groups):
        own, mine, pos = [], [], {}
        for g in member:
            p = torch.nn.Parameter(torch.randn(6, generator=gen))
            q = torch.nn.Parameter(p.detach().clone())
            pos[id(p)] = (size, 6)
            size += 6
            own.append({**{k: v for k, v in g.items() if k != "params"}, "params": [p]})
            mine.append({**{k: v for k, v in g.items() if k != "params"}, "params": [q]})
        ours.append(own)
        theirs.append(make(mine, e))
        where.append(pos)
    flat = torch.cat([g["params"][0].detach() for member in ours for g in member]) if size else torch.zeros(0)
    vec = VecOptimizer.from_groups(name, flat, ours, where, betas, momentum)
    for t in range(steps):
        grad = torch.randn(size, generator=gen) * 10.0 ** (t - 1)
        factor = (0.3, 1.0, 0.7)[t % 3]
        for member, opt in zip(ours, theirs):
            for g, tg in zip(member, opt.param_groups):
                g["lr"] = tg["lr"] = g.get("initial_lr", g["lr"]) * factor
        o = 0
        for opt in theirs:
            for tg in opt.param_groups:
                tg["params"][0].grad = grad[o : o + 6].clone()
                o += 6
            opt.step()
        vec.step(grad)
        mine = torch.cat([tg["params"][0].detach() for opt in theirs for tg in opt.param_groups]) if size else flat
        if not torch.equal(mine, flat):
            return False
    return True
