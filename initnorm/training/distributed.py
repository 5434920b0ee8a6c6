"""One run across processes: where a fit runs (``Placement``), and what the engine adds under Lightning's DDP.

``cli/devices.choose`` decides a job's ``Placement`` (accelerator, devices, strategy, the members' device in this
process); ``fit`` hands it to Lightning's ``Trainer`` as it is. Under ``trainer.strategy=ddp`` with N processes:

- ``batch_size`` is the global batch. Every rank draws the same batch (the stream is a function of the seed and the
  step) and trains on its own contiguous N-th of the rows (``shard``); Lightning's ``DistributedDataParallel`` averages
  the gradients, so the step is the step of one process on the whole batch, to float rounding. A checkpoint therefore
  resumes on any world size that divides the batch.
- The per-member losses are averaged over the ranks before the engine records them or checks them for divergence
  (``mean_over_ranks``): every rank records, and stops, on the global batch's loss.
- Rank 0 alone writes the job's folder (its log, trackers, checkpoints, record, the instruments' files); another rank's
  engine writes what it would write into a scratch folder (``scratch_folders``).
- Every rank evaluates the whole validation set (the fit turns Lightning's distributed sampler off): every rank's
  history is the same, and rank 0's is the record.
- The per-role learning rates, decays and multipliers are checked equal on every rank at the start (``check_same``),
  by a name table that survives the wrappers' prefixes (``unwrapped``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from initnorm.errors import ConfigError

if TYPE_CHECKING:
    import torch

# What wrappers put into a parameter's name: DistributedDataParallel a leading ``module.``; torch.compile ``_orig_mod.``
# and FSDP1 ``_fsdp_wrapped_module.`` (activation checkpointing ``_checkpoint_wrapped_module.``) before each module they
# wrap, anywhere in the name. FSDP2 (``fully_shard``) keeps the names.
LEADING = "module"
INSERTED = ("_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module")


def unwrapped(name: str) -> str:
    """A parameter's name as its own model names it, whatever wrapped it: ``module._orig_mod.blocks.0.attn.w`` ->
    ``blocks.0.attn.w``. A layer of the model's own called ``module`` keeps its name, unless it is the first."""
    parts = name.split(".")
    while len(parts) > 1 and parts[0] in (LEADING, *INSERTED):
        parts.pop(0)
    return ".".join([p for p in parts[:-1] if p not in INSERTED] + parts[-1:])


@dataclass(frozen=True)
class Placement:
    """Where a fit runs: Lightning's ``accelerator``, ``devices`` and ``strategy``, the number of processes, and the
    device of the members' tensors in this process."""

    accelerator: str  # what runs: cpu, cuda or mps (Lightning's names), never auto
    devices: int | list[int] = 1
    strategy: str = "auto"
    processes: int = 1
    device: str = "cpu"

    def trainer_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"accelerator": self.accelerator, "devices": self.devices, "strategy": self.strategy}
        if self.processes > 1:
            kw["use_distributed_sampler"] = False  # every rank evaluates every batch; the training rows are sharded here
        return kw


def placement_of(device: str | torch.device | Placement) -> Placement:
    """A torch device (``cpu``, ``cuda:1``, ``mps``) as the one-process ``Placement`` that trains there."""
    import torch

    if isinstance(device, Placement):
        return device
    d = torch.device(device)
    if d.type == "cuda":
        return Placement("cuda", [d.index or 0], device=f"cuda:{d.index or 0}")
    return Placement(d.type, 1, device=d.type)


def local_rank() -> int:
    """This process's rank on its node, as Lightning's DDP launcher sets it for the processes it starts (0 in the first)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def other_rank() -> bool:
    """Whether this process is a rank other than 0 of one run across processes (Lightning's DDP launcher started it with
    ``LOCAL_RANK``; before the process group exists): it trains, and rank 0 writes the folder (log, trackers, record)."""
    return int(os.environ.get("RANK") or os.environ.get("LOCAL_RANK") or 0) > 0


def scratch_folders(n: int) -> list[Path]:
    """``n`` folders of a temporary one, removed when the process ends: what another rank's engine writes into (its
    checkpoints, an instrument's files: rank 0 writes the job's own), so that nothing of another rank lands in the job's
    folder."""
    import atexit
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="initnorm-rank-"))
    atexit.register(shutil.rmtree, root, True)
    return [root / str(e) for e in range(n)]


def world() -> tuple[int, int]:
    """(rank, world size) of this process's process group; (0, 1) outside one."""
    import torch

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def check_batch(batch_size: int, processes: int) -> None:
    """``ConfigError`` unless ``batch_size`` (the global batch) splits evenly over ``processes``."""
    if processes > 1 and batch_size % processes:
        raise ConfigError(f"batch_size={batch_size} is invalid: it is the global batch, split evenly over the "
                          f"{processes} processes of trainer.devices={processes}; fix it with "
                          f"`batch_size={max(processes, batch_size // processes * processes)}`")


def shard(batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's rows of a stacked batch ``(xs, ys)`` (``[E, B, ...]``): the r-th of N equal slices; the batch itself
    outside a process group."""
    rank, size = world()
    if size == 1:
        return batch
    rows = batch[0].shape[1] // size
    return tuple(t[:, rank * rows : (rank + 1) * rows] for t in batch)


def mean_over_ranks(values: torch.Tensor) -> torch.Tensor:
    """``values`` averaged over the ranks (each rank's loss on its rows -> the loss of the global batch)."""
    _, size = world()
    if size == 1:
        return values
    import torch

    out = values.detach().clone()
    torch.distributed.all_reduce(out, op=torch.distributed.ReduceOp.SUM)
    return out / size


def fingerprint(engine) -> list[tuple]:
    """What must be the same in every rank: each parameter (by its unwrapped name) with its group (rate, decay, the
    role's multipliers), and every layer's float attributes (its forward multiplier), for every member."""
    groups = engine.optimizer.param_groups
    ids = {id(p): g for g in groups for p in g["params"]}
    out = []
    for name, p in engine.named_parameters():
        g = ids.get(id(p))
        out.append((unwrapped(name), None if g is None else tuple(sorted((k, repr(v)) for k, v in g.items() if k != "params"))))
    for name, mod in engine.named_modules():  # the forward multipliers live in the layers that apply them
        out += [(f"{unwrapped(name)}.{k}", repr(v)) for k, v in sorted(vars(mod).items()) if isinstance(v, float)]
    return out


def check_same(engine, gather=None) -> None:
    """``RuntimeError`` naming the first difference when the ranks' per-role rates, decays or multipliers differ
    (``gather``: the list of every rank's fingerprint; default ``all_gather_object`` over the process group)."""
    import torch

    mine = fingerprint(engine)
    if gather is None:
        if world()[1] == 1:
            return
        everyone: list[Any] = [None] * world()[1]
        torch.distributed.all_gather_object(everyone, mine)
    else:
        everyone = gather(mine)
    for rank, theirs in enumerate(everyone):
        if theirs != mine:
            first = next((a, b) for a, b in zip(_padded(mine, theirs), _padded(theirs, mine)) if a != b)
            raise RuntimeError(f"rank {rank}'s optimiser groups differ from this rank's: {first[1]} against {first[0]}")


def _padded(a: Sequence, b: Sequence) -> list:
    return list(a) + [None] * max(0, len(b) - len(a))
