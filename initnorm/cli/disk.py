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
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from initnorm.errors import ConfigError
from initnorm.results import write_atomic

# Out of space, out of quota, a read-only file system, a file too large: the disk, not the job, is at fault.
DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}
# No permission: the folder's fault when the file is in it (a user's init reading a file it may not read is the job's).
PERMISSION_ERRNOS = {errno.EACCES, errno.EPERM}


class DiskError(BaseException):
    """A write that failed for want of space or permission. A BaseException: it stops the sweep
    instead of being recorded as one failed job (the next job would fail the same way)."""

    def __init__(self, path: str | None, reason: str):
        super().__init__(f"cannot write {path}: {reason}")
        self.path, self.reason = path, reason

    def __reduce__(self):  # a parallel launcher's worker sends it back to the sweep's process
        return (type(self), (self.path, self.reason))

    @property
    def folder(self) -> str:
        return str(Path(self.path).parent) if self.path else "the output folder"


def disk_error(exc: BaseException | None, within: str | Path | None = None) -> DiskError | None:
    """``exc`` (or what caused it) as a ``DiskError`` when it is a full disk, or a permission refused
    on a file below ``within`` (default: the current folder, a job's own); else None."""
    while exc is not None:
        if isinstance(exc, DiskError):
            return exc
        if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
            return DiskError(exc.filename, os.strerror(exc.errno))
        if isinstance(exc, OSError) and exc.errno in PERMISSION_ERRNOS and exc.filename:
            if Path(os.fspath(exc.filename)).absolute().is_relative_to(Path(within or os.getcwd()).absolute()):
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


def hydra_saves_atomically() -> None:
    """Make Hydra write a job's ``.hydra/*.yaml`` atomically (it writes them in place, so a full
    disk leaves a 0-byte ``config.yaml``); a disk error there becomes ``DiskError``."""
    import hydra.core.utils as hydra_utils
    from omegaconf import OmegaConf

    if getattr(hydra_utils._save_config, "initnorm", False):
        return

    def _save_config(cfg, filename: str, output_dir: Path) -> None:
        try:
            write_atomic(Path(output_dir) / filename, OmegaConf.to_yaml(cfg))
        except OSError as exc:
            raise (disk_error(exc, within=output_dir) or exc) from exc

    _save_config.initnorm = True
    hydra_utils._save_config = _save_config


def report(err: DiskError, argv: list[str]) -> int:
    """One line naming the folder, the summary of the finished jobs where it fits, the command that resumes; exit status 1."""
    from initnorm.cli import signals as cli_signals

    print(f"error: {err}; the jobs that finished are kept: free space (or fix the folder's permissions) and resume, "
          f"or pick another folder with `hydra.sweep.dir=...` (`hydra.run.dir=...` for one run)", file=sys.stderr)
    where = cli_signals.current_folder()
    if where.get("key") == "hydra.sweep.dir":
        summary = cli_signals.write_summary(where["dir"])
        if summary:
            print(f"summary of the finished jobs: {summary}", file=sys.stderr)
    if where:
        print(f"resume with: {cli_signals.resume_command(argv, where['key'], where['dir'])}", file=sys.stderr)
    return 1


@contextmanager
def reported(argv: list[str]):
    """Run a command's jobs so that a disk error ends it as ``report`` says (``SystemExit(1)``)."""
    hydra_saves_atomically()
    try:
        yield
    except DiskError as err:
        sys.exit(report(err, argv))
