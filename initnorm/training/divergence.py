"""The divergence stop, for E >= 1 members: a NaN or infinite training loss is a result (the run
diverged at that step), not a crash. The member is recorded and frozen; the others go on; when
none is left the fit stops. A job alone is the case E = 1."""

from __future__ import annotations

import torch


class Divergence:
    """Which members are alive, and the step at which each of the others diverged."""

    def __init__(self, members: int):
        self.steps: list[int | None] = [None] * members
        self.active = torch.ones(members, dtype=torch.bool)

    def check(self, losses: torch.Tensor, step: int) -> list[int]:
        """The members whose loss at ``step`` (``[E]``, on any device) is the first that is not finite."""
        finite = torch.isfinite(losses)
        if bool(finite.all()):  # the common case: one comparison, one read back, as a plain loop pays
            return []
        newly = (self.active & ~finite.cpu()).nonzero().flatten().tolist()
        for e in newly:
            self.steps[e] = step
            self.active[e] = False
        return newly

    def restore(self, e: int, step: int | None) -> None:
        """Member ``e`` as its checkpoint left it."""
        self.steps[e] = step
        self.active[e] = step is None

    @property
    def stopped(self) -> bool:
        return not bool(self.active.any())
