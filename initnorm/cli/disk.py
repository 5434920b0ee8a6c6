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

from initnorm import envvars
from initnorm.errors import ConfigError, DiskError
from initnorm.results import write_atomic
from initnorm.safe_files import real_folder

# Out of space, out of quota, a read-only file system, a file too large: the disk, not the job, is at fault.
DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}
# No permission: the folder's fault when the file is in it (a user's init reading a file it may not read is the job's).
PERMISSION_ERRNOS = {errno.EACCES, errno.EPERM}


def disk_error(exc: BaseException | None, within: str | Path | None = None) -> DiskError | None:
    """``exc`` (or what caused it) as a ``DiskError`` when it is a full disk, or a permission refused
    on a file below ``within`` (default: the current folder, a job's own); else None."""
    while exc is not None:
        if isinstance(exc, DiskError):
            return exc
        if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
            return DiskError(exc.filename, os.strerror(exc.errno), None if exc.filename else str(Path(within or os.getcwd()).absolute()))
        if (isinstance(exc, OSError) and exc.errno in PERMISSION_ERRNOS and exc.filename
                and Path(os.fspath(exc.filename)).absolute().is_relative_to(Path(within or os.getcwd()).absolute())):
            return DiskError(exc.filename, os.strerror(exc.errno))
        exc = exc.__cause__ or exc.__context__
    return None


def cannot_write(exc: OSError, folder: str | Path) -> str:
    """``cannot write /f/summary.md (Read-only file system); ...``: a command's one line for a write it could not make in ``folder``."""
    path = exc.filename or folder
    return (f"cannot write {path} ({exc.strerror or type(exc).__name__}); free space or fix the permissions of {folder}, "
            f"or copy the folder somewhere writable and run the command on the copy")


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
        raise ConfigError(f"cannot write in {where} ({exc.strerror or exc}); free space, fix its permissions, or pick another folder with "
                          f"`{fix}`") from None


# training.compiling.CACHE_ENV, read here before torch is imported (tests/test_hardening_surfaces.py checks they agree).
COMPILER_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
# Where set_aside_compiler_cache keeps a value it took out of the environment, for the preflight's line.
UNUSABLE_CACHE_ENV = envvars.UNUSABLE_CACHE


def set_aside_compiler_cache() -> None:
    """Before torch is imported: a ``TORCHINDUCTOR_CACHE_DIR`` that cannot be made or written is taken
    out of the environment. torch makes that folder when it is imported (Lightning imports its
    compiler), so ``/proc/x`` failed every command at import, ``compile=false`` included; now only a
    run that compiles needs it, and the preflight refuses that one in one line (``check_compiler_cache``)."""
    folder = os.environ.get(COMPILER_CACHE_ENV)
    if not folder:
        return
    try:
        os.makedirs(folder, exist_ok=True)  # as torch's import would
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".initnorm-write-test.")
        os.close(fd)
        os.unlink(tmp)
    except OSError:
        os.environ[UNUSABLE_CACHE_ENV] = os.environ.pop(COMPILER_CACHE_ENV)


def check_compiler_cache(folder: str | Path) -> None:
    """For a job that compiles: ``ConfigError`` (one line) unless the compiler's cache can be written."""
    from initnorm.training.compiling import cache_folder

    unusable = os.environ.get(UNUSABLE_CACHE_ENV)
    if unusable:
        where = nearest_existing(Path(unusable))
        raise ConfigError(f"{COMPILER_CACHE_ENV}={unusable} cannot be made or written (nearest folder that exists: {where}), and a run "
                          "that compiles keeps the compiler's cache there; point it at a writable folder or unset it, or fix it with "
                          "`compile=false`")
    check_writable(cache_folder(folder), "compile=false")


def hydra_saves_atomically() -> None:
    """Make Hydra write a job's ``.hydra/*.yaml`` atomically (it writes them in place, so a full
    disk leaves a 0-byte ``config.yaml``, and a link planted there is followed) into a real ``.hydra``
    folder (a link in its place is taken away); a disk error there becomes ``DiskError``. And keep
    TensorBoard's writer thread quiet about a full disk (``quiet_writer_thread``)."""
    import hydra.core.utils as hydra_utils
    from omegaconf import OmegaConf

    if getattr(hydra_utils._save_config, "initnorm", False):
        return
    quiet_writer_thread()

    def _save_config(cfg, filename: str, output_dir: Path) -> None:
        save_hydra_file(output_dir, filename, OmegaConf.to_yaml(cfg))

    _save_config.initnorm = True
    hydra_utils._save_config = _save_config


def save_hydra_file(output_dir: Path, filename: str, text: str) -> None:
    """One of a job's ``.hydra/*.yaml`` files, as Hydra's ``_save_config`` here writes it (``hydra_saves_atomically``)."""
    try:  # .hydra/ a real folder (a link there taken away, not followed); the file renamed into place
        write_atomic(real_folder(output_dir) / filename, text)
    except OSError as exc:
        raise (disk_error(exc, within=output_dir) or exc) from exc


def quiet_writer_thread() -> None:
    """TensorBoard writes events from a thread of its own; on a full disk that thread printed its
    traceback, then the job's next write raised the same error (``_AsyncWriter`` re-raises it), which
    ends the job in the one line ``report`` prints. So that thread's disk error is not printed."""
    import threading

    from tensorboard.summary.writer.event_file_writer import _AsyncWriterThread as writer_thread  # the thread, by its type

    previous = threading.excepthook

    def hook(args) -> None:
        if isinstance(args.thread, writer_thread) and disk_error(args.exc_value, within="/") is not None:
            return
        previous(args)

    threading.excepthook = hook


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
