from __future__ import annotations

import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from akka_training.telemetry.grafana import KEY_FILE, GrafanaLinks

START = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)
END = datetime(2026, 12, 1, 10, 30, 0, tzinfo=UTC)


def _verify(token: str, jwks: dict[str, Any]) -> dict[str, Any]:
    """Verify a link's token the way Grafana does: the key named by kid in the JWKS."""
    keys = jwt.PyJWKSet.from_dict(jwks)
    kid = jwt.get_unverified_header(token)["kid"]
    key = next(k for k in keys.keys if k.key_id == kid)
    return jwt.decode(
        token, key.key, algorithms=["RS256"], audience="grafana", issuer="akka-training"
    )


def test_a_link_opens_the_run_and_its_token_verifies_against_the_jwks(tmp_path: Path) -> None:
    links = GrafanaLinks("https://grafana.example.com/", "akka-training", None, tmp_path, 3600)
    url, expires_at = links.link("maths", "run-42", START, END)

    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == (
        "https://grafana.example.com/d/akka-training/akka-training"
    )
    query = parse_qs(parts.query)
    assert query["var-project"] == ["maths"]
    assert query["var-run"] == ["run-42"]
    assert query["from"] == [str(int(START.timestamp() * 1000))]
    assert query["to"] == [str(int(END.timestamp() * 1000))]
    assert list(parse_qs(parts.query))[:4] == ["var-project", "var-run", "from", "to"]

    token = query["auth_token"][0]
    assert jwt.get_unverified_header(token)["alg"] == "RS256"
    claims = _verify(token, links.jwks())
    assert claims["project"] == "maths"
    assert claims["sub"] == "akka-training:maths"
    assert claims["role"] == "Viewer"
    assert claims["exp"] == int(expires_at.timestamp())
    now = datetime.now(UTC)
    assert now + timedelta(seconds=3590) <= expires_at <= now + timedelta(seconds=3601)
    assert claims["exp"] - claims["iat"] == 3600


def test_a_running_run_links_to_now_and_the_token_expires(tmp_path: Path) -> None:
    issued = datetime.now(UTC) - timedelta(hours=2)
    links = GrafanaLinks(
        "https://g.example", "akka-training", None, tmp_path, 600, clock=lambda: issued
    )
    url, expires_at = links.link("maths", "run-1", START, None)
    query = parse_qs(urlsplit(url).query)
    assert query["to"] == ["now"]
    assert expires_at == issued.replace(microsecond=0) + timedelta(seconds=600)
    with pytest.raises(jwt.ExpiredSignatureError):
        _verify(query["auth_token"][0], links.jwks())


def test_the_generated_key_is_private_and_kept_across_restarts(tmp_path: Path) -> None:
    first = GrafanaLinks("https://g.example", "akka-training", None, tmp_path / "keys", 60)
    path = tmp_path / "keys" / KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    second = GrafanaLinks("https://g.example", "akka-training", None, tmp_path / "keys", 60)
    assert first.kid == second.kid
    url, _ = first.link("maths", "r", START, END)
    token = parse_qs(urlsplit(url).query)["auth_token"][0]
    assert _verify(token, second.jwks())["project"] == "maths"
    assert [k.name for k in (tmp_path / "keys").iterdir()] == [KEY_FILE]


def test_a_configured_key_signs_and_nothing_is_written(tmp_path: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()
    links = GrafanaLinks("https://g.example", "akka-training", pem, tmp_path, 60)
    url, _ = links.link("vision", "r", START, END)
    token = parse_qs(urlsplit(url).query)["auth_token"][0]
    decoded = jwt.decode(token, key.public_key(), algorithms=["RS256"], audience="grafana")
    assert decoded["project"] == "vision"
    assert list(tmp_path.iterdir()) == []
    jwk = links.jwks()["keys"][0]
    assert (jwk["kty"], jwk["alg"], jwk["use"], jwk["kid"]) == ("RSA", "RS256", "sig", links.kid)
    assert "d" not in jwk  # the public half only


def test_a_token_signed_by_another_key_does_not_verify(tmp_path: Path) -> None:
    ours = GrafanaLinks("https://g.example", "akka-training", None, tmp_path / "a", 60)
    theirs = GrafanaLinks("https://g.example", "akka-training", None, tmp_path / "b", 60)
    url, _ = theirs.link("maths", "r", START, END)
    token = parse_qs(urlsplit(url).query)["auth_token"][0]
    with pytest.raises(StopIteration):  # its kid is not in our key set
        _verify(token, ours.jwks())
    our_key = jwt.PyJWKSet.from_dict(ours.jwks()).keys[0].key
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(token, our_key, algorithms=["RS256"], audience="grafana")
