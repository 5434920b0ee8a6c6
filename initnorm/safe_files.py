"""Files one did not create: read and written in run and sweep folders without following a link,
without blocking on a FIFO and without reading more than a bound (STYLE.md 19).

A sweep folder may be shared or copied, so anything in it may have been put there by someone else: a
symbolic link named ``.initnorm.lock`` or ``train.log`` would have a write land in its target, a FIFO
named ``.progress`` would hang the reader (and, open() blocking, a stop signal with it), a link to
``/dev/zero`` would fill its memory. Every reader of such a file goes through ``read_bounded`` (or
``open_no_follow``): the last component is opened with ``O_NOFOLLOW`` and ``O_NONBLOCK``, only after
``lstat`` says it is a regular file, and checked again on the open file (``fstat``: the same file, still
regular), so nothing else is opened at all.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

KiB, MiB = 2**10, 2**20


class NotAFile(Exception):
    """A path that is not read or written: a link, a FIFO, a device, a folder, or a file larger than the bound."""


def file_kind(mode: int) -> str:
    """``a FIFO``, ``a folder``, ``a symbolic link`` ...: what a non-regular file is, for a line."""
    kinds = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def size_text(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB else f"{n // KiB} KiB" if n >= KiB else f"{n} bytes"


def planted(path: Path | str) -> str | None:
    """What stands at ``path`` if it is neither absent nor a regular file (``a symbolic link to /x``, ``a FIFO``); else None."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return f"a symbolic link to {os.readlink(path)}"
    return file_kind(mode)


def open_no_follow(path: Path | str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A file descriptor of the regular file ``path`` (created with ``mode`` where ``flags`` has ``O_CREAT``), opened
    without following a last-component link and without blocking; anything else raises ``NotAFile`` naming what it is.
    A device or a FIFO is never opened (``lstat`` first), and the open file is checked to be the one ``lstat`` saw."""
    try:
        before = os.lstat(path)
    except FileNotFoundError:
        if not flags & os.O_CREAT:
            raise
        before = None
    if before is not None and not stat.S_ISREG(before.st_mode):
        raise NotAFile(planted(path) or file_kind(before.st_mode))
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:  # swapped for a link (ELOOP), a folder or a FIFO after the lstat
        if exc.errno in (errno.ELOOP, errno.EMLINK, errno.EISDIR, errno.ENXIO):
            raise NotAFile(planted(path) or "not a regular file") from None
        raise
    now = os.fstat(fd)
    if not stat.S_ISREG(now.st_mode) or (before is not None and (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino)):
        os.close(fd)
        raise NotAFile(file_kind(now.st_mode) if not stat.S_ISREG(now.st_mode) else "replaced while it was opened")
    return fd


def read_bounded(path: Path | str, limit: int) -> bytes:
    """The bytes of the regular file ``path`` if it holds at most ``limit``; else ``NotAFile`` (``larger than 16 MiB``,
    ``a FIFO``, ``a symbolic link to /dev/zero`` ...). ``FileNotFoundError`` where there is nothing."""
    fd = open_no_follow(path)
    try:
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise NotAFile(f"larger than {size_text(limit)}")
    return b"".join(chunks)
