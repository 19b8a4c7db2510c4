"""One JSON POST to a grading endpoint, with every way it can fail mapped to a cause.

Shared by the ``judge`` and ``http`` terms:

- no complete answer within ``timeout_seconds`` (connect, send, wait and read together) ->
  ``timeout``
- the connection refused, the host unreachable or unknown -> ``connect``
- an answer with a status other than 2xx -> ``http-status``
- a 2xx answer whose body is not JSON -> ``no-verdict``
- anything else (a malformed URL, a broken connection mid-answer) -> ``error``
"""

from __future__ import annotations

import asyncio
import math
import re
from typing import Any

import httpx

from akka_training.rewards.inputs import FailureCause, TermFailed

_BODY_PREVIEW_CHARS = 200
_SCORE_LINE_RE = re.compile(r"(?i)\bscore\s*[:=]\s*([-+]?\d*\.?\d+)")
_BARE_NUMBER_RE = re.compile(r"^\s*([-+]?\d*\.?\d+)\s*\.?\s*$")


async def post_json(
    client: httpx.AsyncClient,
    url: str,
    payload: dict[str, Any],
    *,
    headers: dict[str, str],
    timeout_seconds: float,
) -> Any:
    """POST `payload` to `url` and return the decoded JSON answer, or raise `TermFailed`."""
    try:
        # httpx's timeout bounds each phase; asyncio's bounds the whole exchange, so a server
        # that trickles its answer cannot hold the call past the limit either.
        async with asyncio.timeout(timeout_seconds):
            response = await client.post(
                url, json=payload, headers=headers, timeout=httpx.Timeout(timeout_seconds)
            )
    except (TimeoutError, httpx.TimeoutException):
        raise TermFailed(
            FailureCause.TIMEOUT, f"{url} did not answer within {timeout_seconds:g} s"
        ) from None
    except httpx.ConnectError as exc:
        raise TermFailed(FailureCause.CONNECT, f"could not connect to {url}: {exc}") from None
    except httpx.HTTPError as exc:
        raise TermFailed(FailureCause.ERROR, f"{type(exc).__name__} from {url}: {exc}") from None
    if not response.is_success:
        body = response.text[:_BODY_PREVIEW_CHARS]
        raise TermFailed(
            FailureCause.HTTP_STATUS, f"{url} answered HTTP {response.status_code}: {body}"
        )
    try:
        return response.json()
    except ValueError:
        raise TermFailed(
            FailureCause.NO_VERDICT,
            f"{url} answered something other than JSON: {response.text[:_BODY_PREVIEW_CHARS]!r}",
        ) from None


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
