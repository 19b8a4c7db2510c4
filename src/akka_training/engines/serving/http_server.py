"""The endpoint job's HTTP server: the OpenAI API's chat and text completions over one
`GenerationEngine`, on a port of its host.

It answers the trainer's front door only: the front door has checked the caller's token and
resolved the request's `model` to an adapter, which it names in `ADAPTER_HEADER`. Streams are
server-sent events, one chunk per piece of text, the usage in the last chunk, then
``data: [DONE]``. Requests that arrive together are generated in one batch (`Batcher`).
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from akka_training.engines.generation.batcher import Batcher
from akka_training.engines.generation.engine import AdapterNotLoaded, GenerationEngine
from akka_training.engines.generation.schema import BASE, Delta
from akka_training.engines.reachable import http_server, http_url
from akka_training.engines.serving import ADAPTER_HEADER, KEY_HEADER
from akka_training.engines.serving.openai_api import (
    ApiRefusal,
    Call,
    answer,
    chat_call,
    chunk,
    text_call,
    usage_chunk,
)

log = logging.getLogger(__name__)


class EndpointServer:
    """Serves `engine` on `host`:`port` (0: any free port) in a thread of its own."""

    def __init__(
        self, engine: GenerationEngine, key: str, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.engine = engine
        self.batcher = Batcher(engine)
        self.activity = Activity()
        self.key = key
        # socketserver's default backlog of 5 drops the connections of a burst of streams (32
        # opened at once by the front door waited out its connect timeout and answered 503).
        self._server = http_server(
            host, port, _handler(engine, self.batcher, self.activity, key), backlog=256
        )
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return http_url(str(host), int(port))

    def start(self) -> EndpointServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.batcher.close()


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


def _handler(
    engine: GenerationEngine, batcher: Batcher, activity: Activity, key: str
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug(format, *args)

        def _trusted(self) -> bool:
            """Only the trainer, which has the key, may call: refuse anyone else."""
            if hmac.compare_digest(self.headers.get(KEY_HEADER, ""), key):
                return True
            self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
            self._refuse(ApiRefusal(403, "This endpoint answers its trainer only."))
            return False

        def do_GET(self) -> None:
            if not self._trusted():
                return
            if self.path.rstrip("/") == "/health":
                self._json(200, {"status": "ok", "adapters": sorted(engine.adapters)})
                return
            self._refuse(ApiRefusal(404, f"There is no route {self.path}."))

        def do_POST(self) -> None:
            if not self._trusted():
                return
            with activity:
                self._answer()

        def _answer(self) -> None:
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if not isinstance(body, dict):
                    raise ApiRefusal(400, "The request's body must be a JSON object.")
                adapter = self.headers.get(ADAPTER_HEADER) or BASE
                path = self.path.rstrip("/")
                if path == "/v1/chat/completions":
                    call = chat_call(body, adapter, engine.chat_prompt)
                elif path == "/v1/completions":
                    call = text_call(body, adapter, engine.text_prompt)
                else:
                    raise ApiRefusal(404, f"There is no route {self.path}.")
                if call.stream:
                    self._stream(call)
                else:
                    self._json(200, answer(call, batcher.submit(call.requests)))
            except ApiRefusal as refusal:
                self._refuse(refusal)
            except AdapterNotLoaded as exc:
                self._refuse(ApiRefusal(404, f"This endpoint does not serve {exc.args[0]}."))
            except json.JSONDecodeError:
                self._refuse(ApiRefusal(400, "The request's body is not JSON."))

        def _stream(self, call: Call) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            started: set[tuple[int, int]] = set()

            def send(delta: Delta) -> None:
                key = (delta.request, delta.index)
                self._event(chunk(call, delta, key not in started))
                started.add(key)

            results = batcher.submit(call.requests, send)
            self._event(usage_chunk(call, results))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

        def _event(self, body: dict[str, Any]) -> None:
            self.wfile.write(b"data: " + json.dumps(body).encode() + b"\n\n")
            self.wfile.flush()

        def _refuse(self, refusal: ApiRefusal) -> None:
            self._json(refusal.status, refusal.body())

        def _json(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
