"""Hydra instantiates launchers only from the ``hydra_plugins`` namespace: this registers initnorm's
SLURM launcher (``hydra/launcher=slurm``; the code is in initnorm/cli/slurm.py) under it."""

from initnorm.cli.slurm import SlurmLauncher as _SlurmLauncher


class SlurmLauncher(_SlurmLauncher):
    """``conf/hydra/launcher/slurm.yaml``'s ``_target_``: see initnorm.cli.slurm."""
