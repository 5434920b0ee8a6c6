"""Where a decaying schedule ends (issue 46): updates are steps 0 ... steps - 1 and the factor reaches 0 at step
``steps``, one step after the last update, so linear_to_zero's last update runs at 1/(steps - warmup) of the peak. Every
committed result was trained under this convention; a change to it changes their numbers, and this test says so."""

import math

import pytest

from initnorm.training.optim import schedule_factor


@pytest.mark.parametrize("steps,warmup", [(100, 0), (100, 10), (1500, 0)])
def test_linear_to_zero_ends_one_step_after_the_last_update(steps, warmup):
    assert schedule_factor(steps - 1, steps, warmup, "linear_to_zero") == pytest.approx(1 / (steps - warmup), rel=1e-12)
    assert schedule_factor(steps, steps, warmup, "linear_to_zero") == 0.0
    assert schedule_factor(warmup, steps, warmup, "linear_to_zero") == 1.0  # the first update after warmup: the peak


def test_wsd_and_cosine_end_the_same_way():
    steps = 100  # wsd: the last 20 steps decay, from step 80
    assert schedule_factor(79, steps, 0, "wsd") == 1.0 and schedule_factor(80, steps, 0, "wsd") == 1.0
    assert schedule_factor(steps - 1, steps, 0, "wsd") == pytest.approx(1 / 20)
    assert schedule_factor(steps, steps, 0, "wsd") == 0.0
    assert schedule_factor(steps - 1, steps, 0, "cosine") == pytest.approx(0.5 * (1 - math.cos(math.pi / steps)))
    assert schedule_factor(steps, steps, 0, "cosine") == pytest.approx(0.0, abs=1e-15)
