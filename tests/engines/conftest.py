"""Fixtures for job tests: the development models, a recording report server on loopback, a
temporary blob store, and a factory for job specs."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from akka_training.blobstore import LocalBlobStore
from akka_training.core.reports import strongest, unbatched
from akka_training.devmodels.catalog import read_catalog

# Decides the action answering a report: (kind, body, reports so far) -> action.
Script = Callable[[str, dict[str, Any], list["Report"]], str]


@dataclass
class Report:
    kind: str
    body: dict[str, Any]
    token: str


@dataclass
class ReportServer:
    """A real HTTP server that takes job reports, records them and answers each with the
    action its script decides (``continue`` by default). A job's bootstrap exchange is answered
    with the token ``exchanged:BOOTSTRAP`` and the `store_env` (each credential once)."""

    url: str = ""
    reports: list[Report] = field(default_factory=list)
    # The kind of each request, as it came (a ``batch`` request holds several reports).
    requests: list[str] = field(default_factory=list)
    script: Script = lambda kind, body, reports: "continue"
    # What else the answer to a report holds (a long-lived task's current ``params``).
    extra: Callable[[str, dict[str, Any]], dict[str, Any]] = lambda kind, body: {}
    lock: threading.Lock = field(default_factory=threading.Lock)
    store_env: dict[str, str] = field(default_factory=dict)
    bootstraps: list[str] = field(default_factory=list)

    def of(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [r.body for r in self.reports if r.kind == kind]

    def kinds(self) -> list[str]:
        with self.lock:
            return [r.kind for r in self.reports if r.kind != "heartbeat"]


@pytest.fixture(scope="session")
def catalog(dev_models: Path) -> dict[str, dict[str, Any]]:
    """Catalog entries by model id (the models are built already: this reads their markers, and
    loads no training stack)."""
    return {entry["id"]: entry for entry in read_catalog(dev_models.resolve())}


@pytest.fixture
def report_server() -> Iterator[ReportServer]:
    server_state = ReportServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            kind = self.path.rstrip("/").split("/")[-1]
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            if self.path == "/v1/jobs/bootstrap":
                self._exchange(token)
                return
            actions = []
            with server_state.lock:
                server_state.requests.append(kind)
                # A batch report is recorded as the reports it holds, in order.
                for one_kind, one in unbatched(kind, body):
                    server_state.reports.append(Report(one_kind, one, token))
                    actions.append(server_state.script(one_kind, one, list(server_state.reports)))
                extra = server_state.extra(kind, body)
            self._answer(200, {"action": strongest(actions), **extra})

        def _exchange(self, bootstrap: str) -> None:
            with server_state.lock:
                spent = bootstrap in server_state.bootstraps
                server_state.bootstraps.append(bootstrap)
            if spent:
                self._answer(401, {"error": {"code": "unauthorized", "message": "spent"}})
            else:
                token = f"exchanged:{bootstrap}"
                self._answer(200, {"token": token, "env": server_state.store_env})

        def _answer(self, status: int, answer: dict[str, Any]) -> None:
            payload = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    server_state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield server_state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def store(tmp_path: Path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path / "blobs")
