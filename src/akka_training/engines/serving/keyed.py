"""What an endpoint job's servers share, whichever engine answers behind them: they answer the
trainer only (`KEY_HEADER` carries the key the job reported), count what is in flight for the
idle clock (`Activity`), and speak JSON and server-sent events the same way."""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

from akka_training.engines.serving import KEY_HEADER
from akka_training.engines.serving.openai_api import ApiRefusal

log = logging.getLogger(__name__)


class Activity:
    """When the server last answered a request, and how many it answers now (an endpoint goes
    idle only when none is in flight)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.in_flight = 0
        self.last = time.monotonic()

    def idle_for(self) -> float:
        """Seconds since the last request ended; 0 while one is in flight."""
        with self._lock:
            return 0.0 if self.in_flight else time.monotonic() - self.last

    def __enter__(self) -> None:
        with self._lock:
            self.in_flight += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.in_flight -= 1
            self.last = time.monotonic()


class KeyedHandler(BaseHTTPRequestHandler):
    """A request of the trainer: ``GET /health`` answers `health`, a ``POST`` is `answer`ed
    while counted in `activity`; a request without `key` is refused (403) before either."""

    protocol_version = "HTTP/1.1"
    key: ClassVar[str] = ""
    activity: ClassVar[Activity]

    def health(self) -> dict[str, Any]:
        raise NotImplementedError

    def answer(self) -> None:
        raise NotImplementedError

    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)

    def do_GET(self) -> None:
        if not self._trusted():
            return
        if self.path.rstrip("/") == "/health":
            self.send_json(200, self.health())
            return
        self.refuse(ApiRefusal(404, f"There is no route {self.path}."))

    def do_POST(self) -> None:
        if not self._trusted():
            return
        with self.activity:
            self.answer()

    def _trusted(self) -> bool:
        """Only the trainer, which has the key, may call: refuse anyone else."""
        if self.key and hmac.compare_digest(self.headers.get(KEY_HEADER, ""), self.key):
            return True
        self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
        self.refuse(ApiRefusal(403, "This endpoint answers its trainer only."))
        return False

    def read_body(self) -> dict[str, Any]:
        """The request's JSON object; a refusal (400) for anything else."""
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        except json.JSONDecodeError as exc:
            raise ApiRefusal(400, "The request's body is not JSON.") from exc
        if not isinstance(body, dict):
            raise ApiRefusal(400, "The request's body must be a JSON object.")
        return body

    def open_stream(self) -> None:
        """The head of a server-sent events answer; the connection closes after it."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def refuse(self, refusal: ApiRefusal) -> None:
        self.send_json(refusal.status, refusal.body())

    def send_json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def keyed(handler: type[KeyedHandler], key: str, activity: Activity) -> type[KeyedHandler]:
    """`handler` answering callers that send `key`, counted in `activity`."""
    handler.key = key
    handler.activity = activity
    return handler
