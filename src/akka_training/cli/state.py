"""Global options and the way to the trainer: which context, which URL, which token.

Global flags may stand anywhere on the command line (`akka training runs get R -o json`);
`main.run` takes them out before the subcommand parses the rest. The trainer and the token are
found by `akka_training.client.connect`, exactly as a Python user's `connect()` finds them.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from akka_training.core.errors import InvalidRequest

if TYPE_CHECKING:
    from akka_training.client.connection import Connection
    from akka_training.client.contexts import ConfigFile, Context
    from akka_training.client.trainer import TrainerClient


@dataclass
class State:
    context: str | None = None
    output: str = "text"
    trainer_url: str | None = None
    no_color: bool = False
    force: bool = False
    quiet: bool = False
    debug: bool = False
    _client: TrainerClient | None = field(default=None, repr=False)
    _connection: Connection | None = field(default=None, repr=False)
    _config: ConfigFile | None = field(default=None, repr=False)
    _plugins_off: bool = field(default=False, repr=False)

    @property
    def config(self) -> ConfigFile:
        if self._config is None:
            # The configuration file (and PyYAML) is read when a command first needs it.
            from akka_training.client.contexts import load_config

            self._config = load_config()
        return self._config

    def context_name(self) -> str | None:
        from akka_training.client.contexts import context_name

        return context_name(self.config, self.context)

    def current_context(self) -> Context | None:
        """The context in use; an unknown name given by --context/AKKA_CONTEXT is refused."""
        from akka_training.client.contexts import find_context

        return find_context(self.config, self.context)

    def url(self) -> str:
        """The trainer's URL, chosen as `client.connection.resolve` chooses it."""
        from akka_training.client.contexts import find_url

        return find_url(
            self.current_context(), self.trainer_url, context_named=self.context is not None
        )

    def connection(self) -> Connection:
        """The trainer's URL and the token to call it with (a login is exchanged here)."""
        # Imported when a command first needs the trainer: httpx, pydantic and the API's
        # models are not worth loading for `akka --help` or `akka config`.
        import_httpx()
        self._without_pydantic_plugins()
        from akka_training.client.connection import resolve

        if self._connection is None:
            self._connection = resolve(self.trainer_url, context=self.context, config=self.config)
        return self._connection

    def client(self) -> TrainerClient:
        if self._client is None:
            self._client = self.connection().client()
            self._client.on_starting = _say_waiting
        return self._client

    def reset(self) -> None:
        """No global flags and no trainer yet: each command line starts here (`root.main`), so a
        command run in a process that ran another (a program calling `main`, the tests) takes
        nothing from it, such as its ``-o json`` or its client."""
        for each in fields(self):
            setattr(self, each.name, each.default)

    def close(self) -> None:
        """The command is done: the client's connections closed, pydantic's plugins back on."""
        if self._client is not None:
            self._client.close()
        if self._plugins_off:
            os.environ.pop(_NO_PLUGINS, None)
            self._plugins_off = False

    def _without_pydantic_plugins(self) -> None:
        """The trainer's answers are validated without pydantic's plugins, as typer validates
        the command line: looking for plugins reads the entry points of every installed
        distribution (0.01 to 0.02 s in a full environment) on the first validator pydantic
        builds. A value of the variable already set stays."""
        if _NO_PLUGINS not in os.environ:
            os.environ[_NO_PLUGINS] = "__all__"
            self._plugins_off = True

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


def _say_waiting(sentence: str) -> None:
    """One line, on stderr, while the command waits for a trainer that is starting."""
    print(f"{sentence.rstrip('.')}; waiting for it.", file=sys.stderr, flush=True)


_NO_PLUGINS = "PYDANTIC_DISABLE_PLUGINS"


def import_httpx() -> None:
    """Import httpx without its command line (`httpx._main`): httpx imports it when it can, and
    with it click, pygments and rich's progress bars and syntax highlighting, about 0.04 s that
    no command of the CLI uses. httpx goes without it when it cannot be imported (its own
    fallback), so the import is made to fail, once; a later import of `httpx._main` works."""
    if "httpx" in sys.modules or "httpx._main" in sys.modules:
        return
    sys.modules["httpx._main"] = None  # type: ignore[assignment]
    try:
        import httpx  # noqa: F401
    finally:
        if sys.modules.get("httpx._main", ...) is None:
            del sys.modules["httpx._main"]
