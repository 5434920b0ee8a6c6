"""One device per job: the accelerator and device a job's Trainer gets, the one device policy of every launcher, the
preflight, the memory check and a fit of one's own (``placement``: what ``training/fit.fit`` takes).

A sweep is many small processes, one per job, each on one device. Lightning's DDP relaunch
(``devices > 1``) starts copies of the script, which does not work inside a Hydra multirun
(Hydra issue 2070), so a sweep refuses ``devices > 1``. With ``trainer.accelerator=auto`` and N
visible GPUs, job k runs on GPU ``k mod N``: parallel jobs spread over the GPUs instead of all
landing on GPU 0. Under SLURM with one GPU per job, SLURM's ``CUDA_VISIBLE_DEVICES`` leaves one
GPU visible and every job takes it. ``accelerator=cpu`` (the default) never touches a GPU.
"""

from __future__ import annotations

from typing import Any

from initnorm.errors import bad_value
from initnorm.training.distributed import Placement, check_batch, local_rank

GPU = ("gpu", "cuda")
# The strategies whose every process holds the whole model: the engine's members over one flat tensor train so. ddp_spawn
# runs the whole fit in each spawned rank (training/distributed.spawned); ddp_fork and the notebook ones are not taken.
STRATEGIES = ("auto", "ddp", "ddp_spawn")


def gpu_count() -> int:
    """CUDA GPUs this process may use (after ``CUDA_VISIBLE_DEVICES``)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def has_mps() -> bool:
    """Whether Apple's MPS device is there."""
    import torch

    return bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()


def _count(devices: Any) -> int | None:
    """How many devices ``trainer.devices`` asks for; None for ``auto`` or an explicit list."""
    if devices in (None, "auto", -1, "-1"):
        return None
    if isinstance(devices, (list, tuple)):
        return len(devices)
    try:
        return int(devices)
    except (TypeError, ValueError):
        return None  # a string Lightning parses itself, such as "0,1"


def _available(n_gpus: int, mps: bool) -> str:
    return "this machine has cpu" + (f" and cuda ({n_gpus} GPU{'s' * (n_gpus > 1)})" if n_gpus else "") + (" and mps" if mps else "")


def choose(trainer: dict[str, Any], job_num: int, multirun: bool, n_gpus: int, mps: bool = False) -> Placement:
    """The one decision of where a job trains: ``trainer``'s ``accelerator``, ``devices`` and ``strategy`` for job
    ``job_num`` when ``n_gpus`` CUDA GPUs (and ``mps``) are visible; what cannot run here is one line.

    >>> choose({"accelerator": "auto", "devices": 1}, job_num=5, multirun=True, n_gpus=4).device
    'cuda:1'
    >>> choose({"accelerator": "cpu", "devices": 1}, job_num=5, multirun=True, n_gpus=4).device
    'cpu'
    """
    devices, strategy = trainer.get("devices", 1), str(trainer.get("strategy") or "auto")
    accelerator = str(trainer.get("accelerator", "cpu")).lower()
    count = _count(devices)
    if multirun and (count or 1) > 1:
        raise bad_value("trainer.devices", devices, "1 in a sweep: one process and one device per job (Lightning's DDP relaunch "
                        "does not work inside a Hydra multirun, Hydra issue 2070); spread jobs over devices with a parallel launcher",
                        "trainer.devices=1 hydra/launcher=local_parallel")
    if count is None and not isinstance(devices, (list, tuple)) and devices not in (None, "auto", -1, "-1"):
        raise bad_value("trainer.devices", devices, "a number of devices, or a list of GPU indices", "trainer.devices=1")
    if count is not None and count < 1:  # Lightning's own refusal of 0 or [] is a traceback from inside its Trainer
        raise bad_value("trainer.devices", devices, "1 or more devices (auto or -1: every visible GPU)", "trainer.devices=1")
    if accelerator == "auto":
        accelerator = "cuda" if n_gpus else "mps" if mps else "cpu"
    if accelerator in GPU:
        accelerator = "cuda"
        if n_gpus == 0:
            raise bad_value("trainer.accelerator", trainer.get("accelerator"), f"{_available(n_gpus, mps)}: no CUDA GPU is visible "
                            "to this process", "trainer.accelerator=cpu")
    if accelerator == "mps" and not mps:
        raise bad_value("trainer.accelerator", "mps", f"{_available(n_gpus, mps)}: no Apple MPS device", "trainer.accelerator=cpu")
    if devices in (None, "auto", -1, "-1"):
        count = n_gpus if accelerator == "cuda" else 1
    if strategy not in STRATEGIES:
        raise bad_value("trainer.strategy", strategy, f"one of {', '.join(STRATEGIES)}: every process holds the whole model "
                        "(FSDP2 and the others: docs/devices.md)", "+trainer.strategy=ddp")
    if count > 1 and strategy == "auto":
        raise bad_value("trainer.devices", devices, f"{count} devices train one run in {count} processes, and the strategy that "
                        "does it must be named", f"+trainer.strategy=ddp trainer.devices={devices}")
    if accelerator == "mps" and count > 1:
        raise bad_value("trainer.devices", devices, "1 on mps (one Apple GPU)", "trainer.devices=1")
    if accelerator != "cuda":
        return Placement(accelerator, count, strategy, count, accelerator)
    if isinstance(devices, (list, tuple)):
        picked = [int(d) for d in devices]
    elif count > 1:
        picked = list(range(count))
    else:
        picked = [job_num % n_gpus]  # job k of a sweep on GPU k mod N
    if max(picked) >= n_gpus:
        raise bad_value("trainer.devices", devices, f"{_available(n_gpus, mps)}: GPUs 0 to {n_gpus - 1}", "trainer.devices=1")
    return Placement("cuda", picked, strategy, len(picked), f"cuda:{picked[local_rank() % len(picked)]}")


def available_memory() -> int | None:
    """Bytes of memory this machine can give a process now (Linux's MemAvailable); None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_memory(need: int, what: str, fix: str) -> None:
    """``ConfigError`` (one line) when ``what`` needs more than the memory available: said before
    anything is made, instead of an allocation's traceback after the output folder exists."""
    from initnorm.errors import ConfigError

    have = available_memory()
    if have is not None and need > have:
        raise ConfigError(f"{what} needs about {need / 2**30:,.1f} GiB of memory and this machine has {have / 2**30:,.1f} GiB available; "
                          f"fix it with `{fix}`")


def placement(trainer: dict[str, Any], index: int, multirun: bool, batch_size: int | None = None) -> Placement:
    """Where unit or job ``index`` trains on this machine, as ``choose`` decides it (``index`` mod N on N GPUs where GPUs
    are asked for); ``batch_size``: a job's global batch, checked against its processes."""
    t = {"accelerator": trainer["accelerator"], "devices": trainer["devices"], "strategy": trainer.get("strategy")}
    place = choose(t, index, multirun, gpu_count(), has_mps())
    if batch_size is not None:
        check_batch(int(batch_size), place.processes)
    return place
