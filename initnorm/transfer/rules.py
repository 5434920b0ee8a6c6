"""Carry a config tuned at a base (width, depth, batch size, steps) to a job's: the batch, horizon and weight-decay
rules, applied once where the config is checked (``schema.check``), so that every launcher and both engine
paths read numbers already resolved: ``lr``, ``optim.weight_decay``, ``optim.betas`` and ``optim.eps``.

With ``transfer.base`` the point where lr, wd, betas and eps were tuned (null: the job's own value, so
nothing moves), k = batch / base batch and h = steps / base steps:

- ``transfer.batch_rule``: ``sqrt``: lr x k^1/2 (Malladi et al. 2022, the SDE scaling rule for Adam);
  ``linear``: lr x k (Goyal et al. 2017, SGD); ``none``. ``transfer.sde_betas``: 1 - beta -> k (1 - beta),
  ``transfer.sde_eps``: eps -> eps / k^1/2 (the rest of Malladi et al.'s rule);
- ``transfer.horizon_rule``: ``power``: lr x h^p with p = ``transfer.horizon_exponent`` (-0.32: Bjorck et al.
  2025, fitted against tokens at a fixed batch, where they grow as the steps); ``none``;
- ``optim.weight_decay_rule``: AdamW's weights average over tau = 1 / (lr x wd) iterations (Wang & Aitchison
  2024; 1 / wd under ``weight_decay_mode=independent``, whose decay does not scale with lr), and the rule holds
  tau fixed: in ``iterations``, as a ``fraction`` of the run (tau / steps: Wang & Aitchison 2024; Bergsma
  et al. 2025's B / (lr wd D)) or in ``tokens_per_param`` (tau x tokens a step / parameters: Bergsma et al.
  2025, "Power Lines"). ``optim.weight_decay_timescale`` gives tau in that unit; null takes the one the
  tuned lr and wd have at the base. wd follows from tau and the job's own (resolved) lr.

The resolved config names what moved in ``transfer.applied`` (the base it came from and each factor) and sets
``transfer.base`` to null: the numbers are now the job's own, and a second resolution moves nothing.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from typing import Any

from initnorm.errors import ConfigError, bad_value
from initnorm.transfer.axes import BATCH_RULES, HORIZON_RULES

POINT = ("width", "depth", "batch_size", "steps")  # what a base names
BATCH = {r.name: r.exponent for r in BATCH_RULES}  # none 0, sqrt 0.5, linear 1
HORIZON = tuple(r.name for r in HORIZON_RULES)  # none, power
WEIGHT_DECAY_RULES = ("none", "iterations", "fraction", "tokens_per_param")


def resolve(c: dict[str, Any]) -> dict[str, Any]:
    """``c`` (a checked config, plain dicts) with its lr, weight decay, betas and eps carried from ``transfer.base`` to
    its own width, depth, batch and steps by the configured rules; ``c`` itself when nothing moves. One line
    (``ConfigError``) for a rule that cannot apply (a beta pushed out of [0, 1), a decay rule without a decay)."""
    t, optim = c["transfer"], c["optim"]
    job = {k: c[k] for k in POINT}
    base = {k: job[k] if t["base"][k] is None else t["base"][k] for k in POINT}
    wd_rule = optim["weight_decay_rule"] if "weight_decay" in optim else "none"
    out = json.loads(json.dumps(c))
    if base == job:  # nothing to carry (a resolved config's own numbers); a decay set by its timescale is set all the same
        if wd_rule == "none" or optim["weight_decay_timescale"] is None:
            return c
        out["optim"]["weight_decay"] = weight_decay(c, base, c["lr"], wd_rule)
        return out
    k, h = job["batch_size"] / base["batch_size"], job["steps"] / base["steps"]
    lr_factor = k ** BATCH[t["batch_rule"]] * (h ** t["horizon_exponent"] if t["horizon_rule"] == "power" else 1.0)
    o, applied = out["optim"], {"from": {key: base[key] for key in POINT if base[key] != job[key]}, "lr_factor": lr_factor}
    out["lr"] = c["lr"] * lr_factor
    if t["sde_betas"] and k != 1:
        if "betas" not in optim:
            raise bad_value("transfer.sde_betas", True, f"optim={optim['name']} has no betas", "transfer.sde_betas=false")
        o["betas"] = [1 - k * (1 - b) for b in optim["betas"]]
        if not all(0 <= b < 1 for b in o["betas"]):
            raise ConfigError(f"transfer.sde_betas=true takes optim.betas={optim['betas']} to {o['betas']} at {k:g}x the batch "
                              f"(1 - beta x {k:g}), outside [0, 1): the SDE rule does not reach this batch; fix it with "
                              "`transfer.sde_betas=false` or a base batch nearer this one")
        applied["betas_from"] = list(optim["betas"])
    if t["sde_eps"] and k != 1 and "eps" in optim:
        o["eps"] = optim["eps"] / math.sqrt(k)
        applied["eps_factor"] = 1 / math.sqrt(k)
    if wd_rule != "none":
        o["weight_decay"] = weight_decay(c, base, out["lr"], wd_rule)
        if optim["weight_decay"]:
            applied["wd_factor"] = o["weight_decay"] / optim["weight_decay"]
    out["transfer"]["base"] = {key: None for key in POINT}
    out["transfer"]["applied"] = applied
    return out


def weight_decay(c: Mapping[str, Any], base: Mapping[str, int], lr: float, rule: str) -> float:
    """The decay that holds AdamW's timescale fixed in the rule's unit at the job's point, for its resolved ``lr``."""
    optim = c["optim"]
    coupled = optim["weight_decay_mode"] != "independent"  # independent decay: tau = 1 / wd, whatever the rate

    def per_step(point: Mapping[str, int]) -> float:
        """Iterations per unit of the rule: 1, the run's steps, or the steps that see one token per parameter."""
        if rule == "iterations":
            return 1.0
        if rule == "fraction":
            return float(point["steps"])
        return parameter_count(c, point["width"], point["depth"]) / (point["batch_size"] * targets(c))

    tau = optim["weight_decay_timescale"]
    if tau is None:  # the timescale the tuned lr and wd have at the base, in the rule's unit
        if not optim["weight_decay"]:
            raise bad_value("optim.weight_decay_timescale", None, f"a timescale (optim.weight_decay_rule={rule} with no decay to "
                            "take it from)", "optim.weight_decay_timescale=0.5")
        tau = 1 / ((c["lr"] if coupled else 1.0) * optim["weight_decay"]) / per_step(base)
    job = {key: c[key] for key in POINT}
    return 1 / ((lr if coupled else 1.0) * tau * per_step(job))


def targets(c: Mapping[str, Any]) -> int:
    from initnorm.training.tasks import TASKS

    return TASKS.get(c["data"]["kind"]).targets(c)


def parameter_count(c: Mapping[str, Any], width: int, depth: int) -> int:
    """The model's parameters at ``width`` and ``depth``, built on the meta device (no memory, no init)."""
    model = dict(c["model"], width=width, depth=depth)
    return _count(json.dumps(model, sort_keys=True), json.dumps({"data": c["data"], "batch_size": c["batch_size"], "seed": c["seed"]},
                                                             sort_keys=True))


@functools.lru_cache(maxsize=64)
def _count(model_json: str, data_json: str) -> int:
    from initnorm.training.group import parameter_count as built  # here: models.build checks with schema, which calls resolve

    return built({**json.loads(data_json), "model": json.loads(model_json)})
