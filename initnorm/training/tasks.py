"""Tasks by name (``data.kind``): how to make the data module and which LightningModule trains on it.

A task pairs a data module factory ``make(config) -> LightningDataModule`` with a LightningModule
class; ``train.py`` looks both up here, so a new family adds an entry instead of an if-chain.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lightning as L

from initnorm.data import own
from initnorm.data.clusters import Clusters
from initnorm.data.modules import CharLM
from initnorm.data.windows import CharWindows
from initnorm.keyrules import KeyRule
from initnorm.registry import About, Registry
from initnorm.training.classifier import Classifier
from initnorm.training.module import LanguageModel, Trainable


@dataclass(frozen=True)
class Task:
    make_data: Callable[[dict[str, Any]], L.LightningDataModule]
    module: type[Trainable]


TASKS: Registry[Task] = Registry("task", "data.kind", path_key="data.kind",
                                 expects=(lambda e: isinstance(e, Task), "Task", "mypkg.tasks:my_task"))


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

# A LightningDataModule of one's own (data/own.py): `data=custom data._target_=mypkg.data.MyData`; its other keys
# under data go to the constructor. The language-model loss, or the classifier's with data.kind=custom_classify.
OWN_DATA_RULES = {
    "_target_": KeyRule("dotted", fix="mypkg.data.MyDataModule", note="a LightningDataModule class"),
    "*": KeyRule("any", note="passed to the constructor"),
}
TASKS.register("custom", About("your own data (next-token loss)", rules=OWN_DATA_RULES))(Task(own.make, LanguageModel))
TASKS.register("custom_classify", About("your own data (classes)", rules=OWN_DATA_RULES))(Task(own.make, Classifier))
