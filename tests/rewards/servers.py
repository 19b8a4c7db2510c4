"""A scripted HTTP server on 127.0.0.1 for the judge, http and scorer tests."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from akka_training.rewards.inputs import RolloutInput


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # a concurrency test opens many connections at once


@dataclass
class Reply:
    """What the scripted server answers: a status, a JSON body (or raw bytes), after a delay,
    with any further headers (``Retry-After``)."""

    body: Any = None
    status: int = 200
    delay: float = 0.0
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class ScriptedServer:
    respond: Callable[[str, Any], Reply]
    requests: list[tuple[str, Any, dict[str, str]]] = field(default_factory=list)
    max_in_flight: int = 0
    _in_flight: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"null")
                with scripted._lock:
                    scripted.requests.append((self.path, body, dict(self.headers)))
                    scripted._in_flight += 1
                    scripted.max_in_flight = max(scripted.max_in_flight, scripted._in_flight)
                try:
                    reply = scripted.respond(self.path, body)
                    if reply.delay and scripted._stopping.wait(reply.delay):
                        return  # the test is over: drop the answer
                    data = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (a timeout test)
                finally:
                    with scripted._lock:
                        scripted._in_flight -= 1

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)  # an AF_INET address: (host, port)
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def rollout(
    completion: str = "the answer\n#### 42",
    expected: str | None = "#### 42",
    prompt: Any = "What is six times seven?",
    tokens: int = 10,
    **extra: Any,
) -> RolloutInput:
    """A rollout with sensible defaults."""
    return RolloutInput(
        prompt=prompt, completion=completion, expected=expected, completion_tokens=tokens, **extra
    )
