"""Hydra instantiates launchers and sweepers only from the ``hydra_plugins`` namespace: this registers
initnorm's SLURM launcher (``hydra/launcher=slurm``; the code is in initnorm/cli/slurm.py) and its
sweeper (``hydra/sweeper=checked``, the default; initnorm/cli/sweeper.py) under it."""

from initnorm.cli.slurm import SlurmLauncher as _SlurmLauncher
from initnorm.cli.sweeper import CheckedSweeper as _CheckedSweeper


class SlurmLauncher(_SlurmLauncher):
    """``conf/hydra/launcher/slurm.yaml``'s ``_target_``: see initnorm.cli.slurm."""


class CheckedSweeper(_CheckedSweeper):
    """``conf/hydra/sweeper/checked.yaml``'s ``_target_``: see initnorm.cli.sweeper."""
