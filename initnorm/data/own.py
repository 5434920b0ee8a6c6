"""A LightningDataModule of one's own: ``data=custom data._target_=mypkg.data.MyData`` (+``data.<arg>=...``).

The other keys under ``data`` go to its constructor, and ``batch_size``, ``seed`` and ``context`` too where
the constructor takes an argument of that name. The module must say how many symbols (or classes) the
model's output has, as ``vocab_size`` (or ``num_classes``), by the end of its ``setup("fit")``; its
training batches are what the task's LightningModule takes: ``(x, y)`` with ``y`` the next token of each
position (``data=custom``: the language-model loss) or one class per example (``data.kind=custom_classify``).

initnorm trains by steps, not epochs: the training loader is read round and round, each pass a new
``iter`` of it under torch's RNG seeded from (seed, pass), so a shuffled loader's order follows the job's
seed whatever else drew random numbers. A resumed run skips as many batches as it had taken, so it sees
what an uninterrupted run would (a loader whose order depends on other state, e.g. its own unseeded
generator, does not replay); initnorm's own data modules draw batch ``s`` from (seed, s) and skip nothing.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Mapping
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, IterableDataset

from initnorm.data.own_check import check_batch
from initnorm.errors import ConfigError
from initnorm.own_errors import yours
from initnorm.registry import import_dotted

# initnorm's own keys under data (the schema's): the rest are the constructor's.
OWN_KEYS = ("kind", "_target_", "name", "path", "context", "val_batch_size")
PASSED_IF_TAKEN = ("batch_size", "seed", "context")  # handed over where the constructor names them


def make(c: Mapping[str, Any]) -> OwnData:
    d = c["data"]
    target = import_dotted(d["_target_"], "data._target_", fix="fix it with `data._target_=mypkg.data.MyDataModule`")
    kwargs = {k: v for k, v in d.items() if k not in OWN_KEYS}
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):  # a constructor without a signature Python can read: only what was given
        sig = None
    params = sig.parameters if sig is not None else {}
    offered = {"batch_size": c["batch_size"], "seed": c["seed"], "context": d.get("context")}
    kwargs |= {k: offered[k] for k in PASSED_IF_TAKEN if k in params and k not in kwargs and offered[k] is not None}
    what = f"data._target_={d['_target_']}"
    try:  # a probe of the arguments first: a TypeError raised inside the constructor is the user's, not a refusal
        if sig is not None:
            sig.bind(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{what} refused its arguments ({exc}); the keys under data other than "
                          f"{', '.join(OWN_KEYS)} go to it: fix them with `data.<argument>=...`") from None
    try:
        inner = target(**kwargs)
    except ConfigError:
        raise
    except Exception as exc:
        raise yours(exc, what) from exc
    if not isinstance(inner, L.LightningDataModule):
        raise ConfigError(f"{what} made a {type(inner).__name__}, not a LightningDataModule; fix it with "
                          "`data._target_=mypkg.data.MyDataModule` (a class of lightning's LightningDataModule)")
    return OwnData(inner, d["_target_"], c["seed"], classify=d["kind"] != "custom")


class _Endless(IterableDataset):
    """The inner module's training batches, pass after pass, from batch ``start`` on. Each pass starts under
    torch's RNG seeded from (seed, pass), so a shuffled loader's order is a function of the job's seed and the
    pass alone: the same for the job alone, as a member of a stacked group (whose members share one global
    RNG) and after a resume."""

    def __init__(self, inner: L.LightningDataModule, start: int, seed: int):
        self.inner, self.start, self.seed = inner, start, seed

    def __iter__(self):
        taken, n = 0, 0
        while True:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed * 1_000_003 + n)  # as data/modules.batch_generator: (seed, pass) pairs do not collide
                batches = iter(self.inner.train_dataloader())
                first = next(batches, None)  # a sampler draws its order when the first batch is asked for
            if first is None:
                raise ConfigError(f"{type(self.inner).__name__}.train_dataloader() gave no batch; it must give at least one")
            for batch in itertools.chain([first], batches):
                if taken >= self.start:
                    yield batch
                taken += 1
            n += 1


class OwnData(L.LightningDataModule):
    """The user's module behind initnorm's data interface: ``vocab_size``, a step-indexed training stream, ``start_step``."""

    def __init__(self, inner: L.LightningDataModule, target: str, seed: int, classify: bool = False):
        super().__init__()
        self.inner, self.target, self.seed, self.classify = inner, target, seed, classify
        self.start_step = 0  # set from a checkpoint on resume: the batches already taken are skipped
        self._ready = False

    def setup(self, stage: str | None = None) -> None:
        """The user's ``prepare_data`` and ``setup("fit")``, once; then its first batch checked (``data/own_check.py``), so
        a notebook's fit and the command line's preflight refuse a wrong batch in the same one line."""
        if self._ready:
            return
        what = f"data._target_={self.target}"
        for step, call in (("prepare_data()", self.inner.prepare_data), ("setup('fit')", lambda: self.inner.setup("fit"))):
            try:
                call()
            except ConfigError:
                raise
            except Exception as exc:
                raise yours(exc, f"{what}: its {step}") from exc
        self._ready = True
        check_batch(self, what, self.classify)

    @property
    def vocab_size(self) -> int:
        self.setup()
        for name in ("vocab_size", "num_classes"):
            n = getattr(self.inner, name, None)
            if isinstance(n, int) and not isinstance(n, bool) and n > 0:
                return n
        raise ConfigError(f"data._target_={self.target}: {type(self.inner).__name__} has no vocab_size (or num_classes) after "
                          "setup('fit'); give it one (the number of tokens, or of classes, the model predicts)")

    def train_dataloader(self):
        return DataLoader(_Endless(self.inner, self.start_step, self.seed), batch_size=None)

    def val_dataloader(self):
        return self.inner.val_dataloader()
