"""``hydra/sweeper=checked`` (the default): Hydra's basic sweeper, without composing every job twice.

Before Hydra starts, the preflight (initnorm/cli/preflight.py) composes and checks every job of
the command line. Hydra's basic sweeper then composes each job once more before launching, only to
catch composition errors early; its own comment calls this slow for large sweeps (0.1-0.4 s a job
here). This sweeper skips that pass for a batch whose jobs the preflight checked, and runs it for any
other (a sweep started without the preflight).

The preflight's jobs reach it, and the vectorised launcher, as a value: ``cli/train.main`` runs Hydra
inside ``checked_plan.planned(jobs)``, and both read ``checked_plan.plan()`` (their overrides -> the checked job) while it
lasts.

It wraps a basic sweeper rather than subclassing it: Hydra's plugin discovery executes the module
of the basic sweeper a second time, so a class taken from it at import would not be the one Hydra uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra.plugins.sweeper import Sweeper

from initnorm.cli.checked_plan import plan


class CheckedSweeper(Sweeper):
    def __init__(self, max_batch_size: int | None = None, params: dict[str, str] | None = None) -> None:
        from initnorm.cli.hydra_adapter import basic_sweeper

        self.basic = basic_sweeper()(max_batch_size, params)
        validate = self.basic.validate_batch_is_legal

        def validate_unchecked(batch: Sequence[Sequence[str]]) -> None:
            checked = plan()
            if not all(tuple(job) in checked for job in batch):
                validate(batch)

        self.basic.validate_batch_is_legal = validate_unchecked  # type: ignore[method-assign]

    def setup(self, **kwargs: Any) -> None:
        from initnorm.cli.basic import adopt

        self.basic.setup(**kwargs)
        self.basic.launcher = adopt(self.basic.launcher)  # Hydra's basic launcher's jobs through run.run (cli/basic.py)
        launch = self.basic.launcher.launch

        def forked(batch: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
            """The batch with its horizon-fork plan written and each family's provider first (``launch/forks.py``)."""
            from pathlib import Path

            from initnorm.cli.composer import Composer
            from initnorm.launch import forks

            basic = self.basic
            composers: list = []

            def subdir(overrides: Sequence[str], c: Any) -> str:
                if not composers:  # made only for a sweep over steps
                    composers.append(Composer(basic.hydra_context.config_loader, basic.config))
                return composers[0].subdir(overrides, c)

            return launch(forks.prepare(Path(str(basic.config.hydra.sweep.dir)), batch, plan(), subdir), initial_job_idx=initial_job_idx)

        self.basic.launcher.launch = forked  # type: ignore[method-assign]

    def sweep(self, arguments: list[str]) -> Any:
        from pathlib import Path

        from initnorm.safe_files import remove_planted

        # The basic sweeper writes multirun.yaml in place (open for writing follows a link): a link put there is taken
        # away first, never its target (the preflight refuses one in a named folder; this covers a later one).
        remove_planted(Path(str(self.basic.config.hydra.sweep.dir)) / "multirun.yaml")
        return self.basic.sweep(arguments)
