"""An exception raised inside a user's own code (their model, data module, callback, init scheme, table), named as
theirs in one line: its type and message, and the file and line of their code it came from, never "a bug in
initnorm". Which code is theirs is read from the traceback (a probe of where it was raised, not of its text): the last
frame outside initnorm's package, Python's own library and the installed packages."""

from __future__ import annotations

import os
import sysconfig
import traceback
from pathlib import Path

from initnorm.errors import ConfigError

_PACKAGE = Path(__file__).resolve().parent
OURS = (str(_PACKAGE), str(_PACKAGE.parent / "hydra_plugins"))  # initnorm and the launchers Hydra finds beside it
LIBRARIES = tuple(dict.fromkeys(str(Path(p).resolve()) for k in ("stdlib", "platstdlib", "purelib", "platlib")
                                if (p := sysconfig.get_paths().get(k))))


class YourError(ConfigError):
    """A user's own code raised: the line names it as theirs (``yours``)."""


def error_line(exc: BaseException) -> str:
    """``ValueError: bad thing``: the exception's type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _theirs(filename: str) -> bool:
    if filename.startswith("<"):
        return False
    path = str(Path(filename).resolve())
    return not path.startswith(OURS) and not path.startswith(LIBRARIES)


def user_frame(exc: BaseException) -> str | None:
    """``mypkg/models.py:12`` (relative to the working folder where it is below it): the last frame of the user's code in
    ``exc``'s traceback, or in the exception it was raised from (Hydra's instantiate wraps a constructor's own error)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if _theirs(f.filename)]
        if frames:
            f = frames[-1]
            path = Path(f.filename).resolve()
            shown = os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)
            return f"{shown}:{f.lineno}"
        exc = exc.__cause__ or exc.__context__
    return None


def yours(exc: BaseException, what: str) -> YourError:
    """A user's own exception as one line: ``<what> raised ValueError: ... (in your code at mypkg/x.py:12, not initnorm's:
    fix it there)``."""
    cause = exc.__cause__ if exc.__cause__ is not None and user_frame(exc.__cause__) else exc
    where = user_frame(cause)
    return YourError(f"{what} raised {error_line(cause)} (in your code{f' at {where}' if where else ''}, not initnorm's: fix it there)")
