"""`akka trainer serve`: run the trainer service."""

from __future__ import annotations

import logging
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
    try:
        import uvicorn

        from akka_training.config.settings import load_settings
        from akka_training.deployment.context import build_context
        from akka_training.server.app import create_app
    except ModuleNotFoundError as exc:
        top = (exc.name or "").partition(".")[0]
        if top not in SERVICE_MODULES:
            raise
        raise ServiceNotInstalled(
            f"akka trainer serve needs the trainer service's dependencies, which this "
            f"installation lacks (no module {top!r}): install them with "
            f"pip install 'akka-training[service]'."
        ) from None

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = load_settings(config)
    if host:
        settings.trainer.listen.host = host
    if port is not None:
        settings.trainer.listen.port = port
    ctx = build_context(settings)
    app_ = create_app(settings, ctx)
    print(f"akka trainer {settings.trainer_url} (home {settings.home})", flush=True)
    uvicorn.run(
        app_,
        host=settings.trainer.listen.host,
        port=settings.trainer.listen.port,
        log_level=log_level,
        timeout_graceful_shutdown=5,
    )
