"""The endpoint job's HTTP server: the OpenAI API's chat and text completions over one
`GenerationEngine`, on a port of its host.

It answers the trainer's front door only: the front door has checked the caller's token and
resolved the request's `model` to an adapter, which it names in `ADAPTER_HEADER`. Streams are
server-sent events, one chunk per piece of text, the usage in the last chunk, then
``data: [DONE]``. Requests that arrive together are generated in one batch (`Batcher`).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from akka_training.engines.generation.batcher import Batcher
from akka_training.engines.generation.engine import AdapterNotLoaded, GenerationEngine
from akka_training.engines.generation.schema import BASE, Delta
from akka_training.engines.reachable import http_server, http_url
from akka_training.engines.serving import ADAPTER_HEADER
from akka_training.engines.serving.keyed import Activity, KeyedHandler, keyed
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


def _handler(
    engine: GenerationEngine, batcher: Batcher, activity: Activity, key: str
) -> type[KeyedHandler]:
    class Handler(KeyedHandler):
        def health(self) -> dict[str, Any]:
            return {"status": "ok", "adapters": sorted(engine.adapters)}

        def answer(self) -> None:
            try:
                body = self.read_body()
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
                    self.send_json(200, answer(call, batcher.submit(call.requests)))
            except ApiRefusal as refusal:
                self.refuse(refusal)
            except AdapterNotLoaded as exc:
                self.refuse(ApiRefusal(404, f"This endpoint does not serve {exc.args[0]}."))

        def _stream(self, call: Call) -> None:
            self.open_stream()
            started: set[tuple[int, int]] = set()

            def send(delta: Delta) -> None:
                key = (delta.request, delta.index)
                self._event(chunk(call, delta, key not in started))
                started.add(key)

            results = batcher.submit(call.requests, send)
            self._event(usage_chunk(call, results))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

        def _event(self, body: dict[str, Any]) -> None:
            self.wfile.write(b"data: " + json.dumps(body).encode() + b"\n\n")
            self.wfile.flush()

    return keyed(Handler, key, activity)
