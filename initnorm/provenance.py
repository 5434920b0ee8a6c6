"""What every run records about itself beside its results, so a number can be traced to the code and packages that made it."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from initnorm import __version__


@functools.lru_cache(maxsize=1)
def git_revision() -> str:
    """The project's git revision (with ``-dirty`` when the tree has changes), or ``unknown``."""
    root = Path(__file__).resolve().parents[1]
    try:
        rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (rev + ("-dirty" if dirty else "")) if rev else "unknown"


def describe() -> dict[str, str]:
    import lightning
    import torch

    return {"initnorm": __version__, "git": git_revision(), "torch": torch.__version__, "lightning": lightning.__version__}
