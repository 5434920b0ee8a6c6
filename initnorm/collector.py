"""Python's cyclic garbage collector held off while a process imports torch and Lightning.

Those imports make millions of objects that live as long as the process, and the collector, started every few hundred
allocations, walks the growing heap again and again while they load: about a quarter of the imports' CPU. A sweep
worker's imports took 5.1-5.3 s of CPU with it on and 3.9-4.1 s with it off (AMD EPYC family 26, 2026-12-04, three
quiet pairs).

- ``paused()``: off for the duration of an import, then as it was (the command line's imports, a job's first import
  of Lightning in the command's own process). What the imports leave is collected later as usual.
- A sweep's fork server imports with it off for good (``launch/forkserver_preload.py``) and each worker it forks
  starts with ``settle()``: what the server imported is frozen, then the collector runs. This is the recipe of
  Python's documentation of ``gc.freeze`` for a process that forks: collections in the workers then never walk (or
  write to) the objects they share with the server.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def settle() -> None:
    """In a process forked from one that imported with the collector off: freeze what exists, then collect as usual."""
    gc.freeze()
    gc.enable()
