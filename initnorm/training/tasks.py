"""Tasks by name (``data.kind``): how to make the data module and which LightningModule trains on it.

A task pairs a data module factory ``make(config) -> LightningDataModule`` with a LightningModule
class; a job looks both up here, so a new family adds an entry instead of an if-chain.

The schema reads this registry to check ``data.kind`` before anything trains, so the entries here name
their data modules and LightningModules without importing them (Lightning's import is most of a
command's start): each factory imports its module when it runs, and a LightningModule may be given as
its ``module:Class`` path. A task of one's own (``data.kind=mypkg.tasks:my_task``) may hold the class itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from initnorm.keyrules import KeyRule
from initnorm.registry import About, Registry, import_dotted

if TYPE_CHECKING:
    import lightning as L


def one_target(c: dict[str, Any]) -> int:
    return 1


@dataclass(frozen=True)
class Task:
    make_data: Callable[[dict[str, Any]], L.LightningDataModule]
    # the LightningModule class (a ``training/engine.Engine`` subclass: named, not imported, since the transfer rules read
    # this registry while a config is checked), or its ``package.module:Class`` path
    module: type[L.LightningModule] | str
    # the targets one training sample has (a character model's context: each position predicts the next), so that a
    # report reads steps x batch as tokens (initnorm/transfer/axes.py)
    targets: Callable[[dict[str, Any]], int] = one_target
    # the model's output width (the vocabulary, or the classes) read without making the data module, where the task can:
    # a parameter count (``training/group.parameter_count``) in a sweep's own process, which then never imports Lightning
    # (seconds of a command's start). None: the data module is made and set up for it.
    vocab: Callable[[dict[str, Any]], int] | None = None

    def make_module(self, *args: Any, **kwargs: Any) -> L.LightningModule:
        """The LightningModule that trains the built members on this task's data (its class imported here if named by path)."""
        cls = import_dotted(self.module, "data.kind") if isinstance(self.module, str) else self.module
        return cls(*args, **kwargs)


TASKS: Registry[Task] = Registry("task", "data.kind", path_key="data.kind",
                                 expects=(lambda e: isinstance(e, Task), "Task", "mypkg.tasks:my_task"))


def tokens_of(config: dict[str, Any] | None) -> int | None:
    """The tokens a job's steps mean: steps x batch size x the targets one sample has (its task's ``targets``: the
    context of a character language model, one for a classifier); None where the config lacks them (the transfer
    report's ``tokens`` axis, runs.csv's ``tokens`` column)."""
    from initnorm.errors import ConfigError

    config = config or {}
    steps, batch, kind = config.get("steps"), config.get("batch_size"), (config.get("data") or {}).get("kind")
    if not (isinstance(steps, int) and isinstance(batch, int) and isinstance(kind, str)):
        return None
    try:
        return steps * batch * TASKS.get(kind).targets(config)
    except (ConfigError, KeyError, TypeError):  # a task of another version, a config without its data keys
        return None


LANGUAGE_MODEL = "initnorm.training.module:LanguageModel"
CLASSIFIER = "initnorm.training.classifier:Classifier"


def _char_lm(c: dict[str, Any]):
    from initnorm.data.modules import CharLM

    d = c["data"]
    return CharLM(d["name"], d["context"], c["batch_size"], c["seed"], d["path"], d["val_batch_size"])


def _context(c: dict[str, Any]) -> int:
    return c["data"]["context"]


def _corpus_vocab(c: dict[str, Any]) -> int:
    """The symbols of the corpus (what ``CharLM`` and ``CharWindows`` read as their ``vocab_size``)."""
    from initnorm.data.corpus import load_corpus

    return load_corpus(c["data"]["name"], c["data"]["path"]).vocab_size


TASKS.register("char_lm")(Task(_char_lm, LANGUAGE_MODEL, _context, _corpus_vocab))


def _clusters(c: dict[str, Any]):
    from initnorm.data.clusters import Clusters

    d = c["data"]
    return Clusters(d["n_clusters"], d["dim"], d["n_train"], d["n_val"], c["batch_size"], c["seed"])


def _char_windows(c: dict[str, Any]):
    from initnorm.data.windows import CharWindows

    d = c["data"]
    return CharWindows(d["name"], d["context"], c["batch_size"], c["seed"], d["train_chars"], d["val_chars"], d["train_eval"], d["path"])


# Chapter 003: the deep MLP's Gaussian clusters; the char and wide MLPs' character windows.
TASKS.register("clusters")(Task(_clusters, CLASSIFIER, vocab=lambda c: c["data"]["n_clusters"]))
TASKS.register("char_windows")(Task(_char_windows, CLASSIFIER, vocab=_corpus_vocab))

def _own(c: dict[str, Any]):
    from initnorm.data import own

    return own.make(c)


# A LightningDataModule of one's own (data/own.py): `data=custom data._target_=mypkg.data.MyData`; its other keys
# under data go to the constructor. The language-model loss, or the classifier's with data.kind=custom_classify.
OWN_DATA_RULES = {
    "_target_": KeyRule("dotted", fix="mypkg.data.MyDataModule", note="a LightningDataModule class"),
    "*": KeyRule("any", note="passed to the constructor"),
}
TASKS.register("custom", About("your own data (next-token loss)", rules=OWN_DATA_RULES))(Task(_own, LANGUAGE_MODEL))
TASKS.register("custom_classify", About("your own data (classes)", rules=OWN_DATA_RULES))(Task(_own, CLASSIFIER))
