"""Tasks by name (``data.kind``): how to make the data module and which LightningModule trains on it.

A task pairs a data module factory ``make(config) -> LightningDataModule`` with a LightningModule
class; ``train.py`` looks both up here, so a new family adds an entry instead of an if-chain.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lightning as L

from initnorm.data.clusters import Clusters
from initnorm.data.modules import CharLM
from initnorm.data.windows import CharWindows
from initnorm.registry import Registry
from initnorm.training.classifier import Classifier
from initnorm.training.module import LanguageModel, Trainable


@dataclass(frozen=True)
class Task:
    make_data: Callable[[dict[str, Any]], L.LightningDataModule]
    module: type[Trainable]


TASKS: Registry[Task] = Registry("task", "data.kind")


def _char_lm(c: dict[str, Any]) -> CharLM:
    d = c["data"]
    return CharLM(d["name"], d["context"], c["batch_size"], c["seed"], d["path"], d["val_batch_size"])


TASKS.register("char_lm")(Task(_char_lm, LanguageModel))


def _clusters(c: dict[str, Any]) -> Clusters:
    d = c["data"]
    return Clusters(d["n_clusters"], d["dim"], d["n_train"], d["n_val"], c["batch_size"], c["seed"])


def _char_windows(c: dict[str, Any]) -> CharWindows:
    d = c["data"]
    return CharWindows(d["name"], d["context"], c["batch_size"], c["seed"], d["train_chars"], d["val_chars"], d["train_eval"], d["path"])


# Chapter 003: the deep MLP's Gaussian clusters; the char and wide MLPs' character windows.
TASKS.register("clusters")(Task(_clusters, Classifier))
TASKS.register("char_windows")(Task(_char_windows, Classifier))
