"""The preflight's memory check (initnorm/cli/memory.py): a job, or the jobs that train at once, that cannot fit is one
line with the fix, before any folder is made (an allocation traceback after 48 s, or a worker the OOM killer took)."""

import pytest

from initnorm.cli import memory
from initnorm.errors import ConfigError
from initnorm.training import devices

GIB = 2**30
VECTORIZED = {"_target_": "hydra_plugins.initnorm_vectorized.vectorized_launcher.VectorizedLauncher", "engine": "processes",
              "n_jobs": 2, "max_group": 12, "max_params": None}


def job(width: int) -> dict:
    return {"model": {"width": width, "depth": 2}, "batch_size": 32, "data": {"context": 32}, "trainer": {"accelerator": "cpu"}}


@pytest.fixture
def sixteen_gib(monkeypatch):
    monkeypatch.setattr(devices, "available_memory", lambda: 16 * GIB)


def test_a_job_larger_than_the_memory_is_refused_with_a_smaller_width(sixteen_gib):
    with pytest.raises(ConfigError, match=r"one job \(width=32768\) needs about 1,604.0 GiB .* 16.0 GiB available; fix it with a "
                                          r"smaller width \(`width=8192`\)"):
        memory.check([job(32768)], {}, lambda c: 25 * GIB)


def test_jobs_that_fit_alone_but_not_together_are_refused_with_fewer_at_once(sixteen_gib):
    jobs, params = [job(4096)] * 8, 6 * GIB // memory.BYTES_PER_PARAM  # 6.5 GiB each (6 of state, 0.5 of activations): 2 fit
    with pytest.raises(ConfigError, match=r"8 jobs train at once \(1 worker, up to 8 members a stacked group\), each needing about "
                                          r"6.5 GiB \(width=4096\): 52.0 GiB against 16.0 GiB available; fix it with fewer at once, "
                                          r"`hydra.launcher.max_group=1`, or a smaller width"):
        memory.check(jobs, VECTORIZED, lambda c: params)
    memory.check(jobs, VECTORIZED | {"max_group": 1}, lambda c: params)  # 2 workers, a job each: 13 GiB fit
    memory.check(jobs, VECTORIZED | {"max_params": 2_000_000}, lambda c: params)  # max_params keeps each job alone
    with pytest.raises(ConfigError, match=r"3 jobs train at once \(3 workers\).* fix it with fewer at once, `hydra.launcher.n_jobs=2`"):
        memory.check(jobs[:3], {"_target_": "hydra_plugins.initnorm_vectorized.vectorized_launcher.ParallelLauncher",
                                    "n_jobs": 4}, lambda c: params)


def test_the_preflight_refuses_width_32768_before_anything_is_made(sixteen_gib, tmp_path, monkeypatch):
    from initnorm.cli.preflight import check_command_line

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"one job \(width=32768\) needs about [\d,]+\.\d GiB of memory"):
        check_command_line(["width=32768", "steps=1"])
    assert not any(tmp_path.iterdir())
