"""`hparams_search=... hydra.sweeper.workers=2 hydra/launcher=slurm` on a real single-node SLURM (`make test-slurm`):
each worker is one SLURM task asking its next trial from the sweep folder's journal file; a worker cancelled mid-trial
leaves its trial to be asked again, whose job resumes from its checkpoint; the search ends with its report."""

from __future__ import annotations

import json
import subprocess

from tests.slurm.test_real_slurm import output, start, wait_for


def running_trials(sweep):
    from optuna.trial import TrialState

    from initnorm.search import study as search_study

    if not (sweep / "search.journal").is_file():
        return []
    study = search_study.existing(sweep)
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)) if "worker" in t.user_attrs] if study else []


def test_a_search_with_two_slurm_workers_asks_a_cancelled_workers_trial_again(tmp_path):
    sweep = tmp_path / "search"
    proc = start(sweep, "hparams_search=lr_base", "width=8", "steps=400", "checkpoint.every_n_steps=50",
                 "hydra.sweeper.seeds=[1]", "hydra.sweeper.n_trials=3", "hydra.sweeper.workers=2")
    try:
        def checkpointed():
            return [t for t in running_trials(sweep)
                    if (sweep / f"lr={t.params['lr']!r}" / "seed=1" / "checkpoints" / "initnorm.ckpt").is_file()]

        wait_for("a worker's trial with a checkpoint", lambda: bool(checkpointed()))
        trial = checkpointed()[0]
        job = trial.user_attrs["worker"]["slurm_job"]
        assert job, trial.user_attrs
        subprocess.run(["scancel", job], check=True)
        text = output(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        ids = [p.name for p in (sweep / ".submitit").iterdir() if p.is_dir()] if (sweep / ".submitit").is_dir() else []
        subprocess.run(["scancel", *ids], capture_output=True)
    assert proc.returncode == 0, text[-4000:]
    assert text.count("submitted as SLURM job") >= 3, text[-4000:]  # two workers, and one in the cancelled one's place
    summary = json.loads((sweep / "search.json").read_text())
    states = [(t["state"], t["params"]["lr"]) for t in summary["trials"]]
    lr = trial.params["lr"]
    assert ("FAIL", lr) in states and ("COMPLETE", lr) in states, states
    assert [s for s, _ in states].count("COMPLETE") == 3, states
    record = json.loads((sweep / f"lr={lr!r}" / "seed=1" / "metrics.json").read_text())
    assert record["status"] == "finished" and record["resumed_from_step"] >= 50 and record["steps"] == 400
    assert (sweep / "search.md").is_file() and (sweep / "summary.md").is_file()
