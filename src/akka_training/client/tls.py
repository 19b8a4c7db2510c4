"""The TLS context of the client's connections, built when the first one needs it.

httpx builds its context for ``verify=True`` (certifi's CA bundle, or the file or folder that
``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` name) as soon as a client is made: reading the bundle takes
about 0.04 s, paid by every command of the CLI, though a trainer is often reached over plain
http. `DeferredTLS` stands in for that context and builds it, with httpx's own
`create_ssl_context`, when a connection first needs TLS; every TLS connection is then made by
the very context httpx would have made.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterable
from typing import Self


class DeferredTLS(ssl.SSLContext):
    """httpx's ``verify=True`` context (with `trust_env` as the client's), built on first use.
    httpcore calls only the three methods below on a client's context."""

    _context: ssl.SSLContext | None
    _trust_env: bool
    _lock: threading.Lock

    def __new__(cls, trust_env: bool = True) -> Self:
        made = super().__new__(cls, ssl.PROTOCOL_TLS_CLIENT)
        made._context = None
        made._trust_env = trust_env
        made._lock = threading.Lock()
        return made

    def __init__(self, trust_env: bool = True) -> None:
        pass

    def built(self) -> ssl.SSLContext:
        """The context that makes the connections (httpx's, for ``verify=True``)."""
        with self._lock:
            if self._context is None:
                from httpx import create_ssl_context

                self._context = create_ssl_context(verify=True, trust_env=self._trust_env)
            return self._context

    def set_alpn_protocols(self, alpn_protocols: Iterable[str]) -> None:
        self.built().set_alpn_protocols(alpn_protocols)

    def wrap_socket(
        self,
        sock: socket.socket,
        server_side: bool = False,
        do_handshake_on_connect: bool = True,
        suppress_ragged_eofs: bool = True,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLSocket:
        return self.built().wrap_socket(
            sock,
            server_side=server_side,
            do_handshake_on_connect=do_handshake_on_connect,
            suppress_ragged_eofs=suppress_ragged_eofs,
            server_hostname=server_hostname,
            session=session,
        )

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        return self.built().wrap_bio(
            incoming,
            outgoing,
            server_side=server_side,
            server_hostname=server_hostname,
            session=session,
        )
