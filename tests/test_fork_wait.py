"""A horizon fork's branch waiting for its provider (initnorm/training/forks.py): a provider killed with -9 is said at
once (N08/N14: the branch waited 1-2 minutes with no line)."""

import fcntl
import logging
import os
import time

from initnorm.training import forks


def test_a_branch_says_at_once_that_its_provider_was_killed(tmp_path, caplog):
    store, provider = tmp_path / "store", tmp_path / "provider"
    store.mkdir()
    provider.mkdir()
    held = os.open(store / "provider.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)  # the provider trains
    looks = []

    def stop():  # asked at each look: after the second, the provider dies (its lock released with its process)
        looks.append(1)
        if len(looks) == 2:
            os.close(held)

    fork = forks.Fork(store=store, branch=50, provide=(), provider=provider)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        assert forks.wait(fork, logging.getLogger("branch"), stop) is False
    assert time.monotonic() - started < 5 < forks.START_GRACE_S
    assert f"the provider {provider} ended without a record before step 50 (killed?)" in caplog.text
