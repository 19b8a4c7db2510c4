"""Expiring links to a run on the project's Grafana dashboard.

A link opens the provisioned dashboard (uid ``akka-training``) with the run's project and id as
its variables and the run's time range, and carries a JWT in ``auth_token``. Grafana, set up as
docs/grafana.md describes (``[auth.jwt]`` with ``url_login = true`` and ``jwk_set_url`` pointing
at the service's JWKS endpoint), checks the signature against `jwks()` and the ``aud`` and
``iss`` claims against its ``expect_claims``, signs the holder in as the project's viewer
(``sub`` = ``akka-training:<project>``, role claim ``Viewer``) in the project's own Grafana
organisation (``orgs`` = ``[<project>]``: Grafana reads ``org_attribute_path`` as a list, so
the claim is an array) and refuses the token after ``exp``. Anyone holding the link can view
the project's Grafana until then, and no other project's.

The signing key is the deployment's ``trainer.grafana.signing-key`` when set; otherwise one RSA
key is generated on first use and kept in `key_dir` (mode 600), so links survive a restart and
every replica of the service that shares the directory signs with the same key.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

KEY_FILE = "grafana-link-key.pem"
DASHBOARD_SLUG = "akka-training"
ROLE_CLAIM = "role"
# The array claim Grafana maps to organisations (org_attribute_path = orgs).
ORGS_CLAIM = "orgs"
SUBJECT_PREFIX = "akka-training:"
ISSUER = "akka-training"
AUDIENCE = "grafana"


class GrafanaLinks:
    def __init__(
        self,
        base_url: str,
        dashboard_uid: str,
        signing_key_pem: str | bytes | None,
        key_dir: Path | str | None,
        lifetime_seconds: int,
        *,
        role: str = "Viewer",
        issuer: str = ISSUER,
        audience: str = AUDIENCE,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        """`signing_key_pem`: an RSA private key (PKCS#1 or PKCS#8 PEM), or None to use (and
        create when missing) ``key_dir/grafana-link-key.pem``. `role`: the Grafana role the
        token's role claim grants (``role_attribute_path = role``)."""
        if lifetime_seconds <= 0:
            raise ValueError("trainer.grafana link lifetime must be a positive number of seconds")
        self.base_url = base_url.rstrip("/")
        self.dashboard_uid = dashboard_uid
        self.lifetime = timedelta(seconds=lifetime_seconds)
        self.role = role
        self.issuer = issuer
        self.audience = audience
        self._clock = clock or (lambda: datetime.now(UTC))
        self._key = _load_or_create_key(signing_key_pem, key_dir)
        self._public_jwk: dict[str, Any] = RSAAlgorithm.to_jwk(self._key.public_key(), as_dict=True)
        self.kid = _thumbprint(self._public_jwk)

    def link(
        self, project: str, run_id: str, start: datetime, end: datetime | None
    ) -> tuple[str, datetime]:
        """(the dashboard URL for the run from `start` to `end` (or now, for a run still
        going), when the link stops working)."""
        issued = self._clock().astimezone(UTC).replace(microsecond=0)
        expires_at = issued + self.lifetime
        claims = {
            "sub": SUBJECT_PREFIX + project,
            "project": project,
            ORGS_CLAIM: [project],
            ROLE_CLAIM: self.role,
            "iss": self.issuer,
            "aud": self.audience,
            "iat": int(issued.timestamp()),
            "exp": int(expires_at.timestamp()),
        }
        token = jwt.encode(claims, self._key, algorithm="RS256", headers={"kid": self.kid})
        query = urlencode(
            {
                "var-project": project,
                "var-run": run_id,
                "from": _millis(start),
                "to": "now" if end is None else _millis(end),
                "auth_token": token,
            },
            quote_via=quote,
        )
        url = f"{self.base_url}/d/{quote(self.dashboard_uid)}/{DASHBOARD_SLUG}?{query}"
        return url, expires_at

    def jwks(self) -> dict[str, Any]:
        """The JSON Web Key Set Grafana's ``jwk_set_url`` reads."""
        key = {**self._public_jwk, "kid": self.kid, "use": "sig", "alg": "RS256"}
        return {"keys": [key]}


@functools.lru_cache(maxsize=8)
def _loaded(pem: bytes) -> rsa.RSAPrivateKey:
    """An RSA key read from its PEM text, once a process: loading checks the key, which costs
    a fifth of a second, and a process that builds its app again (tests, a reload) reads the
    same key."""
    return _rsa(serialization.load_pem_private_key(pem, password=None))


def _load_or_create_key(
    signing_key_pem: str | bytes | None, key_dir: Path | str | None
) -> rsa.RSAPrivateKey:
    if signing_key_pem:
        pem = signing_key_pem.encode() if isinstance(signing_key_pem, str) else signing_key_pem
        return _loaded(pem)
    if key_dir is None:
        raise ValueError("Grafana links need trainer.grafana.signing-key or a key directory")
    path = Path(key_dir) / KEY_FILE
    if path.exists():
        return _loaded(path.read_bytes())
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # Written to a private temporary name, then linked into place: a concurrent creator (another
    # replica) either wins, and its key is read back, or loses without a half-written file.
    tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, pem)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        key = _rsa(serialization.load_pem_private_key(path.read_bytes(), password=None))
    finally:
        tmp.unlink(missing_ok=True)
    return key


def _rsa(key: Any) -> rsa.RSAPrivateKey:
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError("the Grafana signing key must be an RSA private key (RS256)")
    return key


def _thumbprint(public_jwk: dict[str, Any]) -> str:
    """RFC 7638 JWK thumbprint: a key id that is the same wherever the key is."""
    canonical = json.dumps(
        {"e": public_jwk["e"], "kty": "RSA", "n": public_jwk["n"]},
        separators=(",", ":"),
        sort_keys=True,
    )
    digest = hashlib.sha256(canonical.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _millis(moment: datetime) -> int:
    # A naive datetime is taken as UTC, as the service stores times.
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return int(aware.timestamp() * 1000)
