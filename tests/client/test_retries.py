"""Which answers the client sends a request again after, and how long it waits first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from akka_training.client.retries import NO_RETRIES, RetryPolicy, retry_after


def answer(status: int, **headers: str) -> httpx.Response:
    return httpx.Response(status, headers=headers)


def test_a_busy_answer_is_sent_again_after_its_retry_after_whatever_the_request() -> None:
    policy = RetryPolicy()
    for idempotent in (True, False):
        pause = policy.delay(1, answer(503, **{"Retry-After": "2"}), idempotent)
        assert pause is not None and 2 <= pause <= 2.5


def test_a_503_without_retry_after_is_not_sent_again() -> None:
    # The trainer promises nothing was saved only with Retry-After (a cluster that does not
    # answer is a 503 without it).
    assert RetryPolicy().delay(1, answer(503), True) is None


def test_a_dropped_connection_or_a_gateway_error_resends_only_an_idempotent_request() -> None:
    policy = RetryPolicy(base_delay=0.5)
    for response in (None, answer(502), answer(504)):
        pause = policy.delay(1, response, idempotent=True)
        assert pause is not None and 0.25 <= pause <= 0.5
        assert policy.delay(1, response, idempotent=False) is None
    # The back-off doubles, up to its ceiling.
    later = policy.delay(5, None, idempotent=True)
    assert later is not None and 4 <= later <= 8


@pytest.mark.parametrize("status", [400, 404, 409, 422, 500])
def test_other_answers_are_final(status: int) -> None:
    assert RetryPolicy().delay(1, answer(status), True) is None


def test_the_client_stops_after_its_attempts() -> None:
    busy = answer(503, **{"Retry-After": "1"})
    assert RetryPolicy(attempts=3).delay(3, busy, True) is None
    assert NO_RETRIES.delay(1, busy, True) is None


def test_retry_after_as_seconds_or_as_a_date() -> None:
    assert retry_after(answer(503, **{"Retry-After": "7"})) == 7
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    seconds = retry_after(answer(503, **{"Retry-After": when}))
    assert seconds is not None and 28 <= seconds <= 30
    assert retry_after(answer(503, **{"Retry-After": "soon"})) is None
    assert retry_after(answer(503)) is None
