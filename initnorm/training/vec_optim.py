"""One optimiser step for E stacked jobs at once: AdamW, Adam and SGD on a flat [E, N] parameter.

A vectorised group (``training/stacked.py``) keeps every member's parameters as one row of a
flat ``[E, N]`` tensor, so a step is a dozen element-wise operations on the whole group instead
of a dozen per parameter tensor per job. Every number that may differ between jobs is a column
or a row here, not a Python scalar:

- the learning rate per (member, element): the member's base lr x its table's multiplier for the
  element's role (``rates``), times the member's warmup/cosine factor of this step (``factors``);
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

from collections.abc import Mapping, Sequence

import torch

KINDS = ("adamw", "adam", "sgd")


SUPPORTED = {  # torch.optim class -> (kind, options that must stay at their defaults)
    "AdamW": ("adamw", {"amsgrad": False, "maximize": False}),
    "Adam": ("adam", {"amsgrad": False, "maximize": False, "decoupled_weight_decay": False}),
    "SGD": ("sgd", {"nesterov": False, "maximize": False, "dampening": 0}),
}


class NotStackable(ValueError):
    """These optimisers (or models) cannot be stepped as one stacked tensor. ``parts``, where known:
    the members (indices) that could still share a model, because they agree on what differs."""

    def __init__(self, message: str, parts: list[list[int]] | None = None):
        super().__init__(message)
        self.parts = parts


class VecOptimizer:
    """``kind`` in adamw | adam | sgd over ``flat`` (float32, any layout), every number per element.

    The elements fall into segments: ``seg`` (``flat``'s shape) says each element's segment, and a
    segment is one member's elements that share every optimiser number (one parameter group of one
    member's optimiser, say). Per segment: ``member`` (long), ``rates`` (float64: the group's
    learning rate, base lr x role multiplier), ``wd`` (float64: its weight decay, decoupled for
    adamw, added to the gradient for adam and sgd, as torch does) and ``eps``. Per member:
    ``betas`` ([E, 2]) and ``momentum`` ([E]). ``from_torch`` reads them all from the members' own
    optimisers.

    A step computes its per-segment numbers in double precision (a few hundred values at most) and
    spreads them over the elements once; every element-wise operation writes into buffers kept from
    step to step. A 12-member group of width-1,024 MLPs has 27 million elements: float64 temporaries
    and fresh allocations per operation, not the arithmetic, were most of its step.
    """

    def __init__(self, kind: str, flat: torch.Tensor, seg: torch.Tensor, member: torch.Tensor, rates: torch.Tensor,
                 wd: torch.Tensor, eps: torch.Tensor,
                 betas: torch.Tensor, momentum: torch.Tensor):
        if kind not in KINDS:
            raise NotStackable(f"optim.name={kind!r} has no vectorised step; allowed: {', '.join(KINDS)}")
        dev = flat.device
        self.E = int(betas.shape[0])
        self.kind, self.flat = kind, flat
        # int32 where it fits: the index is read once per spread coefficient per step
        self.seg = seg.reshape(-1).to(device=dev, dtype=torch.int32 if len(member) < 2**31 else torch.long)
        self.member = member.to(device=dev, dtype=torch.long)  # [S]
        self.seg_rates = rates.to(device=dev, dtype=torch.float64)  # [S]
        self.seg_wd = wd.to(device=dev, dtype=torch.float64)
        self.seg_eps = eps.to(device=dev, dtype=torch.float64)
        self.beta1 = betas[:, 0].to(device=dev, dtype=torch.float64)  # [E]
        self.beta2 = betas[:, 1].to(device=dev, dtype=torch.float64)
        decayed = bool(self.seg_wd.any())
        self._coupled, self._decays = decayed and kind != "adamw", decayed and kind == "adamw"
        self.steps = torch.zeros(self.E, dtype=torch.float64, device=dev)  # optimiser steps taken per member
        self.exp_avg = torch.zeros_like(flat)  # Adam's m, or SGD's momentum buffer
        self.exp_avg_sq = torch.zeros_like(flat) if kind != "sgd" else None
        m = self.member
        # Numbers fixed for the whole run, as a Python float where every segment agrees (the common case)
        self._wd_f32 = self._spread(self.seg_wd.float())
        self._one_m_b1 = self._spread((1.0 - self.beta1).float()[m])
        self._one_m_b2 = self._spread((1.0 - self.beta2).float()[m])
        self._b2 = self._spread(self.beta2.float()[m])
        self._eps = self._spread(self.seg_eps.float())
        self._momentum = self._spread(momentum.to(device=dev, dtype=torch.float32)[m])
        self._bufs: dict[str, torch.Tensor] = {}
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
    def from_torch(cls, flat: torch.Tensor, optimizers: Sequence[torch.optim.Optimizer],
                   where: Sequence[Mapping[int, tuple[int, int]]]) -> VecOptimizer:
        """The numbers of each member's own torch optimiser: its parameter groups' lr, weight decay,
        eps, betas, momentum, element by element (``where[e]``: id(parameter) -> (start, size) of
        its elements in ``flat.view(-1)``). Whatever the groups hold (per-role lr, weight-decay and ε
        multipliers of any parameterisation) is what the stacked step uses."""
        names = {type(o).__name__ for o in optimizers}
        if len(names) != 1 or next(iter(names)) not in SUPPORTED:
            raise NotStackable(f"optimisers {sorted(names)}: a stacked step exists for one kind at a time of {', '.join(SUPPORTED)}")
        kind, fixed = SUPPORTED[next(iter(names))]
        E, total = len(optimizers), flat.numel()
        seg = torch.full((total,), -1, dtype=torch.long)
        member, rates, wd, eps = [], [], [], []  # per segment: one parameter group of one member
        betas = torch.zeros(E, 2, dtype=torch.float64)
        momentum = torch.zeros(E)
        for e, (opt, pos) in enumerate(zip(optimizers, where)):
            for g in opt.param_groups:
                for k, v in fixed.items():
                    if g.get(k, v) != v:
                        raise NotStackable(f"{type(opt).__name__}({k}={g[k]}) has no stacked step")
                s = len(member)
                member.append(e)
                rates.append(g.get("initial_lr", g["lr"]))
                wd.append(g["weight_decay"])
                eps.append(g["eps"] if kind != "sgd" else 1.0)
                for p in g["params"]:
                    o, n = pos[id(p)]
                    seg[o : o + n] = s
                if kind != "sgd":
                    betas[e] = torch.tensor([float(b) for b in g["betas"]], dtype=torch.float64)
                else:
                    momentum[e] = g["momentum"]
            # betas/momentum per member: one value for all of a member's groups
            if kind != "sgd" and len({tuple(g["betas"]) for g in opt.param_groups}) > 1:
                raise NotStackable("betas differ between a member's parameter groups")
            if kind == "sgd" and len({g["momentum"] for g in opt.param_groups}) > 1:
                raise NotStackable("momentum differs between a member's parameter groups")
        if bool((seg < 0).any()):
            raise NotStackable("the members' optimisers do not hold every stacked parameter")
        f64 = lambda v: torch.tensor(v, dtype=torch.float64)
        return cls(kind, flat, seg.view(flat.shape), torch.tensor(member), f64(rates), f64(wd), f64(eps), betas, momentum)

    @torch.no_grad()
    def step(self, grad: torch.Tensor, factors: torch.Tensor, active: torch.Tensor | None = None) -> None:
        """One step with ``grad`` (``flat``'s layout) at schedule ``factors`` ([E], float64); members not ``active`` stay as they are."""
        p = self.flat
        lr = self.seg_rates * factors.to(self.seg_rates)[self.member]  # [S], float64: (lr x mult) x factor, as LambdaLR sets it
        if active is not None and not bool(active.all()):
            keep = self.member_mask(~active)
            old = (p.clone(), self.exp_avg.clone(), None if self.exp_avg_sq is None else self.exp_avg_sq.clone(), self.steps.clone())
        else:
            keep = None
        if self.kind == "sgd":
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
            grad = grad + self._wd_f32 * p  # Adam's L2 term: grad.add(param, alpha=wd)
        self.exp_avg.lerp_(grad, self._one_m_b1)
        t1, t2 = self._buf("t1"), self._buf("t2")
        torch.mul(grad, self._one_m_b2, out=t1)
        self.exp_avg_sq.mul_(self._b2).add_(t1.mul_(grad))  # addcmul: self + (value * t1) * t2
        step_size = self._spread((lr / (1.0 - self.beta1**self.steps)[m]).float().neg(), "step")  # -lr / bias_correction1
        bc2_sqrt = self._spread(((1.0 - self.beta2**self.steps) ** 0.5).float()[m], "bc2")
        torch.sqrt(self.exp_avg_sq, out=t2)
        t2.div_(bc2_sqrt).add_(self._eps)  # denom
        torch.mul(self.exp_avg, step_size, out=t1)
        p.add_(t1.div_(t2))  # addcdiv: self + (value * t1) / t2

    def _sgd(self, p, grad, lr):
        self.steps += 1
        g = grad + self._wd_f32 * p if self._coupled else grad  # grad.add(param, alpha=wd)
        buf = self.exp_avg
        buf.mul_(self._momentum).add_(g)  # first step: 0 * m + g = g, torch's clone of the gradient
        t1 = self._buf("t1")
        torch.mul(buf, self._spread(lr.float().neg(), "step"), out=t1)
        p.add_(t1)

    # ------------------------------------------------------------------ checkpoints, one member at a time

    def _idx(self, i: int) -> torch.Tensor:
        """Member ``i``'s positions in ``flat.view(-1)``, in order."""
        return (self._per_element(self.member) == i).flatten().nonzero().flatten()

    def member_state(self, i: int) -> dict[str, torch.Tensor]:
        idx = self._idx(i)
        out = {"steps": self.steps[i].clone().cpu(), "exp_avg": self.exp_avg.view(-1)[idx].cpu()}
        if self.exp_avg_sq is not None:
            out["exp_avg_sq"] = self.exp_avg_sq.view(-1)[idx].cpu()
        return out

    @torch.no_grad()
    def load_member_state(self, i: int, state: dict[str, torch.Tensor]) -> None:
        idx = self._idx(i)
        self.steps[i] = state["steps"].to(self.steps)
        self.exp_avg.view(-1)[idx] = state["exp_avg"].to(self.exp_avg)
        if self.exp_avg_sq is not None:
            self.exp_avg_sq.view(-1)[idx] = state["exp_avg_sq"].to(self.exp_avg_sq)

    def member_values(self, t: torch.Tensor, i: int) -> torch.Tensor:
        """Member ``i``'s elements of ``t`` (``flat``'s layout), in order."""
        return t.reshape(-1)[self._idx(i)]

    @torch.no_grad()
    def set_member_values(self, t: torch.Tensor, i: int, values: torch.Tensor) -> None:
        t.view(-1)[self._idx(i)] = values.to(t)
