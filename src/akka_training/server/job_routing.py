"""Routing a request to the job that holds a run's model: an interactive run's job
(`akka_training.engines.tinker.api`) answers on the address and with the key it reported in its
``started`` placement. The service reads them here, outside any database session, and forwards
the request's body as it came; what the job answers goes back as it is."""

from __future__ import annotations

import functools
import ssl
from dataclasses import dataclass

import httpx
from sqlalchemy.orm import Session

from akka_training.core.errors import Conflict, ServiceUnavailable
from akka_training.core.phases import TERMINAL, Phase
from akka_training.storage.models import Attempt, Run

KEY_HEADER = "X-Job-Key"
# A job's answers are immediate (its work is queued), or held a few seconds for a result
# (``retrieve_future``); one that does not answer in this long is gone or hung.
ROUTE_TIMEOUT = httpx.Timeout(60.0, connect=5.0)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS context of the service's clients of its jobs, made once: a new client would load
    the CA bundle again, 10-130 ms of CPU for every request routed (bench/serving.py,
    bench/tinker_api.py). With it go ``trust_env=False``: a job's address is reached directly,
    never through a proxy of the environment."""
    return httpx.create_ssl_context()


_client = httpx.Client(timeout=ROUTE_TIMEOUT, verify=tls_context(), trust_env=False)


@dataclass(frozen=True)
class JobAddress:
    url: str
    key: str


def job_address(session: Session, run: Run) -> JobAddress | None:
    """Where the current attempt of `run` answers; None while it has not started answering."""
    attempt = session.get(Attempt, (run.id, run.attempt)) if run.attempt else None
    placement = (attempt.placement if attempt is not None else None) or {}
    url, key = placement.get("apiUrl"), placement.get("apiKey")
    if not url or not key:
        return None
    return JobAddress(str(url), str(key))


def live_address(session: Session, run: Run) -> JobAddress:
    """`job_address` of a run that is training; a run that ended or has not started is refused
    with a sentence saying so."""
    phase = Phase(run.phase)
    if phase in TERMINAL:
        detail = f": {run.failure_detail}" if run.failure_detail else ""
        raise Conflict(
            f"Run {run.id} has ended ({phase.value.lower()}{detail}); create a new training "
            "client to go on."
        )
    address = job_address(session, run) if phase == Phase.TRAINING else None
    if address is None:
        raise Conflict(
            f"Run {run.id} is {phase.value.lower()}: its model is not loaded yet; wait for "
            "create_lora_training_client to return."
        )
    return address


def route(
    address: JobAddress,
    path: str,
    body: bytes,
    content_type: str,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    try:
        return _client.post(
            address.url.rstrip("/") + "/" + path.lstrip("/"),
            content=body,
            headers={KEY_HEADER: address.key, "Content-Type": content_type, **(headers or {})},
        )
    except httpx.HTTPError as exc:
        raise ServiceUnavailable(
            f"The run's job did not answer ({type(exc).__name__}); if the run has failed, "
            "`akka training runs get` says why."
        ) from None


async def route_async(
    address: JobAddress, path: str, body: bytes, content_type: str
) -> httpx.Response:
    """`route`, on the event loop: for the questions a job holds until their answer is there,
    which would otherwise hold one of the service's threads each."""
    try:
        async with httpx.AsyncClient(
            timeout=ROUTE_TIMEOUT, verify=tls_context(), trust_env=False
        ) as client:
            return await client.post(
                address.url.rstrip("/") + "/" + path.lstrip("/"),
                content=body,
                headers={KEY_HEADER: address.key, "Content-Type": content_type},
            )
    except httpx.HTTPError as exc:
        raise ServiceUnavailable(
            f"The run's job did not answer ({type(exc).__name__}); if the run has failed, "
            "`akka training runs get` says why."
        ) from None
