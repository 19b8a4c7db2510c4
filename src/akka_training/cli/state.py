"""Global options and the way to the trainer: which context, which URL, which token.

Global flags may stand anywhere on the command line (`akka training runs get R -o json`);
`main.run` takes them out before the subcommand parses the rest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from akka_training.client.api import TrainerClient
from akka_training.client.contexts import (
    ConfigFile,
    Context,
    cached_access_token,
    load_config,
    remember_access_token,
)
from akka_training.core.errors import InvalidRequest

DEFAULT_URL = "http://localhost:9001"


@dataclass
class State:
    context: str | None = None
    output: str = "text"
    trainer_url: str | None = None
    no_color: bool = False
    force: bool = False
    quiet: bool = False
    _client: TrainerClient | None = field(default=None, repr=False)
    _config: ConfigFile | None = field(default=None, repr=False)

    @property
    def config(self) -> ConfigFile:
        if self._config is None:
            self._config = load_config()
        return self._config

    def context_name(self) -> str | None:
        return self.context or os.environ.get("AKKA_CONTEXT") or self.config.current

    def current_context(self) -> Context | None:
        """The context in use; an unknown name given by --context/AKKA_CONTEXT is refused."""
        name = self.context or os.environ.get("AKKA_CONTEXT")
        if name:
            return self.config.context(name)
        current = self.config.current
        return self.config.contexts.get(current) if current else None

    def url(self) -> str:
        explicit = self.trainer_url or os.environ.get("TRAINER_URL")
        if explicit:
            return explicit.rstrip("/")
        ctx = self.current_context()
        return ctx.url if ctx else DEFAULT_URL

    def credential(self) -> tuple[str | None, str]:
        """(token, where it came from). Credential variables win over every login."""
        env_token = os.environ.get("AKKA_ACCESS_TOKEN")
        ctx = self.current_context()  # refuses an unknown --context even when a variable wins
        if env_token:
            return env_token, "AKKA_ACCESS_TOKEN"
        if ctx is None or not ctx.login:
            return None, "none"
        cached = cached_access_token(self.config.path, ctx)
        if cached:
            return cached, f"context {ctx.name}"
        # The login is exchanged at the context's API host, which may differ from the trainer.
        with TrainerClient(ctx.api_host) as auth:
            answer = auth.exchange(ctx.login)
        remember_access_token(self.config.path, ctx, answer["accessToken"], answer["expiresAt"])
        return str(answer["accessToken"]), f"context {ctx.name}"

    def client(self) -> TrainerClient:
        if self._client is None:
            token, source = self.credential()
            refresh = self._exchange_again if source.startswith("context ") else None
            self._client = TrainerClient(self.url(), token, refresh=refresh)
        return self._client

    def _exchange_again(self) -> str | None:
        """After a 401 with a cached access token: exchange the login once more."""
        ctx = self.current_context()
        if ctx is None or not ctx.login:
            return None
        with TrainerClient(ctx.api_host) as auth:
            answer = auth.exchange(ctx.login)
        remember_access_token(self.config.path, ctx, answer["accessToken"], answer["expiresAt"])
        return str(answer["accessToken"])

    def project(self, given: str | None) -> str:
        if given:
            return given
        ctx = self.current_context()
        if ctx and ctx.project:
            return ctx.project
        raise InvalidRequest(
            "Name a project with --project, or set one on the context "
            "(`akka config set-context NAME --project P`)."
        )


state = State()
