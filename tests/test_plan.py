"""The plan a sweep prints once its jobs are checked (initnorm/cli/plan.py): its jobs, what is skipped or resumed, and
what runs them, before anything trains."""

from pathlib import Path
from types import SimpleNamespace

from initnorm.cli import plan
from initnorm.training.resume import Prior

VECTORIZED = {"_target_": "hydra_plugins.initnorm_vectorized.vectorized_launcher.VectorizedLauncher", "max_group": 12,
              "engine": "processes", "n_jobs": 2}


def job(prior: Prior | None = None) -> SimpleNamespace:
    return SimpleNamespace(prior=prior or Prior(), folder=Path("run"))


def test_a_fresh_sweep_says_how_many_jobs_run_and_on_what():
    line = plan.describe([job()] * 10_000, VECTORIZED, multirun=True)
    assert line == ("plan: 10,000 jobs: 10,000 to run, on hydra/launcher=vectorized (stacked groups of up to 12 jobs that share "
                    "every shape; 2 worker processes)")
    basic = {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}
    assert plan.describe([job()], basic, multirun=True) == \
        "plan: 1 job: 1 to run, on hydra/launcher=basic (one job after another in this process)"


def test_a_rerun_says_what_is_skipped_and_resumed():
    jobs = [job(Prior(finished={"status": "finished"})), job(Prior(checkpoint=Path("c"), step=500)), job(), job()]
    line = plan.describe(jobs, {**VECTORIZED, "engine": "sequential"}, multirun=True)
    assert line == ("plan: 4 jobs: 1 finished (skipped), 1 resume (from step 500), 2 to run, on hydra/launcher=vectorized "
                    "(stacked groups of up to 12 jobs that share every shape; one after another in this process)")


def test_a_single_run_says_only_that_it_resumes():
    assert plan.describe([job()], VECTORIZED, multirun=False) is None
    assert plan.describe([job(Prior(checkpoint=Path("c"), step=7))], None, multirun=False) == "resuming run from step 7"


def test_the_preflight_hands_the_plan_its_launcher(tmp_path):
    from initnorm.cli.preflight import check_command_line

    jobs = check_command_line(["-m", "seed=1,2", "steps=2", "hydra/launcher=vectorized", "hydra.launcher.engine=sequential",
                               f"hydra.sweep.dir={tmp_path}"])
    assert jobs.sweep and jobs.launcher["max_group"] == 12 and len(jobs) == 2
    assert plan.describe(jobs, jobs.launcher, jobs.sweep).startswith("plan: 2 jobs: 2 to run, on hydra/launcher=vectorized")
    single = check_command_line(["steps=2", f"hydra.run.dir={tmp_path}/run"])
    assert not single.sweep and plan.describe(single, single.launcher, single.sweep) is None


def test_the_preflight_checks_an_interpolated_override_as_each_job_resolves_it(tmp_path):
    # `trainer.val_check_interval=${steps}` is each job's own steps (it was read as the primary config's 1,500), and the
    # checked jobs are keyed by the overrides Hydra's sweeper hands the launcher (the interpolation escaped)
    from initnorm.cli.preflight import check_command_line

    jobs = check_command_line(["-m", "steps=16,32", "trainer.val_check_interval=${steps}", f"hydra.sweep.dir={tmp_path}"])
    assert [(j.config["steps"], j.config["trainer"]["val_check_interval"]) for j in jobs] == [(16, 16), (32, 32)]
    assert jobs[0].overrides == ["steps=16", "trainer.val_check_interval=$\\{steps\\}"]
