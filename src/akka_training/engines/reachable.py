"""The address a job's own server listens on, so that the trainer reaches it.

A job that answers the trainer (an endpoint's server, a Tinker session's API) listens on the
address of this node on the route to the trainer: the local address a socket would use to talk to
``trainer_url``'s host, found without sending anything. For a trainer on this host that is
loopback; on a cluster it is the node's address on the trainer's network. ``AKKA_ENDPOINT_HOST``
in the job's environment names the address instead (a node with several networks, a proxy)."""

from __future__ import annotations

import os
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOST_ENV = "AKKA_ENDPOINT_HOST"
LOOPBACK = "127.0.0.1"


def listen_host(trainer_url: str) -> str:
    """The address to listen on: `HOST_ENV` if set, else this node's address towards the
    trainer, else loopback when there is no route to it at all."""
    named = os.environ.get(HOST_ENV, "").strip()
    if named:
        return named
    parts = urlsplit(trainer_url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        family, _, _, _, address = socket.getaddrinfo(
            parts.hostname or LOOPBACK, port, type=socket.SOCK_DGRAM
        )[0]
        # Connecting a datagram socket only chooses the route: no packet leaves this host.
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(address)
            return str(probe.getsockname()[0])
    except (OSError, ValueError):
        return LOOPBACK


def http_url(host: str, port: int) -> str:
    """``http://host:port``, with an IPv6 address in brackets."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def http_server(
    host: str, port: int, handler: type[BaseHTTPRequestHandler], backlog: int = 5
) -> ThreadingHTTPServer:
    """A threading HTTP server on `host` (IPv4 or IPv6) and `port` (0: any free port), that
    keeps up to `backlog` connections waiting to be accepted."""

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        daemon_threads = True
        request_queue_size = backlog

    return Server((host, port), handler)
