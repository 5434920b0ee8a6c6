"""The one small registry helper behind init schemes, norms and parameterisations.

A registry maps a name to a callable. Entries are added with a decorator in an explicit module
(``initnorm.nn.init`` and friends), so nothing depends on import side effects; a user's own
entry comes from outside the package either by the same decorator or by a dotted path
(``init=custom init.fn=mypkg.inits.fancy``).
"""

from __future__ import annotations

import difflib
import importlib
from typing import Callable, Generic, TypeVar

from initnorm.errors import ConfigError

T = TypeVar("T", bound=Callable)


class Registry(Generic[T]):
    """Name -> callable, with duplicate checks and errors that list what is known.

    ``kind`` names the thing in messages (``init scheme``) and ``key`` is the config override
    that picks an entry (``init``), so an error can say how to fix itself.
    """

    def __init__(self, kind: str, key: str, hint: str = ""):
        self.kind, self.key, self.hint = kind, key, hint
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@INITS.register("fancy")``. A second entry under one name is an error."""

        def add(fn: T) -> T:
            if name in self._entries and self._entries[name] is not fn:
                raise ConfigError(f"{self.kind} {name!r} is already registered; pick another name")
            self._entries[name] = fn
            return fn

        return add

    def names(self) -> list[str]:
        return sorted(self._entries)

    def get(self, name: str) -> T:
        """The entry called ``name``; an unknown name raises one line listing the known ones."""
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(self.names())
            best = (difflib.get_close_matches(str(name), self.names(), n=1, cutoff=0.0) or ["<name>"])[0]
            hint = f" ({self.hint})" if self.hint else ""
            raise ConfigError(f"unknown {self.kind} {self.key}={name!r}; known: {known}; fix it with `{self.key}={best}`{hint}") from None


def import_dotted(path: str, key: str) -> Callable:
    """Import ``pkg.module.attr`` for user code named in a config; errors name the override."""
    module_name, _, attr = str(path).rpartition(".")
    if not module_name:
        raise ConfigError(f"{key}={path!r} is not a dotted path like mypkg.inits.fancy; fix it with `{key}=module.function`")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"{key}={path!r} does not import ({exc}); put the module on PYTHONPATH or fix it with `{key}=module.function`"
        ) from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"{key}={path!r}: {module_name} has no callable {attr!r}; fix it with `{key}=module.function`")
    return fn
