"""A full disk or a folder that cannot be written: one line naming the folder, nothing half-written.

Three places meet it. Before anything runs, ``check_writable(folder)`` tries a file in the output
folder (or the nearest folder above it that exists) the way the jobs will, so a read-only mount
or a missing permission is one line instead of Hydra's traceback. During a sweep, a job whose
write fails for lack of space (or any of ``DISK_ERRNOS``) raises ``DiskError``: the sweep stops
there (the next job would meet the same disk), the jobs that finished are summarised where the
summary still fits, and the command prints the line and the command that resumes. And Hydra's
own ``.hydra/config.yaml`` (written before the job starts) is written atomically here, so a full
disk never leaves an empty ``config.yaml`` that looks like a job's record.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from initnorm.errors import ConfigError

# Out of space, out of quota, a read-only file system, no permission: the folder, not the job, is at fault.
DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG}


class DiskError(BaseException):
    """A write that failed for want of space or permission. A BaseException: it stops the sweep
    instead of being recorded as one failed job (the next job would fail the same way)."""

    def __init__(self, path: str | None, reason: str):
        super().__init__(f"cannot write {path}: {reason}")
        self.path, self.reason = path, reason

    @property
    def folder(self) -> str:
        return str(Path(self.path).parent) if self.path else "the output folder"


def disk_error(exc: BaseException) -> DiskError | None:
    """``exc`` (or what caused it) as a ``DiskError`` when it is a full disk or an unwritable folder; else None."""
    while exc is not None:
        if isinstance(exc, DiskError):
            return exc
        if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
            return DiskError(exc.filename, os.strerror(exc.errno))
        exc = exc.__cause__ or exc.__context__
    return None


def nearest_existing(folder: Path) -> Path:
    folder = Path(folder).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def check_writable(folder: str | Path, fix: str) -> None:
    """``ConfigError`` (one line, naming the folder and ``fix``) unless a file can be made in ``folder``
    or, where it does not exist yet, in the nearest folder above it that does."""
    where = nearest_existing(Path(folder))
    if not where.is_dir():
        raise ConfigError(f"cannot write in {folder}: {where} is a file, not a folder; fix it with `{fix}`")
    try:
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".initnorm-write-test.")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise ConfigError(f"cannot write in {where} ({exc.strerror or exc}); free space, fix its permissions, or pick another folder with `{fix}`") from None


def save_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a unique temporary file, fsynced, then renamed: a failure
    leaves no file (and no empty one), only the error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def hydra_saves_atomically() -> None:
    """Make Hydra write a job's ``.hydra/*.yaml`` atomically (it writes them in place, so a full
    disk leaves a 0-byte ``config.yaml``); a disk error there becomes ``DiskError``."""
    import hydra.core.utils as hydra_utils
    from omegaconf import OmegaConf

    if getattr(hydra_utils._save_config, "initnorm", False):
        return

    def _save_config(cfg, filename: str, output_dir: Path) -> None:
        try:
            save_atomically(Path(output_dir) / filename, OmegaConf.to_yaml(cfg))
        except OSError as exc:
            raise (disk_error(exc) or exc) from exc

    _save_config.initnorm = True
    hydra_utils._save_config = _save_config
