"""Where a job trains: ``training/devices.choose``, the one decision every launcher's jobs take, driven with a fake device count
(no GPU needed), and the record of what ran."""

import json

import lightning as L
import pytest
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf

from initnorm.cli import job
from initnorm.errors import ConfigError
from initnorm.training import devices, tasks
from initnorm.training import fit as fit_module
from initnorm.training.devices import choose
from initnorm.training.distributed import Placement, placement_of
from tests.conftest import compose_cfg


def trainer(accelerator="auto", devices=1, **more):
    return {"accelerator": accelerator, "devices": devices, **more}


@pytest.mark.parametrize("n_gpus", [1, 2, 4, 8])
def test_parallel_jobs_spread_over_every_gpu(n_gpus):
    picks = [choose(trainer(), job_num=k, multirun=True, n_gpus=n_gpus) for k in range(3 * n_gpus)]
    assert all(p.accelerator == "cuda" and len(p.devices) == 1 and p.processes == 1 for p in picks)
    gpus = [p.devices[0] for p in picks]
    assert gpus == [k % n_gpus for k in range(3 * n_gpus)]
    assert [p.device for p in picks] == [f"cuda:{g}" for g in gpus]
    # Any n_gpus consecutive jobs (what runs at once with n_jobs = n_gpus) cover every GPU once.
    for start in range(len(gpus) - n_gpus + 1):
        assert sorted(gpus[start : start + n_gpus]) == list(range(n_gpus))


def test_cpu_stays_the_default_even_with_gpus():
    assert choose(trainer("cpu"), job_num=3, multirun=True, n_gpus=4) == Placement("cpu", 1, "auto", 1, "cpu")


def test_auto_is_resolved_to_what_this_machine_has():
    assert choose(trainer(), job_num=3, multirun=True, n_gpus=0).accelerator == "cpu"
    assert choose(trainer(), job_num=3, multirun=True, n_gpus=0, mps=True).device == "mps"


def test_a_gpu_job_alone_takes_the_first_gpu_and_keeps_a_pinned_choice():
    # The bug this fixes: "gpu" and "cuda" were both read back as the CPU by the job's own device_of.
    for name in ("gpu", "cuda", "GPU", "auto"):
        assert choose(trainer(name), job_num=0, multirun=False, n_gpus=2) == Placement("cuda", [0], "auto", 1, "cuda:0")
    assert choose(trainer("cuda", [1]), job_num=0, multirun=True, n_gpus=2).device == "cuda:1"


def test_one_run_on_several_devices_is_the_strategy_named():
    p = choose(trainer("cpu", 2, strategy="ddp"), job_num=0, multirun=False, n_gpus=0)
    assert (p.accelerator, p.devices, p.strategy, p.processes) == ("cpu", 2, "ddp", 2)
    assert p.trainer_kwargs()["use_distributed_sampler"] is False
    g = choose(trainer("gpu", 2, strategy="ddp"), job_num=0, multirun=False, n_gpus=2)
    assert (g.accelerator, g.devices, g.processes, g.device) == ("cuda", [0, 1], 2, "cuda:0")
    # A strategy on one device is what was asked: DDP in one process.
    assert choose(trainer("cpu", 1, strategy="ddp"), job_num=0, multirun=False, n_gpus=0).processes == 1
    # ddp_spawn: the command spawns its ranks, each on its own GPU (training/distributed.spawned)
    spawn = choose(trainer("gpu", 2, strategy="ddp_spawn"), job_num=0, multirun=False, n_gpus=2)
    assert (spawn.strategy, spawn.processes, spawn.devices, spawn.spawned) == ("ddp_spawn", 2, [0, 1], False)


@pytest.mark.parametrize("devices_", [2, "4", [0, 1]])
def test_a_sweep_refuses_several_devices_per_job(devices_):
    with pytest.raises(ConfigError, match=r"trainer\.devices=.*Hydra issue 2070.*trainer\.devices=1"):
        choose(trainer("auto", devices_, strategy="ddp"), job_num=0, multirun=True, n_gpus=4)


