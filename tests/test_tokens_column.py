"""runs.csv keeps the tokens each job's steps mean (steps x batch x targets per sample), so that a transfer report
over tokens reads a results/ folder, which keeps runs.csv and no configs (issue 38)."""

from initnorm.config import to_plain
from initnorm.results import read_runs_csv, render_runs_csv
from initnorm.transfer.axes import axis_value
from tests.conftest import compose_cfg


def record(steps: int, batch: int, seed: int) -> dict:
    config = to_plain(compose_cfg(f"steps={steps}", f"batch_size={batch}"))
    return {"_dir": f"steps={steps},batch_size={batch},seed={seed}", "job_num": seed, "status": "finished", "seed": seed,
            "overrides": {"steps": str(steps), "batch_size": str(batch), "seed": str(seed)}, "swept": ["steps", "batch_size", "seed"],
            "config": config, "final_val_loss": 2.0, "diverged": False, "summary_metrics": ["final_val_loss"]}


def test_a_runs_csv_read_back_gives_each_jobs_tokens_as_its_config_did(tmp_path):
    records = [record(30, 8, 1), record(60, 16, 2)]
    context = records[0]["config"]["data"]["context"]
    (tmp_path / "runs.csv").write_text(render_runs_csv(records))
    back = read_runs_csv(tmp_path)
    assert [axis_value(r, "tokens") for r in records] == [30 * 8 * context, 60 * 16 * context]
    assert [axis_value(r, "tokens") for r in back] == [30 * 8 * context, 60 * 16 * context]
    assert all("config" not in r for r in back)  # the number came from the column, not from a config
