"""``initnorm.coord_check``: the µP coordinate check (deck §7d; Yang et al. 2022, "Tensor Programs V", §D.1) on a
model of one's own, in a plain loop::

    report = initnorm.coord_check(GPT, batches, loss_fn, widths=[64, 128, 256, 512], base_width=64,
                                  width_arg="n_embd", vocab_size=65, n_layer=2, n_head=2)
    print(report.text); report.save("coord")      # coord.csv, verdict.txt, coord.png

For every (parameterisation, depth, width, seed) the model is built by ``initnorm.parameterize`` from that seed,
trained ``steps`` optimiser steps at a constant ``lr`` on the same first ``steps`` batches, and after each step
its probe points' outputs on fixed inputs are compared with step 0's: the RMS change per point
(``record.py``, what the ``CoordCheck`` callback measures in initnorm-train's jobs). The records are then judged
by ``analysis.judge``, the function ``initnorm-coord-check`` judges its jobs' ``coord.csv`` with: the same
table, verdict and figure. The defaults are the command's (``WIDTHS``, ``PARAMS``, ``STEPS``, ``LR``, ``SEED``,
``TOLERANCE``: cli/coord_check.py reads them from here) and its jobs' optimiser (conf/optim/adamw.yaml), so the
same model, batches and inputs give initnorm-coord-check's numbers (tests/test_coord_check_library.py).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from initnorm.callbacks.probes import Record, eval_forward
from initnorm.errors import ConfigError, bad_value
from initnorm.instruments.coord.analysis import TOLERANCE, CoordReport, judge
from initnorm.instruments.coord.record import clone, member_records, watched_points
from initnorm.models.parameterize import parameterize
from initnorm.nn.param import PARAMS as TABLES
from initnorm.registry import is_dotted
from initnorm.training.optimizers import build_named

__all__ = ["LR", "PARAMS", "SEED", "STEPS", "TOLERANCE", "WIDTHS", "WINDOWS", "coord_check"]

WIDTHS = (16, 32, 64, 128, 256)
PARAMS = ("sp", "mup")
STEPS = 10
LR = 0.01  # constant: the deck's "learning rate 0.01", no decay within the steps
SEED = 1
WINDOWS = 16  # fixed inputs measured at every step


def coord_check(
    model: Callable[..., nn.Module] | str,
    batches: Iterable[Any],
    loss_fn: Callable[[nn.Module, Any], torch.Tensor],
    *,
    widths: Sequence[int] = WIDTHS,
    params: Sequence[str | Callable] = PARAMS,
    depths: Sequence[int] | None = None,
    steps: int = STEPS,
    lr: float = LR,
    seed: int = SEED,
    seeds: Sequence[int] | None = None,
    inputs: torch.Tensor | None = None,
    windows: int = WINDOWS,
    tolerance: float = TOLERANCE,
    optimizer: str = "adamw",
    weight_decay: float = 0.01,
    mode: str = "scaled",
    eps: float = 1e-8,
    betas: tuple[float, float] = (0.9, 0.999),
    momentum: float = 0.9,
    device: str | torch.device = "cpu",
    **model_kw: Any,
) -> CoordReport:
    """The coordinate check of ``model`` over ``widths`` (or ``depths`` at one width) and ``params``.

    ``model`` and ``model_kw`` are ``initnorm.parameterize``'s (a constructor with ``base_width=``, ``width_arg=``
    and its own arguments, or a family's name; ``depth=``, one depth, or ``depths=[...]`` at one width: the check
    across depth); ``batches``: the training batches, of which the first ``steps`` are
    taken once and given to every job; ``loss_fn(model, batch)``: the scalar loss of a batch (``model`` returns
    what its forward returns); ``inputs``: the fixed inputs measured at every step (default: the first batch's
    inputs, its first element or its ``input_ids``, cut to ``windows``). The optimiser is ``optimizer`` over
    ``Parameterized.param_groups(lr, weight_decay, eps, mode)``, with ``betas`` (Adam) or ``momentum`` (SGD), at a
    constant rate. ``seeds`` (default ``[seed]``): one job per seed, each model drawn from its seed (the batches and
    inputs are the same); the exponents' intervals are a bootstrap over them. ``tolerance``: the largest |exponent|
    that counts as flat (``analysis.verdict``). Returns the ``CoordReport``: ``records`` (width, depth, param, seed,
    step, layer, role, statistic, value), ``exponents``, ``ok``, ``text`` (tables and verdict), ``png()`` and
    ``save(folder)``."""
    if "width" in model_kw or (depths is not None and "depth" in model_kw):
        raise TypeError("coord_check takes widths=[...] and depths=[...] (or one depth=), not width=")
    depths = [model_kw.pop("depth", None)] if depths is None else list(depths)
    check_axes(list(widths), depths, list(params), [seed] if seeds is None else list(seeds), steps, lr)
    taken = list(itertools.islice(iter(batches), steps))
    if len(taken) < steps:
        raise ConfigError(f"batches gave {len(taken)} batches, and the coordinate check takes {steps} steps; give at least {steps} "
                          f"batches or fix it with `steps={max(1, len(taken))}`")
    taken = [_to(b, device) for b in taken]
    fixed = (_inputs_of(taken[0]) if inputs is None else inputs)[:windows].to(device)
    records: list[dict] = []
    for param, depth, width, job_seed in itertools.product(params, depths, widths, [seed] if seeds is None else seeds):
        torch.manual_seed(job_seed)
        p = parameterize(model, width=width, depth=depth, param=param, optimizer=optimizer, **model_kw)
        net = p.model.to(device)
        opt = build_named(optimizer, p.param_groups(lr, weight_decay=weight_decay, eps=eps, mode=mode), lr, betas=betas,
                          eps=eps, weight_decay=weight_decay, momentum=momentum)
        label = param if isinstance(param, str) else f"{param.__module__}:{param.__qualname__}"  # the verdict reads its kind
        meta = {"width": width, "depth": depth, "param": label, "seed": job_seed}
        records += [{**meta, "step": r.step, "layer": r.layer, "role": r.role, "statistic": r.stat, "value": r.value}
                    for r in _trained(net, opt, taken, loss_fn, fixed)]
    return judge(records, tolerance, optimizer)


def check_axes(widths: list, depths: list, params: list, seeds: list, steps: int, lr: float, flags: bool = False) -> None:
    """What no exponent can be read from, in one line each, before any job trains: the library's keywords
    (``widths=[16, 32]``) or, with ``flags``, ``initnorm-coord-check``'s (``--widths 16,32``)."""

    def spelt(value):
        return ",".join(map(str, value)) if flags and isinstance(value, list) else value

    def bad(key: str, value, allowed: str, fix) -> ConfigError:
        if flags:
            return bad_value(f"--{key}", spelt(value), allowed, f"--{key} {spelt(fix)}")
        return bad_value(key, value, allowed, f"{key}={fix}")

    if not (isinstance(steps, int) and steps > 0):
        raise bad("steps", steps, "a positive integer", STEPS)
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise bad("lr", lr, "a finite positive number", LR)
    unknown = [p for p in params if not (callable(p) or isinstance(p, str) and (p in TABLES.names() or is_dotted(p)))]
    if unknown:  # before any job: the command named the job that met it and offered `param=sp`, not a flag
        raise bad("params", params, f"parameterisations by name ({', '.join(TABLES.names())}) or a dotted path of one's "
                  f"own (mypkg.tables:mine); {unknown[0]!r} is neither", [p for p in params if p not in unknown] or list(PARAMS))
    for key, values in (("widths", widths), ("depths", depths), ("params", params), ("seeds", seeds)):
        if len(set(map(repr, values))) < len(values):  # a seed twice narrows the bootstrap's interval with no new evidence
            raise bad(key, values, "each value once", list(dict.fromkeys(values)))
    if len(widths) < 2 and len(depths) < 2:  # an exponent on width (depth) needs two of them at least
        several = "several --depths" if flags else "depths=[...] at one width"
        raise bad("widths", widths, f"two widths or more (or {several}: the check across depth)", list(WIDTHS))


