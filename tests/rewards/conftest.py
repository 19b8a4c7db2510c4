"""Fixtures for the reward tests: scripted HTTP servers on 127.0.0.1 and a closed port."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .servers import Reply, ScriptedServer


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[str, Any], Reply]], ScriptedServer]]:
    """Start scripted servers; every one is stopped when the test ends."""
    started: list[ScriptedServer] = []

    def start(respond: Callable[[str, Any], Reply]) -> ScriptedServer:
        server = ScriptedServer(respond)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (connections are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
