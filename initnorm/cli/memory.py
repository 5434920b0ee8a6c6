"""Whether a command's jobs fit in this machine's memory, asked by the preflight before anything is made.

Without it ``width=32768 steps=1`` ended in an allocation traceback after 48 s (its folder made), and
``-m width=16384 seed=1,2 hydra/launcher=vectorized`` in a worker taken by the out-of-memory killer. The estimate is a
measured one: per job ``BYTES_PER_PARAM`` a parameter (below) and one batch's
activations (``ACTIVATIONS_PER_LAYER`` tensors of batch x context x width a block, kept for the backward pass), times
the jobs that train at once (a worker each; a vectorised group's members together). Against Linux's MemAvailable;
on a GPU the device's own allocator says it, and a model whose parameters cannot be counted (a constructor of one's
own that needs more than the meta device) is not checked.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from initnorm import collector
from initnorm.cli import launchers
from initnorm.errors import ConfigError
from initnorm.training import devices

# The weight, its gradient and AdamW's two moments are 16 bytes (float32); a job holds more: the flat optimiser's
# buffers, the instruments' copy of the initial weights, a checkpoint's state. Measured (Intel Xeon, 2026-12-04): a
# 50.5M-parameter Decoder (width 512, depth 24, one step) peaked 3.6 GB above a tiny job's 0.5 GB with the per-layer
# statistics (71 bytes a parameter) and 2.8 GB with callbacks=none (51); batch 1 or 32 moved it by 0.2 GB. At 16 a
# width-1024 depth-48 job (403M parameters) passed the check and the out-of-memory killer ended it with no line. The
# default run's instruments on: 64 (over callbacks=none's 51 by a quarter: such a job within a fifth of the memory is refused).
BYTES_PER_PARAM = 64
ACTIVATIONS_PER_LAYER = 16  # a pre-norm block's saved tensors of batch x context x width (q, k, v, norms, the MLP's 4 ...)


def job_bytes(c: dict[str, Any], params: int) -> int:
    """One job's floor: its training state and one batch's activations."""
    model, data = c.get("model") or {}, c.get("data") or {}
    width, depth = int(model.get("width") or 0), int(model.get("depth") or 1)
    tokens = int(c.get("batch_size") or 1) * int(data.get("context") or 1)
    return BYTES_PER_PARAM * params + 4 * ACTIVATIONS_PER_LAYER * tokens * width * depth


def at_once(launcher: dict[str, Any], jobs: int, params: int) -> tuple[int, int]:
    """(workers asked for, members a worker trains together) of a sweep of ``jobs`` of ``params`` parameters each under
    ``launcher`` (its resolved node): a worker per core or ``n_jobs``, a group capped by ``max_group`` and ``max_params``."""
    kind = launchers.kind(launcher)
    n_jobs = launcher.get("n_jobs")
    workers = 1
    engine = launchers.engine_name(launcher.get("engine", "processes"), quiet=True)
    if kind in ("local_parallel", "vectorized") and engine == "processes":
        n = int(n_jobs) if isinstance(n_jobs, int) else -1
        workers = n if n > 0 else max(1, (os.cpu_count() or 1) + 1 + n)
    members = 1
    if kind == "vectorized":
        members = int(launcher.get("max_group") or 1)
        if isinstance(launcher.get("max_params"), int):
            members = min(members, max(1, launcher["max_params"] // max(1, params)))
    return workers, max(1, min(members, jobs))


def fits(jobs: list, launcher: dict[str, Any]) -> list:
    """The preflight's ``jobs`` (each with its checked ``config``), once ``check`` found they fit under ``launcher`` (the
    resolved ``hydra.launcher`` node)."""
    check([j.config for j in jobs], launcher, count)
    return jobs


def count(c: dict[str, Any]) -> int | None:
    """One job's parameter count (its model on the meta device); None where that cannot be built there."""
    from initnorm.training.group import parameter_count

    try:
        with collector.paused():  # the first meta-device build imports torch's compiler (0.85 s; initnorm/collector.py)
            return parameter_count(c)
    except Exception:  # a model of one's own that needs real tensors to build: the check is skipped, not the job
        return None


def on_gpu(c: dict[str, Any]) -> bool:
    """Whether the job trains on a CUDA GPU, as ``training/devices.choose`` places it (a refused device: the preflight says so)."""
    try:
        return devices.choose(c.get("trainer") or {}, 0, False, devices.gpu_count(), devices.has_mps()).accelerator == "cuda"
    except ConfigError:
        return False


def check(configs: Sequence[dict[str, Any]], launcher: dict[str, Any], count) -> None:
    """``ConfigError`` (one line, with the fix) when the largest job, times the jobs that train at once, needs more
    memory than is available; ``count(c)``: one job's parameter count (None: not known)."""
    if not configs or on_gpu(configs[0]):
        return
    have = devices.available_memory()
    if have is None:
        return
    sized = {}
    for c in configs:
        key = (repr(c.get("model")), c.get("batch_size"), repr((c.get("data") or {}).get("context")))
        if key not in sized:
            params = count(c)
            if params is None:
                return
            sized[key] = (job_bytes(c, params), c, params)
    need, biggest, params = max(sized.values(), key=lambda v: v[0])
    cores, members = at_once(launcher, len(configs), params)
    workers = min(cores, -(-len(configs) // members))  # a worker per unit at most
    width = (biggest.get("model") or {}).get("width")
    if need > have:
        raise ConfigError(f"one job (width={width}) needs about {need / 2**30:,.1f} GiB of memory (weights, gradients, AdamW's "
                          f"state, one batch's activations) and this machine has {have / 2**30:,.1f} GiB available; fix it "
                          f"with a smaller width (`width={_smaller(width)}`) or a smaller `batch_size`")
    together = min(len(configs), workers * members)
    if need * together > have:
        fits = max(1, have // need)
        if members > 1:  # fewer members a group (vectorized), and fewer workers where even groups of one do not fit
            fix = f"`hydra.launcher.max_group={max(1, fits // cores)}`" + (f" `hydra.launcher.n_jobs={fits}`" if fits < cores else "")
        else:
            fix = f"`hydra.launcher.n_jobs={fits}`"
        raise ConfigError(f"{together} jobs train at once ({workers} worker{'s' * (workers > 1)}"
                          + (f", up to {members} members a stacked group" if members > 1 else "")
                          + f"), each needing about {need / 2**30:,.1f} GiB (width={width}): {need * together / 2**30:,.1f} GiB "
                          f"against {have / 2**30:,.1f} GiB available; fix it with fewer at once, {fix}, or a smaller width")


def _smaller(width: Any) -> Any:
    return width // 4 if isinstance(width, int) and width >= 64 else width
