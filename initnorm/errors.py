"""The two error types a user sees in one line, without a traceback.

Every check in the project raises ``ConfigError`` with one line that names the bad value,
what is allowed, and the override that fixes it, so a user can act on it without reading code. The entry points catch
it and print the line without a traceback unless ``HYDRA_FULL_ERROR=1``. ``DiskError`` is the other one: a write that
failed for want of space or permission (``cli/disk.py`` tells one from an ``OSError``).
"""

from pathlib import Path


class ConfigError(ValueError):
    """A bad value in the composed config (or in data it points at), explained in one line."""


def bad_value(key: str, value, allowed: str, fix: str | None = None) -> ConfigError:
    """Build the standard one-line message: ``key=value is invalid: allowed ...; fix: override``."""
    msg = f"{key}={value!r} is invalid: {allowed}"
    if fix:
        msg += f"; fix it with `{fix}`"
    return ConfigError(msg)


def distance(a: str, b: str) -> int:
    """Edit distance with a swap of two neighbours as one edit (``nrom`` -> ``norm``: 1), the commonest typo."""
    prev2, prev = None, list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i]
        for j, cb in enumerate(b, 1):
            row.append(min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (ca != cb)))
            if prev2 is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                row[j] = min(row[j], prev2[j - 2] + 1)
        prev2, prev = prev, row
    return prev[-1]


def closest(word, names) -> str | None:
    """The known name a typo most likely meant: the fewest edits, at most a third of the word's letters (one for a
    short word), a name the word starts (``rms`` -> ``rmsnorm``), or a name the word is a whole part of
    (``heads`` -> ``n_heads``, ``decay`` -> ``weight_decay``: four letters at least, one such name); None when no name is that close
    (``lion`` among ``adam, adamw, sgd``), so that an error never suggests an arbitrary name as if it were the meant one."""
    word, names = str(word), [str(n) for n in names]
    near = [(distance(word, n), n) for n in names
            if distance(word, n) <= max(1, len(word) // 3) or (len(word) >= 2 and n.startswith(word))]
    parts = [n for n in names if len(word) >= 4 and word in n.split("_")]
    near += [(distance(word, parts[0]), parts[0])] if len(parts) == 1 else []  # two names with that part: neither is meant
    return min(near)[1] if near else None


class DiskError(BaseException):
    """A write that failed for want of space or permission. A BaseException: it stops the sweep
    instead of being recorded as one failed job (the next job would fail the same way)."""

    def __init__(self, path: str | None, reason: str, where: str | None = None):
        # A write that names no file (TensorBoard's event writer): the folder it was writing in.
        super().__init__(f"cannot write {path}: {reason}" if path else f"cannot write in {where or 'the output folder'}: {reason}")
        self.path, self.reason, self.where = path, reason, where

    def __reduce__(self):  # a parallel launcher's worker sends it back to the sweep's process
        return (type(self), (self.path, self.reason, self.where))

    @property
    def folder(self) -> str:
        return str(Path(self.path).parent) if self.path else self.where or "the output folder"