@pytest.mark.parametrize(("asked", "n_gpus", "mps", "match"), [
    (trainer("gpu"), 0, False, r"trainer\.accelerator='gpu' is invalid: this machine has cpu: no CUDA GPU.*trainer\.accelerator=cpu"),
    (trainer("cuda"), 0, True, r"trainer\.accelerator='cuda' is invalid: this machine has cpu and mps: no CUDA.*accelerator=cpu"),
    (trainer("mps"), 2, False, r"trainer\.accelerator='mps' is invalid: this machine has cpu and cuda \(2 GPUs\): no Apple MPS"),
    (trainer("cpu", 2), 0, False, r"trainer\.devices=2 is invalid: 2 devices .* named.*`\+trainer\.strategy=ddp trainer\.devices=2`"),
    (trainer("cpu", 2, strategy="ddp_fork"), 0, False, r"trainer\.strategy='ddp_fork' is invalid: one of auto, ddp, ddp_spawn"),
    (trainer("cpu", 2, strategy="fsdp"), 0, False, r"trainer\.strategy='fsdp' is invalid.*docs/devices\.md"),
    (trainer("gpu", 4, strategy="ddp"), 2, False, r"trainer\.devices=4 is invalid: this machine has cpu and cuda \(2 GPUs\)"),
    (trainer("cpu", "two"), 0, False, r"trainer\.devices='two' is invalid"),
    (trainer("cpu", 0), 0, False, r"trainer\.devices=0 is invalid: 1 or more devices.*`trainer\.devices=1`"),
    (trainer("gpu", -2), 2, False, r"trainer\.devices=-2 is invalid: 1 or more devices"),
    (trainer("gpu", []), 2, False, r"trainer\.devices=\[\] is invalid: 1 or more devices"),
])
def test_what_this_machine_cannot_run_is_one_line(asked, n_gpus, mps, match):
    with pytest.raises(ConfigError, match=match) as err:
        choose(asked, job_num=0, multirun=False, n_gpus=n_gpus, mps=mps)
    assert "\n" not in str(err.value)


@pytest.fixture
def fake_gpus(monkeypatch):
    """``n`` CUDA GPUs as torch (and so ``devices.gpu_count``, and Lightning) sees them; none exists."""
    def fake(n):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
    return fake


def as_multirun_job(num: int, cwd) -> None:
    """This process as Hydra's job ``num`` of a multirun (a SLURM task runs its job so: submitit's task calls Hydra's)."""
    HydraConfig.instance().cfg = OmegaConf.create({"hydra": {  # conftest's no_hydra_job_left clears it
        "mode": RunMode.MULTIRUN, "job": {"num": num}, "overrides": {"task": []}, "runtime": {"choices": {}, "cwd": str(cwd)},
        "sweep": {"dir": str(cwd)}}})


class Stop(Exception):
    pass


@pytest.fixture
def built_on(monkeypatch):
    """The device each fit's members are built on (their tensors' device: the stack is made there) and the Trainer each
    fit would get, recorded; the fit stops there (no GPU exists to go on)."""
    seen = []

    def record(self, built, device, compiled):  # the stack of the members' tensors is made on this device
        seen.append(device)
        raise Stop

    monkeypatch.setattr(tasks.Task, "make_module", record)
    return seen


