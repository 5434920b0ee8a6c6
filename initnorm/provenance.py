"""What every run records about itself beside its results, so a number can be traced to the code and packages that made it."""

from __future__ import annotations

import functools
import os
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from initnorm import __version__


@functools.lru_cache(maxsize=1)
def git_revision() -> str:
    """The project's git revision (with ``-dirty`` when the tree has changes), or ``unknown``."""
    root = Path(__file__).resolve().parents[1]
    try:
        # check=False: outside a git checkout (an installed wheel) git fails, and the revision is "unknown"
        rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5,
                             check=False).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True,
                               timeout=5, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (rev + ("-dirty" if dirty else "")) if rev else "unknown"


# Environment variables that change which CPU kernels run (docs/numerics.md), recorded when set.
NUMERIC_ENV = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
               "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """``AMD EPYC`` / ``Intel(R) Xeon(R) Processor``: the model name the OS reports."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine() -> dict[str, Any]:
    """What decides the last digits of a result on this machine (docs/numerics.md)."""
    import torch

    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    mkl = re.search(r"Math Kernel Library Version ([\w.]+)", config)
    dnnl = re.search(r"MKL-DNN v([\w.]+)", config)
    out = {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "blas": (blas.group(1) if blas else "unknown") + (f" {mkl.group(1)}" if mkl else ""),
        "onednn": dnnl.group(1) if dnnl and torch.backends.mkldnn.is_available() else "off",
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
    env = {k: os.environ[k] for k in NUMERIC_ENV if k in os.environ}
    if env:
        out["env"] = env
    return out


@functools.cache
def installed(package: str) -> str:
    """An installed package's version from its metadata (read once per process: ~2 ms, in every member's record)."""
    return metadata.version(package)


def describe() -> dict[str, Any]:
    """The versions and the machine (``machine``) behind a result."""
    import torch

    # Lightning's version from its installed metadata: a job that failed before training never imported it.
    return {"initnorm": __version__, "git": git_revision(), "torch": torch.__version__,
            "lightning": installed("lightning"), "machine": machine()}
