"""The one small registry helper behind model families, init schemes, norms and parameterisations.

A registry maps a name to an entry (a function, a class, a ``Family``). Entries are added with a
decorator in an explicit module (``initnorm.nn.init`` and friends), so nothing depends on import
side effects. Each entry describes itself with an ``About``: the name reports and plots print, its
kind (what it promises: a table's stable axes, a family's data kind) and the config keys it reads,
with their rules, which the schema applies. A user's own entry needs no edit of the package: every
registry takes a dotted path (``param.name=mypkg.tables:mine`` or ``mypkg.tables.mine``) where it
takes a name, and reads the entry's ``about`` attribute, if it has one.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from initnorm.errors import ConfigError, closest

T = TypeVar("T")


@dataclass(frozen=True)
class About:
    """What a registration says of itself. ``display``: the name reports, verdicts and plots print
    (``µP``); ``kind``: what it is, in the registry's own words (a parameterisation: ``neither``,
    ``width`` or ``width+depth``, the axes its coordinates are expected to be stable across; a model
    family: the ``data.kind`` it trains on); ``rules``: the keys of its config group it reads
    (``{"readout": Choice(("logits", "zero"))}`` for ``param.readout``), as ``initnorm.keyrules``;
    ``absolute``: a parameterisation whose rules hold in each parameter's own shape, with no base
    width or depth (u-µP), so the reports measure it from a sweep's smallest size, not from a base."""

    display: str = ""
    kind: str = ""
    rules: Mapping[str, Any] = field(default_factory=dict)
    absolute: bool = False


def is_dotted(name: Any) -> bool:
    """``mypkg.module:Thing`` or ``mypkg.module.Thing``: a user's own entry, not a registered name."""
    return isinstance(name, str) and (":" in name or "." in name.strip("."))


class Registry(Generic[T]):
    """Name (or dotted path) -> entry, with duplicate checks and errors that list what is known.

    ``noun`` names the thing in messages (``init scheme``), ``key`` is the config group override
    that picks a shipped entry (``init=xavier``) and ``path_key`` the key that takes a dotted path
    (``init.name``), so an error can say how to fix itself.
    """

    def __init__(self, noun: str, key: str, hint: str = "", path_key: str | None = None,
                 expects: tuple[Callable[[Any], bool], str, str] = (callable, "callable", "module.function")):
        self.noun, self.key, self.hint, self.expects = noun, key, hint, expects
        self.path_key = path_key or f"{key}.name"
        self._entries: dict[str, T] = {}
        self._about: dict[str, About] = {}

    def register(self, name: str, about: About | None = None) -> Callable[[T], T]:
        """Decorator: ``@INITS.register("fancy", About("fancy"))``. A second entry under one name is an error."""

        def add(entry: T) -> T:
            if name in self._entries and self._entries[name] is not entry:
                raise ConfigError(f"{self.noun} {name!r} is already registered; pick another name")
            self._entries[name] = entry
            if about is not None:
                self._about[name] = about
            return entry

        return add

    def names(self) -> list[str]:
        return sorted(self._entries)

    def _known(self) -> str:
        return f"known: {', '.join(self.names())}, or your own as a dotted path (`{self.path_key}=mypkg.module:Thing`)"

    def _fix(self, name: Any) -> str:
        best = closest(name, self.names())
        hint = f" ({self.hint})" if self.hint else ""
        if best is None:  # an arbitrary name offered as the meant one misleads (optim=lion once got `optim=sgd`)
            return f"no known name is close to {str(name)!r}; fix it with `{self.key}=<one of those>`{hint}"
        return f"the closest: {best}; fix it with `{self.key}={best}`{hint}"

    def get(self, name: Any, key: str | None = None) -> T:
        """The entry called ``name``, or the object a dotted path names (``key``: the config key
        that held the path, default ``path_key``); anything else raises one line listing the known
        names and the dotted-path form. An entry itself (a function, a ``Family``: the library's way to hand one
        over without a module to name it by, ``initnorm.parameterize``) is returned as it is."""
        if isinstance(name, str) and name in self._entries:
            return self._entries[name]
        if not isinstance(name, str) and name is not None and self.expects[0](name):
            return name
        if is_dotted(name):
            key = key or self.path_key
            ok, what, example = self.expects
            entry = import_dotted(name, key, f"; {self._known()}", f"fix it with `{key}={example}` or a known name")
            if not ok(entry):
                module_name, attr = split_dotted(name)
                raise ConfigError(f"{key}={name!r}: {module_name} has no {what} {attr!r} (it is a {type(entry).__name__}); "
                                  f"{self._known()}; fix it with `{key}={example}`")
            return entry
        raise ConfigError(f"unknown {self.noun} {self.key}={name!r}; {self._known()}; {self._fix(name)}")

    def known(self, name: Any) -> T | None:
        """The entry ``name`` names, found without importing anything: a registered name, or a dotted path into a module
        this process imported already (the command line named it, and the schema's check imported it); else None. What is
        read back from files (a record's param, a family in its config) is looked up so: a name in a file never imports
        the code it names: a folder may be shared or copied, and only the command line is a source of code."""
        if isinstance(name, str) and name in self._entries:
            return self._entries[name]
        if not is_dotted(name):
            return None
        module_name, attr = split_dotted(name)
        module = sys.modules.get(module_name)
        return getattr(module, attr, None) if module is not None and attr else None

    def about(self, name: Any, strict: bool = True) -> About:
        """What the entry says of itself (``About``); one without a description is shown by its name.
        ``strict=False`` (reports over records, and the schema after its names are checked): the entry is looked up
        without importing (``known``), and one that does not resolve is shown by its name."""
        if strict:
            entry = self.get(name)
        elif (entry := self.known(name)) is None:
            return About(str(name))
        registered = next((n for n, e in self._entries.items() if e is entry), None)  # a shipped entry named by its path
        about = self._about.get(registered) if registered else None
        about = about or getattr(entry, "about", None)
        return about if isinstance(about, About) else About(str(name))

    def display(self, name: Any) -> str:
        """The name reports print: the entry's ``About.display``, else ``name`` as written (an entry handed over
        itself: its ``__name__``)."""
        return self.about(name, strict=False).display or getattr(name, "__name__", None) or str(name)


