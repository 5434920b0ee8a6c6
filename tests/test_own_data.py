"""data=custom (issue 24): a LightningDataModule of one's own, named by its class, trains a model of one's own."""

from __future__ import annotations

import math

import pytest
import torch

from initnorm import schema
from initnorm.config import to_plain
from initnorm.errors import ConfigError
from initnorm.training.tasks import TASKS
from tests.conftest import compose
from tests.test_own_model import GPT

DATA = ["data=custom", "data._target_=tests.own_data.Tokens", "+data.vocab=13"]
TINY = ["steps=6", "trainer.val_check_interval=3", "log_every=1", "trainer.enable_progress_bar=false", "checkpoint.every_n_steps=0",
        "batch_size=8", "width=32", "callbacks=none"]


def made(*overrides: str):
    c = schema.check(to_plain(compose(*GPT, *DATA, *overrides)))
    data = TASKS.get(c["data"]["kind"]).make_data(c)
    data.setup("fit")
    return c, data


def test_its_keys_reach_the_constructor_and_its_vocab_sizes_the_model():
    _, data = made("batch_size=8", "data.context=16")
    inner = data.inner
    assert (inner.batch_size, inner.context, inner.vocab_size, data.vocab_size) == (8, 16, 13, 13)
    x, y = next(iter(data.train_dataloader()))
    assert x.shape == (8, 16) and torch.equal(x[:, 1:], y[:, :-1])


def test_the_stream_runs_past_an_epoch_and_a_resume_skips_the_batches_taken():
    _, data = made()
    torch.manual_seed(3)
    stream = iter(data.train_dataloader())
    first = [next(stream)[0] for _ in range(20)]  # 46 windows a pass in batches of 32 and 14: ten passes
    torch.manual_seed(4)  # what else drew from torch's RNG does not move the stream
    data.start_step = 7
    resumed = iter(data.train_dataloader())
    assert all(torch.equal(a, next(resumed)[0]) for a in first[7:])
    assert not torch.equal(first[0], first[2])  # the second pass is shuffled anew


def test_a_job_and_a_stacked_group_train_on_it(tmp_path):
    from initnorm.cli.train import train
    from initnorm.training.fit import Member, fit

    alone = train(compose(*GPT, *DATA, *TINY), tmp_path / "alone")
    assert alone["status"] == "finished" and math.isfinite(alone["final_val_loss"])
    members = [Member(to_plain(compose(*GPT, *DATA, *TINY, f"seed={s}")), tmp_path / f"m{s}") for s in (1, 2)]
    group = fit(members)
    assert group[0]["final_val_loss"] == pytest.approx(alone["final_val_loss"], rel=1e-4)  # seed 1 in a group, as alone


def test_what_is_wrong_with_it_is_one_line():
    with pytest.raises(ConfigError, match=r"^data._target_=tests.own_data.NotAModule made a NotAModule, not a LightningDataModule"):
        made("data._target_=tests.own_data.NotAModule")
    with pytest.raises(ConfigError, match=r"refused its arguments .*fix them with `data.<argument>=...`"):
        made("+data.colour=blue")
    with pytest.raises(ConfigError, match=r"data._target_ is not a key .*`data=custom data._target_=mypkg.data.MyData`"):
        schema.check(to_plain(compose(*GPT, "+data._target_=tests.own_data.Tokens")))


def test_a_task_of_ones_own_is_named_by_its_dotted_path():
    c = schema.check(to_plain(compose(*GPT, "data.kind=tests.own_data:TOKENS")))
    data = TASKS.get(c["data"]["kind"]).make_data(c)
    assert type(data).__name__ == "Tokens" and data.context == c["data"]["context"]
    with pytest.raises(ConfigError, match=r"^data.kind='tests.own_data:Tokens': tests.own_data has no Task 'Tokens'"):
        schema.check(to_plain(compose(*GPT, "data.kind=tests.own_data:Tokens")))
