"""The instruments, one package each (coord, diagnostics, probe, stats, unitscale): a Lightning callback that records
while a job or a stacked group trains, and the analysis that reads its files back."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A package's ``__getattr__`` (PEP 562) that imports a name's module (``where``: name -> module) when the name is
    first used: a callback imports Lightning (most of a command's start), which the commands that only read finished
    folders (``initnorm-diagnose``, ``initnorm-coord-check --help``) never need, and ``import initnorm`` needs no torch."""

    def __getattr__(name: str) -> Any:
        if name in where:
            return getattr(importlib.import_module(where[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
