"""The sweep's worker pool (initnorm/launch/pool.py, on pebble): a worker that dies costs only the unit it held, the others
go on; a stop signal to a busy worker is recorded (the unit stops), never its death; a stopped worker is named."""

import os
import signal
import threading
import time

import pytest

from initnorm.launch import pool as pools
from initnorm.launch.pool import Lost, Pool


def unit(k: int, how: str) -> int | str:
    if how == "exit":
        os._exit(3)
    if how == "kill":  # the out-of-memory killer's way
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "interrupt":
        raise KeyboardInterrupt
    if how == "raise":
        raise ValueError(f"unit {k}")
    if how == "sigstop":
        os.kill(os.getpid(), signal.SIGSTOP)
    if how.startswith("until-stopped"):  # a job's loop: it checks the recorded stop at each step
        from initnorm.training import signals

        open(how.partition(":")[2], "w").close()  # it runs
        for _ in range(600):
            if signals.requested() is not None:
                return f"stopped by {signals.requested()}"
            time.sleep(0.05)
        return "never stopped"
    return k * k


def gone(pids) -> bool:
    return all(pools._state(p) in ("", "Z") for p in pids)


@pytest.mark.parametrize("how,reason", [("exit", "exited with status 3"), ("kill", "killed by SIGKILL"),
                                        ("interrupt", "raised KeyboardInterrupt")])
def test_a_unit_whose_worker_dies_is_lost_alone_and_the_others_run(how, reason):
    pool = Pool(2, "spawn")
    try:
        out = pool.run(unit, [(0, ""), (1, how), (2, ""), (3, "")], stopping=lambda: False)
        pids = pool.workers()
    finally:
        pool.close()
    assert out[0] == 0 and out[2] == 4 and out[3] == 9, out
    assert isinstance(out[1], Lost) and reason in out[1].reason, out[1]
    assert pids and gone(pids), pids  # a replacement was started, and nothing outlives close()


def test_the_parent_sees_a_units_end_as_it_comes_not_at_its_next_look(monkeypatch):
    """The parent waits on its units (looking for a stop signal and a stopped worker every ``POLL_S`` between), never
    sleeps blind: the sweep's last unit's end, which the summary waits for, is seen as it comes. With a look an hour
    apart, two units in one worker still return within the bound (a blind sleep: an hour after each)."""
    monkeypatch.setattr(pools, "POLL_S", 3600.0)
    pool, out = Pool(1, "spawn"), []
    runner = threading.Thread(target=lambda: out.append(pool.run(unit, [(2, ""), (3, "")], stopping=lambda: False)), daemon=True)
    try:
        runner.start()
        runner.join(300)
        assert out == [[4, 9]], "the parent did not see its units end"
    finally:
        pool.close()


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


def test_a_stop_signal_to_the_workers_stops_the_unit_running_and_kills_none(tmp_path):
    """kill -TERM of the group reached the workers, and each busy one died with status 255: its jobs recorded failed.
    Here the busy worker records the signal and its unit returns stopped; the idle one records it too."""
    pool, started = Pool(2, "spawn"), tmp_path / "started"

    def send() -> None:
        while not started.exists():
            time.sleep(0.05)
        pool.send(signal.SIGTERM)

    threading.Thread(target=send, daemon=True).start()
    try:
        out = pool.run(unit, [(0, f"until-stopped:{started}"), (1, "")], stopping=lambda: False)
        time.sleep(0.5)  # a worker that died of it would be gone by now
        workers = pool.workers()
        dead = [p for p in workers if pools._state(p) in ("", "Z")]
    finally:
        pool.close()
    assert out == [f"stopped by {int(signal.SIGTERM)}", 1], out
    assert len(workers) == 2 and not dead, workers


def test_a_stopped_worker_is_named_and_its_unit_goes_on_once_continued(monkeypatch, capsys):
    """kill -STOP of a worker hung the sweep with no line."""
    monkeypatch.setattr(pools, "STOPPED_SAY_S", 0.2)
    pool = Pool(1, "spawn")
    woken = []

    def wake():
        while not woken:
            for pid in pools.stopped(pool.workers()):
                time.sleep(1.0)  # long enough to be named
                os.kill(pid, signal.SIGCONT)
                woken.append(pid)
            time.sleep(0.1)

    waker = threading.Thread(target=wake, daemon=True)
    try:
        waker.start()
        out = pool.run(unit, [(2, "sigstop")], stopping=lambda: False)
    finally:
        woken.append(0)
        pool.close()
    assert out == [4]
    assert f"worker process {woken[0]} is stopped (SIGSTOP or SIGTSTP)" in capsys.readouterr().err


def test_the_engines_former_name_joblib_still_runs_the_pool_with_one_warning(monkeypatch, capsys):
    from initnorm.cli import launchers

    monkeypatch.setattr(launchers, "_warned", set())
    assert [launchers.engine_name("joblib") for _ in range(3)] == ["processes"] * 3
    assert launchers.engine_name("sequential") == "sequential"
    err = capsys.readouterr().err
    assert err.count("warning: hydra.launcher.engine=joblib is deprecated") == 1 and err.count("\n") == 1, err


def bar_locks() -> list[str]:
    """The modules of the locks tqdm's bars take in this process, after one bar."""
    import io

    from tqdm import tqdm

    with tqdm(total=1, file=io.StringIO()) as bar:
        bar.update()
    lock = tqdm.get_lock()
    return [type(one).__module__ for one in getattr(lock, "locks", [lock])]


def test_a_workers_bars_take_no_semaphore_that_its_sigkill_at_close_would_leak():
    """A cold ``compile=true`` sweep ended with the resource tracker's "2 leaked semaphore objects" warning: the compiler's
    tqdm bar took a multiprocessing lock in each worker, and ``close`` ends workers by SIGKILL."""
    pool = Pool(1, "spawn")  # not the fork server: one started here with no preload would serve the next test's pool
    try:
        [locks] = pool.run(bar_locks, [()], stopping=lambda: False)
    finally:
        pool.close()
    assert locks and not any(m.startswith("multiprocessing") for m in locks), locks
