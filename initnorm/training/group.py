"""Who may share a group: jobs that one stacked model can hold.

Jobs that share every shape and the computation graph (family, width, depth, heads, norm placement
and type, context, batch size, data, ...) differ only in numbers: the seed (weights and batch
order, each exactly as its own job draws them), learning rate, warmup, schedule, init scheme and
options, weight decay, Adam's betas and eps, SGD's momentum, the parameterisation's multipliers, and
the horizon: ``steps`` with what follows from it (the schedule's decay, the validation interval), each member
retiring at its own last step (``training/horizons.py``).
``group_key`` says which jobs can share a group; ``training/fit.py`` trains one (a job alone is a
group of one), and ``training/stack.py`` decides by a probe how its members run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import torch

from initnorm.models.families import MODELS  # the registry alone: models.build checks with schema, which transfer.rules (a caller) serves
from initnorm.training.tasks import TASKS

__all__ = ["MEMBER_KEYS", "drop_key", "get_key", "group_key", "parameter_count"]

# Keys whose values may differ inside a group: they change numbers, not shapes or the graph.
MEMBER_KEYS = ("seed", "lr", "warmup", "schedule", "init", "param", "model.mup", "optim.betas", "optim.eps", "optim.weight_decay",
               "optim.weight_decay_mode", "optim.momentum", "optim.adamw_lr", "summary", "regularizer",
               "callbacks.coord.seed", "callbacks.coord.param",  # the coordinate check's labels for its table
               "steps", "trainer.val_check_interval",  # a horizon and its validations
               "transfer")  # the rules that carried lr, wd, betas and eps to the job (numbers: members' own, resolved)
# A horizon's own key where it only repeats ``steps`` (conf/trainer: max_steps: ${steps}); one set apart from the steps
# stays in the key, so every member of a group stops the run where its job alone stops it.
HORIZON_KEYS = ("trainer.max_steps",)


def drop_key(d: dict, dotted: str) -> None:
    node, *rest = dotted.split(".")
    if not rest:
        d.pop(node, None)
    elif isinstance(d.get(node), dict):
        drop_key(d[node], ".".join(rest))


def get_key(d: dict, dotted: str) -> Any:
    for node in dotted.split("."):
        d = d.get(node) if isinstance(d, dict) else None
    return d


def group_key(c: Mapping[str, Any]) -> str:
    """Jobs with the same key can train as one group: the resolved config without the member-wise keys."""
    out = json.loads(json.dumps(dict(c), default=str))
    for k in HORIZON_KEYS:
        if get_key(out, k) == out.get("steps"):
            drop_key(out, k)
    for k in MEMBER_KEYS:
        drop_key(out, k)
    return json.dumps(out, sort_keys=True)


def parameter_count(c: Mapping[str, Any]) -> int:
    """One member's parameter count: the family's model built on the meta device (no memory, no init), for the vocabulary
    its task reads without a data module where it can (``Task.vocab``), else its data module's, set up."""
    task = TASKS.get(c["data"]["kind"])
    if task.vocab is not None:
        vocab = task.vocab(c)
    else:
        data = task.make_data(c)
        data.setup("fit")
        vocab = data.vocab_size
    with torch.device("meta"):
        model = MODELS.get(c["model"]["family"]).build(c["model"], vocab)
    return sum(p.numel() for p in model.parameters())
