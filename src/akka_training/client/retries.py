"""When the client sends a request again, and after how long.

- An answer of 503 with ``Retry-After`` means the trainer saved nothing of the request (its
  database was busy): any request whose body can be sent again is, after the time the header
  names (with a little jitter, so that many clients do not come back at the same instant).
- A connection dropped before the answer, or a 502 or 504 from a proxy in front of the trainer,
  leaves unknown whether the request took effect: only an idempotent request is sent again (a
  read, or a submission that carries a ``submissionId``, which the trainer starts once), after
  an exponential back-off.

A trainer that is starting answers 503 with the code ``starting``: every request waits for it
(up to `start_seconds`), whatever its method, since the trainer took none of it; a refused
connection is tried again for `connect_seconds`, the time a trainer started on the line before
takes to open its port.

Either way the client stops after `attempts` sends or once `budget_seconds` have passed, and
then raises what the last answer said.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

import httpx

# Methods that change nothing, so that sending them twice is as sending them once.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Answers of a proxy that lost the trainer's answer (or never reached it).
_GATEWAY = frozenset({502, 504})


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6
    budget_seconds: float = 60.0
    # The first back-off after a dropped connection; it doubles each time, up to `max_delay`.
    base_delay: float = 0.5
    max_delay: float = 8.0
    # How long a request waits for a trainer that answers "starting" (its first start builds
    # the development models), apart from `attempts` and `budget_seconds`.
    start_seconds: float = 300.0
    # How long a refused connection is tried again (nothing was sent): a trainer started the
    # moment before opens its port within it.
    connect_seconds: float = 1.5

    def delay(
        self, attempt: int, response: httpx.Response | None, idempotent: bool
    ) -> float | None:
        """Seconds to wait before sending the request again after its `attempt`-th send (1 for
        the first) answered `response` (None: the connection dropped), or None: do not."""
        if attempt >= self.attempts:
            return None
        if response is not None and response.status_code == 503:
            after = retry_after(response)
            if after is None:
                return None
            return after + random.uniform(0, 0.5)
        if not idempotent:
            return None
        if response is not None and response.status_code not in _GATEWAY:
            return None
        backoff = min(self.max_delay, self.base_delay * 2.0 ** (attempt - 1))
        return backoff * random.uniform(0.5, 1.0)


NO_RETRIES = RetryPolicy(attempts=1)


def retry_after(response: httpx.Response) -> float | None:
    """The answer's ``Retry-After`` in seconds (a number or an HTTP date), or None."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
