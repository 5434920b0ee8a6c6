"""Test helper: a command (``python -m initnorm.train ...``) run in this process, as its ``main`` runs it.

A subprocess spends most of its time importing torch and Lightning; where what the command writes or prints is
what a test checks (not its exit as a process), the command's own ``main`` runs here instead. Everything such a
run touches in this process is put back afterwards: ``sys.argv``, the working folder, the environment, the signal
handlers, Hydra's global state and its HydraConfig (a job's config stays set after Hydra's run: a later ``train()`` in
this process would take itself for that sweep's job), the logging handlers and levels (Hydra configures logging for its
jobs) and the warning filters (``console.quiet``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGCONT)


@dataclass
class Ran:
    """What a command run in process left: its exit status (0 where ``main`` returned), stdout and stderr."""

    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def restored() -> Iterator[None]:
    """Put back, on leaving, the process state a command's ``main`` changes."""
    argv, cwd, env = list(sys.argv), os.getcwd(), dict(os.environ)
    handlers = {s: signal.getsignal(s) for s in _SIGNALS}
    loggers = {name: (lg.level, list(lg.handlers), lg.propagate, lg.disabled)
               for name, lg in [("", logging.getLogger()), *logging.root.manager.loggerDict.items()] if isinstance(lg, logging.Logger)}
    filters = list(warnings.filters)
    hydra_config = HydraConfig.instance().cfg
    try:
        yield
    finally:
        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = hydra_config
        sys.argv[:] = argv
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        for s, h in handlers.items():
            signal.signal(s, h)
        for name, lg in [("", logging.getLogger()), *logging.root.manager.loggerDict.items()]:
            if not isinstance(lg, logging.Logger):
                continue
            level, kept, propagate, disabled = loggers.get(name, (logging.NOTSET, [], True, False))
            for h in lg.handlers:
                if h not in kept:
                    h.close()
            lg.handlers[:] = kept
            lg.setLevel(level)
            lg.propagate, lg.disabled = propagate, disabled
        warnings.filters[:] = filters
        warnings._filters_mutated()


def run_main(main: Callable[[], object], argv: list[str], cwd: Path) -> Ran:
    """Run ``main()`` with ``sys.argv = argv`` in ``cwd``, its stdout and stderr captured, and everything put back."""
    out, err = io.StringIO(), io.StringIO()
    with restored(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        sys.argv[:] = argv
        os.chdir(cwd)
        try:
            code = main()
        except SystemExit as stop:
            code = stop.code
    return Ran(code if isinstance(code, int) else (0 if code is None else 1), out.getvalue(), err.getvalue())


def run_train(*args: str, cwd: Path) -> Ran:
    """``python -m initnorm.train args`` in this process (``initnorm.cli.train.main``, the command's checks included)."""
    from initnorm.cli.train import main

    return run_main(main, ["initnorm.train", *args], cwd)


_COMPOSER = None


def compose(*overrides: str):
    """The training config with ``overrides``, as ``tests.conftest.compose_cfg`` gives it (no ``hydra`` node), made by the
    library's Composer (initnorm/cli/composer.py): Hydra composes once per distinct choice of config groups, and each list's
    value overrides are applied to a copy with Hydra's own function, in Hydra's order (tests/test_composer.py holds the two
    equal). Hydra's composition costs ~0.4 s of CPU a list; a test module that composes dozens of lists pays that once per
    choice of groups."""
    global _COMPOSER
    from hydra import initialize_config_dir
    from hydra.types import RunMode
    from omegaconf import open_dict

    from initnorm.cli.compose import CONF_DIR
    from initnorm.cli.composer import Composer
    from initnorm.cli.sweep import register_resolvers

    if _COMPOSER is None:
        register_resolvers()
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            loader = GlobalHydra.instance().config_loader()
            _COMPOSER = Composer(loader, loader.load_configuration("train", [], run_mode=RunMode.RUN))
        GlobalHydra.instance().clear()
    cfg = _COMPOSER.job_config(list(overrides))
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg
