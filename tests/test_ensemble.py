"""Vectorised sweeps: the stacked optimiser step is torch.optim's bit for bit, every member of a group trains as
its job alone does (every family and a model of one's own, µP members included), divergence and resume are per member, and
``hydra/launcher=vectorized`` writes the job folders and summary the other launchers write."""

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from initnorm.config import to_plain
from initnorm.tb import LEARNING_RATE, TRAIN_LOSS, VAL_LOSS
from initnorm.training.fit import Member, fit
from initnorm.training.group import group_key, parameter_count
from initnorm.training.optim import schedule_factor
from initnorm.training.vec_optim import VecOptimizer
from tests.conftest import compose_cfg, run_cli
from tests.inproc import command
from tests.test_own_model import GPT

QUIET = ["callbacks=none", "trainer.enable_progress_bar=false"]
GRU = ["model=custom", "model._target_=tests.own_recurrent.GRULM", "model.width_arg=width", "model.depth_arg=depth",
       "model.vocab_arg=vocab_size"]


@dataclass
class MemberHyper:
    """One member's optimiser numbers, for a step without a torch optimiser."""

    lr: float
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    momentum: float = 0.0


def from_hypers(kind: str, flat: torch.Tensor, hypers, lr_mult: torch.Tensor, decayed: torch.Tensor) -> VecOptimizer:
    """Members described by numbers, ``flat`` [E, N]: lr x ``lr_mult`` per element, decay on ``decayed`` elements (adam: none)."""
    E, N = flat.shape
    col = lambda values: torch.tensor(list(values), dtype=torch.float64).unsqueeze(1)
    rates = col([h.lr for h in hypers]) * lr_mult.to(torch.float64)
    wd = torch.where(decayed.unsqueeze(0), col([0.0 if kind == "adam" else h.weight_decay for h in hypers]),
                     torch.zeros((), dtype=torch.float64))
    eps = col([h.eps for h in hypers]).expand_as(rates)
    member = torch.arange(E).unsqueeze(1).expand(E, N)
    keys, seg = torch.unique(torch.stack([member.double(), rates, wd, eps], -1).view(-1, 4), dim=0, return_inverse=True)
    betas = torch.tensor([list(h.betas) for h in hypers], dtype=torch.float64)
    return VecOptimizer(kind, flat, seg.view(E, N), keys[:, 0].long(), keys[:, 1], keys[:, 2], keys[:, 3], betas,
                        torch.tensor([h.momentum for h in hypers]))


# ------------------------------------------------------------------------------------------ the optimiser


@pytest.mark.parametrize("kind", ["adamw", "adam", "sgd"])
def test_vectorised_step_is_torch_optim_on_separate_tensors(kind):
    torch.manual_seed(0)
    shapes = [(4, 5), (5,), (3, 4)]  # two matrices (decayed) and a vector (not)
    hypers = [MemberHyper(lr=0.01, weight_decay=0.01), MemberHyper(lr=0.03, weight_decay=0.1, betas=(0.8, 0.99), eps=1e-6, momentum=0.9),
              MemberHyper(lr=0.002, weight_decay=0.0, momentum=0.5)]
    mults = [[1.0, 1.0, 0.5], [1.0, 2.0, 0.25], [1.0, 1.0, 1.0]]  # per-role learning-rate multipliers, per member
    warmups, steps = [0, 5, 2], 12
    start = [[torch.randn(s) for s in shapes] for _ in hypers]
    separate, refs = [], []
    for h, m, ps, w in zip(hypers, mults, start, warmups):
        params = [p.clone().requires_grad_() for p in ps]
        groups = [{"params": [p], "lr": h.lr * k, "weight_decay": h.weight_decay if p.dim() >= 2 else 0.0} for p, k in zip(params, m)]
        if kind == "adamw":
            opt = torch.optim.AdamW(groups, lr=h.lr, betas=h.betas, eps=h.eps)
        elif kind == "adam":
            opt = torch.optim.Adam([{**g, "weight_decay": 0.0} for g in groups], lr=h.lr, betas=h.betas, eps=h.eps)
        else:
            opt = torch.optim.SGD(groups, lr=h.lr, momentum=h.momentum)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s, w=w: schedule_factor(s, steps, w))
        separate.append(params)
        refs.append((opt, sched))
    flat = torch.stack([torch.cat([p.flatten() for p in ps]) for ps in start])
    sizes = [math.prod(s) for s in shapes]
    N = sum(sizes)
    # rows of flat
    columns = [{id(p): (e * N + sum(sizes[:i]), sizes[i]) for i, p in enumerate(params)} for e, params in enumerate(separate)]
    vec = VecOptimizer.from_groups(kind, flat, [opt.param_groups for opt, _ in refs], columns,
                                   [h.betas for h in hypers], [h.momentum for h in hypers])  # each member's own groups
    for step in range(steps):
        grads = [[torch.randn(s) for s in shapes] for _ in hypers]
        for params, gs, (opt, sched) in zip(separate, grads, refs):
            for p, g in zip(params, gs):
                p.grad = g.clone()
            opt.step()
            sched.step()
        factors = torch.tensor([schedule_factor(step, steps, w) for w in warmups], dtype=torch.float64)
        vec.step(torch.stack([torch.cat([g.flatten() for g in gs]) for gs in grads]), factors)
    expected = torch.stack([torch.cat([p.detach().flatten() for p in ps]) for ps in separate])
    assert torch.equal(flat, expected), (flat - expected).abs().max()  # torch's arithmetic, its fused multiply-adds included
    assert not torch.equal(flat, torch.stack([torch.cat([p.flatten() for p in ps]) for ps in start]))


def test_a_frozen_member_keeps_its_parameters_and_state():
    flat = torch.randn(2, 6)
    vec = from_hypers("adamw", flat, [MemberHyper(lr=0.1), MemberHyper(lr=0.1)], torch.ones(2, 6, dtype=torch.float64),
                      torch.ones(6, dtype=torch.bool))
    before = flat.clone()
    vec.step(torch.randn(2, 6), torch.ones(2, dtype=torch.float64), active=torch.tensor([True, False]))
    assert torch.equal(flat[1], before[1]) and not torch.equal(flat[0], before[0])
    assert vec.steps[1].item() == 0 and vec.exp_avg[1].abs().sum() == 0


# ------------------------------------------------------------------------------------------ members = jobs alone

FAMILIES = {
    # family: (shared overrides, per-member overrides): seeds, lrs, warmups and µP multipliers differ in one group
    "decoder": (["width=32", "log_every=1"], [["seed=1", "lr=0.01"], ["seed=2", "lr=0.02", "warmup=10"],
                                              ["seed=3", "param=mup", "schedule=constant"]]),
    # u-µP members with their own multipliers (residual weights, unit-scaled ops, fan-in rates, depth 3: lr x 3^-1/2)
    "decoder_umup": (["width=16", "depth=3", "log_every=1"], [["seed=1", "param=umup", "lr=0.5"],
                     ["seed=2", "param=umup", "lr=0.25", "param.residual_mult=0.5", "param.residual_attn_ratio=2", "param.attn_mult=2"]]),
    "deep_mlp": (["experiment=deep_mlp_train", "width=32", "depth=4", "model.mup.base_width=16"],
                 [["seed=0", "lr=0.003"], ["seed=1", "lr=0.001", "warmup=10", "param=mup"]]),
    "char_mlp": (["experiment=regularization", "width=64", "trainer.val_check_interval=25", "model.mup.base_width=32"],
                 [["seed=0", "regularizer=weight_decay_1.0"], ["seed=1", "lr=0.001", "warmup=10", "param=mup"]]),
    "wide_mlp": (["experiment=mup_mlp_sweep"], [["seed=0", "lr=0.002"], ["seed=1", "lr=0.001", "warmup=10", "param=mup"]]),
    # model=custom (examples/nanogpt.py): µP's readout x 1/2 by a hook and attention x 2^-1/2 by its own attribute, beside SP's 1
    "custom_nanogpt": ([*GPT, "width=32", "model.base_width=16", "data.context=16", "batch_size=4", "log_every=1"],
                       [["seed=1", "param=sp", "lr=0.01"], ["seed=2", "param=mup", "lr=0.02", "warmup=4"]]),
    # loop (vmap has no batching rule for aten::gru): a recurrent model of one's own (tests/own_recurrent.py), SP and µP members
    "custom_gru": ([*GRU, "width=32", "model.base_width=16", "data.context=16", "batch_size=4", "log_every=1"],
                   [["seed=1", "param=sp", "lr=0.01"], ["seed=2", "param=mup", "lr=0.02", "warmup=4"]]),
    # loop (dropout draws random numbers): each member draws its masks from its own stream, as its job alone does
    "char_mlp_dropout": (["experiment=regularization", "regularizer=dropout_0.2", "width=64", "trainer.val_check_interval=25"],
                         [["seed=0"], ["seed=1", "lr=0.001", "warmup=10"]]),
}
# How the members of each family run: vmap where it runs and agrees with each member's own forward, else a loop.
FORWARD = {"custom_gru": "loop", "char_mlp_dropout": "loop"}
STEPS = 20  # every step's loss compared: the warmups (4, 10) end inside the run, and rounding has room to grow


def _scalars(folder: Path, tag: str) -> list[float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(next(folder.rglob("events.out.tfevents.*")).parent))
    acc.Reload()
    return [e.value for e in acc.Scalars(tag)]


def _train_losses(folder: Path, metrics: dict) -> list[float]:
    return metrics["train_losses"] if "train_losses" in metrics else _scalars(folder, TRAIN_LOSS)


@pytest.mark.parametrize("family", FAMILIES)
def test_each_member_trains_as_its_job_alone(family, tmp_path):
    from initnorm.cli.train import train

    shared, variants = FAMILIES[family]
    base = [*shared, f"steps={STEPS}", "checkpoint.every_n_steps=0", *QUIET]
    members = [Member(to_plain(compose_cfg(*base, *v)), tmp_path / f"group{i}") for i, v in enumerate(variants)]
    assert len({group_key(m.cfg) for m in members}) == 1
    together = fit(members)
    assert {r["group"]["forward"] for r in together} == {FORWARD.get(family, "vmap")}
    for i, v in enumerate(variants):
        alone = train(compose_cfg(*base, *v), tmp_path / f"alone{i}")
        a, b = _train_losses(tmp_path / f"alone{i}", alone), _train_losses(tmp_path / f"group{i}", together[i])
        assert len(a) == len(b) == STEPS
        if FORWARD.get(family) == "loop":  # each member's own module, its own kernels and random stream: bit for bit
            assert a == b and together[i]["final_val_loss"] == alone["final_val_loss"], family
        worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))  # vmap's batched kernels sum in another order
        assert worst < 1e-5, f"{family} member {v}: relative difference {worst:.2e}"
        assert together[i]["final_val_loss"] == pytest.approx(alone["final_val_loss"], rel=1e-4)
        assert together[i]["params"] == alone["params"] and together[i]["steps"] == alone["steps"] == STEPS
        assert (tmp_path / f"group{i}" / "roles.txt").is_file() == family.startswith("custom")  # as a job alone writes it


@pytest.mark.parametrize("overrides", [(), ("experiment=deep_mlp_train",), ("experiment=regularization",)])
def test_a_tasks_vocabulary_read_without_its_data_module_is_the_data_modules(overrides):
    """``Task.vocab`` (what a parameter count reads, in a sweep's own process that never imports Lightning) gives what the
    data module set up gives, for each shipped task (char_lm, clusters, char_windows)."""
    from initnorm.training.tasks import TASKS

    c = to_plain(compose_cfg(*overrides))
    task = TASKS.get(c["data"]["kind"])
    data = task.make_data(c)
    data.setup("fit")
    assert task.vocab is not None and task.vocab(c) == data.vocab_size


def test_big_models_are_not_stacked_past_the_parameter_budget():
    from initnorm.cli.vectorized import PlannedJob
    from initnorm.training.grouping import units_of

    assert parameter_count(to_plain(compose_cfg())) == 5_376  # the deck's count, from a model built on the meta device
    wide = parameter_count(to_plain(compose_cfg("experiment=mup_mlp_sweep", "width=1024")))
    assert wide == 2_298_896
    jobs = [PlannedJob(i, [], None, ("small",)) for i in range(5)] + [PlannedJob(5 + i, [], None, ("big",)) for i in range(3)]
    size = {"small": 5_376, "big": wide}
    units = units_of(jobs, max_group=12, max_params=2_000_000, params_of=lambda j: size[j.key[0]])
    assert [len(u) for u in units] == [5, 1, 1, 1]  # the big ones each alone, the small ones one group
    units = units_of(jobs[:5], max_group=12, max_params=10_000, params_of=lambda j: 5_376)
    assert [len(u) for u in units] == [1] * 5  # one member already fills the budget
    assert [len(u) for u in units_of(jobs[:5], max_group=12, max_params=11_000, params_of=lambda j: 5_376)] == [2, 2, 1]


def test_groups_are_split_by_shape():
    base = to_plain(compose_cfg("seed=1"))
    assert group_key(base) == group_key(to_plain(compose_cfg("seed=2", "lr=0.1", "warmup=200", "param=mup", "init=gpt2")))
    assert group_key(base) != group_key(to_plain(compose_cfg("norm=post")))
    assert group_key(base) != group_key(to_plain(compose_cfg("width=32")))
    dropout = to_plain(compose_cfg("experiment=regularization", "regularizer=dropout_0.2"))
    assert group_key(dropout) == group_key(to_plain(compose_cfg("experiment=regularization", "regularizer=dropout_0.2", "seed=7")))


def test_a_diverging_member_is_frozen_and_the_others_go_on(tmp_path):
    base = ["steps=40", "trainer.val_check_interval=20", "log_every=1", "checkpoint.every_n_steps=0", *QUIET]
    ok = [Member(to_plain(compose_cfg(*base, "seed=1")), tmp_path / "ok")]
    mixed = [Member(to_plain(compose_cfg(*base, "seed=1")), tmp_path / "m0"),
             Member(to_plain(compose_cfg(*base, "seed=2", "lr=1e6")), tmp_path / "m1")]
    alone, (good, bad) = fit(ok)[0], fit(mixed)
    assert bad["diverged"] and 0 < bad["diverged_step"] < 40 and math.isnan(bad["final_val_loss"]) and bad["steps"] == bad["diverged_step"]
    assert not good["diverged"] and good["steps"] == 40
    assert good["final_val_loss"] == pytest.approx(alone["final_val_loss"], rel=1e-5)
    assert len(_scalars(tmp_path / "m1", TRAIN_LOSS)) == bad["diverged_step"]  # nothing logged after its step
    assert json.loads((tmp_path / "m1" / "metrics.json").read_text())["diverged_step"] == bad["diverged_step"]


def test_resumed_group_ends_bit_for_bit_as_an_uninterrupted_one(tmp_path):
    base = ["steps=30", "trainer.val_check_interval=10", "checkpoint.every_n_steps=10", "callbacks=default",
            "~callbacks.diagnostics", *QUIET[1:]]
    variants = [["seed=1"], ["seed=2", "lr=0.03", "warmup=5"]]

    def members(where):
        return [Member(to_plain(compose_cfg(*base, *v)), tmp_path / where / str(i)) for i, v in enumerate(variants)]

    whole = fit(members("whole"))
    fit(members("cut"))
    for i in range(2):  # as if killed after the checkpoint of step 20
        (tmp_path / "cut" / str(i) / "metrics.json").unlink()
    resumed = fit(members("cut"))
    for w, r in zip(whole, resumed):
        assert r["resumed_from_step"] == 20
        assert r["val_history"] == w["val_history"] and r["final_val_loss"] == w["final_val_loss"]


def test_vectorized_launcher_writes_what_other_launchers_write(tmp_path):
    """The command, run in this process (its sequential engine: the folders and records are what is checked). Four steps:
    the instruments measure at step 0, the loss is logged at 0, 2 and 4, validations at 0, 2 and 4 (20 steps cost ~1 s of
    CPU more; no number of a step is checked here)."""
    args = ["-m", "norm=pre,post", "seed=1,2", "lr=0.01,0.02", "steps=4", "trainer.val_check_interval=2", "log_every=2",
            "trainer.enable_progress_bar=false", "summary.plots=[]",  # the folders and records are checked, not the figure
            "hydra/launcher=vectorized", "hydra.launcher.engine=sequential", "hydra.launcher.max_group=3",
            f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    proc = command(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    sweep = tmp_path / "sweep"
    metrics = sorted(sweep.rglob("metrics.json"))
    assert len(metrics) == 8 and (sweep / "summary.md").is_file() and (sweep / "summary.csv").is_file()
    records = [json.loads(p.read_text()) for p in metrics]
    # 4 jobs per norm, max_group=3 -> groups of 2 and 2 (even split), 4 groups in all
    assert sorted(r["group"]["size"] for r in records) == [2] * 8
    assert sorted(r["job_num"] for r in records) == list(range(8))
    job = metrics[0].parent
    assert (job / ".hydra" / "config.yaml").is_file() and (job / "train.log").read_text()
    tags = set()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(next(job.rglob("events.out.tfevents.*")).parent))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for prefix in (TRAIN_LOSS, LEARNING_RATE, VAL_LOSS, "act_rms/", "grad_norm/", "grad_rms/", "update_ratio/", "eff_lr/",
                   "eps_frac/", "sigma_w/", "sigma_dw/"):
        assert any(t.startswith(prefix) for t in tags), prefix
    # metrics.json: every key a job alone writes (the same record, training/record.py), and the group's own numbers
    alone = command("norm=pre", "seed=1", "steps=4", "trainer.val_check_interval=2", "log_every=2", "trainer.enable_progress_bar=false",
                    f"hydra.run.dir={tmp_path / 'alone'}", cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr[-2000:]
    alone_keys = set(json.loads((tmp_path / "alone" / "metrics.json").read_text()))
    assert all(set(r) == alone_keys for r in records), [sorted(set(r) ^ alone_keys) for r in records][:1]
    assert json.loads((tmp_path / "alone" / "metrics.json").read_text())["group"]["size"] == 1
    # Rerun: every job is finished, so each is skipped (the task function's own "already finished").
    again = command(*args, cwd=tmp_path)
    assert again.returncode == 0 and again.stdout.count("already finished") == 8, again.stdout[-2000:]


@pytest.mark.slurm
def test_vectorized_groups_run_as_a_slurm_array_through_submitit(tmp_path):
    from tests.test_launchers import slurm_env

    env = slurm_env(tmp_path)
    sweep = tmp_path / "sweep"
    args = ["-m", "norm=pre,post", "seed=1,2", "steps=10", "trainer.val_check_interval=5", "callbacks=none",
            "trainer.enable_progress_bar=false",
            "hydra/launcher=vectorized", "hydra.launcher.engine=submitit", "hydra.launcher.slurm.partition=tiny",
            "hydra.launcher.slurm.mem_gb=2",
            f"hydra.sweep.dir={sweep}"]
    proc = run_cli(*args, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    script = (tmp_path / "bin" / "submitted.sh").read_text()
    for line in ["--partition=tiny", "--mem=2GB", "--array=0-1%"]:  # one array task per group (norm=pre, norm=post)
        assert f"#SBATCH {line}" in script, script
    records = [json.loads(p.read_text()) for p in sweep.rglob("metrics.json")]
    assert len(records) == 4 and all(r["group"]["size"] == 2 for r in records)
    assert (sweep / "summary.md").is_file()


def test_a_family_that_branches_on_a_differing_multiplier_trains_its_members_in_a_loop(tmp_path, monkeypatch):
    from initnorm.cli.train import train
    from initnorm.models.decoder import Attention

    plain = Attention.forward

    def branching(self, x):  # Python control flow on the attention-score multiplier, which differs between sp and mup members
        if self.forward_mult == 0.0:
            return x
        return plain(self, x)

    monkeypatch.setattr(Attention, "forward", branching)
    base = ["width=32", "steps=10", "trainer.val_check_interval=5", "checkpoint.every_n_steps=0", *QUIET]
    together = fit([Member(to_plain(compose_cfg(*base, f"param={p}")), tmp_path / p) for p in ("sp", "mup")])
    assert [r["group"]["forward"] for r in together] == ["loop", "loop"]  # the probe found vmap cannot run it
    for p, r in zip(("sp", "mup"), together):
        assert r["val_history"] == train(compose_cfg(*base, f"param={p}"), tmp_path / f"alone_{p}")["val_history"]


class Branchy(torch.nn.Module):
    """A model of one's own that ``vmap`` cannot run: Python control flow on a tensor's value."""

    def __init__(self, vocab_size: int, width: int = 16):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab_size, width)
        self.hidden = torch.nn.Linear(width, width)
        self.head = torch.nn.Linear(width, vocab_size)

    def forward(self, idx):
        h = self.emb(idx)
        if h.abs().mean() > 0:  # under vmap one member's number, which a Python branch cannot take
            h = torch.relu(self.hidden(h))
        return self.head(h)


def test_a_model_of_ones_own_torch_func_cannot_run_trains_in_a_loop(tmp_path):
    base = ["model=custom", "model._target_=tests.test_ensemble.Branchy", "width=32", "data.context=16", "batch_size=4", "steps=6",
            "checkpoint.every_n_steps=0", *QUIET]
    together = fit([Member(to_plain(compose_cfg(*base, f"param={p}")), tmp_path / p) for p in ("sp", "mup")])
    assert [r["group"]["forward"] for r in together] == ["loop", "loop"] and all(r["status"] == "finished" for r in together)


def test_the_default_callbacks_and_the_coordinate_check_stack():
    c = to_plain(compose_cfg())
    assert "diagnostics" in c["callbacks"]  # the default sweep stacks, diagnostics included
    assert group_key(c) == group_key(to_plain(compose_cfg("seed=2")))
    coord = [to_plain(compose_cfg("experiment=coord_check", "width=64", f"param={p}",
                                  f"seed={s}")) for p in ("sp", "mup") for s in (1, 2, 3)]
    assert len({group_key(c) for c in coord}) == 1  # param and seed are the check's labels, not shapes
    assert group_key(coord[0]) != group_key(to_plain(compose_cfg("experiment=coord_check", "width=32")))


def test_each_members_record_states_its_own_build(tmp_path):
    """The set-up a group cannot share (each member's seed, data, model and init check) is in its record, so that the
    benchmark reads the rest of a member's set-up apart from it (initnorm/repro/bench_scale.py)."""
    base = ["steps=2", "trainer.val_check_interval=2", "checkpoint.every_n_steps=0", *QUIET]
    records = fit([Member(to_plain(compose_cfg(*base, f"seed={s}")), tmp_path / str(s)) for s in (1, 2)])
    builds = [r["group"]["build_s"] for r in records]
    assert all(isinstance(b, float) and b > 0 for b in builds), builds
