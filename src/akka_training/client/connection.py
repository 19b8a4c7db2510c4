"""Finding the trainer and a token as the CLI does, for the CLI and for Python users alike.

- The context: the one named (``--context``), else ``AKKA_CONTEXT``, else the configuration
  file's current context (``~/.akka/config.yaml``, or the file ``AKKA_CONFIG`` names). A name
  the file does not hold is refused with the list of the contexts it holds.
- The URL: the one given (``--trainer-url``), else the trainer URL of a context named with
  ``--context`` (its API host unless it names one: the flag beats the variable), else
  ``TRAINER_URL``, else the current context's trainer URL, else ``http://localhost:9001``.
- The token: the one given, else ``AKKA_ACCESS_TOKEN`` (a credential variable wins over every
  login), else the context's login exchanged for an access token at the context's API host.
  The access token is cached beside the configuration file (mode 600) until shortly before it
  expires; a cached token the trainer no longer knows is exchanged again once, after a 401.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from akka_training.client.contexts import (
    ConfigFile,
    Context,
    cached_access_token,
    find_context,
    find_url,
    load_config,
    remember_access_token,
)
from akka_training.client.trainer import TrainerClient


@dataclass(frozen=True)
class Connection:
    """Where the trainer is and as whom to call it."""

    url: str
    token: str | None
    credential: str  # where the token came from: AKKA_ACCESS_TOKEN, context NAME, given, none
    context: Context | None
    config: ConfigFile

    def client(self, timeout: float = 60.0) -> TrainerClient:
        return TrainerClient(self.url, self.token, timeout=timeout, refresh=self._refresh())

    def _refresh(self) -> Callable[[], str | None] | None:
        """After a 401 with a cached access token: exchange the login once more. Without any
        credential: the login of a context written since for this trainer (a trainer's first
        start writes the context `local` while a command already waits for it)."""
        if self.credential == "none":
            path, url = self.config.path, self.url
            return lambda: _login_written_since(path, url)
        if self.context is None or not self.credential.startswith("context "):
            return None
        context, config = self.context, self.config
        return lambda: exchange_login(config, context)


def connect(
    trainer_url: str | None = None,
    *,
    context: str | None = None,
    token: str | None = None,
    config: ConfigFile | Path | None = None,
    timeout: float = 60.0,
) -> TrainerClient:
    """A client of the trainer the CLI would reach, as whom the CLI would reach it (see the
    module's docstring for the order). Every argument overrides its variable or file."""
    return resolve(trainer_url, context=context, token=token, config=config).client(timeout)


def resolve(
    trainer_url: str | None = None,
    *,
    context: str | None = None,
    token: str | None = None,
    config: ConfigFile | Path | None = None,
) -> Connection:
    """The URL, token and context `connect` uses. A login is exchanged (or read from the
    cache) here."""
    file = config if isinstance(config, ConfigFile) else load_config(config)
    ctx = find_context(file, context)  # refuses an unknown name even when a variable wins
    url = find_url(ctx, trainer_url, context_named=context is not None)
    if token:
        return Connection(url, token, "given", ctx, file)
    env_token = os.environ.get("AKKA_ACCESS_TOKEN")
    if env_token:
        return Connection(url, env_token, "AKKA_ACCESS_TOKEN", ctx, file)
    if ctx is None or not ctx.login:
        return Connection(url, None, "none", ctx, file)
    access = cached_access_token(file.path, ctx) or exchange_login(file, ctx)
    return Connection(url, access, f"context {ctx.name}", ctx, file)


def _login_written_since(path: Path, url: str) -> str | None:
    file = load_config(path)
    ctx = find_context(file, None)
    if ctx is None or not ctx.login or ctx.url.rstrip("/") != url.rstrip("/"):
        return None
    return exchange_login(file, ctx)


def exchange_login(config: ConfigFile, ctx: Context) -> str:
    """Exchange the context's login at its API host (which may differ from the trainer) and
    cache the access token."""
    if not ctx.login:
        raise ValueError(f"context {ctx.name} holds no login")
    with TrainerClient(ctx.api_host) as auth:
        answer = auth.exchange(ctx.login)
    remember_access_token(config.path, ctx, answer.access_token, answer.expires_at.isoformat())
    return answer.access_token
