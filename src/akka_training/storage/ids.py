"""Identifiers: short random hex ids for runs and pipelines, and secrets for tokens."""

from __future__ import annotations

import hashlib
import secrets


def new_id(prefix: str = "") -> str:
    return prefix + secrets.token_hex(6)


def new_secret() -> str:
    return "akka_" + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
