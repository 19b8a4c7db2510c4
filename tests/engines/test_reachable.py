"""A job's server listens where the trainer reaches it: loopback for a trainer on this host,
this node's address towards a trainer elsewhere, or the address the environment names."""

from __future__ import annotations

import socket
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler

import pytest

from akka_training.engines.reachable import HOST_ENV, http_server, http_url, listen_host


def test_a_trainer_on_this_host_is_reached_over_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(HOST_ENV, raising=False)
    assert listen_host("http://127.0.0.1:8000") == "127.0.0.1"
    assert listen_host("http://localhost:8000/") in ("127.0.0.1", "::1")


def test_a_trainer_elsewhere_is_reached_on_this_nodes_address_towards_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(HOST_ENV, raising=False)
    # A documentation address (RFC 5737): routing towards it sends nothing.
    host = listen_host("https://192.0.2.10")
    if host == "127.0.0.1":
        pytest.skip("this machine has no route off loopback")
    assert not host.startswith("127.")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind((host, 0))  # an address of this host


def test_the_environment_names_the_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOST_ENV, "10.1.2.3")
    assert listen_host("http://127.0.0.1:8000") == "10.1.2.3"


def test_urls_bracket_ipv6_and_the_server_answers_on_its_address() -> None:
    assert http_url("::1", 80) == "http://[::1]:80"
    assert http_url("10.0.0.1", 80) == "http://10.0.0.1:80"

    class Ok(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http_server("127.0.0.1", 0, Ok)
    try:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        host, port = server.server_address[:2]
        with urllib.request.urlopen(http_url(str(host), int(port))) as answer:
            assert answer.status == 204
    finally:
        server.shutdown()
        server.server_close()
