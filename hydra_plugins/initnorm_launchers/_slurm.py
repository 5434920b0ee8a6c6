"""``hydra/launcher=slurm`` (the ``launchers`` extra): Hydra's submitit launcher's keys and config, its jobs one unit each
through ``run.run`` with the ``Submitit`` executor (initnorm.launch.executors): see initnorm.launch.slurm."""

from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as _HydraSlurmLauncher

from initnorm.launch import slurm


class SlurmLauncher(_HydraSlurmLauncher):
    """``conf/hydra/launcher/slurm.yaml``'s ``_target_``: see initnorm.launch.slurm."""

    def launch(self, job_overrides, initial_job_idx):
        from initnorm.cli import vectorized

        return vectorized.launch(self, job_overrides, initial_job_idx, grouped=False, job_id=slurm.job_id,
                                 params=slurm.as_engine(self.params))
