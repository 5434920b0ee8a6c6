"""One run across processes (``trainer.devices=2 +trainer.strategy=ddp``, and ``ddp_spawn``: Lightning's DDP on CPU with
gloo): each step equals one process on the global batch, rank 0 alone writes, and the checkpoint resumes in one process;
the names that keep the roles survive the wrappers, and every rank's per-role rates are checked equal
(``training/distributed.py``)."""

import json
import os
import re

import lightning as L
import pytest
from torch import nn

from initnorm.cli.job import checked
from initnorm.cli.train import train
from initnorm.errors import ConfigError
from initnorm.training import distributed
from initnorm.training.distributed import Placement, check_same, unwrapped
from initnorm.training.fit import Member, assemble, fit
from initnorm.training.optimizers import OPTIMIZERS
from initnorm.training.resume import checkpoint_path, load_checkpoint
from tests.conftest import compose_cfg, run_cli

# A tiny decoder, 2 steps to the stop and 2 more on resume; a batch of 8 rows: 4 a process.
RUN = ["steps=4", "trainer.val_check_interval=2", "log_every=1", "callbacks=none", "trainer.enable_progress_bar=false",
       "checkpoint.every_n_steps=2", "batch_size=8", "logger=tensorboard"]
STOP = ["+callbacks.stop._target_=tests.stop_after.StopAfter", "+callbacks.stop.step=2"]
# Measured (2 steps of this run, AdamW): the largest difference of any weight, 2 processes against 1 on the same batch,
# 1.6e-7 (Adam's moments 1.9e-9), float32 sums in another order; one process on half the batch is 3.7e-2 away.
# ddp_spawn: 1.6e-7 too (the same DDP in each rank).
BOUND = 1e-6
# Muon's hidden matrices step by an orthogonalised update computed in bf16 (torch.optim.Muon's Newton-Schulz): gradients
# that differ in their last float32 bits can round to neighbouring bf16 values, and five quintic iterations carry that
# into the update. Measured at 2 steps: 2.5e-4 on an AMD EPYC of family 26 (native bf16 dot products), within 1e-6 on
# family 25; one process on half the batch is 3.7e-2 away (Muon too), so the bound still tells the global batch.
BOUNDS = {"adamw": BOUND, "muon": 1e-3}


def test_wrapper_prefixes_are_stripped_from_names():
    assert unwrapped("module._orig_mod.blocks.0.attn.weight") == "blocks.0.attn.weight"
    assert unwrapped("_fsdp_wrapped_module.layers.1._fsdp_wrapped_module.w") == "layers.1.w"
    assert unwrapped("encoder.module") == "encoder.module"  # a layer of the model's own called so, last, stays
    model = nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.Linear(3, 1)))

    class Wrapper(nn.Module):  # as DistributedDataParallel holds the model
        def __init__(self, module):
            super().__init__()
            self.module = module

    class Compiled(nn.Module):  # as torch.compile's OptimizedModule holds it (importing torch._dynamo costs seconds)
        def __init__(self, module):
            super().__init__()
            self._orig_mod = module

    wrapped = Wrapper(Compiled(Wrapper(model)))
    assert next(n for n, _ in wrapped.named_parameters()) == "module._orig_mod.module.0.weight"
    assert [unwrapped(n) for n, _ in wrapped.named_parameters()] == [n for n, _ in model.named_parameters()]


def test_every_rank_must_have_the_same_per_role_rates(tmp_path, tiny):
    c = checked(compose_cfg(*tiny, "param=mup", "model.width=32"))
    engine, _, _ = assemble([Member(c, tmp_path)])
    check_same(engine, gather=lambda mine: [mine, mine])
    other = [(name, g) for name, g in distributed.fingerprint(engine)]
    i = next(i for i, (n, g) in enumerate(other) if isinstance(g, tuple) and n.endswith("weight"))
    other[i] = (other[i][0], tuple((k, "0.5") if k == "lr" else (k, v) for k, v in other[i][1]))
    with pytest.raises(RuntimeError, match=rf"rank 1's optimiser groups differ from this rank's: .*{re.escape(other[i][0])}"):
        check_same(engine, gather=lambda mine: [mine, other])


def state(folder):
    s = load_checkpoint(checkpoint_path(folder))
    moments = s["optimizer"]["state"]  # parameter name -> torch's per-parameter state (training/engine.optimizer_state)
    return s["global_step"], {**s["state_dict"], **{f"{k}.{n}": t for k, m in moments.items() for n, t in m.items()}}, s["history"]


def assert_one_step(two, one, bound: float = BOUND) -> None:
    """The run of 2 processes stopped where the run of 1 did, its weights within ``bound`` and its losses the same."""
    (s2, w2, h2), (s1, w1, h1) = state(two), state(one)
    assert s2 == s1 == 2 and w2.keys() == w1.keys()
    gap = max((w2[k] - w1[k]).abs().max().item() for k in w1)
    assert 0 <= gap < bound, gap
    assert h2["train_losses"] == pytest.approx(h1["train_losses"], rel=1e-6)


# AdamW under ddp is `make test-slow`'s (marked slow): ddp_spawn below shows AdamW's step of one process within BOUND (the
# same DDP in each rank), and Muon here shows the command relaunched by ddp; each case is a run of two processes, ~10 s.
@pytest.mark.parametrize("optim", [pytest.param("adamw", marks=pytest.mark.slow), "muon"])
def test_two_processes_take_the_step_of_one_on_the_global_batch(tmp_path, optim):
    if optim not in OPTIMIZERS.names():
        pytest.skip(f"optim={optim} is not registered on this branch")
    run = [*RUN, f"optim={optim}"]
    two = run_cli(*run, *STOP, "trainer.devices=2", "+trainer.strategy=ddp", f"hydra.run.dir={tmp_path / 'two'}", cwd=tmp_path,
                  timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    record = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert record["status"] == "finished" and "at step 2 of 4" in record["early_stopped"]  # a callback's stop (training/fit.py)
    assert record["device"]["world_size"] == 2 and record["device"]["strategy"] == "DDPStrategy"
    # Rank 0 alone wrote: one start line, one end line on the terminal, one process's event files.
    assert (tmp_path / "two" / "train.log").read_text().count("sp of decoder") == 1
    assert two.stdout.count("final validation loss") == 1, two.stdout
    assert len({p.name.rsplit(".", 2)[-2] for p in (tmp_path / "two").glob("events.out.tfevents.*")}) == 1
    # One process, the same global batch, stopped at the same step.
    train(compose_cfg(*run, *STOP), tmp_path / "one")
    assert_one_step(tmp_path / "two", tmp_path / "one", BOUNDS[optim])
    # The run of 2 processes resumes in 1 (batch_size is the global batch) and ends where the run of 1 ends. A fit a callback
    # stopped is finished and a rerun keeps it (test_engine): without its record, as if killed after its checkpoint.
    for run_dir in ("two", "one"):
        (tmp_path / run_dir / "metrics.json").unlink()
    resumed = train(compose_cfg(*run), tmp_path / "two")
    alone = train(compose_cfg(*run), tmp_path / "one")
    assert resumed["resumed_from_step"] == 2 and resumed["device"]["world_size"] == 1
    assert resumed["final_val_loss"] == pytest.approx(alone["final_val_loss"], rel=1e-5)


def test_ddp_spawn_takes_the_step_of_one_process_and_hands_back_rank_0s_record(tmp_path):
    """In this process: the spawned ranks train, this process only waits for rank 0's record (a command relaunched as under
    ``ddp`` could not be pytest)."""
    spawned = train(compose_cfg(*RUN, *STOP, "trainer.devices=2", "+trainer.strategy=ddp_spawn"), tmp_path / "two")
    assert spawned["device"]["world_size"] == 2 and "at step 2 of 4" in spawned["early_stopped"]
    record = json.loads((tmp_path / "two" / "metrics.json").read_text())  # rank 0's, and what came back through the launcher
    keys = ("final_val_loss", "device", "steps", "ms_per_step")
    assert {k: spawned[k] for k in keys} == {k: record[k] for k in keys}
    assert (tmp_path / "two" / "train.log").read_text().count("sp of decoder") == 1
    events = {p.name.rsplit(".", 2)[-2] for p in (tmp_path / "two").glob("events.out.tfevents.*")}
    assert len(events) == 1 and events != {str(os.getpid())}, events  # one rank logged, and not this process
    train(compose_cfg(*RUN, *STOP), tmp_path / "one")
    assert_one_step(tmp_path / "two", tmp_path / "one")
    (tmp_path / "two" / "metrics.json").unlink()  # as if killed after its checkpoint: it resumes in one process
    resumed = train(compose_cfg(*RUN), tmp_path / "two")
    assert resumed["resumed_from_step"] == 2 and resumed["device"]["world_size"] == 1


def test_ddp_spawn_refuses_what_does_not_pickle_before_any_process_starts(tmp_path, tiny):
    c = checked(compose_cfg(*tiny, "batch_size=8", "trainer.devices=2", "+trainer.strategy=ddp_spawn"))

    class Local(L.Callback):  # a class defined in a function does not pickle
        pass

    with pytest.raises(ConfigError, match=r"^trainer.strategy='ddp_spawn' is invalid for this fit: a callback or option does not "
                                          r"pickle .*; fix it with `\+trainer.strategy=ddp`"):
        fit([Member(c, tmp_path)], Placement("cpu", 2, "ddp_spawn", 2), callbacks=[Local()])
    assert not (tmp_path / "metrics.json").exists()
