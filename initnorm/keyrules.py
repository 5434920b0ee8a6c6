"""What one config key may hold: ``KeyRule`` and its short constructors (``Int(1)``, ``Choice(...)``).

A rule is data; ``initnorm.schema`` applies it. It lives apart from the schema so that a
registration (a model family, a parameterisation, an init scheme, a norm) can declare the keys it
reads next to its own code (``About.rules``) without importing the schema, which imports them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from initnorm.registry import Names


@dataclass(frozen=True)
class KeyRule:
    """What one key may hold. ``lo``/``hi`` are numbers or the name of another key (``warmup <= steps``)."""

    kind: str  # int | number | bool | auto_bool | choice | entry | text | path | dotted | names | betas | schedule | n_jobs | any
    lo: float | str | None = None
    hi: float | str | None = None
    lo_open: bool = False  # lo itself is not allowed
    hi_open: bool = False
    null: bool = False  # None allowed (it means "not set")
    choices: tuple[str, ...] | Callable[[], Iterable[str]] | None = None
    fix: Any = None  # the value the error suggests
    note: str = ""  # what a special value means ("0: no checkpoints")


def Int(lo=None, hi=None, fix=1, **kw) -> KeyRule:
    return KeyRule("int", lo, hi, fix=fix, **kw)


def Num(lo=None, hi=None, fix=0.01, **kw) -> KeyRule:
    return KeyRule("number", lo, hi, fix=fix, **kw)


def Bool(fix=True, **kw) -> KeyRule:
    return KeyRule("bool", fix=fix, **kw)


def Choice(choices, fix=None, **kw) -> KeyRule:
    return KeyRule("choice", choices=choices, fix=fix, **kw)


def Text(**kw) -> KeyRule:
    return KeyRule("text", **kw)


def Entry(module: str, name: str, fix: str, *more: str, **kw) -> KeyRule:
    """A registry's name or a dotted path to the user's own entry (``param.name=mypkg.tables:mine``);
    the registry itself says what is wrong with either."""
    return KeyRule("entry", choices=Names(module, name, *more), fix=fix, **kw)
