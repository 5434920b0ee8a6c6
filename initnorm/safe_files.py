"""Files one did not create: read and written in run and sweep folders without following a link,
without blocking on a FIFO and without reading more than a bound (a shared or
copied folder's entries may have been planted by someone else, below).

A sweep folder may be shared or copied, so anything in it may have been put there by someone else: a
symbolic link named ``.initnorm.lock`` or ``train.log`` would have a write land in its target, a FIFO
named ``.progress`` would hang the reader (and, open() blocking, a stop signal with it), a link to
``/dev/zero`` would fill its memory. Every reader of such a file goes through ``read_bounded`` (or
``open_no_follow``): the last component is opened with ``O_NOFOLLOW`` and ``O_NONBLOCK``, only after
``lstat`` says it is a regular file, and checked again on the open file (``fstat``: the same file, still
regular), so nothing else is opened at all. What a writer may meet there is ``planted``: any entry that
is not a regular file or a real folder. The preflight refuses every one below a named output folder
before a job runs (``planted_below``), and the writes that would follow a link (Hydra's
``multirun.yaml``, ``.hydra/`` and ``train.log``, a checkpoint's folder) take away whatever stands at
their path first (``remove_planted``, ``real_folder``, ``AppendHandler``): the entry, never its target.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import sys
from pathlib import Path

KiB, MiB = 2**10, 2**20
# Folders whose tools keep links of their own: W&B's ``latest-run`` in <job>/wandb/ (its runs are new folders each start),
# submitit's submission scripts in <sweep>/.submitit/ (a folder whose pickles are trusted by submitit's design: docs/troubleshooting.md).
OWN_LINKS = ("wandb", ".submitit")


class NotAFile(Exception):
    """A path that is not read or written: a link, a FIFO, a device, a folder, or a file larger than the bound."""


class TooLarge(NotAFile):
    """A regular file larger than the bound it is read up to (a rerun of its job replaces it; a planted entry it refuses)."""


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
        raise TooLarge(f"larger than {size_text(limit)}")
    return b"".join(chunks)


def remove_planted(path: Path | str) -> str | None:
    """Take away a link, FIFO, socket or device at ``path`` (the entry itself, never what a link points at), so that
    a writer that opens ``path`` makes a new file; returns what was there (None: nothing was). A folder is left."""
    what = planted(path)
    if what is None or what == "a folder":
        return None
    os.unlink(path)
    return what


def real_folder(path: Path | str) -> Path:
    """``path`` made a real folder (with its parents): a link (to a folder elsewhere) or a FIFO planted in its place is taken
    away first, so what is written below it stays below it."""
    remove_planted(path)
    Path(path).mkdir(parents=True, exist_ok=True)
    return Path(path)


def planted_below(folder: Path | str) -> tuple[Path, str] | None:
    """The first entry below ``folder`` (not following links) that is neither a regular file nor a real folder, with
    what it is; None for none. initnorm, Hydra and Lightning make only files and folders in a sweep folder, so such an
    entry was put there, and a job would write through it (``train.log``, ``multirun.yaml``, a job folder, its
    ``checkpoints/``). W&B's and submitit's own folders (``OWN_LINKS``), where they keep links, are not looked into."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in OWN_LINKS]
        for name in sorted(dirs + files):
            path = Path(root) / name
            what = planted(path)
            if what is not None and what != "a folder":
                return path, what
    return None


class AppendHandler(logging.FileHandler):
    """``logging.FileHandler`` for a job's ``train.log`` (Hydra's job logging and a group member's): a link, FIFO or
    device standing at the path is taken away first (the link, not its target) and the file opened without following
    one, so the job's lines never land in another file."""

    def _open(self):
        if (what := remove_planted(self.baseFilename)) is not None:  # not through logging: its handlers are being set up
            print(f"warning: removed {what} standing at {self.baseFilename}: the job's log is a new file there", file=sys.stderr)
        fd = open_no_follow(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)
