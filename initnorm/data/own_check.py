"""The checks of a data module of one's own (``data=custom``, ``data/own.py``) and of any task's first batch, for the
library and the command line alike: ``OwnData.setup`` runs ``check_batch`` on its first set-up (any fit, and the
command line's preflight, which sets the module up before any folder exists). Each wrong one is a line naming the value and the fix; an
exception raised in the user's code is named as theirs (``own_errors.yours``).

- its ``setup("fit")`` and its first training batch: ``(x, y)``, ids in the vocabulary (or classes in range), nothing
  NaN or infinite.
"""

from __future__ import annotations

import torch

from initnorm.errors import ConfigError
from initnorm.own_errors import yours


def first_batch(data, what: str):
    """The first training batch of the user's own module (its loader, not initnorm's endless stream), drawn without moving
    the process's random stream (a shuffled loader draws its order from it)."""
    inner = getattr(data, "inner", data)
    try:
        with torch.random.fork_rng(devices=[]):
            return next(iter(inner.train_dataloader()))
    except StopIteration:
        raise ConfigError(f"{what}: its train_dataloader() gave no batch; it must give at least one") from None
    except ConfigError:
        raise
    except Exception as exc:
        raise yours(exc, f"{what}: its train_dataloader()") from exc


def check_batch(data, what: str, classify: bool) -> None:
    """``(x, y)``: y integer, in range of the vocabulary (or the classes), of x's shape for a language model (the next
    token of each position), one a row for a classifier; x's ids in the vocabulary; nothing NaN or infinite."""
    batch = first_batch(data, what)
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2 and all(isinstance(t, torch.Tensor) for t in batch)):
        raise ConfigError(f"{what}: its training batch is a {type(batch).__name__}{_shapes(batch)}, not (x, y), two tensors; "
                          "return (inputs, targets) from its loader")
    x, y = batch
    n = data.vocab_size
    for name, t in (("x", x), ("y", y)):
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ConfigError(f"{what}: its training batch's {name} holds NaN or infinite values; fix the data")
    want = "the classes" if classify else "the vocabulary"
    if y.is_floating_point() or (not classify and x.is_floating_point()):
        bad = "y" if y.is_floating_point() else "x"
        raise ConfigError(f"{what}: its training batch's {bad} is {(y if bad == 'y' else x).dtype}, not integer ids; "
                          f"return token ids (torch.long) in 0..{n - 1}")
    expected = (x.shape[0],) if classify else tuple(x.shape)
    if tuple(y.shape) != expected or (not classify and x.dim() != 2):
        shape = f"[{x.shape[0]}]" if classify else "x's, [batch, context]"
        raise ConfigError(f"{what}: its training batch is x {list(x.shape)}, y {list(y.shape)}; y must have the shape {shape}")
    for name, t in (("y", y),) if classify else (("x", x), ("y", y)):
        lo, hi = int(t.min()), int(t.max())
        if lo < 0 or hi >= n:
            raise ConfigError(f"{what}: its training batch's {name} holds {lo}..{hi}, outside {want} (0..{n - 1}, "
                              f"vocab_size={n}); fix the ids, or the module's vocab_size")


def _shapes(batch) -> str:
    if isinstance(batch, (tuple, list)):
        return " of " + ", ".join(type(b).__name__ + (f" {list(b.shape)}" if hasattr(b, "shape") else "") for b in batch)
    return ""
