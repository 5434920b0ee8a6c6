"""A failed job written in one place (initnorm/training/failure.py): each member's own error in its own folder, every
member of a group failing at set-up included, and a finished record never called failed."""

import json

from initnorm.config import to_plain
from initnorm.training.failure import job_failed
from initnorm.training.fit import Member, fit
from tests.conftest import compose

SHORT = ["steps=4", "trainer.val_check_interval=2", "checkpoint.every_n_steps=0", "width=8", "depth=1", "callbacks=none",
         "trainer.enable_progress_bar=false"]


def test_every_member_failing_at_set_up_records_its_own_error_in_its_own_folder(tmp_path, capsys):
    """fit raised the first member's error and the launcher wrote it into every member's folder."""
    members = []
    for i in range(2):
        c = to_plain(compose(*SHORT, f"seed={i + 1}"))
        c["data"]["path"] = str(tmp_path / f"no-such-text-{i}.txt")
        members.append(Member(c, tmp_path / f"m{i}", meta={"job_num": i}))
    results = fit(members)
    err = capsys.readouterr().err
    for i, r in enumerate(results):
        record = json.loads((tmp_path / f"m{i}" / "metrics.json").read_text())
        assert r["status"] == record["status"] == "failed", r
        assert f"no-such-text-{i}.txt" in record["error"] and f"no-such-text-{1 - i}" not in record["error"], record["error"]
        assert f"error: job {i} failed: {record['error']} -> {tmp_path / f'm{i}'}" in err, err


def test_a_finished_record_is_kept_and_not_called_failed(tmp_path, capsys):
    """kill -9 of the fork server: jobs that had finished were printed "error: job N failed: UnitLost"."""
    (tmp_path / "metrics.json").write_text(json.dumps({"status": "finished", "final_val_loss": 1.5}))
    r = job_failed(tmp_path, RuntimeError("its worker process was lost"), {"seed": 1, "job_num": 3})
    assert r["status"] == "finished" and json.loads((tmp_path / "metrics.json").read_text())["status"] == "finished"
    assert "failed" not in capsys.readouterr().err
