"""`akka trainer serve`: run the trainer service."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from akka_training.core.errors import AkkaError

app = typer.Typer(help="Run the trainer service.", no_args_is_help=True)

# The top-level modules the `service` extra installs; a missing one means the extra is.
SERVICE_MODULES = frozenset(
    {
        "alembic",
        "fastapi",
        "jwt",
        "opentelemetry",
        "prometheus_client",
        "psutil",
        "psycopg",
        "pydantic_settings",
        "pyarrow",
        "pynvml",
        "sqlalchemy",
        "starlette",
        "uvicorn",
    }
)


class ServiceNotInstalled(AkkaError):
    code = "service-not-installed"
    status = 0


class PortTaken(AkkaError):
    code = "port-taken"
    status = 0


@app.command()
def serve(
    config: Path = typer.Option(None, "--config", help="Settings file (trainer.* keys)."),
    host: str = typer.Option(None, "--host", help="Listen address (trainer.listen.host)."),
    port: int = typer.Option(None, "--port", help="Listen port (trainer.listen.port)."),
    log_level: str = typer.Option("info", "--log-level"),
) -> None:
    """Serve the trainer API (default http://127.0.0.1:9001).

    SQLite and a local blob directory under AKKA_HOME, the local backend and the development
    catalog, unless settings say otherwise."""
    # Imported here so that the rest of the CLI starts without the service's dependencies,
    # which an install without the `service` extra does not have.
    with _service_imports():
        import uvicorn

        from akka_training.config.settings import load_settings
        from akka_training.server.starting import StartingResponder, listen

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # The service's modules load after logging is set up (the port is opened first), and
    # alembic announces each of its plugins as it loads them: not news to a user.
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    settings = load_settings(config)
    if host:
        settings.trainer.listen.host = host
    if port is not None:
        settings.trainer.listen.port = port
    # The port first, before the service's modules load: a command run while the trainer
    # starts is answered "starting" (and waits) instead of finding nothing there. The context
    # is written before the (slow) first build of the development models.
    listen_host, listen_port = settings.trainer.listen.host, settings.trainer.listen.port
    try:
        sock = listen(listen_host, listen_port)
    except OSError as exc:
        raise PortTaken(
            f"akka trainer serve cannot listen on {listen_host}:{listen_port} "
            f"({exc.strerror}); stop what holds the port or choose another with --port."
        ) from None
    print(f"akka trainer {settings.trainer_url} (home {settings.home}): starting", flush=True)
    responder = StartingResponder(sock).start()
    try:
        with _service_imports():
            from akka_training.deployment.context import build_context
            from akka_training.server.app import create_app
            from akka_training.server.bootstrap import bootstrap_home

        ctx = build_context(settings, on_database=bootstrap_home)
        app_ = create_app(settings, ctx)
    except BaseException:
        responder.stop()
        sock.close()
        raise
    responder.stop()
    print(f"akka trainer {settings.trainer_url} (home {settings.home}): ready", flush=True)
    server = uvicorn.Server(
        uvicorn.Config(
            app_,
            host=listen_host,
            port=listen_port,
            log_level=log_level,
            timeout_graceful_shutdown=5,
        )
    )
    # uvicorn binds the port itself again: served on the socket handed over, an answer sent
    # before a request's whole body was read (413 on an upload over the limit) lost its body
    # to the connection's reset. The moment between is covered by the client, which tries a
    # refused connection again after a "starting" answer.
    sock.close()
    server.run()


@contextmanager
def _service_imports() -> Iterator[None]:
    """Imports of the service's dependencies; a missing one names the `service` extra."""
    try:
        yield
    except ModuleNotFoundError as exc:
        top = (exc.name or "").partition(".")[0]
        if top not in SERVICE_MODULES:
            raise
        raise ServiceNotInstalled(
            f"akka trainer serve needs the trainer service's dependencies, which this "
            f"installation lacks (no module {top!r}): install them with "
            f"pip install 'akka-training[service]'."
        ) from None
