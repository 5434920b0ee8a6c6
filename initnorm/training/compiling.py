"""When a run goes through ``torch.compile`` (``compile=auto|true|false``), and where the compiler keeps its cache.

One decision for every fit (``training/engine.py`` compiles its members' training losses): a job
alone and a vectorised group differ only in how many members share the compile. ``auto`` compiles
a run only when it is long enough to pay back the compile; the thresholds below come from
measurements (docs/performance.md).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

# The compiler's on-disk cache, below the folder a command runs in: every job of a sweep (joblib
# workers, SLURM jobs, the vectorised launcher's groups) and the next sweep find it there, and
# `make clean` removes it with outputs/. A TORCHINDUCTOR_CACHE_DIR set by the user wins.
COMPILE_CACHE = "outputs/.torch_compile_cache"
CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"

# compile=auto compiles when the run is long enough to pay back a cold compile (docs/performance.md,
# "Why 30,000 steps", and bench/RESULTS.md for the groups): a stacked group from this many member-steps
# (steps x members) on, since a cold compile of its step costs about a minute and saves about 1.4 ms of
# CPU per member-step; a job alone from ALONE_FROM steps on (a 28 s compile against about 1 ms a step).
# The MLPs gain nothing compiled; every preset (<= 1,500 steps) stays eager.
GROUP_FROM = 50_000
ALONE_FROM = 30_000


def should_compile(mode: bool | str, steps: int, members: int = 1) -> bool:
    """``compile=true`` always, ``false`` never, ``auto`` from ``ALONE_FROM`` steps on (one model)
    or from ``GROUP_FROM`` member-steps on (a stacked group of ``members``). Any other value is
    refused by the schema (``compile``) before a job starts."""
    if mode is True or mode is False:
        return mode
    return steps * members >= GROUP_FROM if members > 1 else steps >= ALONE_FROM


def use_cache(folder: str | Path) -> str:
    """Point the compiler's cache at ``folder``/COMPILE_CACHE, unless the user set one, and return it.
    Environment, not torch's config: worker processes started afterwards inherit it."""
    os.environ[CACHE_ENV] = cache_folder(folder)
    return os.environ[CACHE_ENV]


def cache_folder(folder: str | Path) -> str:
    """The cache ``use_cache(folder)`` picks: the user's ``TORCHINDUCTOR_CACHE_DIR``, else ``folder``/COMPILE_CACHE."""
    current = os.environ.get(CACHE_ENV)
    if current is None or current == _torch_default():
        return str(Path(folder).resolve() / COMPILE_CACHE)
    return current


def compiler_cache() -> str | None:
    """Where the compiler keeps its cache in this process: the environment's folder (``use_cache``'s, or the user's),
    else torch's own default."""
    return os.environ.get(CACHE_ENV) or _torch_default()


def _torch_default() -> str | None:
    """torch's own cache folder: importing Lightning writes it into the environment (torch's
    ``cache_dir()`` does), so a value equal to it was not set by the user."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # another torch: only an unset variable counts as unset
        return None
    return os.path.abspath(default_cache_dir())


def hooked(modules: list[torch.nn.Module]) -> bool:
    """Whether a forward hook sits on any of ``modules`` (every submodule, listed once: ``submodules``) or globally: the
    per-layer statistics measure through hooks, which a compiled graph does not see once it is built, so such a step
    runs eager. Asked at every training step, hence the flat list: walking each member's ``modules()`` again cost
    about 1.4% of a compiled group's step (py-spy, a group of 6 Decoders)."""
    from torch.nn.modules import module as nn_module

    if nn_module._global_forward_hooks or nn_module._global_forward_pre_hooks:
        return True
    return any(m._forward_hooks or m._forward_pre_hooks for m in modules)


def submodules(models: list[torch.nn.Module]) -> list[torch.nn.Module]:
    """Every module of ``models``, for ``hooked``."""
    return [m for model in models for m in model.modules()]
