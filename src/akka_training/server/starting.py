"""What a trainer answers while it starts: `akka trainer serve` binds its port first, then
builds what it serves (the database, the development models on a first start: about half a
minute), and meanwhile answers every request with 503 and the error code ``starting`` (with
``Retry-After``) instead of refusing the connection. A client reads that as "wait": the CLI says
so on one line and sends its request again once the trainer is up (`client.base`).

The answer is written on the listening socket by one thread, with the standard library only,
before the application (and uvicorn) exist; `stop` hands the socket, with the connections
waiting on it, to uvicorn.
"""

from __future__ import annotations

import json
import select
import socket
import threading

STARTING_CODE = "starting"
MESSAGE = (
    "The trainer is starting (a first start builds the development models, about half a minute)."
)
# Seconds a client waits before it asks again.
RETRY_AFTER = 1
_MAX_HEADER = 65536


class StartingResponder:
    """Answers 503 ``starting`` on `sock` (bound and listening) until `stop`."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="starting", daemon=True)

    def start(self) -> StartingResponder:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop answering; connections not yet accepted stay queued on the socket."""
        self._stop.set()
        self._thread.join()

    def _serve(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self.sock], [], [], 0.1)
            if not ready or self._stop.is_set():
                continue
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, OSError):
                continue
            with conn:
                try:
                    _answer(conn)
                except OSError:
                    pass  # the client went away: nothing to answer


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port` and listening, as uvicorn would bind it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _answer(conn: socket.socket) -> None:
    conn.settimeout(2.0)
    head = b""
    while b"\r\n\r\n" not in head and len(head) < _MAX_HEADER:
        chunk = conn.recv(4096)
        if not chunk:
            return
        head += chunk
    # Read the body the client sends, so that closing does not reset the connection under it.
    header, _, body = head.partition(b"\r\n\r\n")
    left = _content_length(header) - len(body)
    while left > 0:
        chunk = conn.recv(min(left, 65536))
        if not chunk:
            break
        left -= len(chunk)
    payload = json.dumps(
        {"error": {"code": STARTING_CODE, "message": MESSAGE, "problems": []}}
    ).encode()
    conn.sendall(
        b"HTTP/1.1 503 Service Unavailable\r\n"
        b"Content-Type: application/json\r\n"
        + f"Retry-After: {RETRY_AFTER}\r\nContent-Length: {len(payload)}\r\n".encode()
        + b"Connection: close\r\n\r\n"
        + payload
    )


def _content_length(header: bytes) -> int:
    for line in header.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            try:
                return int(value.strip())
            except ValueError:
                return 0
    return 0
