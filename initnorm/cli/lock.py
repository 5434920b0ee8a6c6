"""One command per output folder: two identical sweeps started at once into one folder both trained
every job (TensorBoard showed each curve twice).

The sweep's own process (the one Hydra's callbacks run in, whichever launcher runs the jobs)
takes an exclusive ``flock`` on ``<folder>/.initnorm.lock`` before the first job starts and holds
it until it exits; a second command on that folder is refused in one line and trains nothing. The
kernel drops the lock with the process that held it, so the lock of a command that was killed (even
with ``kill -9``) is taken over by the next one, without a stale file to delete. Where ``flock``
does not exist (Windows), nothing is locked. The lock file is opened without following a link and
only where it is a regular file (``safe_files.open_no_follow``): anything else standing at its name
is refused in one line, never written through.
"""

from __future__ import annotations

import os
from pathlib import Path

from initnorm.errors import ConfigError
from initnorm.safe_files import NotAFile, open_no_follow

LOCK_FILE = ".initnorm.lock"
_held: dict[str, int] = {}  # folder -> the open lock file of this process (one per folder, held to the end)


def claim(folder: str | Path, key: str) -> None:
    """Hold ``folder``'s lock for the rest of this process; ``ConfigError`` (one line naming the
    process that holds it and ``key``, the override that picks another folder) if another has it."""
    try:
        import fcntl
    except ImportError:
        return
    path = Path(folder).absolute()
    if str(path) in _held:
        return
    path.mkdir(parents=True, exist_ok=True)
    try:  # a link planted at its name (to another sweep's metrics.json) was followed and its target truncated to our pid
        fd = open_no_follow(path / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    except NotAFile as exc:
        raise ConfigError(f"{path / LOCK_FILE} is {exc}, not initnorm's lock file, and is not opened (a command would write through "
                          f"it); delete it (or move it away), or pick another folder with `{key}=...`") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held by a live process (a dead one's lock is gone with it)
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise ConfigError(f"{path} is in use by another initnorm command (process {holder}), which trains its jobs now; wait for it to end "
                          f"(a rerun then skips what it finished and resumes the rest), or pick another folder with `{key}=...`") from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except OSError:  # a full disk: the lock holds all the same, only the message lacks the process id
        pass
    _held[str(path)] = fd
