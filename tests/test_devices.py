"""One device per job: GPU assignment with a fake device count (no GPU needed)."""

import lightning as L
import pytest

from initnorm.cli.devices import assign
from initnorm.errors import ConfigError


@pytest.mark.parametrize("n_gpus", [1, 2, 4, 8])
def test_parallel_jobs_spread_over_every_gpu(n_gpus):
    picks = [assign("auto", 1, job_num=k, multirun=True, n_gpus=n_gpus) for k in range(3 * n_gpus)]
    assert all(p["accelerator"] == "cuda" and len(p["devices"]) == 1 for p in picks)
    gpus = [p["devices"][0] for p in picks]
    assert gpus == [k % n_gpus for k in range(3 * n_gpus)]
    # Any n_gpus consecutive jobs (what runs at once with n_jobs = n_gpus) cover every GPU once.
    for start in range(len(gpus) - n_gpus + 1):
        assert sorted(gpus[start : start + n_gpus]) == list(range(n_gpus))


def test_cpu_stays_the_default_even_with_gpus():
    assert assign("cpu", 1, job_num=3, multirun=True, n_gpus=4) == {"accelerator": "cpu", "devices": 1}


def test_auto_without_gpu_is_lightnings_cpu():
    picked = assign("auto", 1, job_num=3, multirun=True, n_gpus=0)
    assert picked == {"accelerator": "auto", "devices": 1}
    trainer = L.Trainer(**picked, logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    assert type(trainer.accelerator).__name__ == "CPUAccelerator"


def test_single_run_takes_the_first_gpu_and_keeps_a_pinned_choice():
    assert assign("gpu", 1, job_num=0, multirun=False, n_gpus=2) == {"accelerator": "cuda", "devices": [0]}
    assert assign("cuda", [1], job_num=0, multirun=True, n_gpus=2) == {"accelerator": "cuda", "devices": [1]}
    # Outside a sweep, several devices are Lightning's DDP, left to it.
    assert assign("gpu", 2, job_num=0, multirun=False, n_gpus=2) == {"accelerator": "gpu", "devices": 2}


@pytest.mark.parametrize("devices", [2, "4", [0, 1]])
def test_a_sweep_refuses_several_devices_per_job(devices):
    with pytest.raises(ConfigError, match=r"trainer\.devices=.*Hydra issue 2070.*trainer\.devices=1"):
        assign("auto", devices, job_num=0, multirun=True, n_gpus=4)


def test_a_gpu_accelerator_without_gpu_says_what_to_do():
    with pytest.raises(ConfigError, match=r"trainer\.accelerator='gpu'.*trainer\.accelerator=auto"):
        assign("gpu", 1, job_num=0, multirun=False, n_gpus=0)
