"""The client verifies a trainer's certificate as httpx's ``verify=True`` does, with the CA
bundle read at the first https connection instead of when the client is made."""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from akka_training.client.retries import NO_RETRIES
from akka_training.client.tls import DeferredTLS
from akka_training.client.trainer import TrainerClient
from akka_training.core.errors import TrainerUnreachable


def self_signed(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class _Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"ok": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def https_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An https server on loopback with a self-signed certificate: its URL and certificate."""
    cert, key = self_signed(tmp_path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", cert
    finally:
        server.shutdown()
        server.server_close()


def _tls(client: TrainerClient) -> DeferredTLS:
    verify = client._http._transport._pool._ssl_context  # type: ignore[attr-defined]
    assert isinstance(verify, DeferredTLS)
    return verify


def test_a_certificate_no_trusted_ca_signed_is_refused(
    https_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = https_server
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with TrainerClient(url) as client:
        assert _tls(client)._context is None  # nothing read yet
        with pytest.raises(TrainerUnreachable) as refused:
            client.request("GET", "/v1/anything")
        assert "CERTIFICATE_VERIFY_FAILED" in repr(refused.value.__cause__)
        assert str(refused.value) == (
            f"The trainer at {url} presented a certificate this machine does not trust "
            "(self-signed certificate); set SSL_CERT_FILE to the file of the CA that signed it."
        )
        built = _tls(client)._context
        assert built is not None
        assert built.verify_mode == ssl.CERT_REQUIRED and built.check_hostname


def test_ssl_cert_file_names_the_cas_as_with_httpx(
    https_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, cert = https_server
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    with TrainerClient(url) as client:
        assert client.request("GET", "/v1/anything") == {"ok": True}


def test_a_client_of_an_http_trainer_reads_no_ca_bundle() -> None:
    tls = DeferredTLS()
    assert tls._context is None
    # No retries: the refused connection is all the test needs.
    with TrainerClient("http://127.0.0.1:9", retries=NO_RETRIES) as client:
        with pytest.raises(TrainerUnreachable):
            client.request("GET", "/v1/anything")
        assert _tls(client)._context is None
