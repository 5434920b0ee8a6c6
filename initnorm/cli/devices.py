"""One device per job: the accelerator and device a job's Trainer gets.

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

GPU = ("gpu", "cuda")


def gpu_count() -> int:
    """CUDA GPUs this process may use (after ``CUDA_VISIBLE_DEVICES``)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


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


def assign(accelerator: str, devices: Any, job_num: int, multirun: bool, n_gpus: int) -> dict[str, Any]:
    """The Trainer's ``accelerator`` and ``devices`` for job ``job_num`` when ``n_gpus`` GPUs are visible.

    >>> assign("auto", 1, job_num=5, multirun=True, n_gpus=4)
    {'accelerator': 'cuda', 'devices': [1]}
    >>> assign("cpu", 1, job_num=5, multirun=True, n_gpus=4)
    {'accelerator': 'cpu', 'devices': 1}
    """
    count = _count(devices)
    if multirun and (count or 1) > 1:
        raise bad_value("trainer.devices", devices, "1 in a sweep: one process and one device per job (Lightning's DDP relaunch "
                        "does not work inside a Hydra multirun, Hydra issue 2070); spread jobs over devices with a parallel launcher",
                        "trainer.devices=1 hydra/launcher=local_parallel")
    accelerator = str(accelerator).lower()
    if accelerator in GPU and n_gpus == 0:
        raise bad_value("trainer.accelerator", accelerator, "a GPU accelerator needs a visible CUDA GPU and this process sees none",
                        "trainer.accelerator=auto")
    if isinstance(devices, (list, tuple)) or (count or 1) > 1:
        return {"accelerator": accelerator, "devices": devices}  # pinned by the user, or DDP in a single run
    if accelerator == "auto" and n_gpus == 0:
        return {"accelerator": "auto", "devices": 1}  # Lightning picks the CPU (or Apple's MPS)
    if accelerator in GPU or accelerator == "auto":
        return {"accelerator": "cuda", "devices": [job_num % n_gpus]}
    return {"accelerator": accelerator, "devices": 1}


def for_job(trainer_cfg: dict[str, Any], job_num: int) -> dict[str, Any]:
    """``assign`` for this process: the visible GPUs, and whether Hydra runs it as a multirun job."""
    from hydra.core.hydra_config import HydraConfig

    mode = HydraConfig.get().mode if HydraConfig.initialized() else None
    multirun = mode is not None and mode.name == "MULTIRUN"
    return assign(trainer_cfg["accelerator"], trainer_cfg["devices"], job_num, multirun, gpu_count())


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
