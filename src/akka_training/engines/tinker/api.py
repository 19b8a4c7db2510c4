"""The job's loopback HTTP API: the service routes each Tinker request of its run here
(`akka_training.server.job_routing`), with the key the job reported in its placement.

A request that does work (``forward_backward``, ``optim_step``, ``save_weights``,
``load_weights``, ``save_weights_for_sampler``) is queued under its ``seq_id`` and answered at once with its request id
(``RUN:SEQ``); the job runs the queue in ``seq_id`` order, whatever order the requests arrived
in, one at a time, on the thread that calls `RequestQueue.serve`. ``retrieve_future`` answers the
result, or ``try_again`` while the request waits or runs: it holds the question up to
`HOLD_SECONDS` for the result first (a long poll), because the SDK asks again at once, and
questions answered at once would keep the host's cores busy beside the request they wait for. A ``sample`` is not queued: it runs on
the sampler beside the queue (`sampler.Sampler`), under a request id of its own. The server itself is small on purpose:
its requests are routed and authenticated by the service, so it binds the loopback address of
the node and checks one key (``X-Job-Key``)."""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol

from akka_training.engines.reachable import http_server, http_url

log = logging.getLogger("akka_training.tinker")

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
KEY_HEADER = "X-Job-Key"
# How long a retrieve_future waits for its result before it answers try_again.
HOLD_SECONDS = 5.0
WORK = (
    "forward_backward",
    "optim_step",
    "save_weights",
    "load_weights",
    "save_weights_for_sampler",
)


@dataclass
class Result:
    content_type: str
    body: bytes


@dataclass
class Work:
    kind: str
    seq_id: int
    body: bytes


# What runs one request: its kind and body in, its result out (an exception is its failure).
Runner = Callable[[Work], Result]


class Samples(Protocol):
    """What answers samples beside the queue (`sampler.Sampler`)."""

    def submit(self, body: dict[str, Any]) -> tuple[str, list[str]]: ...

    def known(self, request_id: str) -> bool: ...

    def result(self, request_id: str) -> Result | None: ...


def failed(message: str, category: str = "user") -> Result:
    return Result(JSON, json.dumps({"error": message, "category": category}).encode())


class RequestQueue:
    """The requests of one model, run in ``seq_id`` order."""

    def __init__(self, run_id: str, runner: Runner) -> None:
        self.run_id = run_id
        self._runner = runner
        self._cond = threading.Condition()
        self._waiting: dict[int, Work] = {}
        self._results: dict[str, Result] = {}
        self._next = 1
        self._stopped = False

    def request_id(self, seq_id: int) -> str:
        return f"{self.run_id}:{seq_id}"

    def submit(self, work: Work) -> str:
        with self._cond:
            if work.seq_id < 1:
                raise ValueError("seq_id starts at 1")
            if work.seq_id >= self._next and work.seq_id not in self._waiting:
                self._waiting[work.seq_id] = work
                self._cond.notify_all()
        return self.request_id(work.seq_id)

    def result(self, request_id: str, wait: float = 0.0) -> Result | None:
        """The result, or None while the request waits or runs after `wait` seconds (or once
        the queue stops)."""
        deadline = time.monotonic() + wait
        with self._cond:
            while request_id not in self._results and not self._stopped:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._results.get(request_id)

    def known(self, request_id: str) -> bool:
        run, _, seq = request_id.rpartition(":")
        if run != self.run_id or not seq.isdigit():
            return False
        with self._cond:
            # The request that runs now is `_next`: it left the waiting ones, and has no result.
            return int(seq) in self._waiting or int(seq) <= self._next

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    @property
    def stopped(self) -> bool:
        return self._stopped

    def serve(self, poll: float = 1.0, check: Callable[[], bool] = lambda: False) -> None:
        """Run requests in order until `stop` (or `check` says to stop)."""
        while True:
            with self._cond:
                while not self._stopped and self._next not in self._waiting:
                    self._cond.wait(poll)
                    if check():
                        self._stopped = True
                if self._stopped:
                    return
                work = self._waiting.pop(self._next)
            try:
                result = self._runner(work)
            except Exception as exc:  # the request fails, the job goes on
                log.exception("request %s (%s) failed", work.seq_id, work.kind)
                result = failed(f"{work.kind} failed: {exc}")
            with self._cond:
                self._results[self.request_id(work.seq_id)] = result
                self._next += 1
                self._cond.notify_all()


def try_again(request_id: str) -> Result:
    body = {"type": "try_again", "request_id": request_id, "queue_state": "active"}
    return Result(JSON, json.dumps(body).encode())


class JobApi:
    """The HTTP server over a `RequestQueue`, on `host` (`reachable.listen_host`) and a free
    port, answering only requests that carry its key."""

    def __init__(
        self,
        queue: RequestQueue,
        key: str,
        host: str = "127.0.0.1",
        samples: Samples | None = None,
        hold: float = HOLD_SECONDS,
    ) -> None:
        self.queue = queue
        self.samples = samples
        self.key = key
        self.hold = hold
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                log.debug(format, *args)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                if not hmac.compare_digest(self.headers.get(KEY_HEADER, ""), api.key):
                    self._answer(403, failed("this job answers its trainer only"))
                    return
                status, result = api.handle(self.path, self.headers, body)
                self._answer(status, result)

            def _answer(self, status: int, result: Result) -> None:
                self.send_response(status)
                self.send_header("Content-Type", result.content_type)
                self.send_header("Content-Length", str(len(result.body)))
                self.end_headers()
                self.wfile.write(result.body)

        self._server = http_server(host, 0, Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return http_url(str(host), int(port))

    def start(self) -> JobApi:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def handle(self, path: str, headers: Any, body: bytes) -> tuple[int, Result]:
        kind = path.strip("/")
        try:
            if kind in WORK:
                if kind == "forward_backward":
                    seq_id = int(headers.get("X-Seq-Id") or 0)
                else:
                    seq_id = int(json.loads(body).get("seq_id") or 0)
                request_id = self.queue.submit(Work(kind, seq_id, body))
                return 200, Result(JSON, json.dumps({"request_id": request_id}).encode())
            if kind == "sample" and self.samples is not None:
                request_id, sequences = self.samples.submit(json.loads(body))
                answer = {"request_id": request_id, "sample_sequence_ids": sequences}
                return 200, Result(JSON, json.dumps(answer).encode())
            if kind == "retrieve_future":
                request_id = str(json.loads(body).get("request_id", ""))
                if self.samples is not None and self.samples.known(request_id):
                    return 200, self.samples.result(request_id) or try_again(request_id)
                if not self.queue.known(request_id):
                    return 404, failed(f"there is no request {request_id!r}")
                return 200, self.queue.result(request_id, self.hold) or try_again(request_id)
            if kind == "shutdown":
                self.queue.stop()
                return 200, Result(JSON, b"{}")
        except (ValueError, TypeError) as exc:
            return 400, failed(f"the request is not readable: {exc}")
        return 404, failed(f"this job has no {kind!r}")
