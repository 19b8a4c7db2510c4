"""An evaluation metric's 95% interval: Student's t on few samples (the normal interval is too
narrow on 8), Wilson's for values that are all 0 or 1."""

from __future__ import annotations

import math

import pytest

from akka_training.core.evaluations import interval, t95

# Two-sided 95% quantiles of Student's t, from published tables.
KNOWN = {
    1: 12.7062,
    2: 4.3027,
    3: 3.1824,
    5: 2.5706,
    7: 2.3646,
    10: 2.2281,
    20: 2.0860,
    29: 2.0452,
    30: 2.0423,
    60: 2.0003,
    120: 1.9799,
    1000: 1.9623,
    2000: 1.9612,
    100000: 1.9600,
}


@pytest.mark.parametrize(("df", "quantile"), sorted(KNOWN.items()))
def test_t95_matches_the_published_quantiles(df: int, quantile: float) -> None:
    assert t95(df) == pytest.approx(quantile, abs=1e-4)


def test_eight_losses_take_students_t_with_seven_degrees_of_freedom() -> None:
    losses = [2.1, 2.4, 1.9, 2.8, 2.2, 2.6, 2.0, 2.5]
    mean, low, high, stderr = interval(losses)
    sd = math.sqrt(sum((v - mean) ** 2 for v in losses) / 7)
    assert stderr == pytest.approx(sd / math.sqrt(8))
    assert (high - low) / 2 == pytest.approx(2.3646 * stderr, rel=1e-4)
    assert (low, high) == pytest.approx((mean - 2.3646 * stderr, mean + 2.3646 * stderr), rel=1e-4)


def test_one_value_has_no_spread_and_zeros_and_ones_keep_wilsons_interval() -> None:
    assert interval([3.5]) == (3.5, 3.5, 3.5, 0.0)
    mean, low, high, _ = interval([1.0] * 8)
    assert mean == 1.0 and high == 1.0 and low == pytest.approx(0.6756, abs=1e-4)
