"""One JSON POST to a grading endpoint, retried while the endpoint is briefly unable to answer,
with every way it can fail mapped to a cause.

Shared by the ``judge`` and ``http`` terms. ``timeout_seconds`` is the term's whole budget for
one rollout: every try and every wait between tries fit in it.

- an answer of 429 (too many requests) or 5xx (the server's trouble) is tried again after a
  back-off (exponential, with jitter) or after what its ``Retry-After`` asks, as long as the
  budget holds the wait; the retries are counted (`RemoteAnswer.retries`, `TermFailed.retries`)
- no complete answer within the budget (connect, send, wait and read together) -> ``timeout``
- the connection refused, the host unreachable or unknown -> ``connect``
- an answer with a status other than 2xx, once there is no retrying it (another 4xx, or a 429
  or 5xx when the budget is spent or its ``Retry-After`` lies past it) -> ``http-status``
- a 2xx answer whose body is not JSON -> ``no-verdict``
- anything else (a malformed URL, a broken connection mid-answer) -> ``error``
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from akka_training.core.clock import SYSTEM_CLOCK, Clock
from akka_training.rewards.inputs import FailureCause, TermFailed

_BODY_PREVIEW_CHARS = 200
_SCORE_LINE_RE = re.compile(r"(?i)\bscore\s*[:=]\s*([-+]?\d*\.?\d+)")
_BARE_NUMBER_RE = re.compile(r"^\s*([-+]?\d*\.?\d+)\s*\.?\s*$")

# The back-off between tries without a Retry-After: FIRST_WAIT, doubling up to MAX_WAIT, plus
# a random part of up to JITTER so that the rollouts of a batch, rate-limited together, do not
# all come back at the same moment.
FIRST_WAIT_SECONDS = 0.2
MAX_WAIT_SECONDS = 5.0
JITTER_SECONDS = 0.5
# A try needs some time to be worth making: a wait that would leave less is not waited.
_LEAST_TRY_SECONDS = 0.05


@dataclass(frozen=True)
class RemoteAnswer:
    """The decoded JSON answer, and how many tries before it were answered 429 or 5xx."""

    body: Any
    retries: int = 0


class _Transient(Exception):
    """An answer worth trying again (429 or 5xx), with the wait its Retry-After asks."""

    def __init__(self, failure: TermFailed, retry_after: float | None) -> None:
        super().__init__(failure.detail)
        self.failure = failure
        self.retry_after = retry_after


async def post_json(
    client: httpx.AsyncClient,
    url: str,
    payload: dict[str, Any],
    *,
    headers: dict[str, str],
    timeout_seconds: float,
    clock: Clock = SYSTEM_CLOCK,
) -> RemoteAnswer:
    """POST `payload` to `url` and return its decoded JSON answer, trying again after a 429 or
    5xx while `timeout_seconds` (the whole budget, in `clock`'s seconds) allows, or raise
    `TermFailed`.

    The loop is our own rather than a retry library's: the same code runs in verl's workers,
    whose environment holds none, and the budget (each try's time limit is what is left of
    it, and no wait outlasts it) is the whole of the policy."""
    deadline = clock.monotonic() + timeout_seconds
    retries = 0
    last = False  # the wait before this try left it no more than its least time
    while True:
        try:
            response = await _post_once(
                client, url, payload, headers, deadline - clock.monotonic(), timeout_seconds, clock
            )
            break
        except _Transient as exc:
            remaining = deadline - clock.monotonic()
            wait = None if last else next_wait(retries, exc.retry_after, remaining)
            if wait is None:
                raise _given_up(exc, retries, timeout_seconds, remaining) from None
            # Decided here, not from the time left after the wait: a try that takes no time
            # would otherwise find a hair more than its least time left, again and again.
            last = wait >= remaining - _LEAST_TRY_SECONDS
        except TermFailed as failure:
            failure.retries = retries
            raise
        retries += 1
        await clock.asleep(wait)
    try:
        return RemoteAnswer(response.json(), retries)
    except ValueError:
        raise TermFailed(
            FailureCause.NO_VERDICT,
            f"{url} answered something other than JSON: {response.text[:_BODY_PREVIEW_CHARS]!r}",
            retries=retries,
        ) from None


def _given_up(exc: _Transient, retries: int, budget: float, remaining: float) -> TermFailed:
    """The last 429 or 5xx as the term's failure, saying why it was not tried again."""
    if exc.retry_after is not None and exc.retry_after > remaining - _LEAST_TRY_SECONDS:
        why = f"it asked to wait {exc.retry_after:g} s (Retry-After), past the term's {budget:g} s"
    else:
        tries = "1 try" if retries == 0 else f"{retries + 1} tries"
        why = f"{tries} in the term's {budget:g} s"
    failure = exc.failure
    return TermFailed(failure.cause, f"{failure.detail} ({why})", retries=retries)


def next_wait(retries: int, retry_after: float | None, remaining: float) -> float | None:
    """Seconds to wait before the next try after `retries` earlier retries, or None when the
    budget's `remaining` seconds cannot hold the wait and a try after it."""
    if retry_after is not None:
        # The endpoint said not before then: a wait past the budget is not worth making.
        if retry_after < 0 or remaining - retry_after < _LEAST_TRY_SECONDS:
            return None
        return retry_after
    # The back-off, cut to leave the last try its least time. (Compared before the cut: after
    # it, `remaining - wait` can round to just under the least time, which gave up with a
    # third of the budget left.)
    if remaining <= _LEAST_TRY_SECONDS:
        return None
    wait = min(MAX_WAIT_SECONDS, FIRST_WAIT_SECONDS * 2.0**retries)
    wait += random.uniform(0.0, JITTER_SECONDS)
    return min(wait, remaining - _LEAST_TRY_SECONDS)


async def _post_once(
    client: httpx.AsyncClient,
    url: str,
    payload: dict[str, Any],
    headers: dict[str, str],
    timeout_seconds: float,
    budget: float,
    clock: Clock,
) -> httpx.Response:
    """One try within `timeout_seconds` (what is left of the term's `budget`) of `clock`: a
    2xx answer, or `_Transient` (429, 5xx), or `TermFailed`."""
    try:
        # The clock's timeout bounds the whole exchange, so a server that trickles its answer
        # cannot hold the call past what is left of the budget; httpx's bounds each phase by
        # the whole budget (a connection that hangs, should the clock be one a test holds).
        async with clock.timeout(max(timeout_seconds, 0.0)):
            response = await client.post(
                url, json=payload, headers=headers, timeout=httpx.Timeout(budget)
            )
    except (TimeoutError, httpx.TimeoutException):
        raise TermFailed(
            FailureCause.TIMEOUT, f"{url} did not answer within {budget:g} s"
        ) from None
    except httpx.ConnectError as exc:
        raise TermFailed(FailureCause.CONNECT, f"could not connect to {url}: {exc}") from None
    except httpx.HTTPError as exc:
        raise TermFailed(FailureCause.ERROR, f"{type(exc).__name__} from {url}: {exc}") from None
    if response.is_success:
        return response
    body = response.text[:_BODY_PREVIEW_CHARS]
    failure = TermFailed(
        FailureCause.HTTP_STATUS, f"{url} answered HTTP {response.status_code}: {body}"
    )
    if response.status_code == 429 or response.status_code >= 500:
        raise _Transient(failure, retry_after(response.headers.get("retry-after")))
    raise failure


def retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """The seconds a ``Retry-After`` header asks to wait (a number of seconds or an HTTP date);
    None when there is none or it cannot be read."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if not math.isfinite(seconds):
        return None
    return max(seconds, 0.0)


def unit_score(value: Any) -> float | None:
    """`value` as a score when it is a finite number in [0, 1] (a bool is not a score)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    score = float(value)
    if not math.isfinite(score) or not 0.0 <= score <= 1.0:
        return None
    return score


def score_in_text(text: str) -> float | None:
    """The last ``SCORE: x`` of a reply, else the reply as a bare number; None when neither
    is present. Range is not checked here."""
    found = _SCORE_LINE_RE.findall(text)
    if found:
        return float(found[-1])
    bare = _BARE_NUMBER_RE.match(text)
    return float(bare.group(1)) if bare else None
