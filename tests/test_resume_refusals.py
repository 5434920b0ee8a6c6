"""A checkpoint whose step or config does not fit its job is refused in one line (issue 34): one at
``global_step=10**9`` was trusted ("finished", its last loss as final), one without its config passed the "different
config" check and resumed another seed's weights."""

import pytest
import torch

from initnorm.errors import ConfigError
from initnorm.training.fit import fit
from initnorm.training.resume import checkpoint_path
from tests.test_engine import members

SHORT = ["steps=8", "trainer.val_check_interval=4", "checkpoint.every_n_steps=4", "width=8", "depth=1", "callbacks=none",
         "trainer.enable_progress_bar=false"]


@pytest.mark.parametrize("change, line", [
    (lambda s: s.update(global_step=10**9), "is at step 1000000000, which a run of steps=8 does not have"),
    (lambda s: s.pop("config"), "is not a checkpoint initnorm wrote (its config is missing or of the wrong type)"),
])
def test_a_checkpoint_of_a_step_the_job_lacks_or_without_its_config_is_refused(tmp_path, change, line):
    [m] = members(tmp_path, ["seed=1"], shared=SHORT)
    fit([m])
    (m.out_dir / "metrics.json").unlink()  # as if killed after its checkpoint of step 4
    path = checkpoint_path(m.out_dir)
    state = torch.load(path, weights_only=True)
    change(state)
    torch.save(state, path)
    with pytest.raises(ConfigError, match=line.replace("(", r"\(").replace(")", r"\)")) as err:
        fit([m])
    assert "\n" not in str(err.value)
