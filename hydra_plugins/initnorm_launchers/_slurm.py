"""``hydra/launcher=slurm`` (the ``launchers`` extra: Hydra's submitit launcher): see initnorm.cli.slurm."""

from initnorm.cli.slurm import SlurmLauncher as _SlurmLauncher


class SlurmLauncher(_SlurmLauncher):
    """``conf/hydra/launcher/slurm.yaml``'s ``_target_``: see initnorm.cli.slurm."""
