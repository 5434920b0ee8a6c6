"""Hydra instantiates launchers and sweepers only from the ``hydra_plugins`` namespace: this holds
initnorm's sweepers (``hydra/sweeper=checked``, the default; initnorm/cli/sweeper.py; ``hparams_search=...``'s
search, initnorm/cli/search.py, which imports Optuna only when it runs) and, in
``_slurm.py``, its SLURM launcher (``hydra/launcher=slurm``; initnorm/launch/slurm.py).

The SLURM launcher builds on Hydra's submitit launcher, which only the ``launchers`` extra installs.
Its module's name starts with an underscore, so Hydra's plugin scan passes it by: an install
without the extra imports nothing of submitit's, and initnorm/cli/launchers.py registers it by
name where the extra is installed."""

from initnorm.cli.search import SearchSweeper as _SearchSweeper
from initnorm.cli.sweeper import CheckedSweeper as _CheckedSweeper


class CheckedSweeper(_CheckedSweeper):
    """``conf/hydra/sweeper/checked.yaml``'s ``_target_``: see initnorm.cli.sweeper."""


class SearchSweeper(_SearchSweeper):
    """``conf/hydra/sweeper/search.yaml``'s ``_target_``: see initnorm.cli.search."""