def _trained(net: nn.Module, opt: torch.optim.Optimizer, batches: list, loss_fn: Callable, inputs: torch.Tensor) -> list[Record]:
    """One job: a step on each batch, and after each step every watched point's RMS change from step 0 on ``inputs``."""
    points, last = watched_points(net)
    measure = lambda: eval_forward(net, inputs, points, lambda t: clone(t).unsqueeze(0))  # [1, ...]: one member
    reference, names, out = measure(), list(points), []
    for step, batch in enumerate(batches, 1):
        loss = loss_fn(net, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        out += member_records(step, names, measure(), reference, last, [True])[0]
    return out


def _inputs_of(batch: Any) -> torch.Tensor:
    """A batch's inputs: a tensor itself, a tuple's first element (``(x, y)``), a mapping's ``input_ids`` (Hugging Face)."""
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, (tuple, list)) and batch and isinstance(batch[0], torch.Tensor):
        return batch[0]
    if isinstance(batch, Mapping) and isinstance(batch.get("input_ids"), torch.Tensor):
        return batch["input_ids"]
    raise TypeError(f"cannot tell the inputs of a {type(batch).__name__} batch; pass inputs=<the fixed inputs to measure>")


def _to(batch: Any, device: str | torch.device) -> Any:
    """The batch's tensors on ``device`` (in tuples, lists and mappings)."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, (tuple, list)):
        return type(batch)(_to(b, device) for b in batch)
    if isinstance(batch, Mapping):
        return type(batch)({k: _to(v, device) for k, v in batch.items()})
    return batch
