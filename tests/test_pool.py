"""The sweep's worker pool (initnorm/cli/pool.py): a worker that dies costs only the unit it held, the others go on."""

import os
import signal

import pytest

from initnorm.cli.pool import Lost, Pool


def unit(k: int, how: str) -> int:
    if how == "exit":
        os._exit(3)
    if how == "kill":  # the out-of-memory killer's way
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "interrupt":
        raise KeyboardInterrupt
    if how == "raise":
        raise ValueError(f"unit {k}")
    return k * k


@pytest.mark.parametrize("how,reason", [("exit", "exited with status 3"), ("kill", "killed by SIGKILL"),
                                        ("interrupt", "raised KeyboardInterrupt")])
def test_a_unit_whose_worker_dies_is_lost_alone_and_the_others_run(how, reason):
    pool = Pool(2, "spawn")
    try:
        out = pool.run(unit, [(0, ""), (1, how), (2, ""), (3, "")], stopping=lambda: False)
    finally:
        pool.close()
    assert out[0] == 0 and out[2] == 4 and out[3] == 9, out
    assert isinstance(out[1], Lost) and reason in out[1].reason, out[1]
    assert all(not w.process.is_alive() for w in pool.workers)


def test_an_exception_a_unit_raises_past_its_jobs_stops_the_run():
    pool = Pool(1, "spawn")
    try:
        with pytest.raises(ValueError, match="unit 1"):
            pool.run(unit, [(0, ""), (1, "raise"), (2, "")], stopping=lambda: False)
    finally:
        pool.close()


def test_no_unit_starts_once_a_stop_is_asked_for():
    pool = Pool(2, "spawn")
    try:
        assert pool.run(unit, [(0, ""), (1, "")], stopping=lambda: True) == [None, None]
    finally:
        pool.close()
