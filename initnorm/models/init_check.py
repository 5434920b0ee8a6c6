"""An init that ignores the table: each parameter of a built model against what its role's rule draws.

microsoft/mup's README warns that a model's own fixed-std init, left in place, trains SP under µP's
name without a word. initnorm fills every parameter itself after the constructor ran
(``models/build.py``), so the model's own ``__init__``/``_init_weights`` cannot leave it; what can is
code that runs later, such as an init deferred to the first forward (as ``nn.Lazy*`` modules and some
user code do). So the check runs on the built model at the target width after one forward of a
training batch, and compares each parameter with a scratch tensor of its shape filled by the same
rule (``apply.init_filler``): a constant rule (biases, norm gains, a zero readout) must match
exactly, a random one in std and mean within six standard errors of two samples of that size (at
least 10% in std).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from initnorm.errors import ConfigError
from initnorm.models.apply import init_filler
from initnorm.nn.param import Table
from initnorm.nn.roles import FIXED_ROLES, Role

# A sample std's relative standard error is ~1/sqrt(2n) for a normal draw; two samples: 1/sqrt(n).
SIGMAS = 6.0
MIN_STD_TOL = 0.1


def mismatch(p: torch.Tensor, want: torch.Tensor) -> str | None:
    """How ``p`` departs from ``want`` (a draw of its rule), or None where it could be a draw of the same rule."""
    p, want = p.detach().double().flatten(), want.double().flatten()
    n = p.numel()
    std, want_std = (p.std().item(), want.std().item()) if n > 1 else (0.0, 0.0)
    mean, want_mean = p.mean().item(), want.mean().item()
    if want_std == 0.0:  # a constant rule (zero, one): exactly that constant
        return None if torch.allclose(p, want) else f"mean {mean:.3g} std {std:.3g} where the rule gives {want_mean:.3g}"
    if abs(math.log(max(std, 1e-30) / want_std)) > max(MIN_STD_TOL, SIGMAS / math.sqrt(n)):
        return f"std {std:.2g} where the rule draws {want_std:.2g}"
    if abs(mean - want_mean) > SIGMAS * want_std * math.sqrt(2.0 / n):
        return f"mean {mean:.3g} where the rule draws {want_mean:.3g} ± {want_std / math.sqrt(n):.2g}"
    return None


def ignored(model: nn.Module, fill: Callable[[str, torch.Tensor], None], roles: Mapping[str, Role]) -> list[str]:
    """``name (role): how it departs`` for each parameter whose values no draw of its rule would give."""
    out = []
    with torch.random.fork_rng(devices=[]):  # the rule's draws must not move the job's random stream
        for name, p in model.named_parameters():
            if p.numel() < 2 and roles[name] not in FIXED_ROLES:
                continue  # one draw of a random rule says nothing of its std
            want = torch.empty(p.shape, dtype=p.dtype)
            fill(name, want)
            if (why := mismatch(p.cpu(), want)) is not None:
                out.append(f"{name} ({roles[name].value}: {why})")
    return out


@torch.no_grad()
def check_init(model: nn.Module, table: Table, roles: Mapping[str, Role], c: Mapping[str, Any], inputs: torch.Tensor) -> None:
    """After one forward of ``inputs`` (eval mode, the job's random stream untouched), every parameter as its rule draws
    it, else one line naming those that are not and the overrides that fix it. ``c``: the job's resolved config."""
    if not c["model"]["check_init"]:
        return
    training = model.training
    model.eval()
    try:
        with torch.random.fork_rng(devices=[]):
            model(inputs)
    finally:
        model.train(training)
    bad = ignored(model, init_filler(model, c["model"], c["init"], table, roles), roles)
    if bad:
        raise ConfigError(
            f"{type(model).__name__}'s initial values do not follow param={table.name} with init={c['init']['name']} at width "
            f"{c['model']['width']}: {'; '.join(bad)}; something re-initialised them after initnorm did (an init on the first "
            "forward, say): remove it and choose the init with `init=...` (a zero readout: "
            "`init=zero_readout`; your own: `init=custom init.fn=mypkg.inits.fancy`), or keep it knowingly with `model.check_init=false`")


def check_built(built, c: Mapping[str, Any], data) -> None:
    """``check_init`` on a job's built model (``models.parameterize.Parameterized``), model=custom only, with the first training batch's
    first two inputs: initnorm's own families are filled by initnorm alone."""
    if c["model"]["family"] != "custom":
        return
    data.setup("fit")
    with torch.random.fork_rng(devices=[]):
        batch = next(iter(data.train_dataloader()))
    check_init(built.model, built.table, built.roles, c, batch[0][:2])
