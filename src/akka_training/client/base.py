"""The client's plumbing: requests, errors, typed answers, streamed lines.

Errors come back as the exception the service raised (`akka_training.core.errors`), rebuilt
from the error code; a service that does not answer raises `TrainerUnreachable`. Answers come
back as the models of `akka_training.api`. A request the trainer was too busy for (503 with
Retry-After), and an idempotent one whose connection dropped, are sent again
(`client.retries`).
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Self, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter

from akka_training.client.retries import NO_RETRIES, SAFE_METHODS, RetryPolicy, retry_after
from akka_training.client.tls import DeferredTLS
from akka_training.core.errors import (
    AkkaError,
    InvalidRequest,
    TrainerUnreachable,
    Unauthorized,
    error_from_json,
)

T = TypeVar("T")


class BaseClient:
    def __init__(
        self,
        url: str,
        token: str | None = None,
        timeout: float = 60.0,
        refresh: Callable[[], str | None] | None = None,
        retries: RetryPolicy | None = None,
    ) -> None:
        """`refresh`, when given, returns a fresh token after a 401 (a cached token the trainer
        no longer knows); the request is then sent once more. `retries`: when a request is sent
        again (`client.retries`; `NO_RETRIES` sends each once)."""
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # The TLS context (its CA bundle) is built by the first https connection, not here.
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, verify=DeferredTLS()
        )
        self._refresh = refresh
        self.retries = retries or RetryPolicy()
        # Called once, with the trainer's sentence, when a request finds the trainer starting
        # (the CLI prints it); the request waits for the trainer either way.
        self.on_starting: Callable[[str], None] | None = None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing --------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        content: bytes | Iterable[bytes] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
        idempotent: bool | None = None,
    ) -> Any:
        """Send a request; the decoded JSON answer, or the exception of an error answer.
        `idempotent`: whether sending it twice is as sending it once (None: only for reads),
        which lets it be sent again after a dropped connection."""
        params = {k: v for k, v in (params or {}).items() if v is not None}
        if idempotent is None:
            idempotent = method.upper() in SAFE_METHODS
        args = (method, path, json, params, content, headers, timeout, idempotent)
        response = self._exchange(*args)
        if response.status_code == 401 and self._refresh is not None and not _is_stream(content):
            token = self._refresh()
            self._refresh = None
            if token:
                self._http.headers["Authorization"] = f"Bearer {token}"
                response = self._exchange(*args)
        return _decode(response)

    def call(
        self,
        answer: type[T],
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        content: bytes | Iterable[bytes] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
        idempotent: bool | None = None,
    ) -> T:
        """`request`, with the answer read as `answer` (a model of `akka_training.api`)."""
        data = self.request(
            method,
            path,
            json=json,
            params=params,
            content=content,
            headers=headers,
            timeout=timeout,
            idempotent=idempotent,
        )
        value: T = read_as(answer, data)
        return value

    def _exchange(
        self,
        method: str,
        path: str,
        json: Any,
        params: dict[str, Any],
        content: bytes | Iterable[bytes] | None,
        headers: dict[str, str] | None,
        timeout: float | None,
        idempotent: bool,
    ) -> httpx.Response:
        """`_send`, again while `self.retries` says so; a streamed body is sent once."""
        policy = NO_RETRIES if _is_stream(content) else self.retries
        began = time.monotonic()
        deadline = began + policy.budget_seconds
        starting_until: float | None = None
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._send(method, path, json, params, content, headers, timeout)
            except TrainerUnreachable as exc:
                if isinstance(exc.__cause__, httpx.ConnectError) and policy.attempts > 1:
                    # Refused: nothing was sent. A trainer started a moment ago (`akka trainer
                    # serve &` on the line before) opens its port within `connect_seconds`.
                    if time.monotonic() - began < policy.connect_seconds:
                        attempt -= 1
                        time.sleep(0.2)
                        continue
                    raise
                if not isinstance(exc.__cause__, _DROPPED):
                    raise
                pause = policy.delay(attempt, None, idempotent)
                if pause is None or time.monotonic() + pause > deadline:
                    raise
            else:
                if _is_starting(response) and not _is_stream(content):
                    # The trainer is up to its port but not yet serving: it saved nothing, and
                    # it answers soon. The wait is not one of the policy's attempts.
                    if starting_until is None:
                        starting_until = time.monotonic() + policy.start_seconds
                        if self.on_starting is not None:
                            self.on_starting(_error_message(response))
                    if time.monotonic() >= starting_until:
                        raise TrainerUnreachable(
                            f"The trainer at {self.url} was still starting after "
                            f"{policy.start_seconds:g} s; its log says what it is doing."
                        )
                    attempt -= 1
                    time.sleep(retry_after(response) or 1.0)
                    # The trainer may be between its "starting" answers and its service
                    # listening: a refused connection is tried again from here.
                    began = time.monotonic()
                    continue
                pause = policy.delay(attempt, response, idempotent)
                if pause is None or time.monotonic() + pause > deadline:
                    return response
            time.sleep(pause)

    def _send(
        self,
        method: str,
        path: str,
        json: Any,
        params: dict[str, Any],
        content: bytes | Iterable[bytes] | None,
        headers: dict[str, str] | None,
        timeout: float | None,
    ) -> httpx.Response:
        try:
            return self._http.request(
                method,
                path,
                json=json,
                params=params,
                content=content,
                headers=headers,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.ConnectError as exc:
            refusal = _certificate_refusal(exc)
            if refusal is not None:
                # Caused by the TLS error, not the ConnectError: it fails the same way a moment
                # later, so the retries of a refused connection leave it alone.
                reason = refusal.verify_message or refusal.reason or refusal
                raise TrainerUnreachable(
                    f"The trainer at {self.url} presented a certificate this machine does not "
                    f"trust ({reason}); set SSL_CERT_FILE to the file of the CA that signed it."
                ) from refusal
            raise TrainerUnreachable(
                f"The trainer at {self.url} does not answer; start it with `akka trainer serve` "
                "or point --trainer-url (or the context) at a running one."
            ) from exc
        except httpx.TimeoutException as exc:
            raise TrainerUnreachable(f"The trainer at {self.url} did not answer in time.") from exc
        except httpx.HTTPError as exc:
            raise TrainerUnreachable(f"The request to {self.url} failed: {exc}") from exc
        except ValueError as exc:
            if "JSON compliant" not in str(exc):
                raise
            # httpx encodes JSON without NaN and Infinity, as the standard says.
            raise InvalidRequest(
                "The request holds .nan or .inf (float('nan'), float('inf')), which a plan "
                "cannot hold and JSON cannot carry; write a finite number."
            ) from None

    def stream_lines(
        self, path: str, params: dict[str, Any] | None = None, timeout: float | None = None
    ) -> Iterator[dict[str, Any]]:
        """The JSON objects of a line-delimited answer, as they arrive."""
        params = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            with self._http.stream(
                "GET", path, params=params, timeout=httpx.Timeout(timeout, connect=10.0)
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    _decode(response)
                for line in response.iter_lines():
                    if line.strip():
                        yield json.loads(line)
        except httpx.ConnectError as exc:
            raise TrainerUnreachable(f"The trainer at {self.url} does not answer.") from exc
        except httpx.RemoteProtocolError as exc:
            raise TrainerUnreachable(f"The trainer at {self.url} closed the stream.") from exc

    def stream_bytes(
        self,
        path: str,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
        chunk_bytes: int = 1 << 20,
    ) -> Iterator[bytes]:
        """The body of a binary answer, a chunk at a time, as it arrives."""
        params = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            with self._http.stream(
                "GET", path, params=params, timeout=httpx.Timeout(timeout, connect=10.0)
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    _decode(response)
                yield from response.iter_bytes(chunk_bytes)
        except httpx.ConnectError as exc:
            raise TrainerUnreachable(f"The trainer at {self.url} does not answer.") from exc
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            raise TrainerUnreachable(f"The trainer at {self.url} closed the download.") from exc


# A connection that dropped after the request may have been sent: whether it took effect is
# unknown, so only an idempotent request is sent again.
_DROPPED = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


def _is_starting(response: httpx.Response) -> bool:
    """Whether the answer says the trainer is starting (`server.starting`)."""
    if response.status_code != 503:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    error = body.get("error") if isinstance(body, dict) else None
    return isinstance(error, dict) and error.get("code") == "starting"


def _error_message(response: httpx.Response) -> str:
    error = response.json()["error"]
    return str(error.get("message", ""))


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def read_as(answer: Any, data: object) -> Any:
    """`data` read as `answer` (a model of `akka_training.api`, a list or a union of them),
    keeping keys this version does not know: a newer service may send more
    (`api.base.ResponseBody` says why the client reads leniently)."""
    found = _ADAPTERS.get(answer)
    if found is None:  # one validator per answer type, built on first use
        found = _ADAPTERS[answer] = TypeAdapter(answer)
    return found.validate_python(data, extra="allow")


def _is_stream(content: object) -> bool:
    return content is not None and not isinstance(content, bytes | str)


def _decode(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            raise AkkaError(
                f"The trainer answered HTTP {response.status_code}: {response.text[:500]}"
            ) from None
        error = error_from_json(body, response.status_code)
        if isinstance(error, Unauthorized):
            # Which trainer refused matters when a context, a variable and a flag disagree.
            origin = response.request.url.copy_with(path="/", query=None, fragment=None)
            error.message = f"{error.message} (answered by {str(origin).rstrip('/')})"
            error.args = (error.message,)
        raise error
    if not response.content:
        return None
    if response.headers.get("content-type", "").startswith("application/json"):
        return response.json()
    return response.text


def plan_document(plan: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
    """A plan as the service reads it: a model sends the fields that were set, so the stored
    plan is what its author wrote, not every default."""
    if isinstance(plan, BaseModel):
        return plan.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return dict(plan)


def _certificate_refusal(error: BaseException) -> ssl.SSLCertVerificationError | None:
    """The TLS error that refused the trainer's certificate, where that is what failed the
    connection."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
