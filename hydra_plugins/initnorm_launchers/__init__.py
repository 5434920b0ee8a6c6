"""Hydra instantiates launchers and sweepers only from the ``hydra_plugins`` namespace: this holds
initnorm's sweeper (``hydra/sweeper=checked``, the default; initnorm/cli/sweeper.py) and, in
``_slurm.py``, its SLURM launcher (``hydra/launcher=slurm``; initnorm/cli/slurm.py).

The SLURM launcher builds on Hydra's submitit launcher, which only the ``launchers`` extra installs.
Its module's name starts with an underscore, so Hydra's plugin scan passes it by: an install
without the extra imports nothing of submitit's, and initnorm/cli/launchers.py registers it by
name where the extra is installed."""

from initnorm.cli.sweeper import CheckedSweeper as _CheckedSweeper


class CheckedSweeper(_CheckedSweeper):
    """``conf/hydra/sweeper/checked.yaml``'s ``_target_``: see initnorm.cli.sweeper."""