def test_a_job_alone_a_group_and_a_slurm_task_get_the_gpu_they_ask_for(tmp_path, fake_gpus, built_on, tiny):
    cfg = compose_cfg(*tiny, "trainer.accelerator=gpu")
    c = job.checked(cfg)
    # A job alone: the first GPU, in its Trainer and for its tensors.
    fake_gpus(2)
    place = job.device_of(c)
    kw = fit_module._trainer_kwargs(c, place)
    assert (kw["accelerator"], kw["devices"], kw["strategy"]) == ("cuda", [0], "auto")
    t = L.Trainer(**{k: v for k, v in kw.items() if k != "max_steps"}, logger=False)
    assert type(t.accelerator).__name__ == "CUDAAccelerator" and t.strategy.root_device == torch.device("cuda", 0)
    with pytest.raises(Stop):
        job.train(cfg, tmp_path / "alone")
    assert built_on[-1] == torch.device("cuda", 0)
    # A stacked group: unit k of the vectorised launcher on GPU k mod N.
    launcher_cfg = OmegaConf.create({"trainer": {"accelerator": "auto", "devices": 1}})
    assert [devices.placement(launcher_cfg.trainer, k, True).device for k in range(3)] == ["cuda:0", "cuda:1", "cuda:0"]
    with pytest.raises(Stop):
        fit_module.fit([job.as_member(c, tmp_path / "group")], devices.placement(launcher_cfg.trainer, 3, True))
    assert built_on[-1] == torch.device("cuda", 1)
    # A SLURM task: its job k of the multirun, with SLURM's CUDA_VISIBLE_DEVICES leaving it one GPU.
    fake_gpus(1)
    as_multirun_job(5, tmp_path)
    assert job.device_of(c) == Placement("cuda", [0], "auto", 1, "cuda:0")
    with pytest.raises(Stop):
        job.train(cfg, tmp_path / "slurm")
    assert built_on[-1] == torch.device("cuda", 0)
    fake_gpus(2)
    assert job.device_of(c).device == "cuda:1"  # two visible: job 5 on GPU 5 mod 2
    fake_gpus(0)
    with pytest.raises(ConfigError, match="no CUDA GPU"):
        job.device_of(c)


def test_the_memory_check_and_the_preflight_read_the_same_decision(fake_gpus):
    from initnorm.cli import memory

    fake_gpus(1)
    assert memory.on_gpu({"trainer": trainer("auto")}) and not memory.on_gpu({"trainer": trainer("cpu")})
    fake_gpus(0)
    assert not memory.on_gpu({"trainer": trainer("auto")}) and not memory.on_gpu({"trainer": trainer("gpu")})
    assert devices.gpu_count() == 0


def test_fit_refuses_a_config_that_asks_more_than_its_placement(tiny):
    c = job.checked(compose_cfg(*tiny, "trainer.devices=2", "+trainer.strategy=ddp"))
    with pytest.raises(ConfigError, match=r"trainer\.devices=2 trainer\.strategy='ddp' is invalid here: this fit was given 1"):
        fit_module._trainer_kwargs(c, placement_of("cpu"))


def test_the_record_holds_what_ran(tmp_path, tiny):
    cfg = compose_cfg(*tiny, "steps=2", "trainer.val_check_interval=1", "+trainer.precision=bf16-mixed")
    job.train(cfg, tmp_path)
    ran = json.loads((tmp_path / "metrics.json").read_text())["device"]
    assert ran == {"accelerator": "cpu", "devices": 1, "world_size": 1, "strategy": "SingleDeviceStrategy",
                   "precision": "bf16-mixed", "root_device": "cpu"}


def test_the_gpu_check_says_in_one_line_that_no_cuda_device_is_here(capsys, fake_gpus):
    from initnorm.repro import gpu_check

    fake_gpus(0)
    assert gpu_check.main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no CUDA device is visible" in err and "--cpu" in err
    # Its parts: the DDP run only where two GPUs are visible; the one job alone at the sweep's widest width.
    names = lambda n: [name for name, _, _ in gpu_check.parts(False, 300, n)]
    assert "2 processes, DDP" not in names(1) and {"2 processes, DDP", "2 processes, DDP spawned"} <= set(names(2))
    assert "width=1024" in {n: o for n, o, _ in gpu_check.parts(False, 300, 1)}["one job of it alone (width 1,024, µP)"]
