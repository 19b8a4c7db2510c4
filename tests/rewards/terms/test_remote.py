"""What a remote term waits before trying again: Retry-After read as seconds or as a date, and
the back-off kept inside the term's budget."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from akka_training.rewards.terms.remote import (
    FIRST_WAIT_SECONDS,
    JITTER_SECONDS,
    MAX_WAIT_SECONDS,
    next_wait,
    retry_after,
)

NOW = datetime(2026, 12, 3, 6, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("2", 2.0),
        ("0.5", 0.5),
        (" 7 ", 7.0),
        ("Thu, 03 Dec 2026 06:00:05 GMT", 5.0),
        ("Thu, 03 Dec 2026 05:59:00 GMT", 0.0),  # a date gone by: at once
        ("-3", 0.0),
        ("soon", None),
        ("", None),
        (None, None),
        ("inf", None),
    ],
)
def test_retry_after_is_read_as_seconds_or_a_date(
    header: str | None, seconds: float | None
) -> None:
    assert retry_after(header, now=NOW) == seconds


def test_the_back_off_grows_with_jitter_and_stays_inside_the_budget() -> None:
    for retries in range(8):
        wait = next_wait(retries, None, remaining=100.0)
        assert wait is not None
        base = min(MAX_WAIT_SECONDS, FIRST_WAIT_SECONDS * 2**retries)
        assert base <= wait <= base + JITTER_SECONDS
    # Near the end of the budget the wait shrinks so that a last try still fits.
    short = next_wait(5, None, remaining=1.0)
    assert short is not None and short < 1.0
    assert next_wait(0, None, remaining=0.01) is None
    # Whatever is left beyond a last try's least time, the back-off is cut to fit it rather
    # than given up (rounding once made a third of such cuts give up early).
    for tenths in range(1, 10):
        remaining = 0.06 + tenths * 0.0937
        assert next_wait(3, None, remaining=remaining) is not None, remaining
    # A Retry-After is waited as asked, or not at all when the budget cannot hold it.
    assert next_wait(0, 2.0, remaining=10.0) == 2.0
    assert next_wait(0, 20.0, remaining=10.0) is None
