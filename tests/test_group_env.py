"""Inside a stacked group a job gets what Hydra's ``run_job`` gives it under the basic launcher: ``hydra.job.env_set`` in
its environment and a job folder as its working folder (N46: the variable was dropped, and a relative write landed in
the launch folder, outside the sweep)."""

import os
from pathlib import Path

import lightning as L

from tests.inproc import command


class SeeEnv(L.Callback):
    """A user's callback: writes what it sees of the environment, relative to the working folder."""

    def on_train_start(self, trainer, pl_module) -> None:
        Path("seen.txt").write_text(f"{os.environ.get('MYVAR')}")


def test_env_set_reaches_a_groups_callback_and_its_relative_write_lands_in_a_job_folder(tmp_path):
    ran = command("-m", "seed=1,2", "steps=2", "trainer.val_check_interval=1", "callbacks=none", "trainer.enable_progress_bar=false",
                  "checkpoint.every_n_steps=0", "summary.plots=[]", "hydra/launcher=vectorized", "hydra.launcher.engine=sequential",
                  "+callbacks.see._target_=tests.test_group_env.SeeEnv", "+hydra.job.env_set.MYVAR=hello",
                  "hydra.sweep.dir=sweep", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "2 jobs in 1 stacked group" in ran.stdout, ran.stdout[-1000:]
    assert not (tmp_path / "seen.txt").exists()  # not the launch folder
    (seen,) = (tmp_path / "sweep").rglob("seen.txt")
    assert seen.parent.name == "seed=1" and seen.read_text() == "hello"
    assert os.environ.get("MYVAR") is None  # the command's own environment is left as it was
