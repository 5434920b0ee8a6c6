"""One run across processes: where a fit runs (``Placement``), and what the engine adds under Lightning's DDP.

``training/devices.choose`` decides a job's ``Placement`` (accelerator, devices, strategy, the members' device in this
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

Under ``trainer.strategy=ddp_spawn`` the command does not train: Lightning's spawn launcher (the one its ``ddp_spawn``
strategy uses) starts N processes, and each runs the whole fit under DDP with the processes already there (``spawned``):
each rank builds its members from their configs (the model and the data are not pickled: the corpus was found, and
downloaded if need be, by the command's checks before), trains, and rank 0 writes the folders and returns the records
through the launcher's return queue. So the fit's history, record and checkpoints are rank 0's, as under ``ddp``, not
only the weights that Lightning hands back.
"""

from __future__ import annotations

import os
import pickle
import signal
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
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
    spawned: bool = False  # a rank that Lightning's spawn launcher started: it trains under DDP with the ranks already there

    def trainer_kwargs(self) -> dict[str, Any]:
        strategy = "ddp" if self.spawned else self.strategy
        kw: dict[str, Any] = {"accelerator": self.accelerator, "devices": self.devices, "strategy": strategy}
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


def spawns(place: Placement) -> bool:
    """Whether ``place`` asks the command to start its ranks by spawning (``ddp_spawn``) and this is not one of them."""
    return place.strategy == "ddp_spawn" and not place.spawned


def spawned(run: Callable[..., list[dict[str, Any]]], members: Sequence, place: Placement, options: dict[str, Any]) -> list[dict[str, Any]]:
    """``run(members, place, **options)`` (``fit``) in ``place.processes`` processes started by Lightning's spawn launcher,
    each a rank of one run under DDP; rank 0's records, or its exception (a stop as ``signals.Interrupted``).

    Everything the ranks get is pickled: a member, callback or option that does not pickle is one line before any process
    starts. A stop signal to the command is passed on to the ranks as SIGTERM (a Ctrl-C reaches them from the terminal as
    well): each saves its checkpoint at the next step, as the command itself would."""
    import lightning as L
    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessException

    from initnorm.training import signals

    # the placement as its fields: Lightning's launcher copies the arguments through apply_to_collection, which refuses a
    # frozen dataclass
    args = (run, list(members), asdict(replace(place, spawned=True)), options, signals.handling())
    for what, value in (("a member (its config, folder, loggers, HPARAMS writer)", args[1]), ("a callback or option", options)):
        try:
            pickle.dumps(value)
        except Exception as exc:  # pickle raises TypeError, AttributeError or PicklingError, by what it meets
            raise ConfigError(f"trainer.strategy='ddp_spawn' is invalid for this fit: {what} does not pickle ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''}), and the spawned ranks get everything by pickling; "
                              "fix it with `+trainer.strategy=ddp` (its ranks build everything themselves)") from None
    # The Trainer of the launcher only: the ranks make their own. Lightning's own strategy picks the launcher, its port and
    # its processes' threads.
    launcher = L.Trainer(accelerator=place.accelerator, devices=place.devices, strategy="ddp_spawn", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False).strategy.launcher
    errors = mp.get_context("spawn").SimpleQueue()
    try:
        with signals.passed_on(lambda signum: launcher.kill(signal.SIGTERM)):  # SIGTERM: a second SIGINT is a hard stop
            return launcher.launch(_rank, *args, errors)
    except ProcessException as exc:
        raised = errors.get() if not errors.empty() else None
        if isinstance(raised, signals.Interrupted) and signals.requested() is not None:
            raise signals.stopped_at(raised.folder, raised.step) if raised.folder else raised from None
        if isinstance(raised, Exception):
            raise raised from None
        raise RuntimeError(f"one run across {place.processes} spawned processes failed: {str(exc).strip().splitlines()[-1]}") from exc


def _rank(run, members, fields: dict[str, Any], options: dict[str, Any], handling: bool, errors) -> list[dict[str, Any]]:
    """One rank started by ``spawned``: the fit under DDP on this rank's device; rank 0's exception also goes to ``errors``
    (the launcher's own answer is only the text of its traceback)."""
    from initnorm.training import signals

    place = Placement(**fields)
    if handling:
        signals.install()  # a stop is recorded and honoured at the next step, as in the command
    if place.accelerator == "cuda":
        place = replace(place, device=f"cuda:{place.devices[local_rank()]}")
    try:
        return run(members, place, **options)
    except BaseException as exc:
        if local_rank() == 0:
            exc.add_note(f"in rank 0 of {place.processes} spawned processes:\n{''.join(traceback.format_exc())[-6000:]}")
            try:
                errors.put(exc)
            except Exception:  # an exception that does not pickle: its text
                errors.put(RuntimeError(f"{type(exc).__name__}: {exc}"))
        raise
