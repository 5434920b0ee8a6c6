"""Your own optimiser, as a user writes one: Lion (Chen et al. 2023, "Symbolic Discovery of Optimization
Algorithms"), element-wise (the update is the sign of a mix of momentum and gradient), trained by

    python -m initnorm.train optim=custom optim._target_=examples.lion.Lion optim.family=adam

``optim.family=adam``: its update's size does not follow the gradient's, so µP scales it as Adam's
(docs/optimisers.md). This one file is all an optimiser of one's own takes (ARCHITECTURE.md counts it)."""

import torch


class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-4, betas=(0.9, 0.99), weight_decay: float = 0.0):
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        for g in self.param_groups:
            b1, b2 = g["betas"]
            for p in g["params"]:
                if p.grad is None:
                    continue
                m = self.state[p].setdefault("exp_avg", torch.zeros_like(p))
                p.mul_(1 - g["lr"] * g["weight_decay"])
                p.add_(torch.sign(m * b1 + p.grad * (1 - b1)), alpha=-g["lr"])
                m.lerp_(p.grad, 1 - b2)
