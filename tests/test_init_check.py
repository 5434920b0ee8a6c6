"""An init that ignores the table (issue 24; mup's README: a fixed-std init left in SP): each parameter of a
user's built model measured against its rule, after one forward, before training; one line naming the ones off."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from initnorm import schema
from initnorm.config import to_plain
from initnorm.errors import ConfigError
from initnorm.models.build import build_model
from initnorm.models.init_check import check_built, mismatch
from initnorm.training.tasks import TASKS
from tests.conftest import compose
from tests.test_own_model import GPT


class LateReset(nn.Module):
    """A readout that re-initialises itself to a fixed std on the first forward, after initnorm filled it (the
    deferred init of ``nn.Lazy*`` modules and some user code): the table's std is gone before step 0."""

    def __init__(self, vocab_size: int, width: int = 16):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, width)
        self.hidden = nn.Linear(width, width)
        self.head = nn.Linear(width, vocab_size)
        self.fresh = True

    def forward(self, idx):
        if self.fresh:
            self.fresh = False
            nn.init.normal_(self.head.weight, std=0.1)
        return self.head(torch.relu(self.hidden(self.emb(idx))))


LATE = ["model=custom", "model._target_=tests.test_init_check.LateReset", "param=mup", "width=256", "batch_size=4", "steps=2",
        "callbacks=none", "trainer.enable_progress_bar=false"]


def checked(*overrides: str) -> None:
    c = schema.check(to_plain(compose(*overrides)))
    data = TASKS.get(c["data"]["kind"]).make_data(c)
    torch.manual_seed(0)
    built = build_model(c["model"], c["init"], c["param"], data.vocab_size)
    state = torch.random.get_rng_state()
    check_built(built, c, data)
    assert torch.equal(state, torch.random.get_rng_state())  # the job's random stream is not moved by the check


def test_a_readout_reinitialised_after_initnorm_is_one_line_before_training(tmp_path):
    from initnorm.cli.train import train
    from initnorm.training.fit import Member, assemble

    line = (r"LateReset's initial values do not follow param=mup with init=normal at width 256: head.weight \(readout: std 0.1 "
            r"where the rule draws 0.02\); .*`model.check_init=false`")
    with pytest.raises(ConfigError, match=line) as err:
        train(compose(*LATE), tmp_path / "alone")
    assert "\n" not in str(err.value) and "hidden.weight" not in str(err.value)  # only the parameter that is off
    assert not list(tmp_path.rglob("events.out.tfevents*"))  # before training: nothing logged
    with pytest.raises(ConfigError, match=line):  # each member of a vectorised group, before it is stacked
        assemble([Member(to_plain(compose(*LATE, f"seed={s}")), tmp_path / f"member{s}") for s in (1, 2)])
    checked(*LATE, "model.check_init=false")  # kept knowingly


@pytest.mark.parametrize("overrides", [("param=mup", "init=he"), ("param=sp", "init=zero_readout")])
def test_an_init_initnorm_made_passes(overrides):
    checked(*GPT, "width=64", "batch_size=4", *overrides)  # nanoGPT: tied weights, a transposed-free model, µP's m^-1/2


def test_the_tolerance_is_the_sampling_error_of_the_size():
    g = torch.Generator().manual_seed(0)
    draw = lambda n, std: torch.randn(n, generator=g) * std
    assert mismatch(draw(4096, 0.02), draw(4096, 0.02)) is None
    # 15% off at 4096 draws: past six standard errors; at 64 draws within them
    assert "std 0.023 where the rule draws 0.02" in mismatch(draw(4096, 0.023), draw(4096, 0.02))
    assert mismatch(draw(64, 0.023), draw(64, 0.02)) is None
    assert "mean" in mismatch(draw(4096, 0.02) + 0.01, draw(4096, 0.02))
    assert mismatch(torch.ones(8), torch.ones(8)) is None and "rule gives 0" in mismatch(torch.full((8,), 0.1), torch.zeros(8))
