"""Shared test helpers: compose the real configs and shrink them (lightning-hydra-template style)."""

from __future__ import annotations

import gc
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONF = str(ROOT / "conf")
_CHECKOUT = pytest.StashKey[set]()

# Short enough that a test pays for what it checks, not for steps: validations at 0, 4, 8 and 12, a loss point every 2.
TINY = ["steps=12", "trainer.val_check_interval=4", "log_every=2", "callbacks=none", "trainer.enable_progress_bar=false"]


def compose_cfg(*overrides: str):
    """The composed training config with ``overrides`` (the real conf/ tree, no Hydra run), as Hydra's ``compose`` gives it:
    made by ``compose`` below, the library's Composer, which tests/test_composer.py holds equal to Hydra's own composition.
    Hydra's composition costs ~0.1 s of CPU a list, and the suite composed ~280 distinct lists this way (26 s of CPU, one
    of its largest costs); the Composer pays it once per distinct choice of config groups. Every caller gets its own
    config."""
    return compose(*overrides)


def compose(*overrides: str):
    """The training config with ``overrides``, as ``compose_cfg`` gives it (no ``hydra`` node): the library's
    ``compose_train`` (initnorm/cli/compose.py), one Composer per process (initnorm/cli/composer.py): Hydra composes once
    per distinct choice of config groups, and each list's value overrides are applied to a copy with Hydra's own function,
    in Hydra's order (tests/test_composer.py holds the two equal). Hydra's composition costs ~0.4 s of CPU a list; a test
    module that composes dozens of lists pays that once per choice of groups."""
    from initnorm.cli.compose import compose_train
    from initnorm.cli.sweep import register_resolvers

    register_resolvers()
    return compose_train(list(overrides))


def run_cli(*args: str, cwd: Path, module: str = "initnorm.train", timeout: int = 600,
            env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m module args`` in ``cwd`` (``env`` added to the environment); return the finished process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def whole_and_resumed(overrides, tmp_path: Path) -> tuple[dict, dict]:
    """Train ``overrides`` uninterrupted, and once more with its metrics.json deleted afterwards (as if
    killed after its last checkpoint) and then resumed from that checkpoint: (whole, resumed) metrics."""
    from initnorm.cli.train import train

    whole = train(compose_cfg(*overrides), tmp_path / "whole")
    train(compose_cfg(*overrides), tmp_path / "cut")
    (tmp_path / "cut" / "metrics.json").unlink()
    return whole, train(compose_cfg(*overrides), tmp_path / "cut")


def _collects(config) -> bool:
    """Whether this process collects and runs the tests: a plain pytest, or an xdist worker (not xdist's controller)."""
    return hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)


def pytest_configure(config):
    """The garbage collector off while the test modules import torch, Lightning and initnorm (initnorm/collector.py: a
    quarter of the imports' CPU) ..."""
    if _collects(config):
        gc.disable()


def pytest_collection_finish(session):
    """... then on over a frozen heap: the collections the tests' own objects trigger never walk the millions of objects
    those imports made (tests/test_errors.py and test_composer.py, one process: 25.6-26.2 -> 23.7-24.7 s of CPU, two
    pairs). A command run in this process leaves them frozen (tests/inproc.py)."""
    gc.freeze()
    gc.enable()


def _checkout_entries() -> set[str]:
    return {p.name for p in ROOT.iterdir() if not p.name.startswith(".")}


def pytest_sessionstart(session):
    session.config.stash[_CHECKOUT] = _checkout_entries()


def pytest_sessionfinish(session):
    """Fail a suite that left a file or folder in the checkout (``outputs/`` from a run or a resolver evaluated outside
    its test's folder): every test writes under its own tmp_path. Checked once, by xdist's controller or a plain run."""
    gc.enable()  # a collection that failed before pytest_collection_finish
    if hasattr(session.config, "workerinput"):
        return
    left = sorted(_checkout_entries() - session.config.stash.get(_CHECKOUT, set()))
    if left:
        print(f"\nerror: the tests left {', '.join(left)} in the checkout {ROOT}; a test must write under its tmp_path")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def no_hydra_job_left():
    """A test that runs a command's ``main`` in this process without tests/inproc.py may leave Hydra's job config set; a
    later ``train()`` in the same worker would then take itself for a job of that sweep (its run named by that sweep's
    overrides). Every test ends with none set."""
    yield
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().cfg = None


def drop_closed_handlers() -> list[logging.Handler]:
    """Take away every logging handler whose stream is closed (and return them). A command run in this process (Hydra's
    job logging, a sweep's train.log) attaches handlers to the stream the test had as stdout or stderr, which pytest
    closes when the test ends; a later test's first log line then prints ``--- Logging error ---`` on its own stderr,
    and a test that reads its stderr fails by the order the tests ran in."""
    dropped = []
    loggers = [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger))]
    for lg in loggers:
        for h in list(lg.handlers):
            if getattr(getattr(h, "stream", None), "closed", False):
                lg.removeHandler(h)
                dropped.append(h)
    return dropped


@pytest.fixture(autouse=True)
def no_closed_log_stream():
    drop_closed_handlers()
    yield


@pytest.fixture
def tiny():
    return list(TINY)


@pytest.fixture
def alarm():
    """Fail instead of hanging: opening a FIFO for reading blocks until someone opens it for writing."""
    signal.signal(signal.SIGALRM, lambda *a: pytest.fail("a read hung"))
    signal.alarm(20)
    yield
    signal.alarm(0)
