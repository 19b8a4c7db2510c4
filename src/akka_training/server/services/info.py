"""The trainer's configuration and build, one row each."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from akka_training import __version__
from akka_training.api.system import Health, Info
from akka_training.config.settings import Settings
from akka_training.core.catalog import engine_for
from akka_training.core.errors import ServiceUnavailable
from akka_training.core.plans import METHODS
from akka_training.deployment.context import AppContext


def _telemetry_row(settings: Settings) -> str:
    telemetry = settings.trainer.telemetry
    endpoint = telemetry.collector_endpoint
    service = (
        f"service metrics over OTLP to {endpoint}"
        if telemetry.service_export == "otlp"
        else "service metrics at /metrics"
    )
    jobs = (
        f"jobs over OTLP to {endpoint}" if endpoint else "jobs write metrics.jsonl and TensorBoard"
    )
    tracking = settings.trainer.tracking.mlflow_uri
    return f"{service}; {jobs}" + (f"; MLflow at {tracking}" if tracking else "")


def info(ctx: AppContext) -> Info:
    settings = ctx.settings
    db = ctx.db.url
    database = "sqlite" if db.startswith("sqlite") else ctx.db.dialect
    if database == "sqlite":
        database = f"sqlite ({db.removeprefix('sqlite:///')})"
    else:
        database = f"{ctx.db.dialect} ({ctx.db.engine.url.render_as_string(hide_password=True)})"
    startup = f"ready in {ctx.startup_seconds:.1f} s"
    if ctx.startup_note:
        startup += f" ({ctx.startup_note})"
    return Info(
        version=__version__,
        engine=ctx.engine,
        engines={method: engine_for(method, ctx.engine) for method in METHODS},
        backend=ctx.backend.name,
        database=database,
        storage=ctx.blobs.url,
        telemetry=_telemetry_row(settings),
        startup=startup,
        image_text_reinforcement=ctx.image_text_rl,
        datasets_max_bytes=settings.trainer.datasets.max_bytes,
        pools=ctx.pool_names,
        default_pool=ctx.default_pool,
    )


def ready(db: Session) -> Health:
    try:
        db.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        raise ServiceUnavailable(
            f"The database does not answer ({type(exc).__name__}); check trainer.database.url "
            "and the database server."
        ) from None
    return Health(status="ok")
