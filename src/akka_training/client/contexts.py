"""The CLI's configuration file (``~/.akka/config.yaml``, or the file ``AKKA_CONFIG`` names).

    current-context: local
    contexts:
      local:
        api-host: http://127.0.0.1:9001   # where the login is exchanged for a trainer token
        trainer-url: http://127.0.0.1:9001  # optional; default: the api-host
        project: maths                      # optional default project
        login: akka_...                     # the login (an admin or project token)

The file holds secrets, so it is written with mode 600. `find_context` and `find_url` choose the
context and the trainer URL a command uses (`client.connection` adds the token).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from akka_training.core.errors import InvalidRequest

DEFAULT_URL = "http://localhost:9001"


@dataclass
class Context:
    name: str
    api_host: str
    trainer_url: str | None = None
    project: str | None = None
    login: str | None = None

    @property
    def url(self) -> str:
        return (self.trainer_url or self.api_host).rstrip("/")

    def to_yaml(self) -> dict[str, Any]:
        out: dict[str, Any] = {"api-host": self.api_host}
        if self.trainer_url:
            out["trainer-url"] = self.trainer_url
        if self.project:
            out["project"] = self.project
        if self.login:
            out["login"] = self.login
        return out


@dataclass
class ConfigFile:
    path: Path
    current: str | None
    contexts: dict[str, Context]

    def context(self, name: str) -> Context:
        if name not in self.contexts:
            known = ", ".join(sorted(self.contexts)) or "none"
            raise InvalidRequest(
                f"There is no context {name!r} in {self.path}; the file holds: {known}. "
                "Create one with `akka config set-context NAME --api-host URL`."
            )
        return self.contexts[name]

    def save(self) -> None:
        body: dict[str, Any] = {}
        if self.current:
            body["current-context"] = self.current
        body["contexts"] = {name: c.to_yaml() for name, c in sorted(self.contexts.items())}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".part")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(body, f, sort_keys=False)
        os.replace(tmp, self.path)


def config_path() -> Path:
    return Path(os.environ.get("AKKA_CONFIG") or "~/.akka/config.yaml").expanduser()


def load_config(path: Path | None = None) -> ConfigFile:
    path = path or config_path()
    if not path.exists():
        return ConfigFile(path, None, {})
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise InvalidRequest(f"{path} is not valid YAML: {exc}") from exc
    contexts = {}
    for name, body in (data.get("contexts") or {}).items():
        body = body or {}
        contexts[str(name)] = Context(
            name=str(name),
            api_host=str(body.get("api-host") or body.get("trainer-url") or ""),
            trainer_url=body.get("trainer-url"),
            project=body.get("project"),
            login=body.get("login"),
        )
    return ConfigFile(path, data.get("current-context"), contexts)


def context_name(config: ConfigFile, name: str | None = None) -> str | None:
    """The name of the context in use, whether or not the file holds it."""
    return name or os.environ.get("AKKA_CONTEXT") or config.current


def find_context(config: ConfigFile, name: str | None = None) -> Context | None:
    """The context in use; a name given (or in AKKA_CONTEXT) that the file lacks is refused."""
    named = name or os.environ.get("AKKA_CONTEXT")
    if named:
        return config.context(named)
    return config.contexts.get(config.current) if config.current else None


def find_url(
    ctx: Context | None, trainer_url: str | None = None, *, context_named: bool = False
) -> str:
    """The trainer's URL: the one given, else the URL of a context named explicitly (a flag
    beats a variable), else ``TRAINER_URL``, else the context's, else the default."""
    if trainer_url:
        return trainer_url.rstrip("/")
    if context_named and ctx is not None:
        return ctx.url
    explicit = os.environ.get("TRAINER_URL")
    if explicit:
        return explicit.rstrip("/")
    return ctx.url if ctx else DEFAULT_URL


# Access tokens exchanged from a context's login, kept beside the configuration file so that
# commands do not exchange the login every time. Mode 600, like the file itself.
_CACHE_MARGIN = timedelta(minutes=5)


def _cache_path(config: Path) -> Path:
    return config.with_name(config.stem + ".tokens.yaml")


def _cache_key(ctx: Context) -> str:
    return hashlib.sha256(f"{ctx.api_host}\0{ctx.login}".encode()).hexdigest()


def cached_access_token(config: Path, ctx: Context) -> str | None:
    path = _cache_path(config)
    try:
        cache = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    entry = cache.get(ctx.name) if isinstance(cache, dict) else None
    if not isinstance(entry, dict) or entry.get("key") != _cache_key(ctx):
        return None
    try:
        expires = datetime.fromisoformat(str(entry["expiresAt"]))
    except (KeyError, ValueError):
        return None
    if expires - _CACHE_MARGIN <= datetime.now(UTC):
        return None
    return str(entry.get("accessToken")) or None


def remember_access_token(config: Path, ctx: Context, token: str, expires_at: str) -> None:
    path = _cache_path(config)
    try:
        cache = yaml.safe_load(path.read_text()) or {} if path.exists() else {}
    except (OSError, yaml.YAMLError):
        cache = {}
    if not isinstance(cache, dict):
        cache = {}
    cache[ctx.name] = {"key": _cache_key(ctx), "accessToken": token, "expiresAt": expires_at}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".part")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(cache, f)
        os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written only costs an exchange next time