def split_dotted(path: str) -> tuple[str, str]:
    """``mypkg.module:Thing`` or ``mypkg.module.Thing`` -> (``mypkg.module``, ``Thing``)."""
    text = str(path)
    module_name, _, attr = text.partition(":") if ":" in text else text.rpartition(".")
    return module_name, attr


def import_dotted(path: str, key: str, known: str = "", fix: str = "") -> Any:
    """Import ``pkg.module:attr`` or ``pkg.module.attr`` for user code named in a config; errors
    name the override (``known``: what else the key takes; ``fix``: the way out, added to each error)."""
    module_name, attr = split_dotted(path)
    fix = fix or f"fix it with `{key}=module.function`"
    if not module_name or not attr:
        raise ConfigError(f"{key}={path!r} is not a dotted path like mypkg.inits.fancy{known}; {fix}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{key}={path!r} does not import ({exc}); put the module on PYTHONPATH{known}; {fix}") from None
    entry = getattr(module, attr, None)
    if entry is None:
        raise ConfigError(f"{key}={path!r}: {module_name} has no callable {attr!r}{known}; {fix}")
    return entry


class Names:
    """The names of a registry or the keys of a table (and ``more``), looked up when needed
    (``initnorm.training.optim.OPTIMIZERS``), so a rule can name them without importing their module
    (which may import this one, or torch)."""

    def __init__(self, module: str, name: str, *more: str):
        self.module, self.name, self.more = module, name, more

    def registry(self):
        return getattr(importlib.import_module(self.module), self.name)

    def __call__(self) -> list[str]:
        found = self.registry()
        return [*(found.names() if hasattr(found, "names") else found), *self.more]


# The config groups whose entry a registry names: group -> (the key that names it, the registry).
# The schema reads each entry's own keys from it; reports and plots its display name.
GROUPS = {
    "model": ("family", Names("initnorm.models.families", "MODELS")),
    "param": ("name", Names("initnorm.nn.param", "PARAMS")),
    "init": ("name", Names("initnorm.nn.init", "INITS")),
    "norm_type": ("name", Names("initnorm.nn.norms", "NORMS")),
    "data": ("kind", Names("initnorm.training.tasks", "TASKS")),
    "optim": ("name", Names("initnorm.training.optimizers", "OPTIMIZERS")),
}
