"""Tasks by name (``data.kind``): how to make the data module and which LightningModule trains on it.

A task pairs a data module factory ``make(config) -> LightningDataModule`` with a LightningModule
class; ``train.py`` looks both up here, so a new family adds an entry instead of an if-chain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import lightning as L

from initnorm.data.modules import CharLM
from initnorm.lit import LanguageModel, Trainable
from initnorm.registry import Registry


@dataclass(frozen=True)
class Task:
    make_data: Callable[[dict[str, Any]], L.LightningDataModule]
    module: type[Trainable]


TASKS: Registry[Task] = Registry("task", "data.kind")


def _char_lm(c: dict[str, Any]) -> CharLM:
    d = c["data"]
    return CharLM(d["name"], d["context"], c["batch_size"], c["seed"], d.get("path"), d.get("val_batch_size", 512))


TASKS.register("char_lm")(Task(_char_lm, LanguageModel))
