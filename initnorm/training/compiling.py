"""When a run goes through ``torch.compile`` (``compile=auto|true|false``), and where the compiler keeps its cache.

One decision for both paths: a job run alone (``training/module.py`` compiles its training loss)
and a vectorised group (``training/ensemble.py`` compiles the stacked step). ``auto`` compiles a
run only when it is long enough to pay back the compile; the thresholds below come from
measurements (docs/performance.md).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from initnorm.errors import bad_value

# The compiler's on-disk cache, below the folder a command runs in: every job of a sweep (joblib
# workers, SLURM jobs, the vectorised launcher's groups) and the next sweep find it there, and
# `make clean` removes it with outputs/. A TORCHINDUCTOR_CACHE_DIR set by the user wins.
COMPILE_CACHE = "outputs/.torch_compile_cache"
CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"

# compile=auto compiles a vectorised group from this many member-steps (steps x members) on: a cold
# compile of the Decoder's stacked step took 60-120 s on the 2-core benchmark machine and saves
# about 1.4 ms of CPU per member-step (bench/RESULTS.md).
GROUP_FROM = 50_000
# compile=auto compiles a job run alone from this many steps on. Measured 2026-11-30 on the 2-core
# machine (load 1.6-2.8, one process, one thread; docs/performance.md): the default Decoder takes
# 4.0-4.5 ms/step eager and 3.2-3.4 compiled, so compiling saves about 1 ms a step, against a compile
# of 28 s with the cache cold (1.7-2.1 s warm): a cold compile pays from about 28,000 steps. The MLPs
# gain nothing (wide MLP width 256: 2.45 ms eager, 2.6-2.7 compiled; deep MLP 7.4 vs 7.1; char MLP even),
# but no preset of theirs comes near this length. Every preset (<= 1,500 steps) stays eager: even a
# warm cache (2 s) does not pay back at 1,500 steps x 1 ms.
ALONE_FROM = 30_000


def should_compile(mode: bool | str, steps: int, members: int = 1) -> bool:
    """``compile=true`` always, ``false`` never, ``auto`` from ``ALONE_FROM`` steps on (one model)
    or from ``GROUP_FROM`` member-steps on (a stacked group of ``members``)."""
    if mode is True or mode is False:
        return mode
    if mode != "auto":
        raise bad_value("compile", mode, "one of auto, true, false", "compile=auto")
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


def _torch_default() -> str | None:
    """torch's own cache folder: importing Lightning writes it into the environment (torch's
    ``cache_dir()`` does), so a value equal to it was not set by the user."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # another torch: only an unset variable counts as unset
        return None
    return os.path.abspath(default_cache_dir())


def hooked(model: torch.nn.Module) -> bool:
    """Whether a forward hook sits on ``model`` or any submodule (or globally): the per-layer
    statistics measure through hooks, which a compiled graph does not see once it is built, so such
    a step runs eager."""
    from torch.nn.modules import module as nn_module

    if nn_module._global_forward_hooks or nn_module._global_forward_pre_hooks:
        return True
    return any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
